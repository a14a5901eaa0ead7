//! `sbx`: the host side of sbx, as a library the `sbx` binary and the MCP server share.
//!
//! - [`connect`]: dial any [`sbx_proto::Address`] (vsock, hybrid vsock, unix, tcp) into a
//!   tonic channel, with a connect timeout and the hybrid-vsock handshake.
//! - [`client`]: [`client::Client`], the one typed client of the agent; CLI subcommands and
//!   MCP tools both call it.
//! - [`sandbox`]: the host's use-cases under both faces: creating, listing, pausing,
//!   resuming and removing sandboxes.
//! - [`vmm`]: what [`sandbox`] runs a microVM with: QEMU's command line, its processes,
//!   QMP, vhost-device-vsock, the state files.
//! - [`template`]: `sbx template build|ls|rm`: baking the agent into your own image.
//! - [`signal`]: signal names and numbers, for the CLI and the MCP tools alike.
//! - [`archive`]: host-side zips for `sbx cp` of directories (pack; safe unpack).
//! - [`cli`]: the clap types of the command line; [`cmd`]: one module per subcommand
//!   group; [`output`]: stdout/stderr/JSON/progress; [`app`]: `main`, exit codes, errors.

pub mod app;
pub mod archive;
pub mod cli;
pub mod client;
pub mod cmd;
pub mod connect;
pub mod mcp;
pub mod output;
pub mod sandbox;
pub mod signal;
pub mod template;
pub mod vmm;
