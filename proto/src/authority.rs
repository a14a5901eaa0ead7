//! Stock gRPC clients on a Unix socket: an `:authority` the HTTP/2 server refuses,
//! replaced before it sees it.
//!
//! gRPC's C core (grpcio for Python, Ruby, PHP...) sends a Unix socket's path,
//! percent-encoded, as `:authority` (`tmp%2Fx%2Fagent.sock`), and grpc-java sends the
//! path as it is. h2, the HTTP/2 server under tonic, parses `:authority` as a URI
//! authority and resets the stream with `PROTOCOL_ERROR` when it is not one
//! (`h2::server::Peer::convert_poll_message`; hyperium/h2#487, hyperium/tonic#742,
//! grpc/grpc-java#12664), so every call of such a client fails before the agent sees it.
//! The agent routes by path alone and never reads the authority, so
//! [`AuthorityFix`] sits between the socket and the server (the agent's, and the host's
//! agent-link multiplexer, whose requests go on to the agent) and replaces an authority
//! that is not one with `localhost`, as grpc-go and Kubernetes send on Unix sockets.
//! An authority that parses is left as it is; nothing else in a request changes.
//!
//! Only the client's header blocks are touched. HPACK compresses them with a table
//! both ends keep, so the blocks are decoded with the client's table and encoded
//! again with one kept for the server: every block of the connection, or the two
//! tables would drift apart. DATA frames and everything the server sends pass
//! through as they are; when a DATA frame fills the server's read, it is read straight
//! into the server's buffer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// What every HTTP/2 connection opens with (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The authority put in place of one the server would refuse.
const REPLACEMENT: &[u8] = b"localhost";
/// HTTP/2 frame types and flags this reads (RFC 9113 section 6).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const FRAME_HEAD: usize = 9;
/// Largest frame written to the server: the size every HTTP/2 peer accepts.
const OUT_FRAME_MAX: usize = 16_384;
/// A header block larger than this is passed on as it is, for the server to refuse.
const BLOCK_MAX: usize = 1 << 20;
/// The HPACK table size both ends start with; the server does not change it.
const TABLE_SIZE: usize = 4096;

/// A server-side connection whose requests' unparsable `:authority` is replaced.
pub struct AuthorityFix<T> {
    inner: T,
    /// Read from `inner`, not yet looked at.
    input: BytesMut,
    /// Looked at, ready for the server.
    output: BytesMut,
    state: State,
    /// A header block being collected (HEADERS and its CONTINUATIONs).
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Within the connection preface; `usize` bytes of it still to check.
    Preface(usize),
    /// At the start of a frame.
    FrameHead,
    /// Within the payload of a frame passed through; bytes left.
    Payload(usize),
    /// Not HTTP/2 as expected: everything passes through, for the server to judge.
    Raw,
}

struct Block {
    stream: [u8; 4],
    flags: u8,
    priority: Option<[u8; 5]>,
    fragment: BytesMut,
    /// The frames as received, passed on instead if the block cannot be decoded.
    original: BytesMut,
}

