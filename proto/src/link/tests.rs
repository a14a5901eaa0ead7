//! Both sides of the handshake on in-memory pipes, with stale bytes, old frames,
//! frames split across reads and lost SYNCs.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf, duplex};

use super::*;

const FAST: Duration = Duration::from_millis(10);

/// A stream whose reads return at most `max` bytes: frames arrive split.
struct Trickle<S> {
    inner: S,
    max: usize,
}

impl<S: AsyncRead + Unpin> AsyncRead for Trickle<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let mut small = vec![0u8; this.max.min(out.remaining())];
        let mut rb = ReadBuf::new(&mut small);
        let poll = Pin::new(&mut this.inner).poll_read(cx, &mut rb);
        if let Poll::Ready(Ok(())) = poll {
            out.put_slice(rb.filled());
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Trickle<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// After both handshakes: the host's HTTP/2 bytes reach the guest from the preface
/// on, and the guest's reach the host with nothing before them.
async fn exchange<H, G>(mut host: LinkStream<H>, mut guest: LinkStream<G>)
where
    H: AsyncRead + AsyncWrite + Unpin,
    G: AsyncRead + AsyncWrite + Unpin,
{
    host.write_all(b"client frames").await.unwrap();
    let mut got = vec![0u8; PREFACE.len() + 13];
    guest.read_exact(&mut got).await.unwrap();
    assert_eq!(&got[..PREFACE.len()], PREFACE);
    assert_eq!(&got[PREFACE.len()..], b"client frames");
    guest.write_all(b"\0\0\x06\x04server settings").await.unwrap();
    let mut got = [0u8; 19];
    host.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"\0\0\x06\x04server settings");
}

/// Runs both sides; the host sends the preface once its handshake is done.
async fn handshake<H, G>(host_io: H, mut guest_io: G, nonce: Nonce) -> (LinkStream<H>, LinkStream<G>)
where
    H: AsyncRead + AsyncWrite + Unpin,
    G: AsyncRead + AsyncWrite + Unpin,
{
    let host = async {
        let mut s = host_handshake_every(host_io, nonce, FAST).await.unwrap();
        s.write_all(PREFACE).await.unwrap();
        s
    };
    let guest = async { guest_handshake(&mut guest_io).await.unwrap() };
    let (host, prefix) = tokio::join!(host, guest);
    (host, LinkStream::new(guest_io, prefix))
}

fn pair() -> (DuplexStream, DuplexStream) {
    duplex(64 * 1024)
}

#[tokio::test]
async fn a_clean_link_hands_over_at_the_preface() {
    let (h, g) = pair();
    let (host, guest) = handshake(h, g, Nonce::random().unwrap()).await;
    exchange(host, guest).await;
}

#[tokio::test]
async fn stale_bytes_and_old_frames_in_both_directions_are_discarded() {
    let (mut h, mut g) = pair();
    let old = Nonce([0xAA; 16]);
    // What an old host connection left for the guest: HTTP/2 bytes, an old SYNC, more.
    h.write_all(b"old client DATA frames").await.unwrap();
    h.write_all(&old.frame(&SYNC_MAGIC)).await.unwrap();
    h.write_all(b"\0\0\x04\x00more old bytes").await.unwrap();
    // What the guest wrote for an old host: server frames, an old ACK, a partial one.
    g.write_all(b"old server frames").await.unwrap();
    g.write_all(&old.frame(&ACK_MAGIC)).await.unwrap();
    g.write_all(&ACK_MAGIC[..5]).await.unwrap();
    let (host, guest) = handshake(h, g, Nonce([0x55; 16])).await;
    exchange(host, guest).await;
}

#[tokio::test]
async fn frames_split_across_reads_are_found() {
    for max in [1u8, 3, 7, 23] {
        let (mut h, g) = pair();
        h.write_all(b"junk ATOLS junk").await.unwrap();
        let h = Trickle { inner: h, max: usize::from(max) };
        let g = Trickle { inner: g, max: usize::from(max) };
        let (host, guest) = handshake(h, g, Nonce([max; 16])).await;
        exchange(host, guest).await;
    }
}

