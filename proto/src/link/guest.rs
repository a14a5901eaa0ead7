//! The guest's side of the handshake: find a SYNC, answer it, and hand over at the
//! HTTP/2 preface that follows.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::LinkError;
use super::frame::{ACK_MAGIC, FRAME_LEN, PREFACE, READ_CHUNK, SYNC_MAGIC, agrees, take_frame};

/// Runs the guest's side on `io`: discards everything up to a SYNC, answers each SYNC
/// with its ACK, and returns once the HTTP/2 client preface follows an ACK. The bytes
/// returned were read past the handshake (they start with the preface): serve
/// [`LinkStream::new(io, bytes)`](super::LinkStream::new). [`LinkError::Closed`] means
/// no host is connected now.
pub async fn guest_handshake<S>(io: &mut S) -> Result<Vec<u8>, LinkError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(FRAME_LEN + READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    'scan: loop {
        let mut nonce = loop {
            if let Some(n) = take_frame(&mut buf, &SYNC_MAGIC) {
                break n;
            }
            fill(io, &mut buf, &mut chunk).await?;
        };
        'answer: loop {
            io.write_all(&nonce.frame(&ACK_MAGIC)).await.map_err(LinkError::Write)?;
            io.flush().await.map_err(LinkError::Write)?;
            loop {
                if buf.len() >= PREFACE.len() && buf[..PREFACE.len()] == PREFACE[..] {
                    return Ok(buf);
                }
                if buf.len() >= FRAME_LEN && buf[..SYNC_MAGIC.len()] == SYNC_MAGIC {
                    nonce = take_frame(&mut buf, &SYNC_MAGIC).expect("a whole SYNC leads the buffer");
                    continue 'answer;
                }
                if !agrees(&buf, PREFACE) && !agrees(&buf, &SYNC_MAGIC) {
                    tracing::debug!("agent link: neither a preface nor a SYNC after an ACK; scanning again");
                    continue 'scan;
                }
                fill(io, &mut buf, &mut chunk).await?;
            }
        }
    }
}

/// Appends one read to `buf`; the end of the stream is [`LinkError::Closed`].
async fn fill<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Result<(), LinkError> {
    match io.read(chunk).await {
        Ok(0) => Err(LinkError::Closed),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) => Err(LinkError::Read(e)),
    }
}
