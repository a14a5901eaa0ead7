//! [`PortIo`]: a virtio-serial port (or any character device standing in for one) as
//! a tokio byte stream that does not spin while no host is connected.
//!
//! With no host on the other end, a virtio-serial port reports `IN|HUP` to every poll
//! and `read()` returns 0 at once, so a plain [`AsyncFd`] on it wakes ~290,000 times a
//! second (measured on the `serial-spike` branch). The port is therefore watched
//! through an inner epoll fd that holds it with `EPOLLET`: the inner fd becomes
//! readable only on a change (a host connects, data arrives, room to write appears),
//! and each wake drains it with `epoll_wait(.., 0)`. `read() == 0` is returned as end
//! of stream and means "no host now", not an error; [`PortIo::wait_event`] waits for
//! the next change. `ENODEV` means the port was unplugged: open it again.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use rustix::event::epoll;
use rustix::fs::{Mode, OFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where the kernel lists virtio-serial ports, each with a `name` file.
const PORTS_DIR: &str = "/sys/class/virtio-ports";

/// True once the virtio-serial driver is loaded (the VM may have ports).
pub fn virtio_ports_exist() -> bool {
    Path::new(PORTS_DIR).is_dir()
}

/// The device node of the virtio-serial port called `name`, if the VM has one (found
/// through sysfs: there is no udev to make `/dev/virtio-ports/<name>`).
pub fn find_port(name: &str) -> Option<PathBuf> {
    std::fs::read_dir(PORTS_DIR).ok()?.flatten().find_map(|entry| {
        let found = std::fs::read_to_string(entry.path().join("name")).ok()?;
        (found.trim_end() == name).then(|| Path::new("/dev").join(entry.file_name()))
    })
}

/// Events taken from the inner epoll fd per `epoll_wait`; it holds one fd.
const DRAIN_BATCH: usize = 4;

/// An open port, read and written without blocking.
#[derive(Debug)]
pub struct PortIo {
    port: OwnedFd,
    /// An epoll fd holding `port` edge-triggered; readable after any change.
    changes: AsyncFd<OwnedFd>,
}

impl PortIo {
    /// Opens the device at `path` for reading and writing.
    pub fn open(path: &Path) -> io::Result<Self> {
        let port = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let flags =
            epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::RDHUP | epoll::EventFlags::ET;
        epoll::add(&ep, &port, epoll::EventData::new_u64(0), flags)?;
        // SAFETY: `ep` is an open epoll fd owned by the AsyncFd from here on, and an
        // OwnedFd always returns the same fd.
        let changes = unsafe { AsyncFd::register_with_interest(ep, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Self { port, changes })
    }

    /// Waits for the next change on the port (a host connects, data or room arrives).
    pub async fn wait_event(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    /// Ready once the port changed since the last call; drains the inner epoll fd.
    fn poll_change(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut guard = ready!(self.changes.poll_read_ready(cx))?;
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); DRAIN_BATCH];
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        loop {
            match epoll::wait(self.changes.get_ref(), &mut events[..], Some(&zero)) {
                Ok((got, _)) if got.len() == DRAIN_BATCH => continue,
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
        guard.clear_ready();
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for PortIo {
    /// Reads until `out` is full or the port has nothing more now: one `read()` returns
    /// at most one guest buffer (a page), so a single one per call would hand HTTP/2 its
    /// frames 4 KiB at a time. Waits only after `EAGAIN` with nothing read; `0` (no host)
    /// or an error after some bytes ends the call with the bytes, and the next call
    /// sees it again.
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let start = out.filled().len();
        while out.remaining() > 0 {
            match rustix::io::read(&self.port, out.initialize_unfilled()) {
                Ok(0) => break,
                Ok(n) => out.advance(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) if out.filled().len() > start => break,
                Err(rustix::io::Errno::AGAIN) => ready!(self.poll_change(cx))?,
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for PortIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            match rustix::io::write(&self.port, buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                // No host, or its side is full: a host connecting or reading is a change.
                Err(rustix::io::Errno::AGAIN) => ready!(self.poll_change(cx))?,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The port stays open for the next host: a session's end closes nothing.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
