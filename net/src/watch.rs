//! Claims keep being checked while a connection is carried: a connection whose verdict
//! depended on its name is allowed for that name only, so every later request head
//! (HTTP/1 keep-alive, pipelining) and every later ClientHello (a TLS 1.3 retry, a
//! renegotiation in the clear) is read as it passes and judged again.
//!
//! [`ClaimWatch::feed`] takes the guest's bytes as they come and returns those that may
//! be forwarded now with the claims found in them; bytes of a request head or ClientHello
//! not yet complete are held back (at most [`MAX_PEEK`]) so that a denied one never
//! reaches the server. A stream that stops parsing where a request head must start is
//! [`Unparseable`]: the caller judges it as claiming nothing (fail closed).
//!
//! HTTP bodies are skipped by `Content-Length` or chunked framing; after a request that
//! asks for an upgrade (WebSocket, `CONNECT`), bytes that are not a request head mean the
//! server switched protocols and the rest is carried unread. TLS records other than
//! handshake records are skipped by their length.

use bytes::{Bytes, BytesMut};
use tls_parser::{TlsMessage, TlsMessageHandshake, parse_tls_message_handshake};

use crate::peek::{self, Body, Claimed, Head, MAX_PEEK};

/// The longest chunk-size or trailer line accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// The stream no longer parses where it must (garbage where a request head starts, a
/// head or chunk line past its bound, ambiguous framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unparseable;

/// Watches the guest's side of one connection for claims.
pub(crate) struct ClaimWatch {
    pending: BytesMut,
    state: State,
}

enum State {
    Http {
        phase: Phase,
        upgrade: bool,
    },
    Tls {
        skip: usize,
        handshake: Vec<u8>,
    },
    /// Nothing more to read (switched protocols, or not watched at all).
    Off,
}

enum Phase {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailer,
}

impl ClaimWatch {
    /// A watch for a stream whose first bytes are `first` (not yet fed): TLS when they
    /// start a TLS record, else HTTP.
    pub(crate) fn new(first: &[u8]) -> ClaimWatch {
        let state = match first.first() {
            Some(0x16) => State::Tls { skip: 0, handshake: Vec::new() },
            _ => State::Http { phase: Phase::Head, upgrade: false },
        };
        ClaimWatch { pending: BytesMut::new(), state }
    }

    /// Stops reading: everything from now on is forwarded as it is.
    pub(crate) fn stop(&mut self) -> Bytes {
        self.state = State::Off;
        self.pending.split().freeze()
    }

    /// Takes `chunk`; returns the bytes that may be forwarded now and the claims made in
    /// them, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<(Bytes, Vec<Claimed>), Unparseable> {
        if matches!(self.state, State::Off) && self.pending.is_empty() {
            return Ok((Bytes::copy_from_slice(chunk), Vec::new()));
        }
        self.pending.extend_from_slice(chunk);
        let mut claims = Vec::new();
        let ready = match &mut self.state {
            State::Off => self.pending.len(),
            State::Http { phase, upgrade } => {
                let (ready, off) = http(&self.pending, phase, upgrade, &mut claims)?;
                if off {
                    self.state = State::Off;
                    self.pending.len()
                } else {
                    ready
                }
            }
            State::Tls { skip, handshake } => tls(&self.pending, skip, handshake, &mut claims),
        };
        Ok((self.pending.split_to(ready).freeze(), claims))
    }
}

