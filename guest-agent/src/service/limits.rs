//! Caps on how much work the agent takes on at once: running Exec/ExecStream commands
//! and file transfers (ReadFile, WriteFile, DownloadDir, UploadDir). Over a cap a
//! request is refused at once with ResourceExhausted instead of queueing: a caller
//! (often a model) learns immediately and can retry, and the agent's memory stays
//! bounded.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use super::BoxStream;

/// Default cap on commands running through Exec and ExecStream at once.
pub const DEFAULT_MAX_EXECS: usize = 64;
/// Default cap on file transfers in flight at once.
pub const DEFAULT_MAX_TRANSFERS: usize = 16;

/// How much the agent runs at once.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    /// Exec and ExecStream commands running at once.
    pub max_execs: usize,
    /// ReadFile, WriteFile, DownloadDir and UploadDir calls in flight at once.
    pub max_transfers: usize,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity { max_execs: DEFAULT_MAX_EXECS, max_transfers: DEFAULT_MAX_TRANSFERS }
    }
}

/// A cap was reached.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// Too many commands running.
    #[error("{0} commands are already running; wait for one to finish or raise --max-concurrent-execs")]
    Execs(usize),
    /// Too many transfers in flight.
    #[error(
        "{0} file transfers are already in progress; wait for one to finish or raise --max-concurrent-transfers"
    )]
    Transfers(usize),
}

impl From<LimitError> for Status {
    fn from(e: LimitError) -> Self {
        Status::resource_exhausted(e.to_string())
    }
}

/// The agent's counters of work in flight.
pub(crate) struct Limits {
    capacity: Capacity,
    execs: Arc<Semaphore>,
    transfers: Arc<Semaphore>,
}

/// A slot taken under a cap; dropping it frees the slot. While it is held the call
/// counts as running for [`crate::allocator::trim_when_idle`].
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    fn new(permit: OwnedSemaphorePermit) -> Slot {
        crate::allocator::call_started();
        Slot { _permit: permit }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::allocator::call_ended();
    }
}

impl Limits {
    pub(crate) fn new(capacity: Capacity) -> Self {
        Limits {
            capacity,
            execs: Arc::new(Semaphore::new(capacity.max_execs)),
            transfers: Arc::new(Semaphore::new(capacity.max_transfers)),
        }
    }

    /// A slot for one command, or the reason there is none.
    pub(crate) fn exec(&self) -> Result<Slot, LimitError> {
        self.execs
            .clone()
            .try_acquire_owned()
            .map(Slot::new)
            .map_err(|_| LimitError::Execs(self.capacity.max_execs))
    }

    /// A slot for one transfer, or the reason there is none.
    pub(crate) fn transfer(&self) -> Result<Slot, LimitError> {
        self.transfers
            .clone()
            .try_acquire_owned()
            .map(Slot::new)
            .map_err(|_| LimitError::Transfers(self.capacity.max_transfers))
    }
}

/// `stream`, holding `slot` until the stream is finished or dropped.
pub(crate) fn holding<T: Send + 'static>(stream: BoxStream<T>, slot: Slot) -> BoxStream<T> {
    Box::pin(stream.map(move |item| {
        let _held = &slot;
        item
    }))
}