impl<T> AuthorityFix<T> {
    /// Wraps a newly accepted connection.
    pub fn new(inner: T) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(TABLE_SIZE);
        let mut encoder = loona_hpack::Encoder::new();
        encoder.set_max_table_size(TABLE_SIZE);
        AuthorityFix {
            inner,
            input: BytesMut::new(),
            output: BytesMut::new(),
            state: State::Preface(PREFACE.len()),
            block: None,
            decoder,
            encoder,
        }
    }

    /// Moves what can be judged from `input` to `output`.
    fn process(&mut self) {
        loop {
            match self.state {
                State::Raw => {
                    let all = self.input.split();
                    self.output.unsplit(all);
                    return;
                }
                State::Preface(left) => {
                    let n = left.min(self.input.len());
                    if n == 0 {
                        return;
                    }
                    let at = PREFACE.len() - left;
                    if self.input[..n] != PREFACE[at..at + n] {
                        self.state = State::Raw;
                        continue;
                    }
                    self.pass(n);
                    self.state = if n == left { State::FrameHead } else { State::Preface(left - n) };
                }
                State::Payload(left) => {
                    let n = left.min(self.input.len());
                    if n == 0 {
                        return;
                    }
                    self.pass(n);
                    self.state = if n == left { State::FrameHead } else { State::Payload(left - n) };
                }
                State::FrameHead => {
                    let Some(head) = self.input.get(..FRAME_HEAD) else { return };
                    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                    let kind = head[3];
                    let in_block = self.block.is_some();
                    if kind == HEADERS && !in_block || kind == CONTINUATION && in_block {
                        if len > BLOCK_MAX {
                            self.give_up();
                            continue;
                        }
                        if self.input.len() < FRAME_HEAD + len {
                            return;
                        }
                        let frame = self.input.split_to(FRAME_HEAD + len);
                        if !self.take_block_frame(&frame) {
                            self.give_up();
                        }
                    } else if in_block {
                        // Another frame inside a header block: the server will refuse it.
                        self.give_up();
                    } else {
                        self.pass(FRAME_HEAD);
                        self.state = if len == 0 { State::FrameHead } else { State::Payload(len) };
                    }
                }
            }
        }
    }

    fn pass(&mut self, n: usize) {
        let bytes = self.input.split_to(n);
        self.output.unsplit(bytes);
    }

    /// Passes everything on unchanged from here: a header block held back first.
    fn give_up(&mut self) {
        if let Some(block) = self.block.take() {
            self.output.unsplit(block.original);
        }
        self.state = State::Raw;
    }

    /// Adds a HEADERS or CONTINUATION frame to the block; `false` when it is malformed.
    fn take_block_frame(&mut self, frame: &[u8]) -> bool {
        let (head, payload) = frame.split_at(FRAME_HEAD);
        let flags = head[4];
        let block = match self.block.as_mut() {
            Some(block) => {
                block.original.extend_from_slice(frame);
                if head[5..9] != block.stream {
                    return false;
                }
                block.fragment.extend_from_slice(payload);
                block
            }
            None => {
                let malformed = |out: &mut BytesMut| {
                    out.extend_from_slice(frame);
                    false
                };
                let mut body = payload;
                let mut pad = 0;
                if flags & PADDED != 0 {
                    let Some((&n, rest)) = body.split_first() else { return malformed(&mut self.output) };
                    pad = usize::from(n);
                    body = rest;
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    let Some((p, rest)) = body.split_first_chunk::<5>() else {
                        return malformed(&mut self.output);
                    };
                    priority = Some(*p);
                    body = rest;
                }
                let Some(fragment) = body.len().checked_sub(pad).map(|end| &body[..end]) else {
                    return malformed(&mut self.output);
                };
                self.block.insert(Block {
                    stream: [head[5], head[6], head[7], head[8]],
                    flags,
                    priority,
                    fragment: BytesMut::from(fragment),
                    original: BytesMut::from(frame),
                })
            }
        };
        if block.fragment.len() > BLOCK_MAX {
            return false;
        }
        if flags & END_HEADERS != 0 {
            let block = self.block.take().expect("a block is being collected");
            return self.emit(block);
        }
        true
    }

    /// Decodes a whole header block, replaces a bad authority, and writes the block
    /// out again, encoded for the server.
    fn emit(&mut self, block: Block) -> bool {
        let mut fields = Vec::new();
        let decoded = self.decoder.decode_with_cb(&block.fragment, |name, value| {
            fields.push((name.into_owned(), value.into_owned()));
        });
        if decoded.is_err() {
            self.output.unsplit(block.original);
            return false;
        }
        for (name, value) in &mut fields {
            if name == b":authority" && http::uri::Authority::try_from(&value[..]).is_err() {
                tracing::debug!(
                    authority = %String::from_utf8_lossy(value),
                    "request :authority is not a URI authority; replaced with localhost"
                );
                *value = REPLACEMENT.to_vec();
            }
        }
        let encoded = self.encoder.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut first = BytesMut::new();
        if let Some(priority) = block.priority {
            first.extend_from_slice(&priority);
        }
        let room = OUT_FRAME_MAX - first.len();
        let (head, mut rest) = encoded.split_at(room.min(encoded.len()));
        first.extend_from_slice(head);
        let mut flags = block.flags & (END_STREAM | PRIORITY);
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        self.frame(HEADERS, flags, block.stream, &first);
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(OUT_FRAME_MAX.min(rest.len()));
            rest = tail;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            self.frame(CONTINUATION, flags, block.stream, chunk);
        }
        true
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: [u8; 4], payload: &[u8]) {
        let len = u32::try_from(payload.len()).expect("frames written are at most 16 KiB");
        self.output.put_slice(&len.to_be_bytes()[1..]);
        self.output.put_u8(kind);
        self.output.put_u8(flags);
        self.output.put_slice(&stream);
        self.output.put_slice(payload);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFix<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.output.is_empty() {
                let n = buf.remaining().min(this.output.len());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            this.process();
            if !this.output.is_empty() {
                continue;
            }
            // Bytes that pass through unchanged go straight into the server's buffer.
            let direct = match this.state {
                State::Raw => true,
                State::Payload(left) => left >= buf.remaining(),
                _ => false,
            };
            if direct && this.input.is_empty() {
                let before = buf.filled().len();
                ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
                if let State::Payload(left) = this.state {
                    let n = buf.filled().len() - before;
                    this.state = if n == left { State::FrameHead } else { State::Payload(left - n) };
                }
                return Poll::Ready(Ok(()));
            }
            let mut scratch = [0u8; 8192];
            let mut read = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The client is gone; what was held back goes on for the server to judge.
                this.give_up();
                this.process();
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.input.extend_from_slice(read.filled());
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for AuthorityFix<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// What the server reads when the client sends `sent`.
    async fn through(sent: Vec<u8>) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&sent).await.unwrap();
        drop(client);
        let mut got = Vec::new();
        AuthorityFix::new(server).read_to_end(&mut got).await.unwrap();
        got
    }

    /// The frames of `bytes` after the preface: (type, flags, payload).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
        bytes = bytes.strip_prefix(PREFACE).expect("the preface passes first");
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            out.push((bytes[3], bytes[4], bytes[FRAME_HEAD..FRAME_HEAD + len].to_vec()));
            bytes = &bytes[FRAME_HEAD + len..];
        }
        out
    }

    fn request(authority: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        [
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/atoll.agent.v1.Agent/Info"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
        ]
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
    }

    #[tokio::test]
    async fn a_path_authority_becomes_localhost_across_padding_priority_and_continuation() {
        let mut client = loona_hpack::Encoder::new();
        let block = client.encode(request(b"tmp%2Fx%2Fagent.sock").iter().map(|(n, v)| (&n[..], &v[..])));
        let (a, b) = block.split_at(block.len() / 2);
        let mut padded = vec![3];
        padded.extend_from_slice(&[0, 0, 0, 0, 16]);
        padded.extend_from_slice(a);
        padded.extend_from_slice(&[0; 3]);
        let mut sent = PREFACE.to_vec();
        sent.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100])); // SETTINGS
        sent.extend(frame(HEADERS, PADDED | PRIORITY, 1, &padded));
        sent.extend(frame(CONTINUATION, END_HEADERS, 1, b));
        sent.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0")); // DATA
        sent.extend(frame(0x4, 0x1, 0, &[])); // SETTINGS ack

        let got = frames(&through(sent).await);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], (0x4, 0, vec![0, 3, 0, 0, 0, 100]));
        let (kind, flags, payload) = &got[1];
        assert_eq!((*kind, *flags), (HEADERS, PRIORITY | END_HEADERS));
        assert_eq!(payload[..5], [0, 0, 0, 0, 16]);
        let decoded = loona_hpack::Decoder::new().decode(&payload[5..]).unwrap();
        assert_eq!(decoded, request(b"localhost"));
        assert_eq!(got[2], (0x0, END_STREAM, b"\0\0\0\0\0".to_vec()));
        assert_eq!(got[3], (0x4, 0x1, vec![]));
    }

    #[tokio::test]
    async fn a_valid_authority_and_the_client_table_carry_across_requests() {
        let mut client = loona_hpack::Encoder::new();
        let mut sent = PREFACE.to_vec();
        for stream in [1, 3] {
            let block = client.encode(request(b"localhost:1024").iter().map(|(n, v)| (&n[..], &v[..])));
            sent.extend(frame(HEADERS, END_HEADERS | END_STREAM, stream, &block));
        }
        let got = frames(&through(sent).await);
        assert_eq!(got.len(), 2, "{got:?}");
        let mut server = loona_hpack::Decoder::new();
        for (kind, flags, payload) in got {
            assert_eq!((kind, flags), (HEADERS, END_HEADERS | END_STREAM));
            assert_eq!(server.decode(&payload).unwrap(), request(b"localhost:1024"));
        }
    }

    #[tokio::test]
    async fn what_is_not_http2_passes_as_it_is() {
        let sent = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(through(sent.clone()).await, sent);
    }
}
