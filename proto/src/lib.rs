//! The contract between `atoll` (host) and `atoll-agent` (guest).
//!
//! - [`agent::v1`]: the generated gRPC messages, with the client half behind the
//!   `client` feature and the server half behind the `server` feature.
//! - [`authority`]: [`authority::AuthorityFix`], which lets stock gRPC clients on Unix
//!   sockets (whose `:authority` is a path) reach an HTTP/2 server: the agent's, and the
//!   host's agent-link multiplexer.
//! - [`address`]: the one address grammar both binaries parse (`vsock://`, `hvsock://`,
//!   `unix://`, `tcp://`).
//! - [`limits`]: the defaults and caps both sides agree on.
//! - [`link`]: the handshake that opens every host connection on the agent's
//!   virtio-serial port, written once for both ends.
//! - [`reason`]: the machine-readable reason the agent attaches to an error, from which
//!   each face says what to do next.
//! - [`units`]: sizes and counts for people ("3.2 MiB", "1 file"), written once for
//!   the agent's messages, the CLI and the MCP tools.

pub mod address;
pub mod authority;
pub mod limits;
pub mod link;
pub mod reason;
pub mod units;

pub use address::{Address, AddressError};

/// Generated code for package `atoll.agent.v1`.
pub mod agent {
    /// Version 1 of the agent API.
    #[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    pub mod v1 {
        tonic::include_proto!("atoll.agent.v1");
    }
}