/// Walks HTTP/1 requests in `buf`; returns how many bytes are complete, and whether the
/// stream switched protocols (the rest is not HTTP).
fn http(
    buf: &[u8],
    phase: &mut Phase,
    upgrade: &mut bool,
    claims: &mut Vec<Claimed>,
) -> Result<(usize, bool), Unparseable> {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        match phase {
            Phase::Head => {
                if rest.is_empty() {
                    return Ok((pos, false));
                }
                match peek::http_head(rest) {
                    Head::Partial if rest.len() < MAX_PEEK => return Ok((pos, false)),
                    Head::Partial | Head::Invalid if *upgrade => return Ok((pos, true)),
                    Head::Partial | Head::Invalid => return Err(Unparseable),
                    Head::Complete { len, claim, body, upgrade: asks } => {
                        claims.push(claim);
                        pos += len;
                        *upgrade = asks;
                        *phase = match body {
                            Body::Length(0) => Phase::Head,
                            Body::Length(n) => Phase::Body(n),
                            Body::Chunked => Phase::ChunkSize,
                        };
                    }
                }
            }
            Phase::Body(left) | Phase::ChunkData(left) => {
                let take = usize::try_from(*left).unwrap_or(usize::MAX).min(rest.len());
                pos += take;
                *left -= take as u64;
                if *left > 0 {
                    return Ok((pos, false));
                }
                *phase = if matches!(phase, Phase::Body(_)) { Phase::Head } else { Phase::ChunkEnd };
            }
            Phase::ChunkEnd => {
                match rest {
                    [b'\r', b'\n', ..] => pos += 2,
                    [b'\n', ..] => pos += 1,
                    [] | [b'\r'] => return Ok((pos, false)),
                    _ => return Err(Unparseable),
                }
                *phase = Phase::ChunkSize;
            }
            Phase::ChunkSize | Phase::Trailer => {
                let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                    return if rest.len() > MAX_CHUNK_LINE { Err(Unparseable) } else { Ok((pos, false)) };
                };
                if nl > MAX_CHUNK_LINE {
                    return Err(Unparseable);
                }
                let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
                pos += nl + 1;
                *phase = match phase {
                    Phase::Trailer if line.is_empty() => Phase::Head,
                    Phase::Trailer => Phase::Trailer,
                    _ => match chunk_size(line)? {
                        0 => Phase::Trailer,
                        n => Phase::ChunkData(n),
                    },
                };
            }
        }
    }
}

fn chunk_size(line: &[u8]) -> Result<u64, Unparseable> {
    let digits = line.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
    let text = std::str::from_utf8(digits).map_err(|_| Unparseable)?;
    if text.is_empty() || text.len() > 15 {
        return Err(Unparseable);
    }
    u64::from_str_radix(text, 16).map_err(|_| Unparseable)
}

