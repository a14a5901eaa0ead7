//! `TCP_QUICKACK` on a host-side TCP socket, set again after each read (Linux clears the
//! flag by itself). Without it, a server that writes a response's head and body
//! separately with Nagle on (Python's `http.server`, among others) waits for the ACK of
//! the head, which Linux delays by up to 40 ms on a kept-alive connection: measured as
//! 40 ms more per request (BENCHMARKS.md). Used by the secrets swap's upstream
//! connection ([`QuickAck`]) and the egress relay ([`ack_now`]).

use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TCP stream that acknowledges what it reads at once.
#[derive(Debug)]
pub(crate) struct QuickAck(pub(crate) TcpStream);

/// Asks the kernel to acknowledge what `socket` received at once; a failure only loses
/// the optimisation.
pub(crate) fn ack_now(socket: impl AsFd) {
    let _ = rustix::net::sockopt::set_tcp_quickack(socket, true);
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
            ack_now(&self.0);
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
