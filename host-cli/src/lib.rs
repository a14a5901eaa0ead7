//! `atoll`: the host side of atoll, as a library the `atoll` binary and the MCP server share.
//!
//! The crate has layers, top to bottom; a module imports only from layers below its own,
//! and never from the other face.
//!
//! 1. **Faces**, thin adapters that parse, call one use-case or client method, and print:
//!    - [`app`] (`main`: runtime, logging, exit codes, the one error report), [`cli`]
//!      (every clap type; imports nothing from [`cmd`] or [`app`]), [`cmd`] (one module
//!      per subcommand group), [`output`] (stdout/stderr/JSON/progress), [`tty`] (the
//!      host terminal of `atoll shell` and `atoll exec -t`: raw mode, size, signals);
//!    - [`mcp`]: `atoll mcp`, one file per group of tools in `mcp/tools/`.
//! 2. **Use-cases**, the rules both faces share, written once:
//!    - [`sandbox`]: which agent a call goes to ([`sandbox::Target`]), the sandbox
//!      lifecycle (create, list, inspect, pause, resume, kill), reading a guest file into
//!      memory, permission modes. A new capability (network policy, published ports,
//!      snapshots, mounts) is one module here, with a thin command in `cmd/` and a thin
//!      tool in `mcp/tools/` on top.
//!    - [`template`]: `atoll template build|save|ls|rm`, baking the agent into your own image.
//!    - [`signal`]: signal names and numbers; [`archive`]: host-side zips for `atoll cp` of
//!      directories (pack; safe unpack).
//! 3. **Below the use-cases**, called only by them (and by the faces for the client):
//!    - [`vmm`]: what a microVM runs on: QEMU's command line, its processes, QMP,
//!      vhost-device-vsock, the agent's READY, the state files. Only [`sandbox`] and
//!      [`template`] call it.
//!    - [`jail`]: the one door every QEMU and network helper starts through (seccomp,
//!      namespaces, no capabilities, a scrubbed environment, a cgroup per sandbox).
//!    - [`client`]: [`client::Client`], the one typed client of the agent, and its
//!      records (one file per area).
//! 4. **Transport**: [`connect`] dials any [`atoll_proto::Address`] (vsock, hybrid vsock,
//!    unix, tcp) into a tonic channel, with a connect timeout and the hybrid-vsock
//!    handshake.

pub mod app;
pub mod archive;
pub mod cli;
pub mod client;
pub mod cmd;
pub mod config;
pub mod connect;
pub mod desktop;
pub mod jail;
pub mod mcp;
pub mod output;
pub mod sandbox;
pub mod secrets;
pub mod signal;
pub mod template;
pub mod tty;
pub mod vmm;
