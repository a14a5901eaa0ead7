//! The listening sockets atoll binds for the helper before it and QEMU start
//! (`jail::wire`), which the helper inherits by descriptor: the console's, QEMU's
//! stderr's and, with a network, the NIC's. The helper serves them as it would sockets
//! of its own; it does not bind them.

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};

use tokio::net::UnixListener;

/// Why a handed descriptor cannot be served.
#[derive(Debug, thiserror::Error)]
#[error(
    "the {what} descriptor {fd} is not a listening Unix stream socket ({why}); atoll create starts the helper with its sockets"
)]
pub struct HandedError {
    /// Which socket.
    what: &'static str,
    /// Its number.
    fd: RawFd,
    /// What is wrong with it.
    why: String,
}

/// The helper's listening sockets.
pub struct Handed {
    /// `vm/wire/tty.sock`: QEMU's serial console.
    pub tty: UnixListener,
    /// `net/stderr.sock`: QEMU's stdout and stderr.
    pub stderr: UnixListener,
    /// `vm/wire/net.sock`: the NIC's frames, with a network.
    pub frames: Option<UnixListener>,
}

impl Handed {
    /// Takes the descriptors `args` names (in a tokio runtime).
    ///
    /// # Safety
    /// Each descriptor `args` names must be one this process inherited, owns and uses
    /// for nothing else; each is taken (and closed on error) exactly once.
    pub unsafe fn take(args: &crate::cli::HelperArgs) -> Result<Handed, HandedError> {
        // SAFETY: the caller's contract; all are owned before any is checked, so an
        // error closes every one.
        let (tty, stderr, frames) = unsafe {
            (
                OwnedFd::from_raw_fd(args.tty_fd),
                OwnedFd::from_raw_fd(args.stderr_fd),
                args.frames_fd.map(|fd| OwnedFd::from_raw_fd(fd)),
            )
        };
        Ok(Handed {
            tty: listener("console", tty)?,
            stderr: listener("stderr", stderr)?,
            frames: frames.map(|f| listener("NIC", f)).transpose()?,
        })
    }
}

/// `fd` as a tokio listener, once checked to be a listening Unix stream socket.
fn listener(what: &'static str, fd: OwnedFd) -> Result<UnixListener, HandedError> {
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    let failed = |why: String| HandedError { what, fd: raw, why };
    let domain = rustix::net::sockopt::socket_domain(fd.as_fd()).map_err(|e| failed(e.to_string()))?;
    let kind = rustix::net::sockopt::socket_type(fd.as_fd()).map_err(|e| failed(e.to_string()))?;
    let listening = rustix::net::sockopt::socket_acceptconn(fd.as_fd()).map_err(|e| failed(e.to_string()))?;
    if domain != rustix::net::AddressFamily::UNIX || kind != rustix::net::SocketType::STREAM || !listening {
        return Err(failed(format!("{domain:?}, {kind:?}, listening: {listening}")));
    }
    let std = std::os::unix::net::UnixListener::from(fd);
    std.set_nonblocking(true).map_err(|e| failed(e.to_string()))?;
    UnixListener::from_std(std).map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::os::fd::IntoRawFd;

    use super::*;

    fn args(tty: RawFd, stderr: RawFd, frames: Option<RawFd>) -> crate::cli::HelperArgs {
        crate::cli::HelperArgs {
            dir: "/nowhere".into(),
            runner_fd: None,
            tty_fd: tty,
            stderr_fd: stderr,
            frames_fd: frames,
        }
    }

    /// Listening Unix sockets are served; a connected one, or a file, is refused, naming
    /// the descriptor.
    #[tokio::test]
    async fn only_listening_unix_sockets_are_taken() {
        let d = tempfile::tempdir().unwrap();
        let bound = |n: &str| std::os::unix::net::UnixListener::bind(d.path().join(n)).unwrap().into_raw_fd();
        let a = args(bound("t"), bound("s"), Some(bound("f")));
        // SAFETY: the descriptors were just made here and are used for nothing else.
        let handed = unsafe { Handed::take(&a) }.unwrap();
        let _client = std::os::unix::net::UnixStream::connect(d.path().join("f")).unwrap();
        let (_conn, _) = handed.frames.as_ref().unwrap().accept().await.unwrap();

        let (one, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let file = std::fs::File::create(d.path().join("x")).unwrap().into_raw_fd();
        let a = args(bound("t2"), one.into_raw_fd(), Some(file));
        // SAFETY: as above.
        let err = unsafe { Handed::take(&a) }.err().unwrap().to_string();
        assert!(err.contains("stderr descriptor") && err.contains("listening: false"), "{err}");
    }
}
