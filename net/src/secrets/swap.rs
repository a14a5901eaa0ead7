//! One intercepted connection: TLS toward the guest with the sandbox CA's leaf for the
//! SNI, HTTP/1.1 or HTTP/2 requests read with hyper (an HTTP/1.1 upgrade, such as a
//! WebSocket handshake, relayed once the server switches protocols), each rewritten ([`super::headers`]) and sent
//! over one verified TLS connection to the real server at the address the guest asked
//! for; each request that met a placeholder is a `request` line in the audit log.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::Mutex;

use super::{Secrets, headers};
use crate::log::{Event, Kind, Record};
use crate::policy::{Claim, Verdict};
use crate::shared::Shared;
use crate::stack::guest::GuestStream;

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves the leaf made for the connection's SNI.
#[derive(Debug)]
struct OneLeaf(Arc<CertifiedKey>);

impl ResolvesServerCert for OneLeaf {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Carries the guest connection `guest` (whose first bytes `first`, a ClientHello for
/// `sni`, were read already) to `dst`, swapping secrets; fills `record`'s byte counts
/// and error.
pub(crate) async fn intercept(
    guest: GuestStream,
    first: Bytes,
    dst: SocketAddrV4,
    sni: String,
    record: &mut Record,
    shared: Arc<Shared>,
    secrets: Secrets,
) {
    let leaf = match secrets.ca.leaf(&sni) {
        Ok(leaf) => leaf,
        Err(e) => {
            guest.writer.abort();
            record.error = Some(e.to_string());
            return;
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config =
        match rustls::ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
            Ok(b) => b.with_no_client_auth().with_cert_resolver(Arc::new(OneLeaf(leaf))),
            Err(e) => {
                guest.writer.abort();
                record.error = Some(e.to_string());
                return;
            }
        };
    // HTTP/2 when the guest offers it (ALPN), else HTTP/1.1; upstream is HTTP/1.1 either way.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (stream, counts) = super::guest_io::pipe(guest, first);
    let tls = match tokio_rustls::TlsAcceptor::from(Arc::new(config)).accept(stream).await {
        Ok(tls) => tls,
        Err(e) => {
            record.error = Some(format!("TLS with the sandbox failed (does it trust the sandbox CA?): {e}"));
            return;
        }
    };
    let conn = Arc::new(Conn { secrets, sni, dst, shared, id: record.conn, upstream: Mutex::new(None) });
    let service = hyper::service::service_fn(move |req| {
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(conn.handle(req).await) }
    });
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let served = if h2 {
        hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(TokioIo::new(tls), service)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), service)
            .with_upgrades()
            .await
    };
    if let Err(e) = served {
        record.error = Some(format!("HTTP from the sandbox: {e}"));
    }
    record.bytes_out = counts.from_guest.load(Ordering::Relaxed);
    record.bytes_in = counts.to_guest.load(Ordering::Relaxed);
}

/// One intercepted connection's state.
struct Conn {
    secrets: Secrets,
    sni: String,
    dst: SocketAddrV4,
    shared: Arc<Shared>,
    id: Option<u64>,
    upstream: Mutex<Option<SendRequest<Incoming>>>,
}

