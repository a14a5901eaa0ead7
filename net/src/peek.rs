//! Reading the name a client claims from its first bytes, with parser crates: the TLS
//! ClientHello's SNI (tls-parser) and the HTTP/1 `Host` header (httparse). Nothing is
//! consumed: the bytes are forwarded as they are once the decision is made.

use crate::policy::Claim;
use tls_parser::{
    SNIType, TlsExtension, TlsMessage, TlsMessageHandshake, TlsRecordType, parse_tls_extensions,
    parse_tls_message_handshake, parse_tls_raw_record,
};

/// The most a peek waits for: a ClientHello (even split over records) or a request
/// head longer than this is judged without a name.
pub const MAX_PEEK: usize = 16 * 1024;

/// What the first bytes say so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// Done.
    Done(Claimed),
}

/// What a client's first bytes claim (the owned form of [`Claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// A protocol that carries no name (or bytes too long to tell).
    Unknown,
    /// TLS SNI or HTTP Host, without port.
    Name(String),
    /// TLS without SNI, HTTP without Host or with an IP literal: connected by IP.
    NoName,
    /// An SNI or Host that is not a valid host name (control characters, spaces, bad
    /// labels), escaped for printing ([`escape`]); judged as [`Claimed::NoName`].
    Invalid(String),
}

impl Claimed {
    /// The borrowed form the policy takes.
    pub fn as_claim(&self) -> Claim<'_> {
        match self {
            Claimed::Unknown => Claim::Unknown,
            Claimed::Name(n) => Claim::Name(n),
            Claimed::NoName | Claimed::Invalid(_) => Claim::NoName,
        }
    }

    /// The name, if one was claimed.
    pub fn name(&self) -> Option<&str> {
        match self {
            Claimed::Name(n) => Some(n),
            _ => None,
        }
    }
}

/// The name claimed by `buf`, the first bytes a client sent.
pub fn claimed_name(buf: &[u8]) -> Peek {
    match buf.first() {
        None => Peek::NeedMore,
        Some(0x16) => tls_sni(buf),
        // Servers skip empty lines before a request line (RFC 9112 2.2), so a request
        // may start with one; it is read as HTTP, not waved through as "no name".
        Some(b) if b.is_ascii_uppercase() || *b == b'\r' || *b == b'\n' => http_host(buf),
        Some(_) => Peek::Done(Claimed::Unknown),
    }
}

/// SNI from a TLS ClientHello, reassembled across records if it is fragmented.
pub fn tls_sni(buf: &[u8]) -> Peek {
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        match parse_tls_raw_record(rest) {
            Ok((after, record)) if record.hdr.record_type == TlsRecordType::Handshake => {
                handshake.extend_from_slice(record.data);
                rest = after;
            }
            Ok(_) | Err(tls_parser::Err::Error(_) | tls_parser::Err::Failure(_)) => {
                return Peek::Done(Claimed::Unknown);
            }
            Err(tls_parser::Err::Incomplete(_)) => return too_long_or_more(buf),
        }
        if handshake.first().is_some_and(|t| *t != 1) {
            return Peek::Done(Claimed::Unknown); // not a ClientHello
        }
        if let [_, a, b, c, ..] = handshake[..] {
            let need = 4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
            if handshake.len() >= need {
                return match parse_tls_message_handshake(&handshake[..need]) {
                    Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) => Peek::Done(
                        hello.ext.and_then(sni_in_extensions).map_or(Claimed::NoName, |n| host_claim(&n)),
                    ),
                    _ => Peek::Done(Claimed::Unknown),
                };
            }
        }
        if rest.is_empty() {
            return too_long_or_more(buf);
        }
    }
}

fn sni_in_extensions(ext: &[u8]) -> Option<Vec<u8>> {
    let (_, extensions) = parse_tls_extensions(ext).ok()?;
    extensions.into_iter().find_map(|e| match e {
        TlsExtension::SNI(names) => {
            names.into_iter().find(|(kind, _)| *kind == SNIType::HostName).map(|(_, name)| name.to_vec())
        }
        _ => None,
    })
}

/// The host of an HTTP/1 request's `Host` header, without its port.
pub fn http_host(buf: &[u8]) -> Peek {
    match http_head(buf) {
        Head::Partial => too_long_or_more(buf),
        Head::Complete { claim, .. } => Peek::Done(claim),
        Head::Invalid => Peek::Done(Claimed::Unknown),
    }
}

