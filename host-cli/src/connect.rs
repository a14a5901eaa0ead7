//! Dialing an agent: one function that turns any [`Address`] into a connected tonic
//! [`Channel`], with a connect timeout and errors that say where we looked.
//!
//! The Firecracker hybrid-vsock handshake (`CONNECT <port>\n` answered by `OK <n>\n`,
//! see firecracker `docs/vsock.md`; vhost-device-vsock speaks the same) lives here too;
//! its reply parser is the pure function [`parse_handshake_reply`].

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use atoll_proto::Address;
use atoll_proto::limits::{H2_CONNECTION_WINDOW, H2_MAX_FRAME_SIZE, H2_STREAM_WINDOW};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tonic::transport::{Channel, Endpoint, Uri};

/// How long to wait for an agent to answer when the caller does not say.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest handshake reply line we accept before calling the peer confused.
const MAX_REPLY_LINE: usize = 64;

/// Why no agent could be reached. Every variant names what was reached and what did
/// not answer; none names an RPC.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing accepted the connection within the timeout.
    #[error(
        "nothing at {addr} accepted a connection within {secs}: {hint}",
        secs = seconds(*timeout),
        hint = hint(addr)
    )]
    Timeout {
        /// Where we looked.
        addr: Address,
        /// How long we waited.
        timeout: Duration,
    },
    /// A hybrid-vsock VMM took the connection and the `CONNECT` line but did not
    /// answer it within the timeout.
    #[error(
        "the VM socket at {addr} took the connection but did not let us through to guest port {port} \
         within {secs}: the VM is not booted yet, or it is stopped",
        secs = seconds(*timeout)
    )]
    HandshakeTimeout {
        /// Where we looked.
        addr: Address,
        /// The guest port we asked for.
        port: u32,
        /// How long we waited.
        timeout: Duration,
    },
    /// The connection was taken but not one byte came back within the timeout.
    #[error(
        "{addr} took the connection but sent nothing back within {secs}: the program listening \
         there is stuck, or it is not atoll-agent",
        secs = seconds(*timeout)
    )]
    Silent {
        /// Where we looked.
        addr: Address,
        /// How long we waited.
        timeout: Duration,
    },
    /// The peer started an HTTP/2 session but the agent did not answer a call within the
    /// timeout: the agent is stuck, or the VM behind an agent link is stopped or wedged.
    #[error(
        "{addr} took the connection and started a session, but the agent did not answer within \
         {secs}: the agent is stuck, or the VM it runs in is stopped or wedged",
        secs = seconds(*timeout)
    )]
    Unanswered {
        /// Where we looked.
        addr: Address,
        /// How long we waited.
        timeout: Duration,
    },
    /// An agent link answered for the agent: it cannot reach it.
    #[error("{addr} took the connection but could not reach the agent: {message}")]
    LinkDown {
        /// Where we looked.
        addr: Address,
        /// What the link said.
        message: String,
    },
    /// The socket file does not exist.
    #[error("no socket at {path} (from {addr}): {hint}", path = path.display(), hint = hint(addr))]
    NoSocket {
        /// Where we looked.
        addr: Address,
        /// The missing socket path.
        path: PathBuf,
    },
    /// The connection was refused or failed outright.
    #[error("could not connect to the agent at {addr}: {hint}", hint = hint(addr))]
    Refused {
        /// Where we looked.
        addr: Address,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The VMM's socket accepted us but the guest side is not there yet.
    #[error(
        "the VM socket at {addr} did not let us through to guest port {port} ({why}): the VM is \
         not booted yet or atoll-agent is not listening on port {port}; retry in a moment"
    )]
    NotReady {
        /// Where we looked.
        addr: Address,
        /// The guest port we asked for.
        port: u32,
        /// What the VMM answered instead of `OK`.
        why: HandshakeError,
    },
    /// The VMM's socket took the connection but nothing ever read the request.
    #[error(
        "the VM socket at {addr} took the connection but nothing read the request within {secs}: \
         the VM's process is stopped, or its vsock backend has stopped serving the socket",
        secs = seconds(*after)
    )]
    Stalled {
        /// Where we looked.
        addr: Address,
        /// How long the request lay unread.
        after: Duration,
    },
    /// The HTTP/2 layer failed on an established connection.
    #[error(
        "connected to {addr} but could not start a gRPC session: is atoll-agent the program listening there?"
    )]
    Protocol {
        /// Where we looked.
        addr: Address,
        /// What tonic said.
        #[source]
        source: tonic::transport::Error,
    },
    /// The connection broke before the agent answered anything.
    #[error(
        "connected to {addr} but the connection was lost before the agent answered ({message}): \
         is atoll-agent the program listening there?"
    )]
    Lost {
        /// Where we looked.
        addr: Address,
        /// What the transport said.
        message: String,
    },
}

