//! [`Client::forward_port`]: one host connection carried to a port of the guest over a
//! ConnectPort call (what a published port does with each connection it accepts).

use std::sync::atomic::{AtomicU64, Ordering};

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::port_data::Part;
use atoll_proto::limits::CHUNK_SIZE;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Client, ClientError, Result};

/// Messages buffered towards the agent per connection.
const BUFFER: usize = 8;

/// Bytes carried by one forwarded connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortTraffic {
    /// From the host connection into the guest.
    pub to_guest: u64,
    /// From the guest back to the host connection.
    pub to_host: u64,
}

impl Client {
    /// Connects to `port` on the guest's loopback and carries bytes both ways between it
    /// and `conn`, half-closes included, until both sides are done. Fails before any
    /// byte moves when nothing listens on the port (FAILED_PRECONDITION, with what to do).
    pub async fn forward_port<S>(&self, port: u16, conn: S) -> Result<PortTraffic>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin,
    {
        let err = self.err("ConnectPort");
        let (tx, rx) = mpsc::channel(BUFFER);
        tx.try_send(pb::PortData { part: Some(Part::Open(u32::from(port))) })
            .expect("a new channel has room");
        let mut from_guest =
            self.rpc.clone().connect_port(ReceiverStream::new(rx)).await.map_err(&err)?.into_inner();
        let (mut rd, mut wr) = tokio::io::split(conn);
        let sent = AtomicU64::new(0);
        let up = to_guest(&mut rd, tx, &sent);
        let down = async {
            let mut to_host = 0u64;
            while let Some(msg) = from_guest.message().await.map_err(&err)? {
                match msg.part {
                    Some(Part::Data(bytes)) => {
                        wr.write_all(&bytes).await.map_err(ClientError::PortConnection)?;
                        to_host += bytes.len() as u64;
                    }
                    Some(Part::Eof(true)) => wr.shutdown().await.map_err(ClientError::PortConnection)?,
                    _ => {}
                }
            }
            Ok::<_, ClientError>(to_host)
        };
        tokio::pin!(up, down);
        // The call ends once both sides are done; the host side failing (a reset) ends it
        // at once, and dropping the call then closes the guest connection.
        let mut up_done = false;
        loop {
            tokio::select! {
                r = &mut up, if !up_done => {
                    r.map_err(ClientError::PortConnection)?;
                    up_done = true;
                }
                r = &mut down => {
                    return Ok(PortTraffic { to_guest: sent.load(Ordering::Relaxed), to_host: r? });
                }
            }
        }
    }
}

/// Sends what `rd` gives as `data`, then `eof` at its end.
async fn to_guest<R: AsyncRead + Unpin>(
    rd: &mut R,
    tx: mpsc::Sender<pb::PortData>,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(CHUNK_SIZE);
        let part = match rd.read_buf(&mut buf).await? {
            0 => Part::Eof(true),
            n => {
                sent.fetch_add(n as u64, Ordering::Relaxed);
                Part::Data(buf.split().freeze())
            }
        };
        let eof = matches!(part, Part::Eof(_));
        // A closed channel: the call is over, the guest side ended it.
        if tx.send(pb::PortData { part: Some(part) }).await.is_err() || eof {
            return Ok(());
        }
    }
}