/// One HTTP/1 request head parsed from the start of `buf`.
pub(crate) enum Head {
    /// Not complete yet.
    Partial,
    /// Not an HTTP request.
    Invalid,
    /// A whole head of `len` bytes: what it claims and how its body is framed.
    Complete { len: usize, claim: Claimed, body: Body, upgrade: bool },
}

/// How a request's body is delimited.
pub(crate) enum Body {
    /// `Content-Length` bytes (0 when there is neither header).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Parses one request head. The claim is the `Host` header; several Host headers, or an
/// absolute-form target naming another host (servers route by the target, RFC 9112
/// 3.2.2), claim [`Claimed::Unknown`] so the connection is judged strictly.
pub(crate) fn http_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Partial) => return Head::Partial,
        Ok(httparse::Status::Complete(len)) => len,
        Err(_) => return Head::Invalid,
    };
    let headers = &*request.headers;
    let named = |n: &'static str| headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(n));
    let hosts: Vec<&[u8]> = named("host").map(|h| h.value).collect();
    let mut claim = match hosts.as_slice() {
        [] => Claimed::NoName,
        [one] => host_claim(strip_port(one)),
        _ => Claimed::Unknown,
    };
    if let Some(target) = request.path.and_then(absolute_form_host) {
        let same = matches!((&claim, target_claim(target)), (Claimed::Name(a), Claimed::Name(b)) if a.eq_ignore_ascii_case(&b));
        if !same {
            claim = Claimed::Unknown;
        }
    }
    let chunked = named("transfer-encoding")
        .any(|h| std::str::from_utf8(h.value).is_ok_and(|v| v.to_ascii_lowercase().contains("chunked")));
    let lengths: Vec<Option<u64>> =
        named("content-length").map(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok()).collect();
    let body = if chunked {
        Body::Chunked
    } else {
        match lengths.as_slice() {
            [] => Body::Length(0),
            [Some(n)] => Body::Length(*n),
            // Unparseable or several lengths: the framing is ambiguous (request smuggling).
            _ => return Head::Invalid,
        }
    };
    let upgrade = request.method.is_some_and(|m| m.eq_ignore_ascii_case("CONNECT"))
        || named("upgrade").next().is_some();
    Head::Complete { len, claim, body, upgrade }
}

fn target_claim(host: &[u8]) -> Claimed {
    host_claim(strip_port(host))
}