#[tokio::test]
async fn a_lost_first_sync_is_sent_again() {
    let (h, mut g) = pair();
    let nonce = Nonce([3; 16]);
    let host = tokio::spawn(async move {
        let mut s = host_handshake_every(h, nonce, FAST).await.unwrap();
        s.write_all(PREFACE).await.unwrap();
        s
    });
    // The first SYNC is lost (as one sent before the guest opened the port).
    let mut lost = [0u8; FRAME_LEN];
    g.read_exact(&mut lost).await.unwrap();
    assert_eq!(lost, nonce.frame(&SYNC_MAGIC));
    let prefix = guest_handshake(&mut g).await.unwrap();
    exchange(host.await.unwrap(), LinkStream::new(g, prefix)).await;
}

#[tokio::test]
async fn acks_of_resent_syncs_do_not_reach_the_http2_client() {
    let (h, mut g) = pair();
    let nonce = Nonce([9; 16]);
    let host = tokio::spawn(host_handshake_every(h, nonce, FAST));
    // The guest saw three SYNCs of this connection (it was slow) and answers each.
    let mut sync = [0u8; FRAME_LEN];
    g.read_exact(&mut sync).await.unwrap();
    let nonce_seen = Nonce(sync[8..].try_into().unwrap());
    for _ in 0..3 {
        g.write_all(&nonce_seen.frame(&ACK_MAGIC)).await.unwrap();
    }
    g.write_all(b"\0\0\0\x04settings").await.unwrap();
    let mut host = host.await.unwrap().unwrap();
    let mut got = [0u8; 12];
    host.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"\0\0\0\x04settings");
}

#[tokio::test]
async fn the_guest_answers_every_sync_and_rescans_after_garbage() {
    let (mut h, mut g) = pair();
    let (a, b, c) = (Nonce([1; 16]), Nonce([2; 16]), Nonce([3; 16]));
    h.write_all(&a.frame(&SYNC_MAGIC)).await.unwrap();
    h.write_all(&b.frame(&SYNC_MAGIC)).await.unwrap();
    h.write_all(b"not a preface").await.unwrap();
    h.write_all(&c.frame(&SYNC_MAGIC)).await.unwrap();
    h.write_all(PREFACE).await.unwrap();
    h.write_all(b"rest").await.unwrap();
    let prefix = guest_handshake(&mut g).await.unwrap();
    let mut whole = prefix;
    while whole.len() < PREFACE.len() + 4 {
        let mut more = [0u8; 64];
        let n = g.read(&mut more).await.unwrap();
        whole.extend_from_slice(&more[..n]);
    }
    assert_eq!(&whole[..PREFACE.len()], PREFACE);
    assert_eq!(&whole[PREFACE.len()..], b"rest");
    let mut acks = [0u8; 3 * FRAME_LEN];
    h.read_exact(&mut acks).await.unwrap();
    let want: Vec<u8> = [a, b, c].iter().flat_map(|n| n.frame(&ACK_MAGIC)).collect();
    assert_eq!(acks.to_vec(), want);
}

#[tokio::test]
async fn megabytes_of_stale_bytes_stream_through_a_small_pipe() {
    // A 4 KiB pipe: the stale writer finishes only if the scan keeps reading and
    // dropping, rather than waiting for a frame it cannot hold.
    let (mut h, g) = duplex(4096);
    let stale = tokio::spawn(async move {
        let junk = vec![b'S'; 1 << 20];
        for _ in 0..4 {
            h.write_all(&junk).await.unwrap();
        }
        h
    });
    let mut g = g;
    let guest = tokio::spawn(async move {
        let prefix = guest_handshake(&mut g).await.unwrap();
        (g, prefix)
    });
    let h = stale.await.unwrap();
    let nonce = Nonce([4; 16]);
    let mut host = host_handshake_every(h, nonce, FAST).await.unwrap();
    host.write_all(PREFACE).await.unwrap();
    let (g, prefix) = guest.await.unwrap();
    exchange(host, LinkStream::new(g, prefix)).await;
}

#[tokio::test]
async fn a_closed_stream_ends_either_handshake() {
    let (h, g) = pair();
    drop(g);
    assert!(matches!(host_handshake_every(h, Nonce([0; 16]), FAST).await, Err(LinkError::Closed)));
    let (h, mut g) = pair();
    drop(h);
    assert!(matches!(guest_handshake(&mut g).await, Err(LinkError::Closed)));
}