impl ConnectError {
    /// The address the error is about.
    pub fn address(&self) -> &Address {
        match self {
            ConnectError::Timeout { addr, .. }
            | ConnectError::HandshakeTimeout { addr, .. }
            | ConnectError::Silent { addr, .. }
            | ConnectError::Unanswered { addr, .. }
            | ConnectError::LinkDown { addr, .. }
            | ConnectError::Lost { addr, .. }
            | ConnectError::NoSocket { addr, .. }
            | ConnectError::Refused { addr, .. }
            | ConnectError::NotReady { addr, .. }
            | ConnectError::Stalled { addr, .. }
            | ConnectError::Protocol { addr, .. } => addr,
        }
    }
}

/// `5 s`, `0.25 s`: how the timeout reads in messages.
pub(crate) fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 { format!("{} s", d.as_secs()) } else { format!("{} s", d.as_secs_f64()) }
}

fn hint(addr: &Address) -> String {
    match addr {
        Address::Vsock { port, .. } | Address::HybridVsock { port, .. } => {
            format!("is the VM booted and atoll-agent listening on port {port}?")
        }
        Address::Unix(_) | Address::Tcp(_) => "is atoll-agent running and listening there?".to_string(),
    }
}

/// What a hybrid-vsock VMM answered instead of `OK <n>\n`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The VMM closed the connection before a full line.
    #[error("it closed the connection before answering OK")]
    Eof,
    /// The VMM answered something else.
    #[error("it answered `{0}` instead of `OK <port>`")]
    Unexpected(String),
    /// The reply line grew past any sane length.
    #[error("its reply was longer than {MAX_REPLY_LINE} bytes without a newline")]
    TooLong,
}

/// Parses one reply line of the hybrid-vsock handshake (with or without its `\n`).
/// `OK <n>` gives the host-side port number the VMM assigned; anything else is refused.
pub fn parse_handshake_reply(line: &[u8]) -> Result<u32, HandshakeError> {
    let unexpected =
        || HandshakeError::Unexpected(String::from_utf8_lossy(line).trim_end().escape_debug().to_string());
    let text = std::str::from_utf8(line).map_err(|_| unexpected())?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let port = text.strip_prefix("OK ").ok_or_else(unexpected)?;
    port.trim().parse::<u32>().map_err(|_| unexpected())
}

/// Performs the hybrid-vsock handshake on a freshly connected stream: writes
/// `CONNECT <port>\n` and reads the reply one byte at a time, so nothing the guest
/// sends after the newline is consumed.
pub async fn handshake<S>(stream: &mut S, port: u32) -> Result<u32, HandshakeIoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // A VMM whose guest side is not up yet accepts and closes at once, so the request
    // itself may meet a closed socket: that is the same "not ready" as an early EOF.
    let sent = match stream.write_all(format!("CONNECT {port}\n").as_bytes()).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        return Err(match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                HandshakeIoError::Refused(HandshakeError::Eof)
            }
            _ => HandshakeIoError::Io(e),
        });
    }
    let mut line = Vec::with_capacity(16);
    loop {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(0) => return Err(HandshakeIoError::Refused(HandshakeError::Eof)),
            Ok(_) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    return parse_handshake_reply(&line).map_err(HandshakeIoError::Refused);
                }
                if line.len() >= MAX_REPLY_LINE {
                    return Err(HandshakeIoError::Refused(HandshakeError::TooLong));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(HandshakeIoError::Refused(HandshakeError::Eof));
            }
            Err(e) => return Err(HandshakeIoError::Io(e)),
        }
    }
}

/// A failed handshake: the VMM refused, or the socket itself failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeIoError {
    /// The VMM did not answer `OK`.
    #[error(transparent)]
    Refused(HandshakeError),
    /// Reading or writing the socket failed.
    #[error("the hybrid-vsock handshake failed on the socket")]
    Io(#[source] io::Error),
}

