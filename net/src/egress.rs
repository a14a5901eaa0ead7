//! Every guest TCP connection, decided before anything goes out, then carried.
//!
//! For each held SYN: when every name the connection could still claim leads to the
//! same verdict ([`Policy::decide_before_peek`](crate::policy::Policy::decide_before_peek)), a deny is answered at once with RST
//! ("connection refused"), an allow connects out first and completes the guest's
//! handshake only once the destination accepted (so a closed port is "refused" too).
//! Otherwise the guest's handshake is completed, its first bytes are read (at most
//! [`peek::MAX_PEEK`] or [`PEEK_WAIT`]) for the TLS SNI or HTTP Host, and the decision
//! is made with that name; nothing parseable in time is judged as claiming nothing
//! (fail closed: see [`crate::policy`]), and a deny resets the connection. Such a
//! connection is allowed for its claim only: `watch` reads every later request
//! head and ClientHello as it passes, and a denied one resets it before it reaches the
//! server. An allowed connection is spliced both ways with byte counts; it gets an
//! audit line when it opens (written before anything goes out: a line that cannot be
//! written refuses the connection) and one when it ends; a refused one gets one line.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::dns::DnsServer;
use crate::log::{Event, Kind, Record};
use crate::peek::{self, Claimed, Peek};
use crate::policy::{Claim, Decision, Request, Verdict};
use crate::shared::Shared;
use crate::stack::guest::{GuestReader, GuestStream};
use crate::stack::{DnsQuery, NewFlow, StackCmd, StackControl};
use crate::watch::{ClaimWatch, Unparseable};

/// How long a connection whose verdict depends on its first bytes waits for them; a
/// client that has sent nothing by then (a server-speaks-first protocol) is judged
/// without a name.
pub const PEEK_WAIT: Duration = Duration::from_secs(3);
/// How long a connect out may take before the guest's connection is reset.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Read size from the outside.
const READ_CHUNK: usize = 64 * 1024;
/// DNS queries answered at once.
const DNS_CONCURRENCY: usize = 64;

/// Takes each new guest connection and runs it on its own task.
pub(crate) async fn dispatch(
    mut flows: mpsc::Receiver<NewFlow>,
    control: StackControl,
    shared: Arc<Shared>,
    dns: Arc<DnsServer>,
) {
    while let Some(flow) = flows.recv().await {
        tokio::spawn(connection(flow, control.clone(), shared.clone(), dns.clone()));
    }
}

/// Answers the guest's UDP DNS queries.
pub(crate) async fn serve_dns_udp(
    mut queries: mpsc::Receiver<DnsQuery>,
    control: StackControl,
    dns: Arc<DnsServer>,
) {
    let permits = Arc::new(Semaphore::new(DNS_CONCURRENCY));
    while let Some(query) = queries.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let (dns, control) = (dns.clone(), control.clone());
        tokio::spawn(async move {
            if let Some(payload) = dns.answer(&query.payload, true).await {
                let _ = control.cmd.send(StackCmd::DnsReply { to: query.from, from: query.to, payload });
                control.wake.notify_one();
            }
            drop(permit);
        });
    }
}

