//! Every guest TCP connection, decided before anything goes out, then carried.
//!
//! For each held SYN: when every name the connection could still claim leads to the
//! same verdict ([`Policy::decide_before_peek`](crate::policy::Policy::decide_before_peek)), a deny is answered at once with RST
//! ("connection refused"), an allow connects out first and completes the guest's
//! handshake only once the destination accepted (so a closed port is "refused" too).
//! Otherwise the guest's handshake is completed, its first bytes are read (at most
//! [`peek::MAX_PEEK`] or [`PEEK_WAIT`]) for the TLS SNI or HTTP Host, and the decision
//! is made with that name; a deny then resets the connection. An allowed connection is
//! spliced both ways with byte counts; each attempt is one audit log line when it ends.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::dns::DnsServer;
use crate::log::{Kind, Record};
use crate::peek::{self, Claimed, Peek};
use crate::policy::{Claim, Decision, Request, Verdict};
use crate::shared::Shared;
use crate::stack::guest::{GuestReader, GuestStream};
use crate::stack::{DnsQuery, NewFlow, StackCmd, StackControl};

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

    match policy.decide_before_peek(&request, &shared.builtins) {
        Some(decision) if decision.verdict == Verdict::Deny => {
            refuse(&control, flow.id);
            set_decision(&mut record, &decision);
        }
        Some(decision) => {
            set_decision(&mut record, &decision);
            match connect(flow.dst).await {
                Err(e) => {
                    refuse(&control, flow.id);
                    record.error = Some(e);
                }
                Ok(out) => {
                    if let Some(guest) = accept(&control, flow.id).await {
                        let judge =
                            |claim: Claim<'_>| policy.decide(&Request { claim, ..request }, &shared.builtins);
                        splice(guest, out, None, &mut record, Some(&judge)).await;
                    }
                }
            }
        }
        None => {
            let Some(mut guest) = accept(&control, flow.id).await else { return };
            let (first, claim) = peek_name(&mut guest.reader).await;
            let decision = policy.decide(&Request { claim: claim.as_claim(), ..request }, &shared.builtins);
            set_decision(&mut record, &decision);
            if let Claimed::Name(name) = claim {
                record.name = Some(name);
            }
            if decision.verdict == Verdict::Deny {
                guest.writer.abort();
            } else {
                match connect(flow.dst).await {
                    Err(e) => {
                        guest.writer.abort();
                        record.error = Some(e);
                    }
                    Ok(out) => splice(guest, out, Some(first.freeze()), &mut record, None).await,
                }
            }
        }
    }
    record.duration_ms = u64::try_from(started.1.elapsed().as_millis()).unwrap_or(u64::MAX);
    shared.log.write(&record);
}

fn set_decision(record: &mut Record, decision: &Decision) {
    record.verdict = decision.verdict;
    record.rule = decision.by.rule_text();
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

/// Carries bytes both ways until both sides closed, counting them into `record`. With
/// `judge`, the first bytes from the guest are read for a name as they pass, to log it.
async fn splice(
    guest: GuestStream,
    out: TcpStream,
    first: Option<Bytes>,
    record: &mut Record,
    judge: Option<&Judge<'_>>,
) {
    let GuestStream { mut reader, writer } = guest;
    let (mut out_read, mut out_write) = out.into_split();
    let mut claimed = Claimed::Unknown;
    let up = async {
        let mut sent = 0u64;
        let mut head = judge.map(|_| BytesMut::new());
        if let Some(first) = first {
            out_write.write_all(&first).await.map_err(|e| e.to_string())?;
            sent += first.len() as u64;
        }
        while let Some(chunk) = reader.read().await {
            if let Some(buf) = head.as_mut() {
                buf.extend_from_slice(&chunk);
                if let Peek::Done(claim) = peek::claimed_name(buf) {
                    claimed = claim;
                    head = None;
                }
            }
            out_write.write_all(&chunk).await.map_err(|e| e.to_string())?;
            sent += chunk.len() as u64;
        }
        let _ = out_write.shutdown().await;
        Ok::<u64, String>(sent)
    };
    let down = async {
        let mut received = 0u64;
        let mut buf = BytesMut::new();
        loop {
            buf.reserve(READ_CHUNK);
            match out_read.read_buf(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    received += n as u64;
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
    if let Some(judge) = judge {
        set_decision(record, &judge(claimed.as_claim()));
        if let Claimed::Name(name) = claimed {
            record.name = Some(name);
        }
    }
    record.error = up.err().or(down.err());
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