/// A byte stream to an agent, whatever carried it.
pub enum AgentStream {
    /// A Unix socket (plain, or hybrid vsock after its handshake).
    Unix(tokio::net::UnixStream),
    /// TCP.
    Tcp(tokio::net::TcpStream),
    /// AF_VSOCK.
    Vsock(tokio_vsock::VsockStream),
}

macro_rules! each_stream {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            AgentStream::Unix($s) => $e,
            AgentStream::Tcp($s) => $e,
            AgentStream::Vsock($s) => $e,
        }
    };
}

impl AsyncRead for AgentStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each_stream!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for AgentStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each_stream!(self, s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_stream!(self, s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_stream!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// What is known of the connection under a channel: whether it broke (its peer closed
/// it or a read or write on it failed: a failed call is then a lost connection, whatever
/// status tonic made of it, never an answer from the agent), and whether any byte ever
/// came back on it. Cleared when the channel dials again.
#[derive(Clone, Debug, Default)]
pub struct Link(Arc<LinkState>);

#[derive(Debug, Default)]
struct LinkState {
    broken: AtomicBool,
    heard: AtomicBool,
}

impl Link {
    /// True once the current connection has broken.
    pub fn is_broken(&self) -> bool {
        self.0.broken.load(Ordering::SeqCst)
    }

    /// True once the peer has sent at least one byte on the current connection.
    pub fn heard_back(&self) -> bool {
        self.0.heard.load(Ordering::SeqCst)
    }

    fn set(&self, broken: bool) {
        self.0.broken.store(broken, Ordering::SeqCst);
    }

    fn reset(&self) {
        self.0.broken.store(false, Ordering::SeqCst);
        self.0.heard.store(false, Ordering::SeqCst);
    }
}

/// A stream that marks its [`Link`] broken on end of file or on any error.
struct Watched<S> {
    inner: S,
    link: Link,
}

impl<S> Watched<S> {
    fn watch<T>(&self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &poll {
            self.link.set(true);
        }
        poll
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let wanted = buf.remaining() > 0;
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll
            && wanted
        {
            if buf.filled().len() == before {
                self.link.set(true);
            } else {
                self.link.0.heard.store(true, Ordering::SeqCst);
            }
        }
        self.watch(poll)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(poll)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(poll)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// How long a hybrid-vsock VMM gets to read the `CONNECT` line. vhost-device-vsock reads
/// it as soon as it accepts the connection, whatever the guest is doing, so one that has
/// not after this long has stopped serving its socket: 0.3.0 now and then loses the
/// worker thread that accepts and reads, and the kernel goes on queueing connections
/// for it that nothing will ever answer. A busy host delays the read by milliseconds.
pub const UNREAD_LIMIT: Duration = Duration::from_millis(1500);

/// How many times a hybrid-vsock connection closed before `OK` is tried (see [`dial`]).
const EARLY_CLOSE_TRIES: u32 = 5;
/// The pause between those tries.
const EARLY_CLOSE_PAUSE: Duration = Duration::from_millis(20);

/// Opens a byte stream to `addr` (no timeout; see [`connect`]).
pub async fn dial(addr: &Address) -> Result<AgentStream, ConnectError> {
    let failed = |source: io::Error, path: Option<&Path>| match (source.kind(), path) {
        (io::ErrorKind::NotFound, Some(path)) => {
            ConnectError::NoSocket { addr: addr.clone(), path: path.to_path_buf() }
        }
        _ => ConnectError::Refused { addr: addr.clone(), source },
    };
    match addr {
        Address::Unix(path) => {
            // A sandbox's agent link lies in its network helper's own directory, which a
            // helper taken over by its guest can write: a link planted there is refused.
            let s = if crate::sandbox::network::config::sandbox_dir_of_agent_socket(path).is_some() {
                crate::vmm::safe_fs::connect_unix(path).await
            } else {
                tokio::net::UnixStream::connect(path).await
            };
            Ok(AgentStream::Unix(s.map_err(|e| failed(e, Some(path)))?))
        }
        Address::HybridVsock { path, port } => {
            // A guest restored from a snapshot can still hold vsock sockets of connections
            // that were open when it was saved, on host ports its new backend hands out
            // again: such a connection is closed before `OK`, and the next one, on the next
            // port, gets through. So an early close is tried again a few times.
            let mut tries = 0;
            loop {
                tries += 1;
                let mut s = tokio::net::UnixStream::connect(path).await.map_err(|e| failed(e, Some(path)))?;
                let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
                let reply = tokio::select! {
                    reply = handshake(&mut s, *port) => reply,
                    () = left_unread(fd, UNREAD_LIMIT) => {
                        return Err(ConnectError::Stalled { addr: addr.clone(), after: UNREAD_LIMIT });
                    }
                };
                match reply {
                    Ok(_) => return Ok(AgentStream::Unix(s)),
                    Err(HandshakeIoError::Refused(HandshakeError::Eof)) if tries < EARLY_CLOSE_TRIES => {
                        tokio::time::sleep(EARLY_CLOSE_PAUSE).await;
                    }
                    Err(HandshakeIoError::Refused(why)) => {
                        return Err(ConnectError::NotReady { addr: addr.clone(), port: *port, why });
                    }
                    Err(HandshakeIoError::Io(e)) => return Err(failed(e, None)),
                }
            }
        }
        Address::Tcp(hostport) => {
            let s = tokio::net::TcpStream::connect(hostport.as_str()).await.map_err(|e| failed(e, None))?;
            let _ = s.set_nodelay(true);
            Ok(AgentStream::Tcp(s))
        }
        Address::Vsock { cid, port } => {
            let s = tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port))
                .await
                .map_err(|e| failed(e, None))?;
            Ok(AgentStream::Vsock(s))
        }
    }
}

/// Completes when the bytes written to the Unix stream `fd` still lie unread by its
/// peer `after` that long; otherwise never. `fd` must stay open while this is polled.
async fn left_unread(fd: std::os::fd::RawFd, after: Duration) {
    tokio::time::sleep(after).await;
    let mut unread: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ's number on Linux) writes one int, the bytes of the
    // socket's sent data its peer has not read yet, to a pointer to a live c_int; the
    // caller keeps `fd` open.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unread) };
    if rc == 0 && unread > 0 {
        return;
    }
    std::future::pending().await
}

/// Connects a gRPC channel to the agent at `addr`: dials it (with the hybrid-vsock
/// handshake) and starts the HTTP/2 session, all within `timeout`. Whether the agent
/// answers a call is the caller's to prove ([`crate::client::Client::connect`] does).
///
/// The first stream is dialed here so that failures come back as a [`ConnectError`]
/// rather than a transport error; if the channel later needs to reconnect, it dials the
/// same address again, within `timeout` too.
pub async fn connect(addr: &Address, timeout: Duration) -> Result<(Channel, Link), ConnectError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let first = tokio::time::timeout_at(deadline, dial(addr)).await.map_err(|_| match addr {
        Address::HybridVsock { port, .. } => {
            ConnectError::HandshakeTimeout { addr: addr.clone(), port: *port, timeout }
        }
        _ => ConnectError::Timeout { addr: addr.clone(), timeout },
    })??;
    let first = Arc::new(Mutex::new(Some(first)));
    let redial = addr.clone();
    let link = Link::default();
    let watching = link.clone();
    let connector = tower::service_fn(move |_: Uri| {
        let first = first.lock().ok().and_then(|mut slot| slot.take());
        let (addr, link) = (redial.clone(), watching.clone());
        async move {
            let stream = match first {
                Some(stream) => stream,
                None => tokio::time::timeout(timeout, dial(&addr))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("no answer from {addr}")))?
                    .map_err(io::Error::other)?,
            };
            link.reset();
            Ok::<_, io::Error>(TokioIo::new(Watched { inner: stream, link }))
        }
    });
    let endpoint = Endpoint::from_static("http://agent.invalid")
        .connect_timeout(timeout)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_frame_size(H2_MAX_FRAME_SIZE);
    let channel = tokio::time::timeout_at(deadline, endpoint.connect_with_connector(connector))
        .await
        .map_err(|_| ConnectError::Silent { addr: addr.clone(), timeout })?
        .map_err(|source| ConnectError::Protocol { addr: addr.clone(), source })?;
    Ok((channel, link))
}

