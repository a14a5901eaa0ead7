//! [`LinkStream`]: the byte stream after a handshake, with the bytes the handshake
//! read past its frame handed over first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{ACK_MAGIC, FRAME_LEN, agrees};

/// A stream after its handshake: reads return the bytes the handshake already took
/// from `inner` first (on the host, without the ACKs of re-sent SYNCs that lead them),
/// then `inner`'s. Writes go straight to `inner`.
#[derive(Debug)]
pub struct LinkStream<S> {
    inner: S,
    /// Read past the handshake, not yet returned.
    prefix: Vec<u8>,
    /// Drop ACK frames at the head of the stream (the host's side).
    strip_acks: bool,
}

impl<S> LinkStream<S> {
    /// The guest's side: `prefix` (starting with the HTTP/2 preface) is read first.
    pub fn new(inner: S, prefix: Vec<u8>) -> Self {
        Self { inner, prefix, strip_acks: false }
    }

    /// The host's side: `prefix` is what followed the ACK of its nonce; the guest
    /// answers every SYNC it saw, so more ACKs can lead it and are dropped.
    pub(crate) fn after_ack(inner: S, prefix: Vec<u8>) -> Self {
        Self { inner, prefix, strip_acks: true }
    }

    /// The stream underneath, for the next handshake; unread prefix bytes are dropped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The stream underneath.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LinkStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.strip_acks {
            if this.prefix.len() >= FRAME_LEN && this.prefix[..ACK_MAGIC.len()] == ACK_MAGIC {
                this.prefix.drain(..FRAME_LEN);
                continue;
            }
            if !this.prefix.is_empty() && !agrees(&this.prefix, &ACK_MAGIC) {
                this.strip_acks = false;
                break;
            }
            // Could still be an ACK: read up to the end of one to decide.
            let mut more = [0u8; FRAME_LEN];
            let want = FRAME_LEN - this.prefix.len();
            let mut rb = ReadBuf::new(&mut more[..want]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                this.strip_acks = false;
                break;
            }
            this.prefix.extend_from_slice(rb.filled());
        }
        if !this.prefix.is_empty() {
            let n = out.remaining().min(this.prefix.len());
            out.put_slice(&this.prefix[..n]);
            this.prefix.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LinkStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
