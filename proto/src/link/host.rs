//! The host's side of the handshake: SYNC until the ACK of its own nonce.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::LinkError;
use super::frame::{ACK_MAGIC, FRAME_LEN, Nonce, READ_CHUNK, SYNC_INTERVAL, SYNC_MAGIC, take_frame};
use super::stream::LinkStream;

/// Runs the host's side on a fresh connection to the port, re-sending SYNC every
/// [`SYNC_INTERVAL`]. Returns the stream the HTTP/2 client speaks on; it never
/// returns while the guest does not answer, so callers bound it if they must.
pub async fn host_handshake<S>(io: S, nonce: Nonce) -> Result<LinkStream<S>, LinkError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    host_handshake_every(io, nonce, SYNC_INTERVAL).await
}

/// [`host_handshake`] with the re-send interval given (tests use a short one).
pub async fn host_handshake_every<S>(
    mut io: S,
    nonce: Nonce,
    every: Duration,
) -> Result<LinkStream<S>, LinkError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let sync = nonce.frame(&SYNC_MAGIC);
    let mut buf = Vec::with_capacity(FRAME_LEN + READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    // The first tick is at once: it sends the first SYNC.
    let mut resend = tokio::time::interval(every);
    resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        while let Some(got) = take_frame(&mut buf, &ACK_MAGIC) {
            if got == nonce {
                return Ok(LinkStream::after_ack(io, buf));
            }
            tracing::debug!("agent link: dropped a stale ACK of another connection");
        }
        tokio::select! {
            read = io.read(&mut chunk) => match read {
                Ok(0) => return Err(LinkError::Closed),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(LinkError::Read(e)),
            },
            _ = resend.tick() => {
                io.write_all(&sync).await.map_err(LinkError::Write)?;
                io.flush().await.map_err(LinkError::Write)?;
            }
        }
    }
}