/// Walks TLS records in `buf`; returns how many bytes are complete. Handshake records are
/// held until whole; a ClientHello among them is a claim.
fn tls(buf: &[u8], skip: &mut usize, handshake: &mut Vec<u8>, claims: &mut Vec<Claimed>) -> usize {
    let mut pos = 0;
    loop {
        if *skip > 0 {
            let take = (*skip).min(buf.len() - pos);
            pos += take;
            *skip -= take;
            if *skip > 0 {
                return pos;
            }
        }
        let rest = &buf[pos..];
        let [kind, _, _, a, b, ..] = *rest else { return pos };
        let len = usize::from(u16::from_be_bytes([a, b]));
        if kind != 0x16 {
            // Application data, alerts, change_cipher_spec: forwarded as they come.
            handshake.clear();
            pos += 5;
            *skip = len;
            continue;
        }
        if rest.len() < 5 + len {
            return pos;
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        pos += 5 + len;
        hellos(handshake, claims);
    }
}

/// Takes the complete ClientHellos off the front of `handshake`. Anything that is not a
/// ClientHello (an encrypted handshake message, TLS 1.2's Finished) is dropped: only a
/// hello in the clear can name a host.
fn hellos(handshake: &mut Vec<u8>, claims: &mut Vec<Claimed>) {
    while let [1, a, b, c, ..] = handshake[..] {
        let need = 4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
        if need > MAX_PEEK {
            break;
        }
        if handshake.len() < need {
            return;
        }
        if let Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(_)))) =
            parse_tls_message_handshake(&handshake[..need])
        {
            let mut record = vec![0x16, 3, 1];
            record.extend_from_slice(&u16::try_from(need).unwrap_or(u16::MAX).to_be_bytes());
            record.extend_from_slice(&handshake[..need]);
            if let peek::Peek::Done(claim) = peek::tls_sni(&record) {
                claims.push(claim);
            }
        }
        handshake.drain(..need);
    }
    handshake.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peek::tests::client_hello;

    fn names(claims: &[Claimed]) -> Vec<&str> {
        claims.iter().map(|c| c.name().unwrap_or("-")).collect()
    }

    #[test]
    fn keep_alive_requests_are_each_claimed_and_heads_held_back_until_whole() {
        let first = b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
        let mut w = ClaimWatch::new(first);
        let (out, claims) = w.feed(first).expect("parses");
        assert_eq!((out.len(), names(&claims)), (first.len(), vec!["allowed.test"]));
        let post = b"POST /x HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nGET /GET /";
        let (out, claims) = w.feed(post).expect("parses");
        assert_eq!(
            (out.len(), names(&claims)),
            (post.len() - 5, vec!["allowed.test"]),
            "the body is not a head"
        );
        let (out, claims) = w.feed(b"x HTTP/1.1\r\nHost: oth").expect("parses");
        assert!(out.is_empty() && claims.is_empty(), "an incomplete head is held back");
        let (out, claims) = w.feed(b"er.test\r\n\r\n").expect("parses");
        assert_eq!(&out[..], b"GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n");
        assert_eq!(names(&claims), vec!["other.test"]);
        // A blank line before a request is skipped, as servers do.
        let (_, claims) = w.feed(b"\r\nGET / HTTP/1.1\r\nHost: third.test\r\n\r\n").expect("parses");
        assert_eq!(names(&claims), vec!["third.test"]);
        assert_eq!(w.feed(b"\x00garbage\r\n\r\n"), Err(Unparseable));
    }

    #[test]
    fn chunked_bodies_are_skipped_and_the_next_head_read() {
        let mut w = ClaimWatch::new(b"P");
        let req = b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n\
            5\r\nGET /\r\n3;x=y\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
        for cut in 1..req.len() {
            let mut w2 = ClaimWatch::new(b"P");
            let mut all = Vec::new();
            let (a, c1) = w2.feed(&req[..cut]).expect("first part");
            let (b, c2) = w2.feed(&req[cut..]).expect("second part");
            all.extend(c1);
            all.extend(c2);
            assert_eq!(names(&all), vec!["a.test", "b.test"], "cut at {cut}");
            assert_eq!(a.len() + b.len(), req.len());
        }
        let (_, claims) = w.feed(req).expect("parses");
        assert_eq!(names(&claims), vec!["a.test", "b.test"]);
    }

    #[test]
    fn after_an_upgrade_non_http_bytes_are_carried_unread_but_a_head_is_still_read() {
        let up = b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        let mut w = ClaimWatch::new(up);
        w.feed(up).expect("parses");
        // The server declined: the next request is still checked.
        let (_, claims) = w.feed(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n").expect("parses");
        assert_eq!(names(&claims), vec!["b.test"]);
        let mut w = ClaimWatch::new(up);
        w.feed(up).expect("parses");
        let (out, claims) = w.feed(b"\x81\x85abcdhello").expect("a WebSocket frame");
        assert_eq!((out.len(), claims.len()), (11, 0));
        let after = b"GET / HTTP/1.1\r\nHost: c.test\r\n\r\n";
        let (out, claims) = w.feed(after).expect("carried unread");
        assert_eq!((out.len(), claims.len()), (after.len(), 0));
    }

    #[test]
    fn a_second_client_hello_is_claimed() {
        let one = client_hello("allowed.test");
        let two = client_hello("other.test");
        let mut w = ClaimWatch::new(&one);
        let (out, claims) = w.feed(&one[..10]).expect("parses");
        assert!(out.is_empty() && claims.is_empty(), "a partial hello is held back");
        let (_, claims) = w.feed(&one[10..]).expect("parses");
        assert_eq!(names(&claims), vec!["allowed.test"]);
        let app = [0x17, 3, 3, 0, 3, 1, 2, 3];
        let (out, claims) = w.feed(&app).expect("parses");
        assert_eq!((out.len(), claims.len()), (app.len(), 0));
        let (_, claims) = w.feed(&two).expect("parses");
        assert_eq!(names(&claims), vec!["other.test"]);
        // An encrypted handshake record (TLS 1.2 Finished) is no claim.
        let (out, claims) = w.feed(&[0x16, 3, 3, 0, 4, 0x14, 0, 0, 0]).expect("parses");
        assert_eq!((out.len(), claims.len()), (9, 0));
    }
}
