//! Published ports, the guest side: each ConnectPort call is one TCP connection to a
//! port of the guest's loopback, spliced with the call's messages.
//!
//! The guest's loopback is dialled (`127.0.0.1`, then `[::1]`), not its NIC, so a service
//! that listens only on 127.0.0.1 is reached too, and published ports work in sandboxes
//! without a network. The connection closes as TCP does: `eof` from the host shuts the
//! guest connection's writing side, the guest's end of stream becomes `eof` to the host,
//! and the call ends once both have happened. A host that goes away closes it at once.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use atoll_proto::limits::CHUNK_SIZE;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

/// Messages buffered towards the host; with chunks of at most [`CHUNK_SIZE`] this bounds
/// the agent's memory per connection, and a slow host slows the guest service down.
const BUFFER: usize = 8;

/// Why a port connection could not be made or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The first message did not name a port.
    #[error("the first ConnectPort message must be `open` with the guest port")]
    NotOpened,
    /// `open` came again.
    #[error("`open` may only be the first ConnectPort message")]
    Reopened,
    /// Not a TCP port number.
    #[error("{0} is not a TCP port; give 1 to 65535")]
    BadPort(u32),
    /// Nothing accepts connections on the port.
    #[error(
        "nothing listens on port {0} in the sandbox (127.0.0.1:{0} and [::1]:{0} refused the connection); start the server first, listening on 0.0.0.0, 127.0.0.1 or ::"
    )]
    NothingListening(u16),
    /// The connection failed for another reason.
    #[error("could not connect to port {port} in the sandbox")]
    Connect {
        /// The port.
        port: u16,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Reading from the guest service failed (it reset the connection).
    #[error("the connection to port {port} in the sandbox broke")]
    Broken {
        /// The port.
        port: u16,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// A message from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromHost {
    /// The first message: the guest port to connect to.
    Open(u32),
    /// Bytes for the guest service.
    Data(Bytes),
    /// The host sends no more bytes (TCP half-close).
    Eof,
}

/// A message to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHost {
    /// Bytes from the guest service.
    Data(Bytes),
    /// The guest service sends no more bytes.
    Eof,
}

/// What the host receives: bytes, `eof`, or the error that ended the connection.
pub type Received = mpsc::Receiver<Result<ToHost, PortError>>;

/// Reads `open` from `input`, connects to that port of the guest's loopback and splices
/// the connection with the rest of `input` and the returned receiver.
pub async fn connect<S, E>(mut input: S) -> Result<Received, PortError>
where
    S: Stream<Item = Result<FromHost, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    let port = match input.next().await {
        Some(Ok(FromHost::Open(port))) => port,
        _ => return Err(PortError::NotOpened),
    };
    let port = u16::try_from(port).ok().filter(|p| *p != 0).ok_or(PortError::BadPort(port))?;
    let stream = dial(port).await?;
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let both = futures::future::try_join(to_guest(input, wr), to_host(rd, &tx, port));
        tokio::select! {
            done = both => if let Err(Some(e)) = done {
                let _ = tx.send(Err(e)).await;
            },
            // The host went away: dropping both halves closes the guest connection.
            () = tx.closed() => {}
        }
    });
    Ok(rx)
}

/// Connects to `127.0.0.1:port`, then to `[::1]:port` if nothing listens on the former.
async fn dial(port: u16) -> Result<TcpStream, PortError> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let refused = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionRefused;
    match TcpStream::connect(v4).await {
        Ok(s) => Ok(s),
        Err(e) if refused(&e) => match TcpStream::connect(v6).await {
            Ok(s) => Ok(s),
            // No IPv6 on the loopback counts as nothing listening there.
            Err(e6) if refused(&e6) || e6.kind() == std::io::ErrorKind::AddrNotAvailable => {
                Err(PortError::NothingListening(port))
            }
            Err(source) => Err(PortError::Connect { port, source }),
        },
        Err(source) => Err(PortError::Connect { port, source }),
    }
}

/// Writes the host's bytes to the guest service until `eof` (or the end of the input),
/// then shuts the connection's writing side. `Err(None)`: the host's stream failed, so
/// the connection is dropped. A guest service that stopped reading ends this side
/// quietly: what the host still sends has nowhere to go.
async fn to_guest<S, E>(mut input: S, mut wr: OwnedWriteHalf) -> Result<(), Option<PortError>>
where
    S: Stream<Item = Result<FromHost, E>> + Unpin,
{
    loop {
        match input.next().await {
            Some(Ok(FromHost::Data(bytes))) => {
                if wr.write_all(&bytes).await.is_err() {
                    return Ok(());
                }
            }
            Some(Ok(FromHost::Eof)) | None => {
                let _ = wr.shutdown().await;
                return Ok(());
            }
            Some(Ok(FromHost::Open(_))) => return Err(Some(PortError::Reopened)),
            Some(Err(_)) => return Err(None),
        }
    }
}

/// Sends the guest service's bytes to the host, then `eof`. `Err(None)`: the host is gone.
async fn to_host(
    mut rd: OwnedReadHalf,
    tx: &mpsc::Sender<Result<ToHost, PortError>>,
    port: u16,
) -> Result<(), Option<PortError>> {
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(CHUNK_SIZE);
        let msg = match rd.read_buf(&mut buf).await {
            Ok(0) => ToHost::Eof,
            Ok(_) => ToHost::Data(buf.split().freeze()),
            Err(source) => return Err(Some(PortError::Broken { port, source })),
        };
        let eof = msg == ToHost::Eof;
        tx.send(Ok(msg)).await.map_err(|_| None)?;
        if eof {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn msg(m: FromHost) -> Result<FromHost, ()> {
        Ok(m)
    }

    #[tokio::test]
    async fn bytes_flow_both_ways_and_half_closes_pass_through() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&[b"echo:", &got[..]].concat()).await.unwrap();
        });
        let input = futures::stream::iter([
            msg(FromHost::Open(u32::from(port))),
            msg(FromHost::Data("hello".into())),
            msg(FromHost::Eof),
        ])
        .chain(futures::stream::pending());
        let mut rx = connect(Box::pin(input)).await.unwrap();
        let mut out = Vec::new();
        while let Some(m) = rx.recv().await {
            match m.unwrap() {
                ToHost::Data(b) => out.extend_from_slice(&b),
                ToHost::Eof => break,
            }
        }
        assert_eq!(out, b"echo:hello");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_refused_with_what_to_do() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let input = futures::stream::iter([msg(FromHost::Open(u32::from(port)))]);
        let err = connect(input).await.unwrap_err();
        assert!(matches!(err, PortError::NothingListening(p) if p == port), "{err}");
        assert!(err.to_string().contains("start the server"), "{err}");
        for bad in [0, 70_000] {
            let input = futures::stream::iter([msg(FromHost::Open(bad))]);
            assert!(matches!(connect(input).await, Err(PortError::BadPort(_))));
        }
        let input = futures::stream::iter([msg(FromHost::Data("x".into()))]);
        assert!(matches!(connect(input).await, Err(PortError::NotOpened)));
    }
}
