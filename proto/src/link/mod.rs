//! The agent link's handshake: one definition for both ends of a byte stream with no
//! session boundaries (a virtio-serial port behind QEMU's chardev socket).
//!
//! A virtio-serial port is one byte stream for the VM's whole life. Bytes of an old
//! host connection can reach the next one in both directions, and the guest may see
//! no event between two host connections. So every new host connection starts with a
//! handshake that both ends can find in whatever precedes it:
//!
//! - The host sends SYNC = [`SYNC_MAGIC`] + a fresh random [`Nonce`], and re-sends it
//!   every [`SYNC_INTERVAL`] until answered (a SYNC can be lost: sent before the guest
//!   opened the port, or eaten by a guest session that was still running).
//! - The guest scans its input for SYNC, discarding everything else, and answers
//!   ACK = [`ACK_MAGIC`] + the same nonce. After an ACK the next bytes must be the
//!   HTTP/2 client preface or another SYNC (answered too); anything else sends the
//!   guest back to scanning.
//! - The host discards everything until an ACK of its own nonce (ACKs of other nonces
//!   are stale). From then on the stream is plain HTTP/2 (gRPC), starting with the
//!   host's client preface; ACKs of re-sent SYNCs that follow are dropped by the
//!   returned [`LinkStream`].
//!
//! Scanning keeps at most one frame of carry plus one read chunk: no unbounded
//! buffering, however much stale data precedes a SYNC or an ACK.
//!
//! - [`frame`]: the constants, [`Nonce`] and the bounded scanner.
//! - [`host`]: [`host_handshake`], the host's side.
//! - [`guest`]: [`guest_handshake`], the guest's side.
//! - [`stream`]: [`LinkStream`], the stream a handshake hands over.

pub mod frame;
pub mod guest;
pub mod host;
pub mod stream;

pub use frame::{ACK_MAGIC, FRAME_LEN, Nonce, PREFACE, SYNC_INTERVAL, SYNC_MAGIC};
pub use guest::guest_handshake;
pub use host::{host_handshake, host_handshake_every};
pub use stream::LinkStream;

/// The name of the virtio-serial port the agent link runs on (QEMU's
/// `virtserialport,name=...`; the guest finds it in `/sys/class/virtio-ports/*/name`).
pub const PORT_NAME: &str = "atoll.agent";

/// Why a handshake did not finish.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The stream ended: on the guest, no host is connected now; on the host, QEMU
    /// closed its socket (the VM is gone or being restored).
    #[error("the link closed before its handshake finished; wait for the other end and connect again")]
    Closed,
    /// Reading the stream failed.
    #[error("reading the agent link failed")]
    Read(#[source] std::io::Error),
    /// Writing the stream failed.
    #[error("writing the agent link failed")]
    Write(#[source] std::io::Error),
}

#[cfg(test)]
mod tests;