/// The host of an absolute-form request target (`http://host:port/path`).
fn absolute_form_host(path: &str) -> Option<&[u8]> {
    if path.starts_with('/') || path == "*" {
        return None;
    }
    let rest = path.split_once("://").map_or(path, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some(host.as_bytes())
}

fn too_long_or_more(buf: &[u8]) -> Peek {
    if buf.len() >= MAX_PEEK { Peek::Done(Claimed::Unknown) } else { Peek::NeedMore }
}

/// `name:port` -> `name`, `[v6]:port` -> `[v6]`, surrounding blanks dropped.
fn strip_port(host: &[u8]) -> &[u8] {
    let host = host.trim_ascii();
    if host.starts_with(b"[") {
        return host.iter().position(|b| *b == b']').map_or(host, |i| &host[..=i]);
    }
    match host.iter().rposition(|b| *b == b':') {
        Some(i) if host[i + 1..].iter().all(u8::is_ascii_digit) => &host[..i],
        _ => host,
    }
}

/// What an SNI or Host value (without port) claims: an IP literal or nothing is no
/// name; a valid host name is a name; anything else is [`Claimed::Invalid`].
fn host_claim(raw: &[u8]) -> Claimed {
    let Ok(text) = std::str::from_utf8(raw) else { return Claimed::Invalid(escape(raw)) };
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if text.is_empty() || bare.parse::<std::net::IpAddr>().is_ok() {
        return Claimed::NoName;
    }
    if crate::policy::is_host_name(text) {
        Claimed::Name(text.to_owned())
    } else {
        Claimed::Invalid(escape(raw))
    }
}

/// `bytes` as printable ASCII: anything else (control characters, escape sequences,
/// non-ASCII), and `\` itself, as `\xNN`. Safe to print to a terminal.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello as a TLS 1.2/1.3 client sends it, with an SNI extension for `name`.
    pub(crate) fn client_hello(name: &str) -> Vec<u8> {
        let mut sni = Vec::new();
        let n = u16::try_from(name.len()).unwrap();
        sni.extend_from_slice(&(n + 3).to_be_bytes()); // server_name_list length
        sni.push(0); // host_name
        sni.extend_from_slice(&n.to_be_bytes());
        sni.extend_from_slice(name.as_bytes());
        let mut ext = vec![0, 0]; // extension type server_name
        ext.extend_from_slice(&u16::try_from(sni.len()).unwrap().to_be_bytes());
        ext.extend_from_slice(&sni);
        let mut body = vec![3, 3]; // client_version TLS 1.2
        body.extend_from_slice(&[7; 32]); // random
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&u16::try_from(ext.len()).unwrap().to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1]; // ClientHello
        hs.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn sni_is_read_from_a_client_hello_at_any_split() {
        let hello = client_hello("allowed.test");
        assert_eq!(claimed_name(&hello), Peek::Done(Claimed::Name("allowed.test".into())));
        for cut in 0..hello.len() {
            assert_eq!(claimed_name(&hello[..cut]), Peek::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn a_client_hello_without_sni_names_no_host() {
        let hello = client_hello("x");
        // Drop the extensions: cut them out and fix the lengths.
        let ext_len = 2 + 2 + 2 + 3 + 1; // type, len, list len, entry header, "x"
        let body_len = hello.len() - 5 - 4 - ext_len - 2;
        let mut hs = vec![1];
        hs.extend_from_slice(&u32::try_from(body_len).unwrap().to_be_bytes()[1..]);
        hs.extend_from_slice(&hello[9..9 + body_len]);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
        rec.extend_from_slice(&hs);
        assert_eq!(claimed_name(&rec), Peek::Done(Claimed::NoName));
    }

    #[test]
    fn a_client_hello_fragmented_over_two_records_is_reassembled() {
        let hello = client_hello("other.test");
        let hs = &hello[5..];
        let (a, b) = hs.split_at(20);
        let mut two = vec![0x16, 3, 1];
        two.extend_from_slice(&u16::try_from(a.len()).unwrap().to_be_bytes());
        two.extend_from_slice(a);
        two.extend_from_slice(&[0x16, 3, 1]);
        two.extend_from_slice(&u16::try_from(b.len()).unwrap().to_be_bytes());
        two.extend_from_slice(b);
        assert_eq!(claimed_name(&two), Peek::Done(Claimed::Name("other.test".into())));
    }

    #[test]
    fn http_host_is_read_without_its_port() {
        let req = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST: Allowed.Test:8080\r\n\r\n";
        assert_eq!(claimed_name(req), Peek::Done(Claimed::Name("Allowed.Test".into())));
        assert_eq!(claimed_name(&req[..20]), Peek::NeedMore);
        assert_eq!(
            claimed_name(b"GET / HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n"),
            Peek::Done(Claimed::NoName)
        );
        assert_eq!(
            claimed_name(b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"),
            Peek::Done(Claimed::NoName)
        );
        assert_eq!(claimed_name(b"GET / HTTP/1.0\r\n\r\n"), Peek::Done(Claimed::NoName));
    }

    #[test]
    fn other_protocols_and_garbage_claim_nothing() {
        assert_eq!(claimed_name(b"SSH-2.0-OpenSSH_9.2\r\n"), Peek::Done(Claimed::Unknown));
        assert_eq!(claimed_name(b"\x00\x01\x02"), Peek::Done(Claimed::Unknown));
        assert_eq!(
            claimed_name(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]),
            Peek::Done(Claimed::Unknown),
            "a ServerHello"
        );
        assert_eq!(claimed_name(&[0x17, 3, 3, 0, 1, 0]), Peek::Done(Claimed::Unknown));
        assert_eq!(claimed_name(b""), Peek::NeedMore);
        let endless = [b'A'; MAX_PEEK];
        assert_eq!(
            claimed_name(&endless),
            Peek::Done(Claimed::Unknown),
            "an endless request line stops at the bound"
        );
        let mut big = vec![0x16, 3, 1, 0x40, 0x00];
        big.resize(MAX_PEEK, 0);
        assert_eq!(claimed_name(&big), Peek::Done(Claimed::Unknown));
    }
}
