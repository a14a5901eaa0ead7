//! `sbx`: the host side of sbx, as a library the `sbx` binary and the MCP server share.
//!
//! - [`connect`]: dial any [`sbx_proto::Address`] (vsock, hybrid vsock, unix, tcp) into a
//!   tonic channel, with a connect timeout and the hybrid-vsock handshake.
//! - [`client`]: [`client::Client`], the one typed client of the agent; CLI subcommands and
//!   MCP tools both call it.
//! - [`vm`]: sandboxes: booting microVMs (QEMU + vhost-device-vsock), listing, pausing,
//!   resuming and removing them.
//! - [`target`]: which agent a command talks to (`--agent`, `--sandbox`, `NAME:/path`).

pub mod client;
pub mod connect;
pub mod mcp;
pub mod target;
pub mod vm;