impl Conn {
    async fn handle(&self, mut req: Request<Incoming>) -> Response<Body> {
        let h2 = req.version() == http::Version::HTTP_2;
        let mut line = Record::new(SystemTime::now(), Kind::Tcp, Verdict::Allow, "secret-swap".into());
        line.event = Some(Event::Request);
        line.conn = self.id;
        line.ip = Some(IpAddr::V4(*self.dst.ip()));
        line.port = self.dst.port();
        let host = request_host(&req);
        line.name = Some(host.clone().unwrap_or_default());
        // A secret never widens the policy: each request's Host is judged as the
        // claim watch judges it on a connection carried untouched.
        if let Some(host) = &host {
            let policy = self.shared.policy();
            let resolved = self.shared.memory.names(IpAddr::V4(*self.dst.ip()));
            let request = crate::policy::Request {
                ip: IpAddr::V4(*self.dst.ip()),
                port: self.dst.port(),
                claim: Claim::Name(host),
                resolved: &resolved,
            };
            let decision = policy.decide(&request, &self.shared.builtins());
            if decision.verdict == Verdict::Deny {
                line.verdict = Verdict::Deny;
                line.rule = decision.by.rule_text();
                self.shared.log.write(&line);
                return text(StatusCode::FORBIDDEN, format!("atoll: the egress policy denies {host}\n"));
            }
        }
        let agreed = match &host {
            Some(h) if *h == self.sni => Ok(()),
            Some(h) => Err(format!("Host `{h}` is not the TLS name `{}`", self.sni)),
            None => Err("the request names no Host".to_string()),
        };
        if req.version() == http::Version::HTTP_2 {
            to_http1(&mut req, host.as_deref().unwrap_or(&self.sni));
        }
        let bound = self.secrets.bound(true).await;
        let swapped = headers::swap_request(req.headers_mut(), &bound, host.as_deref().unwrap_or(""), agreed);
        if !swapped.used.is_empty() {
            line.secret = Some(swapped.used.join(","));
        }
        if !swapped.refused.is_empty() {
            let words: Vec<String> = swapped
                .refused
                .iter()
                .map(|(name, why)| format!("placeholder of secret `{name}` not swapped: {why}"))
                .collect();
            line.warning = Some(words.join("; "));
        }
        let upgrade = wants_upgrade(&req).then(|| hyper::upgrade::on(&mut req));
        let sent = match upgrade {
            Some(guest_side) => self.send_upgrade(req, guest_side).await,
            None => self.send(req).await,
        };
        let response = match sent {
            Ok(mut response) => {
                headers::scrub_response(response.headers_mut(), &bound);
                if h2 {
                    for name in
                        ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]
                    {
                        response.headers_mut().remove(name);
                    }
                    *response.version_mut() = http::Version::HTTP_2;
                }
                response.map(|b| b.boxed())
            }
            Err(e) => {
                line.error = Some(e.clone());
                text(StatusCode::BAD_GATEWAY, format!("atoll: {e}\n"))
            }
        };
        if line.secret.is_some() || line.warning.is_some() || line.error.is_some() {
            self.shared.log.write(&line);
        }
        response
    }

    /// Sends `req` on the connection to the real server, opening it on first use.
    async fn send(&self, req: Request<Incoming>) -> Result<Response<Incoming>, String> {
        let mut upstream = self.upstream.lock().await;
        if upstream.as_ref().is_none_or(|s| s.is_closed()) {
            *upstream = Some(self.connect().await?);
        }
        let Some(sender) = upstream.as_mut() else { return Err("no upstream connection".into()) };
        sender.ready().await.map_err(|e| format!("the connection to {} failed: {e}", self.sni))?;
        sender.send_request(req).await.map_err(|e| format!("the request to {} failed: {e}", self.sni))
    }

    /// Sends an upgrade request (`Upgrade: websocket`) on a connection of its own; when
    /// the server switches protocols (101), the two upgraded connections are relayed
    /// byte for byte, both ways, until either side closes.
    async fn send_upgrade(
        &self,
        req: Request<Incoming>,
        guest_side: hyper::upgrade::OnUpgrade,
    ) -> Result<Response<Incoming>, String> {
        let mut sender = self.connect().await?;
        sender.ready().await.map_err(|e| format!("the connection to {} failed: {e}", self.sni))?;
        let mut response =
            sender.send_request(req).await.map_err(|e| format!("the request to {} failed: {e}", self.sni))?;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let server_side = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (Ok(guest), Ok(server)) = tokio::join!(guest_side, server_side) else { return };
                let _ =
                    tokio::io::copy_bidirectional(&mut TokioIo::new(guest), &mut TokioIo::new(server)).await;
            });
        }
        Ok(response)
    }

    async fn connect(&self) -> Result<SendRequest<Incoming>, String> {
        let tcp = tokio::time::timeout(
            crate::egress::CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(SocketAddr::V4(self.dst)),
        )
        .await
        .map_err(|_| format!("connect to {} timed out", self.dst))?
        .map_err(|e| format!("connect to {} failed: {e}", self.dst))?;
        let _ = tcp.set_nodelay(true);
        let name = rustls_pki_types::ServerName::try_from(self.sni.clone())
            .map_err(|e| format!("`{}` is not a server name: {e}", self.sni))?;
        let tls = tokio_rustls::TlsConnector::from(self.secrets.upstream.config().await)
            .connect(name, crate::quickack::QuickAck(tcp))
            .await
            .map_err(|e| {
                format!("the server at {} did not prove it is {} (nothing was sent): {e}", self.dst, self.sni)
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP to {} failed: {e}", self.sni))?;
        // With upgrades: a connection that switched protocols hands its I/O to the relay.
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(sender)
    }
}

/// An HTTP/2 request as the HTTP/1.1 upstream takes it: origin-form target, a `Host`
/// header from `:authority`, version 1.1.
fn to_http1(req: &mut Request<Incoming>, host: &str) {
    let authority = req.uri().authority().map_or_else(|| host.to_owned(), |a| a.as_str().to_owned());
    if !req.headers().contains_key(http::header::HOST)
        && let Ok(value) = http::HeaderValue::from_str(&authority)
    {
        req.headers_mut().insert(http::header::HOST, value);
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    if let Ok(uri) = path.parse() {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_11;
}

/// An HTTP/1.1 request asking to switch protocols (`Connection: upgrade` and
/// `Upgrade`, as a WebSocket handshake does). HTTP/2's extended CONNECT is not carried.
fn wants_upgrade(req: &Request<Incoming>) -> bool {
    let connection_upgrade =
        req.headers().get_all(http::header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
        });
    req.version() == http::Version::HTTP_11
        && connection_upgrade
        && req.headers().contains_key(http::header::UPGRADE)
}

/// The request's Host (or authority), lower case, without port.
fn request_host(req: &Request<Incoming>) -> Option<String> {
    let raw = match req.headers().get(http::header::HOST) {
        Some(v) => v.to_str().ok()?.to_owned(),
        None => req.uri().authority()?.as_str().to_owned(),
    };
    let host = match raw.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6).to_owned(),
        None => raw.split(':').next().unwrap_or(&raw).to_owned(),
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response
}
