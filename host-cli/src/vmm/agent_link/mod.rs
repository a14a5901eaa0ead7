//! The host end of the agent link: one HTTP/2 connection to the agent over the VM's
//! virtio-serial port, shared by every client of a Unix socket.
//!
//! QEMU serves the port `atoll.agent` on a Unix socket in the sandbox directory
//! (`-chardev socket,id=agentport,path=<dir>/vm/wire/agent.port,server=on,wait=off`), and
//! takes one connection at a time. This module keeps that one connection and
//! multiplexes clients onto it:
//!
//! - [`upstream`]: when a request wants it, connects to `agent.port`, runs the host's
//!   side of the handshake of [`atoll_proto::link`] and opens one HTTP/2 client connection
//!   over it; with backoff while that fails (QEMU not started yet), and afresh at the
//!   next request once it ends (QEMU gone, a restore).
//! - [`forward`]: serves `agent.sock`; each accepted connection is an HTTP/2 server
//!   connection whose requests go over the upstream connection as streams of it.
//!   Bodies, trailers and resets pass through; a client that goes away cancels its
//!   upstream stream. While the link is down a request waits a bound (by default
//!   [`LINK_WAIT`]), then fails with gRPC `UNAVAILABLE`.
//!
//! [`start`] runs both as tasks of the calling runtime (the per-sandbox `atoll
//! net-helper` does, for every sandbox); [`run`] is the same in the foreground (the
//! hidden `atoll agent-link` command).

pub mod forward;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;

/// The QEMU chardev socket of the agent's port ([`port_path`]).
pub const PORT_SOCKET: &str = "agent.port";

/// Where QEMU serves the agent's port for the sandbox in `dir`: in `vm/wire/`, the part
/// of the sandbox directory QEMU shares with the network helper.
pub fn port_path(dir: &Path) -> PathBuf {
    crate::vmm::state::wire_dir(dir).join(PORT_SOCKET)
}
/// The socket clients of the agent connect to, in the sandbox directory.
pub const AGENT_SOCKET: &str = "agent.sock";
/// How long a request waits by default for the link to come (back) up before it fails.
pub const LINK_WAIT: Duration = Duration::from_secs(30);

/// Why the agent link could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AgentLinkError {
    /// The client socket could not be made.
    #[error("could not listen on {}; remove the file if no atoll process uses it", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// Accepting a client failed.
    #[error("accepting a client on {} failed", path.display())]
    Accept {
        /// The socket path.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
}

/// Serves the agent of the port at `port` on a new Unix socket at `socket` (0600;
/// a stale socket file there is replaced), as tasks of the current runtime; a request
/// waits up to `wait` for the link. The returned task ends only with an error.
pub fn start(
    port: &Path,
    socket: &Path,
    wait: Duration,
) -> Result<tokio::task::JoinHandle<AgentLinkError>, AgentLinkError> {
    let listener = bind(socket)?;
    let upstream = upstream::Upstream::start(port.to_path_buf(), wait);
    let socket = socket.to_path_buf();
    Ok(tokio::spawn(async move { forward::serve(listener, socket, upstream, wait).await }))
}

/// [`start`], in the foreground; returns only with an error.
pub async fn run(port: &Path, socket: &Path, wait: Duration) -> AgentLinkError {
    match start(port, socket, wait) {
        Ok(task) => task.await.unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic())),
        Err(e) => e,
    }
}

/// Makes the socket at `path` appear only once it listens, with mode 0600: it is bound
/// under a private name beside it, listened on, restricted, then renamed into place. A
/// client that sees the file can connect (no "connection refused" between bind and
/// listen), and no other user can connect in between (before the mode is set).
fn bind(path: &Path) -> Result<UnixListener, AgentLinkError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |source| AgentLinkError::Bind { path: path.to_path_buf(), source };
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && !meta.file_type().is_socket()
    {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "a file that is not a socket is in the way",
        )));
    }
    // Short, so that it fits in a socket address wherever `path` does.
    let private = path.with_file_name(format!(".{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&private);
    let listener = UnixListener::bind(&private).map_err(err)?;
    let placed = std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&private, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&private);
        return Err(err(e));
    }
    Ok(listener)
}

/// The HTTP/2 windows and frame size both connections use ([`atoll_proto::limits`]), as
/// the agent's server and the CLI's channel do.
pub(crate) mod h2 {
    pub(crate) use atoll_proto::limits::{H2_CONNECTION_WINDOW, H2_MAX_FRAME_SIZE, H2_STREAM_WINDOW};
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    use super::*;

    /// Whoever sees the socket file can connect: it appears already listening, 0600,
    /// with no private name left beside it; a stale socket is replaced, anything else
    /// in the way refused.
    #[tokio::test]
    async fn the_socket_appears_only_once_it_listens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AGENT_SOCKET);
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        let listener = bind(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::os::unix::net::UnixStream::connect(&path)
            .expect("the stale socket was replaced by a listening one");
        let (_conn, _) = listener.accept().await.unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [AGENT_SOCKET], "only the socket is left");

        let other = dir.path().join("other.sock");
        std::fs::write(&other, b"not a socket").unwrap();
        assert!(matches!(bind(&other), Err(AgentLinkError::Bind { .. })));
        assert_eq!(std::fs::read(&other).unwrap(), b"not a socket", "what was in the way is kept");
    }
}
