//! The agent link on a virtio-serial port: one host connection at a time, each opened
//! by the handshake of [`atoll_proto::link`], then served as one HTTP/2 connection.
//!
//! A task owns the port and loops: run the guest's handshake; hand the port, wrapped
//! in a [`Session`], to the gRPC server as its next connection; take it back when the
//! server drops that connection (the host went away: `read() == 0`, or bytes that are
//! not HTTP/2, such as a new host's SYNC, ended it); wait for a host if none is
//! connected; open the port again after `ENODEV` (the host replugs it on restore).

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use atoll_proto::link::{LinkError, LinkStream, guest_handshake};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::server::Connected;

use super::port::PortIo;
use atoll_proto::authority::AuthorityFix;

/// How often a port that went away (replug) is looked for again.
const REOPEN_EVERY: Duration = Duration::from_millis(100);

/// One host connection on the port. Dropping it hands the port back to the loop.
pub struct Session {
    stream: Option<LinkStream<PortIo>>,
    back: Option<oneshot::Sender<PortIo>>,
}

impl Session {
    fn stream(&mut self) -> &mut LinkStream<PortIo> {
        self.stream.as_mut().expect("a session holds its stream until dropped")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.stream.take(), self.back.take()) {
            let _ = back.send(stream.into_inner());
        }
    }
}

impl Connected for Session {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Session {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_read(cx, out)
    }
}

impl AsyncWrite for Session {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.get_mut().stream()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_shutdown(cx)
    }
}

/// Which device the link runs on.
#[derive(Debug, Clone)]
pub enum PortSource {
    /// A device node given by path (a stand-in for the port, in tests).
    Device(PathBuf),
    /// The virtio-serial port of this name, wherever the kernel put it; looked up
    /// again after each replug (its device name can change).
    Named(&'static str),
}

impl PortSource {
    /// The device node to open now, if there is one.
    fn locate(&self) -> Option<PathBuf> {
        match self {
            PortSource::Device(path) => Some(path.clone()),
            PortSource::Named(name) => super::port::find_port(name),
        }
    }
}

impl std::fmt::Display for PortSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortSource::Device(path) => write!(f, "{}", path.display()),
            PortSource::Named(name) => write!(f, "virtio port {name}"),
        }
    }
}

/// Opens the port the first time, waiting up to `bound` for it to appear (the kernel
/// adds a virtio-serial port a moment after its driver loads).
pub async fn first_open(source: &PortSource, bound: Duration) -> Option<PortIo> {
    tokio::time::timeout(bound, open(source)).await.ok()
}

/// The sessions of `port`, one after another, for `serve_with_incoming`. The loop
/// ends when the receiver is dropped.
pub fn sessions(source: PortSource, port: PortIo) -> mpsc::Receiver<io::Result<AuthorityFix<Session>>> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(run(source, port, tx));
    rx
}

async fn run(source: PortSource, mut port: PortIo, tx: mpsc::Sender<io::Result<AuthorityFix<Session>>>) {
    loop {
        match guest_handshake(&mut port).await {
            Ok(prefix) => {
                tracing::debug!(port = %source, "agent link: host connected");
                let (back, returned) = oneshot::channel();
                let session = Session { stream: Some(LinkStream::new(port, prefix)), back: Some(back) };
                if tx.send(Ok(AuthorityFix::new(session))).await.is_err() {
                    return;
                }
                port = match returned.await {
                    Ok(port) => port,
                    Err(_) => open(&source).await,
                };
                tracing::debug!(port = %source, "agent link: session ended");
            }
            Err(LinkError::Closed) => {
                if let Err(e) = port.wait_event().await {
                    tracing::warn!(port = %source, "agent link: waiting for a host failed ({e}); opening the port again");
                    port = open(&source).await;
                }
            }
            Err(LinkError::Read(e) | LinkError::Write(e)) => {
                if e.raw_os_error() != Some(libc::ENODEV) {
                    tracing::warn!(port = %source, "agent link: {e}; opening the port again");
                }
                drop(port);
                port = open(&source).await;
            }
        }
    }
}

/// Opens the port, waiting for it to (re)appear.
async fn open(source: &PortSource) -> PortIo {
    loop {
        if let Some(at) = source.locate() {
            match PortIo::open(&at) {
                Ok(port) => return port,
                Err(e) => tracing::debug!(port = %at.display(), "agent link: port not there yet: {e}"),
            }
        }
        tokio::time::sleep(REOPEN_EVERY).await;
    }
}