/// Adds `authorization: Bearer $ATOLL_AGENT_TOKEN` to every call to a `tcp://` agent
/// when that variable is set: an agent listening on a non-loopback TCP address requires
/// it. Never to any other kind of address: a sandbox's agent link, a Unix socket or a
/// vsock port leads to an agent the guest controls, which must not learn the token.
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// The token from `ATOLL_AGENT_TOKEN` for an agent at `addr`: only a `tcp://` one
    /// gets it, and only when the variable is set and usable in a header.
    pub fn for_address(addr: &Address) -> Self {
        if !matches!(addr, Address::Tcp(_)) {
            return Bearer(None);
        }
        let token = std::env::var("ATOLL_AGENT_TOKEN").ok().filter(|t| !t.trim().is_empty());
        let value = token.and_then(|t| {
            let mut v = tonic::metadata::MetadataValue::try_from(format!("Bearer {}", t.trim())).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        Bearer(value)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_reply_gives_the_port() {
        assert_eq!(parse_handshake_reply(b"OK 1073741824\n"), Ok(1_073_741_824));
        assert_eq!(parse_handshake_reply(b"OK 5\r\n"), Ok(5));
        assert_eq!(parse_handshake_reply(b"OK 5"), Ok(5));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [&b"NO\n"[..], b"OK\n", b"OK x\n", b"ok 5\n", b"\n", b"OK -1\n", b"\xff\xfe\n"] {
            assert!(
                matches!(parse_handshake_reply(bad), Err(HandshakeError::Unexpected(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn timeout_message_names_the_address_and_port() {
        let addr: Address = "hvsock:///run/vm/v.sock:1024".parse().unwrap();
        let e = ConnectError::HandshakeTimeout { addr, port: 1024, timeout: Duration::from_secs(5) };
        assert_eq!(
            e.to_string(),
            "the VM socket at hvsock:///run/vm/v.sock:1024 took the connection but did not let us \
             through to guest port 1024 within 5 s: the VM is not booted yet, or it is stopped"
        );
    }

    #[tokio::test]
    async fn handshake_reads_only_up_to_the_newline() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let vmm = tokio::spawn(async move {
            let mut buf = [0u8; 13];
            b.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"CONNECT 1024\n");
            b.write_all(b"OK 77\nrest").await.unwrap();
            b
        });
        assert_eq!(handshake(&mut a, 1024).await.unwrap(), 77);
        let _b = vmm.await.unwrap();
        let mut rest = [0u8; 4];
        a.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"rest");
    }

    #[tokio::test]
    async fn a_socket_closed_before_connect_is_sent_is_not_ready() {
        let (mut a, b) = tokio::net::UnixStream::pair().unwrap();
        drop(b);
        let got = handshake(&mut a, 1024).await;
        assert!(matches!(got, Err(HandshakeIoError::Refused(HandshakeError::Eof))), "{got:?}");
    }

    /// A hybrid-vsock socket: `serve` gets each accepted stream (none when `None`).
    fn vmm_socket(
        serve: Option<fn(std::os::unix::net::UnixStream)>,
    ) -> (tempfile::TempDir, Address, std::os::unix::net::UnixListener) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        if let Some(serve) = serve {
            let l = listener.try_clone().unwrap();
            std::thread::spawn(move || {
                for s in l.incoming() {
                    serve(s.unwrap());
                }
            });
        }
        let addr = format!("hvsock://{}:1024", path.display()).parse().unwrap();
        (dir, addr, listener)
    }

    #[tokio::test]
    async fn a_vmm_that_never_reads_the_request_is_stalled() {
        // The kernel queues the connection; nothing accepts or reads it.
        let (_dir, addr, _listener) = vmm_socket(None);
        let got = tokio::time::timeout(UNREAD_LIMIT * 4, dial(&addr)).await.expect("gives up by itself");
        let Err(e @ ConnectError::Stalled { .. }) = got else { panic!("{:?}", got.err()) };
        assert!(e.to_string().contains("nothing read the request"), "{e}");
    }

    #[tokio::test]
    async fn a_vmm_that_read_the_request_is_waited_for() {
        // A live backend whose guest is slow: the line is read, no answer comes yet.
        let (_dir, addr, _listener) = vmm_socket(Some(|mut s| {
            use std::io::Read as _;
            let mut line = [0u8; 13];
            s.read_exact(&mut line).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }));
        let got = tokio::time::timeout(UNREAD_LIMIT * 2, dial(&addr)).await;
        assert!(got.is_err(), "still waiting for the guest: {:?}", got.map(|r| r.err()));
    }

    #[tokio::test]
    async fn handshake_eof_is_not_ready() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let vmm = tokio::spawn(async move {
            let mut buf = [0u8; 10];
            b.read_exact(&mut buf).await.unwrap();
            drop(b);
        });
        let got = handshake(&mut a, 1).await;
        vmm.await.unwrap();
        assert!(matches!(got, Err(HandshakeIoError::Refused(HandshakeError::Eof))), "{got:?}");
    }
}
