//! One guest TCP connection as the egress side sees it: a bounded stream of byte chunks
//! each way, carried by channels to and from the stack task. Each read or write wakes
//! the stack, which moves bytes between the channels and the smoltcp socket.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};

use super::{FlowId, StackCmd};

/// The guest closed or reset the connection, or the NIC went away.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox side of the connection is gone")]
pub(crate) struct GuestGone;

/// Bytes from the guest.
pub(crate) struct GuestReader {
    pub(super) rx: mpsc::Receiver<Bytes>,
    pub(super) wake: Arc<Notify>,
}

impl GuestReader {
    /// The next chunk the guest sent; `None` once it closed its side (or reset).
    pub(crate) async fn read(&mut self) -> Option<Bytes> {
        let chunk = self.rx.recv().await;
        self.wake.notify_one();
        chunk
    }
}

/// Bytes to the guest; dropping it closes the guest's side (FIN).
pub(crate) struct GuestWriter {
    pub(super) tx: mpsc::Sender<Bytes>,
    pub(super) wake: Arc<Notify>,
    pub(super) cmd: mpsc::UnboundedSender<StackCmd>,
    pub(super) id: FlowId,
}

impl GuestWriter {
    /// Queues `chunk` for the guest, waiting while the stack's queue is full.
    pub(crate) async fn write(&self, chunk: Bytes) -> Result<(), GuestGone> {
        self.tx.send(chunk).await.map_err(|_| GuestGone)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Resets the connection (the guest sees "connection reset").
    pub(crate) fn abort(&self) {
        let _ = self.cmd.send(StackCmd::Abort { id: self.id });
    }

    /// A handle that resets the connection from elsewhere (the side reading the guest).
    pub(crate) fn resetter(&self) -> Resetter {
        Resetter { cmd: self.cmd.clone(), id: self.id }
    }
}

/// Resets one guest connection.
pub(crate) struct Resetter {
    cmd: mpsc::UnboundedSender<StackCmd>,
    id: FlowId,
}

impl Resetter {
    /// Resets the connection (the guest sees "connection reset").
    pub(crate) fn reset(&self) {
        let _ = self.cmd.send(StackCmd::Abort { id: self.id });
    }
}

/// Both halves.
pub(crate) struct GuestStream {
    pub(crate) reader: GuestReader,
    pub(crate) writer: GuestWriter,
}
