//! A host file that downloads are written to by one blocking thread.
//!
//! The chunks go over a short queue, so the next ones arrive while this one is
//! written, and each is written where it lies: `tokio::fs::File` would copy every
//! chunk into its own buffer and hop to the blocking pool per write. Writes are cut to
//! [`WRITE_BYTES`]: larger writes make the page cache ask for larger folios, which the
//! kernel often compacts memory for (1 MiB writes measured 2-3x the system time of
//! 64 KiB ones).

use std::fs::File;
use std::io::{self, Write};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bytes per write(2).
const WRITE_BYTES: usize = 64 * 1024;

/// Chunks queued for the writer thread.
const QUEUE_CHUNKS: usize = 4;

/// A file being written on a blocking thread.
pub(super) struct FileSink {
    tx: mpsc::Sender<Bytes>,
    writer: JoinHandle<io::Result<File>>,
}

impl FileSink {
    /// Starts the writer thread for `file`.
    pub(super) fn new(file: File) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
        let writer = tokio::task::spawn_blocking(move || write_all(file, rx));
        FileSink { tx, writer }
    }

    /// Queues `chunk`; an error is the write that failed before it.
    pub(super) async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        if self.tx.send(chunk).await.is_err() {
            // The writer stopped, which it does only on an error.
            return Err(self.stopped().await);
        }
        Ok(())
    }

    /// Writes what is queued and gives the file back. A sink dropped unfinished (the
    /// download failed) still writes what it has.
    pub(super) async fn finish(self) -> io::Result<File> {
        drop(self.tx);
        self.writer.await.map_err(io::Error::other)?
    }

    /// [`FileSink::finish`], then fsync.
    pub(super) async fn finish_synced(self) -> io::Result<()> {
        let file = self.finish().await?;
        tokio::task::spawn_blocking(move || file.sync_all()).await.map_err(io::Error::other)?
    }

    async fn stopped(&mut self) -> io::Error {
        match (&mut self.writer).await {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => io::Error::other("the file writer stopped early"),
            Err(join) => io::Error::other(join),
        }
    }
}

fn write_all(mut file: File, mut rx: mpsc::Receiver<Bytes>) -> io::Result<File> {
    while let Some(chunk) = rx.blocking_recv() {
        for piece in chunk.chunks(WRITE_BYTES) {
            file.write_all(piece)?;
        }
    }
    Ok(file)
}