async fn connection(flow: NewFlow, control: StackControl, shared: Arc<Shared>, dns: Arc<DnsServer>) {
    let started = (SystemTime::now(), Instant::now());
    tracing::debug!("connection {}: {} -> {}", flow.id, flow.guest, flow.dst);
    // All DNS is answered here, as for UDP: TCP to port 53 on any address included.
    if flow.dst.port() == 53 {
        if let Some(guest) = accept(&control, flow.id).await {
            serve_dns_tcp(guest, &dns).await;
        }
        return;
    }
    let ip = IpAddr::V4(*flow.dst.ip());
    let policy = shared.policy();
    let resolved = shared.memory.names(ip);
    let request = Request { ip, port: flow.dst.port(), claim: Claim::Unknown, resolved: &resolved };
    let mut record = Record::new(started.0, Kind::Tcp, Verdict::Deny, String::new());
    record.ip = Some(ip);
    record.port = flow.dst.port();
    record.name = resolved.first().cloned();
    record.conn = Some(flow.id);
    let builtins = shared.builtins();
    let judge = |claim: Claim<'_>| policy.decide(&Request { claim, ..request }, &builtins);

    // While a secret is bound, a port 443 connection is decided on its SNI, as one whose
    // verdict depends on it is: the SNI says whether it is intercepted. With none bound,
    // nothing changes.
    let secrets = match shared.secrets.clone().filter(|_| flow.dst.port() == 443) {
        Some(s) if !s.bound(false).await.is_empty() => Some(s),
        _ => None,
    };
    let before = match (&secrets, policy.decide_before_peek(&request, &builtins)) {
        (Some(_), Some(d)) if d.verdict == Verdict::Allow => None,
        (_, before) => before,
    };
    match before {
        Some(decision) if decision.verdict == Verdict::Deny => {
            refuse(&control, flow.id);
            set_decision(&mut record, &decision);
        }
        Some(decision) => {
            set_decision(&mut record, &decision);
            if !log_open(&shared, &mut record) {
                return refuse(&control, flow.id);
            }
            match connect(flow.dst).await {
                Err(e) => {
                    refuse(&control, flow.id);
                    record.error = Some(e);
                }
                Ok(out) => {
                    if let Some(guest) = accept(&control, flow.id).await {
                        // No claim can change the verdict: the first bytes are read only
                        // to log the name.
                        splice(guest, out, None, &mut record, Check::LogName(&judge)).await;
                    }
                }
            }
        }
        None => {
            let Some(mut guest) = accept(&control, flow.id).await else { return };
            let (first, claim) = peek_name(&mut guest.reader).await;
            // Only a ClientHello's SNI can lead to an interception.
            let sni = claim.name().filter(|_| first.first() == Some(&0x16)).map(str::to_owned);
            let decision = judge(claim.as_claim());
            set_decision(&mut record, &decision);
            set_claim(&mut record, claim);
            if decision.verdict == Verdict::Deny {
                guest.writer.abort();
            } else if !log_open(&shared, &mut record) {
                return guest.writer.abort();
            } else if let Some(secrets) = secrets
                && let Some(sni) = sni
                && secrets.intercepts(flow.dst.port(), Some(&sni)).await
            {
                crate::secrets::swap::intercept(
                    guest,
                    first.freeze(),
                    flow.dst,
                    sni,
                    &mut record,
                    shared.clone(),
                    secrets,
                )
                .await;
            } else {
                match connect(flow.dst).await {
                    Err(e) => {
                        guest.writer.abort();
                        record.error = Some(e);
                    }
                    Ok(out) => {
                        // Allowed for this claim only: every later one is judged too.
                        let watch = ClaimWatch::new(&first);
                        splice(guest, out, Some(first.freeze()), &mut record, Check::Enforce(watch, &judge))
                            .await;
                    }
                }
            }
        }
    }
    if record.event.is_some() {
        record.event = Some(Event::Close);
    }
    record.duration_ms = u64::try_from(started.1.elapsed().as_millis()).unwrap_or(u64::MAX);
    shared.log.write(&record);
}

/// Writes the `open` line of an allowed connection; false (after logging why) when it
/// cannot be written, and the connection must then be refused: no egress goes unlogged.
fn log_open(shared: &Shared, record: &mut Record) -> bool {
    record.event = Some(Event::Open);
    match shared.log.try_write(record) {
        Ok(()) => true,
        Err(e) => {
            record.event = None;
            record.verdict = Verdict::Deny;
            record.rule = "audit-log-unwritable".into();
            record.error = Some(e.to_string());
            false
        }
    }
}

fn set_decision(record: &mut Record, decision: &Decision) {
    record.verdict = decision.verdict;
    record.rule = decision.by.rule_text();
}

/// Puts what the first bytes claimed on the record: the name, or the escaped invalid one.
fn set_claim(record: &mut Record, claim: Claimed) {
    match claim {
        Claimed::Name(name) => record.name = Some(name),
        Claimed::Invalid(text) => record.invalid_name = Some(text),
        Claimed::Unknown | Claimed::NoName => {}
    }
}

fn refuse(control: &StackControl, id: u64) {
    let _ = control.cmd.send(StackCmd::Refuse { id });
    control.wake.notify_one();
}

async fn accept(control: &StackControl, id: u64) -> Option<GuestStream> {
    let (reply, stream) = oneshot::channel();
    control.cmd.send(StackCmd::Accept { id, reply }).ok()?;
    control.wake.notify_one();
    stream.await.ok()
}

async fn connect(dst: SocketAddrV4) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(SocketAddr::V4(dst))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(format!("connect to {dst} failed: {e}")),
        Err(_) => Err(format!("connect to {dst} timed out after {}s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Reads the guest's first bytes until they tell the name they claim (or do not).
async fn peek_name(reader: &mut GuestReader) -> (BytesMut, Claimed) {
    let mut buf = BytesMut::new();
    let deadline = tokio::time::Instant::now() + PEEK_WAIT;
    loop {
        if let Peek::Done(claimed) = peek::claimed_name(&buf) {
            return (buf, claimed);
        }
        match tokio::time::timeout_at(deadline, reader.read()).await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            Ok(None) | Err(_) => return (buf, Claimed::Unknown),
        }
    }
}

type Judge<'a> = dyn Fn(Claim<'_>) -> Decision + Sync + 'a;

/// What happens to the claims in the guest's bytes while a connection is carried.
enum Check<'a> {
    /// The verdict does not depend on them: the first one is read to log the name.
    LogName(&'a Judge<'a>),
    /// The connection was allowed for its first claim: every claim is judged, and a
    /// denied one (or bytes that stop parsing, judged as claiming nothing) resets it.
    Enforce(ClaimWatch, &'a Judge<'a>),
}

