//! The upstream TCP socket with `TCP_QUICKACK` set again after each read. Without it, a
//! server that writes a response's head and body separately with Nagle on (Python's
//! `http.server`, among others) waits for the ACK of the head, which Linux delays by up to
//! 40 ms on a kept-alive connection: measured as 40 ms more per request through the swap
//! than passed through (BENCHMARKS.md). Linux clears the flag by itself, hence each read.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TCP stream that acknowledges what it reads at once.
#[derive(Debug)]
pub(crate) struct QuickAck(pub(crate) TcpStream);

fn quickack(stream: &TcpStream) {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor owned by `stream`, and a pointer to a c_int of
    // the size given; a failure only loses the optimisation.
    let _ = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&raw const on).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
        )
    };
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            quickack(&self.0);
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
