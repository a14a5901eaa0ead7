//! atoll-net: a sandbox's network, run by its host-side helper process.
//!
//! The guest's NIC is a QEMU `-netdev stream` socket; its frames reach [`stack`], a
//! userspace TCP/IP stack (smoltcp) that terminates every guest connection here, so
//! nothing leaves except what [`egress`] connects out after [`policy`] allowed it.
//!
//! - [`policy`]: egress rules (domain, pattern, IP, CIDR, port) and the one function
//!   that decides every connection, with its precedence written down.
//! - [`engine`]: [`Engine::start`] and [`EngineHandle::set_policy`], the API.
//! - [`stack`]: smoltcp over the NIC socket: ARP, any-IP TCP accept, UDP 53.
//! - [`egress`]: decide (peeking SNI/Host with [`peek`] when it matters), connect out,
//!   splice with byte counts; RST for a deny or a failed connect.
//! - [`dns`]: the guest's DNS server (hickory), with the IP -> name memory.
//! - `watch`: claims keep being checked on an allowed connection (each later HTTP/1
//!   request head, each later ClientHello), so a connection allowed for one name cannot
//!   be reused for another.
//! - [`secrets`]: secrets swapped at egress: TLS terminated with the sandbox's CA on
//!   connections to a bound secret's hosts, placeholders replaced in request headers.
//! - [`log`]: the audit log (JSON lines: open and close of each connection; a file and a
//!   budget per kind; rate limits with counts; write failures refuse egress).
//!
//! The design and its reasons are in docs/network.md.

pub mod dns;
pub mod egress;
pub mod engine;
mod hostaddr;
pub mod log;
pub mod peek;
pub mod policy;
mod quickack;
pub mod secrets;
mod shared;
pub mod stack;
mod watch;

pub use engine::{Engine, EngineConfig, EngineError, EngineHandle, Frames};
