//! atoll-agent: the program inside every atoll microVM.
//!
//! - [`listen`]: binds the addresses of the shared grammar and serves the gRPC service.
//! - [`auth`]: the token that TCP clients must present.
//! - [`service`]: the thin tonic layer; each RPC converts the wire message to the domain
//!   module's own types, calls it, and converts the answer and the error back. Nothing
//!   outside `service` (and `listen`) sees a gRPC or protobuf type.
//!   File chunks and zip data go out framed by hand, without tonic's copy of each chunk.
//! - [`exec`]: running commands with capped (head + tail) or streamed output, process
//!   groups, timeouts. [`jobs`]: detached background jobs with log files.
//! - [`files`]: read, atomic write, list, stat, remove, move, mkdir.
//! - [`placement`]: whether a small piece of work (a file call, a spawn) runs in place or
//!   on the blocking pool: in place only while every mount is local.
//! - [`allocator`]: mimalloc as the allocator, tuned for a small resident set.
//! - [`archive`]: directories as streamed zips, and extraction of uploaded zips.
//! - [`system`]: Info and SetTime.
//! - [`restored`]: Restored, which makes a guest restored from a snapshot a machine of
//!   its own (clock, hostname, randomness) without a process.
//! - [`ports`]: ConnectPort, a TCP connection to a port of the guest's loopback (published
//!   ports).
//! - [`net`]: configuring the guest's NIC from `atoll.net=` on the kernel command line.
//! - [`storage`]: host folders (9p) and the root filesystem's size, from `atoll.mount=`
//!   and `atoll.disk=` on the kernel command line.
//! - [`report`]: errors rendered as one line with their causes.
//! - [`init`]: PID 1 duties (mounts, `lo`, hostname, power-off).
//! - [`cmdline`]: the `atoll.*` settings on the kernel command line.
//! - [`announce`]: the READY line the agent sends once it listens.

pub mod allocator;
pub mod announce;
pub mod archive;
pub mod auth;
pub mod cmdline;
pub mod exec;
pub mod files;
pub mod init;
pub mod jobs;
pub mod listen;
pub mod net;
pub mod placement;
pub mod ports;
pub mod report;
pub mod restored;
pub mod service;
pub mod storage;
pub mod system;

pub use service::AgentService;
