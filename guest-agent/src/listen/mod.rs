//! Binding the addresses of the shared grammar and serving the agent on each.
//!
//! Each connection's requests pass [`AuthorityFix`] (in atoll-proto, shared with the
//! host's agent link), so stock gRPC clients on Unix sockets are served (their
//! `:authority` is a path).
//!
//! - [`port`]: a virtio-serial port as a tokio stream that does not spin without a host.
//! - [`link`]: the agent link on that port: handshake, then one HTTP/2 connection per
//!   host connection ([`serve_port`]).

pub mod link;
pub mod port;

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use atoll_proto::Address;
use futures::TryStreamExt;
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_vsock::{VsockAddr, VsockListener};

use crate::AgentService;
use crate::auth::Token;
use atoll_proto::authority::AuthorityFix;

/// Why the agent could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Hybrid vsock is the host's side of a VMM socket; the guest listens on plain vsock.
    #[error(
        "cannot listen on {0}: hybrid vsock is the host side of a VMM socket; inside the VM listen on vsock://-1:PORT"
    )]
    HybridVsock(Address),
    /// The bind itself failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: Address,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A stale Unix socket could not be replaced.
    #[error("cannot replace the old socket file {path}; remove it or pick another path")]
    StaleSocket {
        /// The socket path.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A TCP listener reachable from other machines would be open to anyone.
    #[error(
        "refusing to serve {0} without a token: it is not a loopback address; pass --token-file PATH or set ATOLL_AGENT_TOKEN, or listen on tcp://127.0.0.1:PORT"
    )]
    TokenRequired(Address),
    /// Nothing was left to serve: every address was left out and the port never came.
    #[error(
        "nothing to serve on: no address could be bound and the agent link's port {port} did not appear within {secs} s; give the VM a vsock device or the virtio-serial port named atoll.agent, or pass --listen"
    )]
    NothingToServe {
        /// The port waited for.
        port: String,
        /// How long it was waited for.
        secs: u64,
    },
    /// The server on the agent link's port stopped with an error.
    #[error("serving the agent link on {port} failed")]
    ServePort {
        /// The port.
        port: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server stopped with an error.
    #[error("serving on {addr} failed")]
    Serve {
        /// The address served.
        addr: Address,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
}

/// A bound socket, ready to serve.
pub enum Listener {
    /// AF_VSOCK.
    Vsock(Address, VsockListener),
    /// A Unix stream socket.
    Unix(Address, UnixListener),
    /// TCP.
    Tcp(Address, TcpListener),
}

/// Receive buffer of the agent's vsock connections (inherited from the listener). The
/// kernel's 256 KiB lets the host send only that far ahead of what the agent has read,
/// and under emulation waiting for its credit updates left the guest idle part of an
/// upload.
const VSOCK_BUFFER_BYTES: u64 = 4 * 1024 * 1024;

/// Sets [`VSOCK_BUFFER_BYTES`] on `l` (`SO_VM_SOCKETS_BUFFER_MAX_SIZE` first, since the
/// size is clamped to it).
fn widen_vsock_buffer(l: &VsockListener) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // linux/vm_sockets.h; the option level is AF_VSOCK.
    const SO_VM_SOCKETS_BUFFER_SIZE: libc::c_int = 0;
    const SO_VM_SOCKETS_BUFFER_MAX_SIZE: libc::c_int = 2;
    for option in [SO_VM_SOCKETS_BUFFER_MAX_SIZE, SO_VM_SOCKETS_BUFFER_SIZE] {
        let value = VSOCK_BUFFER_BYTES;
        // SAFETY: a valid socket fd and a pointer to a live u64 of the given length.
        let ret = unsafe {
            libc::setsockopt(
                l.as_raw_fd(),
                libc::AF_VSOCK,
                option,
                (&raw const value).cast(),
                libc::socklen_t::try_from(std::mem::size_of::<u64>()).expect("8 fits socklen_t"),
            )
        };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl ListenError {
    /// True when binding a vsock address failed (no vsock device, or no vsock in the
    /// guest's kernel at all).
    pub fn is_vsock_bind(&self) -> bool {
        matches!(self, ListenError::Bind { addr: Address::Vsock { .. }, .. })
    }
}

impl Listener {
    /// Binds `addr`. A Unix socket is created 0600 after any stale file at its path is removed.
    pub async fn bind(addr: &Address) -> Result<Self, ListenError> {
        let bind_err = |source| ListenError::Bind { addr: addr.clone(), source };
        match addr {
            Address::Vsock { cid, port } => {
                let l = VsockListener::bind(VsockAddr::new(*cid, *port)).map_err(bind_err)?;
                if let Err(e) = widen_vsock_buffer(&l) {
                    tracing::debug!("vsock receive buffer left at the kernel's default: {e}");
                }
                Ok(Listener::Vsock(addr.clone(), l))
            }
            Address::HybridVsock { .. } => Err(ListenError::HybridVsock(addr.clone())),
            Address::Unix(path) => {
                remove_stale_socket(path)?;
                let l = UnixListener::bind(path).map_err(bind_err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
                Ok(Listener::Unix(addr.clone(), l))
            }
            Address::Tcp(hostport) => {
                let l = TcpListener::bind(hostport.as_str()).await.map_err(bind_err)?;
                Ok(Listener::Tcp(addr.clone(), l))
            }
        }
    }

    /// The address this listener was bound for.
    pub fn address(&self) -> &Address {
        match self {
            Listener::Vsock(a, _) | Listener::Unix(a, _) | Listener::Tcp(a, _) => a,
        }
    }

    /// True for a TCP listener on an address other machines can reach.
    pub fn needs_token(&self) -> bool {
        match self {
            Listener::Tcp(_, l) => l.local_addr().map_or(true, |a| !a.ip().is_loopback()),
            Listener::Vsock(..) | Listener::Unix(..) => false,
        }
    }

    /// Refuses a listener that [needs a token](Self::needs_token) when there is none.
    pub fn check_token(&self, token: Option<&Token>) -> Result<(), ListenError> {
        if self.needs_token() && token.is_none() {
            return Err(ListenError::TokenRequired(self.address().clone()));
        }
        Ok(())
    }

    /// Serves `svc` on this listener until the process ends. With a token, TCP callers
    /// must present it (`authorization: Bearer ...`); vsock and Unix callers need none.
    pub async fn serve(self, svc: AgentService, token: Option<Token>) -> Result<(), ListenError> {
        use tonic::service::interceptor::InterceptedService;
        self.check_token(token.as_ref())?;
        let addr = self.address().clone();
        let plain = || builder().add_service(svc.clone().into_server());
        let result = match (self, token) {
            (Listener::Vsock(_, l), _) => {
                plain().serve_with_incoming(l.incoming().map_ok(AuthorityFix::new)).await
            }
            (Listener::Unix(_, l), _) => {
                plain().serve_with_incoming(UnixListenerStream::new(l).map_ok(AuthorityFix::new)).await
            }
            (Listener::Tcp(_, l), None) => {
                plain().serve_with_incoming(TcpListenerStream::new(l).map_ok(AuthorityFix::new)).await
            }
            (Listener::Tcp(_, l), Some(token)) => {
                let check = move |req: tonic::Request<()>| token.check(&req).map(|()| req);
                builder()
                    .add_service(InterceptedService::new(svc.into_server(), check))
                    .serve_with_incoming(TcpListenerStream::new(l).map_ok(AuthorityFix::new))
                    .await
            }
        };
        result.map_err(|source| ListenError::Serve { addr, source })
    }
}

/// The HTTP/2 server with the flow-control windows and frame size of
/// [`atoll_proto::limits`]: with hyper's defaults (1 MiB windows, 16 KiB frames) an upload
/// arrives in 16 KiB frames, each its own read.
fn builder() -> tonic::transport::Server {
    use atoll_proto::limits::{H2_CONNECTION_WINDOW, H2_MAX_FRAME_SIZE, H2_STREAM_WINDOW};
    tonic::transport::Server::builder()
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_frame_size(H2_MAX_FRAME_SIZE)
}

fn remove_stale_socket(path: &std::path::Path) -> Result<(), ListenError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)
            .map_err(|source| ListenError::StaleSocket { path: path.to_path_buf(), source }),
        Ok(_) => Err(ListenError::StaleSocket {
            path: path.to_path_buf(),
            source: io::Error::new(io::ErrorKind::AlreadyExists, "a file that is not a socket is in the way"),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ListenError::StaleSocket { path: path.to_path_buf(), source }),
    }
}

/// Binds every address. With the agent link's port to serve (`link`), a vsock address
/// that cannot be bound is left out with a log line, and the agent goes on: a VM that
/// atoll starts has the port and no vsock device (an image may even lack vsock in its
/// kernel). Any other failure, or a vsock one without the link, is returned.
pub async fn bind_listeners(addrs: &[Address], link: bool) -> Result<Vec<Listener>, ListenError> {
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        match Listener::bind(addr).await {
            Ok(l) => listeners.push(l),
            Err(e) if link && e.is_vsock_bind() => {
                tracing::info!(
                    "{}; left out, as the agent link's port is to be served",
                    crate::report::error_chain(&e)
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(listeners)
}

/// How long the agent waits at start for the kernel to add the link's port.
const PORT_FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How many calls the host's link may cancel before the agent accepted them (see
/// [`serve_port`]): far more than clients that give up on a stopped VM in one pause.
const LINK_PENDING_RESETS: usize = 4096;

/// Serves `svc` on the agent link's port (a virtio-serial port, or a character device
/// standing in for one), one host connection after another, until the process ends.
/// The port is reached only from the host: no token is asked. A port that does not
/// appear leaves nothing to serve: the other listeners go on, and with none (`alone`)
/// that is an error.
pub async fn serve_port(source: link::PortSource, svc: AgentService, alone: bool) -> Result<(), ListenError> {
    let Some(port) = link::first_open(&source, PORT_FIRST_WAIT).await else {
        if alone {
            return Err(ListenError::NothingToServe {
                port: source.to_string(),
                secs: PORT_FIRST_WAIT.as_secs(),
            });
        }
        tracing::info!(port = %source, "no agent link: the port did not appear");
        return std::future::pending().await;
    };
    tracing::info!(port = %source, "serving the agent link");
    builder()
        // The host's link cancels every call whose client went away. While the VM was
        // stopped or wedged those cancellations pile up unread, and once it runs again
        // they arrive together, before their calls were accepted: hyper's guard against
        // rapid resets (20) would end the whole link with ENHANCE_YOUR_CALM, failing
        // the first call after a resume. The port's only peer is the host.
        .http2_max_pending_accept_reset_streams(Some(LINK_PENDING_RESETS))
        .add_service(svc.into_server())
        .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(link::sessions(
            source.clone(),
            port,
        )))
        .await
        .map_err(|source_err| ListenError::ServePort { port: source.to_string(), source: source_err })
}

/// Binds every address, then serves all of them; returns when any server stops.
pub async fn serve_all(
    addrs: &[Address],
    svc: AgentService,
    token: Option<Token>,
) -> Result<(), ListenError> {
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        listeners.push(Listener::bind(addr).await?);
    }
    serve_listeners(listeners, None, svc, token).await
}

/// Serves already-bound listeners, and the agent link's port if there is one; returns
/// when any server stops, or at once with an error when there are no listeners and
/// the port does not appear. Nothing is served if any listener
/// [needs a token](Listener::needs_token) and there is none.
pub async fn serve_listeners(
    listeners: Vec<Listener>,
    port: Option<link::PortSource>,
    svc: AgentService,
    token: Option<Token>,
) -> Result<(), ListenError> {
    for l in &listeners {
        l.check_token(token.as_ref())?;
    }
    let alone = listeners.is_empty();
    let mut set = tokio::task::JoinSet::new();
    for l in listeners {
        tracing::info!(addr = %l.address(), token = token.is_some() && matches!(l, Listener::Tcp(..)), "listening");
        set.spawn(l.serve(svc.clone(), token.clone()));
    }
    if let Some(port) = port {
        set.spawn(serve_port(port, svc, alone));
    }
    match set.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(join)) => std::panic::resume_unwind(join.into_panic()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind_failure(addr: Address) -> ListenError {
        ListenError::Bind { addr, source: io::Error::from_raw_os_error(libc::EAFNOSUPPORT) }
    }

    #[test]
    fn only_a_vsock_bind_failure_is_one() {
        assert!(bind_failure(Address::default_listen()).is_vsock_bind());
        assert!(!bind_failure(Address::Unix("/run/a.sock".into())).is_vsock_bind());
        assert!(!ListenError::TokenRequired(Address::default_listen()).is_vsock_bind());
    }

    #[tokio::test]
    async fn a_unix_address_that_cannot_be_bound_stays_fatal_beside_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let addr = Address::Unix(dir.path().join("missing-dir/agent.sock"));
        let e = bind_listeners(std::slice::from_ref(&addr), true).await.err().expect("bind must fail");
        assert!(matches!(&e, ListenError::Bind { addr: a, .. } if *a == addr), "{e}");
    }

    /// No listener and no port: the agent must stop (as PID 1, the VM ends and shows why)
    /// rather than run on serving nothing.
    #[tokio::test(start_paused = true)]
    async fn a_port_that_never_appears_with_no_listener_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let source = link::PortSource::Device(dir.path().join("no-such-port"));
        let svc = AgentService::new(dir.path().join("jobs"));
        let e = serve_listeners(Vec::new(), Some(source), svc, None).await.expect_err("nothing to serve");
        assert!(matches!(e, ListenError::NothingToServe { .. }), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_port_that_never_appears_beside_a_listener_leaves_it_serving() {
        let dir = tempfile::tempdir().unwrap();
        let addr = Address::Unix(dir.path().join("agent.sock"));
        let listeners = bind_listeners(std::slice::from_ref(&addr), true).await.unwrap();
        let source = link::PortSource::Device(dir.path().join("no-such-port"));
        let svc = AgentService::new(dir.path().join("jobs"));
        let serving = serve_listeners(listeners, Some(source), svc, None);
        // Well past the port's wait (virtual time): the listener is still being served.
        assert!(tokio::time::timeout(PORT_FIRST_WAIT * 6, serving).await.is_err());
    }
}
