//! A guest connection as an `AsyncRead + AsyncWrite` (what TLS needs): two pumps
//! between it and one end of an in-memory pipe, counting bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::stack::guest::GuestStream;

/// The pipe's buffer each way.
const PIPE: usize = 64 * 1024;

/// Byte counts of a pumped connection.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) from_guest: AtomicU64,
    pub(crate) to_guest: AtomicU64,
}

/// The stream the TLS server reads and writes; `first` are bytes already read from the
/// guest (the peeked ClientHello).
pub(crate) fn pipe(guest: GuestStream, first: Bytes) -> (DuplexStream, Arc<Counts>) {
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let counts = Arc::new(Counts::default());
    let GuestStream { mut reader, writer } = guest;
    let (mut pipe_read, mut pipe_write) = tokio::io::split(ours);
    let up = counts.clone();
    tokio::spawn(async move {
        up.from_guest.fetch_add(first.len() as u64, Ordering::Relaxed);
        if pipe_write.write_all(&first).await.is_err() {
            return;
        }
        while let Some(chunk) = reader.read().await {
            up.from_guest.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if pipe_write.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = pipe_write.shutdown().await;
    });
    let down = counts.clone();
    tokio::spawn(async move {
        let mut buf = BytesMut::new();
        loop {
            buf.reserve(PIPE);
            match pipe_read.read_buf(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    down.to_guest.fetch_add(n as u64, Ordering::Relaxed);
                    if writer.write(buf.split().freeze()).await.is_err() {
                        return;
                    }
                }
                Err(_) => return writer.abort(),
            }
        }
        // Dropping the writer closes the guest's side.
        drop(writer);
    });
    (theirs, counts)
}