/// Carries bytes both ways until both sides closed, counting them into `record`.
async fn splice(
    guest: GuestStream,
    out: TcpStream,
    first: Option<Bytes>,
    record: &mut Record,
    mut check: Check<'_>,
) {
    let GuestStream { mut reader, writer } = guest;
    let resetter = writer.resetter();
    let stop_down = Notify::new();
    let (mut out_read, mut out_write) = out.into_split();
    let mut claimed = Claimed::Unknown;
    let mut denied: Option<(Decision, Claimed)> = None;
    let up = async {
        let mut sent = 0u64;
        let mut head = matches!(check, Check::LogName(_)).then(BytesMut::new);
        let mut first = first;
        loop {
            let chunk = match first.take() {
                Some(chunk) => chunk,
                None => match reader.read().await {
                    Some(chunk) => chunk,
                    None => break,
                },
            };
            let ready = match &mut check {
                Check::LogName(_) => {
                    if let Some(buf) = head.as_mut() {
                        buf.extend_from_slice(&chunk);
                        if let Peek::Done(claim) = peek::claimed_name(buf) {
                            claimed = claim;
                            head = None;
                        }
                    }
                    chunk
                }
                Check::Enforce(watch, judge) => {
                    let (ready, claims, unparseable) = match watch.feed(&chunk) {
                        Ok((ready, claims)) => (ready, claims, false),
                        Err(Unparseable) => (Bytes::new(), vec![Claimed::Unknown], true),
                    };
                    let refused = claims.into_iter().find_map(|claim| {
                        let decision = judge(claim.as_claim());
                        (decision.verdict == Verdict::Deny).then_some((decision, claim))
                    });
                    if let Some(refused) = refused {
                        denied = Some(refused);
                        resetter.reset();
                        stop_down.notify_one();
                        return Err("reset: a later claim on the connection is denied".to_string());
                    }
                    if unparseable {
                        // Unparseable but allowed even so: carried unread from now on.
                        watch.stop()
                    } else {
                        ready
                    }
                }
            };
            if !ready.is_empty() {
                out_write.write_all(&ready).await.map_err(|e| e.to_string())?;
                sent += ready.len() as u64;
            }
        }
        let _ = out_write.shutdown().await;
        Ok::<u64, String>(sent)
    };
    let down = async {
        let mut received = 0u64;
        let mut buf = BytesMut::new();
        loop {
            buf.reserve(READ_CHUNK);
            let read = tokio::select! {
                read = out_read.read_buf(&mut buf) => read,
                () = stop_down.notified() => break,
            };
            match read {
                Ok(0) => break,
                Ok(n) => {
                    received += n as u64;
                    crate::quickack::ack_now(out_read.as_ref());
                    if writer.write(buf.split().freeze()).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    writer.abort();
                    return Err(e.to_string());
                }
            }
        }
        drop(writer);
        Ok::<u64, String>(received)
    };
    let (up, down) = tokio::join!(up, down);
    record.bytes_out = *up.as_ref().unwrap_or(&0);
    record.bytes_in = *down.as_ref().unwrap_or(&0);
    if let Check::LogName(judge) = check {
        set_decision(record, &judge(claimed.as_claim()));
        set_claim(record, claimed);
    }
    record.error = up.err().or(down.err());
    if let Some((decision, claim)) = denied {
        let what = match &claim {
            Claimed::Name(n) => format!("`{n}`"),
            Claimed::Invalid(t) => format!("the invalid name `{t}`"),
            Claimed::NoName => "no host".into(),
            Claimed::Unknown => "nothing parseable".into(),
        };
        set_decision(record, &decision);
        set_claim(record, claim);
        record.error = Some(format!(
            "a later request on this connection claimed {what}, which is denied; the connection was reset"
        ));
    }
}
/// DNS over TCP (two-byte length, message), answered like UDP queries.
async fn serve_dns_tcp(guest: GuestStream, dns: &DnsServer) {
    let GuestStream { mut reader, writer } = guest;
    let mut buf = BytesMut::new();
    while let Some(chunk) = reader.read().await {
        buf.extend_from_slice(&chunk);
        while buf.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            if buf.len() < 2 + len {
                break;
            }
            let query = buf.split_to(2 + len);
            let Some(answer) = dns.answer(&query[2..], false).await else { return writer.abort() };
            let mut framed = BytesMut::with_capacity(2 + answer.len());
            framed.extend_from_slice(&u16::try_from(answer.len()).unwrap_or(u16::MAX).to_be_bytes());
            framed.extend_from_slice(&answer);
            if writer.write(framed.freeze()).await.is_err() {
                return;
            }
        }
    }
}
