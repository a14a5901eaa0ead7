//! DNS-rebinding protection for `atoll mcp --http`: which `Host` and `Origin` headers a
//! request may carry.
//!
//! A web page can make a browser send requests to a local server; a page on a foreign
//! origin carries that origin in `Origin`, and a page on a domain re-pointed at this
//! machine (DNS rebinding) carries that domain in `Host`. So:
//!
//! - `Host` must be a loopback name (`localhost`, `127.0.0.1`, `::1`), the address the
//!   server is bound to, this machine's host name, or an `--allowed-host`. A server bound
//!   to every address (`0.0.0.0`, `::`) also accepts any IP literal: a rebinding attack
//!   needs a domain name in `Host`, never an address.
//! - `Origin`, when present, must be exactly an `--allowed-origin` (scheme, host and
//!   port). No origin is accepted by default, loopback ones neither: a page served on
//!   another loopback port (a sandbox's preview, another local server) is another origin.
//!   Clients that are not browsers send no `Origin` and pass.
//!
//! The same lists go to rmcp's own checks ([`StreamableHttpServerConfig`]), a second line;
//! this layer answers first, with a 403 whose text says which flag admits the request.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;

/// Host names every server accepts.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Why a flag's value was refused.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// An `--allowed-origin` that is not `scheme://host[:port]`.
    #[error(
        "--allowed-origin {0:?} is not an origin; write it as a browser sends it, scheme://host[:port], \
         e.g. https://app.example.com or http://localhost:5173"
    )]
    BadOrigin(String),
    /// An `--allowed-host` that is not a host name or address.
    #[error(
        "--allowed-host {0:?} is not a host name or address; give the name clients use, e.g. atoll.internal"
    )]
    BadHost(String),
}

/// An origin as compared: scheme, lowercase host without brackets, port (the scheme's
/// default when omitted).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

fn parse_origin(text: &str) -> Option<Origin> {
    let uri: http::Uri = text.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    if uri.path_and_query().is_some_and(|p| !matches!(p.as_str(), "" | "/")) {
        return None;
    }
    let authority = uri.authority()?;
    let default = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    Some(Origin { host: normalize(authority.host()), port: authority.port_u16().or(default), scheme })
}

fn normalize(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

/// Which `Host` and `Origin` values the server accepts.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    names: Vec<String>,
    any_address: bool,
    origins: Vec<Origin>,
    origin_texts: Vec<String>,
}

impl HostPolicy {
    /// The policy of a server bound to `bind`, with the user's extra hosts and origins.
    pub fn new(
        bind: SocketAddr,
        extra_hosts: &[String],
        extra_origins: &[String],
    ) -> Result<Self, HostsError> {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect();
        let ip = bind.ip();
        if !ip.is_loopback() {
            if !ip.is_unspecified() {
                names.push(ip.to_string());
            }
            names.push(normalize(&rustix::system::uname().nodename().to_string_lossy()));
        }
        for host in extra_hosts {
            let parsed: http::uri::Authority = host.parse().map_err(|_| HostsError::BadHost(host.clone()))?;
            names.push(normalize(parsed.host()));
        }
        let mut origins = Vec::new();
        for text in extra_origins {
            origins.push(parse_origin(text).ok_or_else(|| HostsError::BadOrigin(text.clone()))?);
        }
        Ok(HostPolicy {
            names,
            any_address: ip.is_unspecified(),
            origins,
            origin_texts: extra_origins.to_vec(),
        })
    }

    /// The host names accepted, for the startup log.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn host_ok(&self, host: &str) -> bool {
        let host = normalize(host);
        self.names.contains(&host) || (self.any_address && host.parse::<IpAddr>().is_ok())
    }

    fn origin_ok(&self, origin: &Origin) -> bool {
        self.origins.contains(origin)
    }

    /// rmcp's config with the same lists: its own check runs after this layer's.
    pub fn apply(&self, config: StreamableHttpServerConfig) -> StreamableHttpServerConfig {
        let config = config.with_allowed_origins(self.origin_texts.clone()).enforce_origin_validation();
        if self.any_address {
            // rmcp cannot say "any IP literal"; this layer checks Host alone.
            config.disable_allowed_hosts()
        } else {
            config.with_allowed_hosts(self.names.clone())
        }
    }

    /// Why a request with these headers is refused, if it is.
    fn refusal(&self, request: &Request) -> Option<String> {
        if let Some(host) = request.headers().get(header::HOST) {
            let authority = host.to_str().ok().and_then(|h| h.parse::<http::uri::Authority>().ok());
            match authority {
                Some(authority) if self.host_ok(authority.host()) => {}
                Some(authority) => {
                    return Some(format!(
                        "Host {:?} is not one this server answers to (DNS-rebinding protection); if clients \
                         reach it by that name, start it with --allowed-host {}\n",
                        authority.as_str(),
                        authority.host()
                    ));
                }
                None => return Some("the Host header is not a host name or address\n".to_owned()),
            }
        }
        let origin = request.headers().get(header::ORIGIN)?;
        let text = String::from_utf8_lossy(origin.as_bytes());
        match parse_origin(&text) {
            Some(parsed) if self.origin_ok(&parsed) => None,
            _ => Some(format!(
                "requests from the web origin {text:?} are refused; to let a page there use this server, \
                 start it with --allowed-origin {text}\n"
            )),
        }
    }
}

/// Middleware: answers 403 to a request whose `Host` or `Origin` the policy refuses.
pub async fn check_host_and_origin(
    State(policy): State<Arc<HostPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    match policy.refusal(&request) {
        None => next.run(request).await,
        Some(why) => {
            tracing::warn!("refused an HTTP request: {}", why.trim_end());
            // The body is left unread: the connection closes after this answer.
            (StatusCode::FORBIDDEN, [(header::CONNECTION, "close")], why).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: &str, origin: Option<&str>) -> Request {
        let mut builder = http::Request::builder().uri("/mcp").header(header::HOST, host);
        if let Some(origin) = origin {
            builder = builder.header(header::ORIGIN, origin);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn a_loopback_server_answers_loopback_names_only() {
        let policy = HostPolicy::new("127.0.0.1:8765".parse().unwrap(), &[], &[]).unwrap();
        for host in ["localhost:8765", "127.0.0.1:8765", "[::1]:8765", "LOCALHOST"] {
            assert!(policy.refusal(&request(host, None)).is_none(), "{host}");
        }
        let why = policy.refusal(&request("evil.example:8765", None)).unwrap();
        assert!(why.contains("--allowed-host evil.example"), "{why}");
        assert!(policy.refusal(&request("10.0.0.5:8765", None)).is_some());
    }

    #[test]
    fn a_wildcard_server_answers_addresses_and_listed_names() {
        let policy =
            HostPolicy::new("0.0.0.0:8765".parse().unwrap(), &["atoll.internal".into()], &[]).unwrap();
        assert!(policy.refusal(&request("10.0.0.5:8765", None)).is_none());
        assert!(policy.refusal(&request("atoll.internal:8765", None)).is_none());
        assert!(policy.refusal(&request("rebound.example:8765", None)).is_some());
    }

    #[test]
    fn foreign_origins_are_refused_unless_allowed() {
        let policy =
            HostPolicy::new("127.0.0.1:8765".parse().unwrap(), &[], &["https://app.example.com".into()])
                .unwrap();
        // A loopback page on another port is another origin (a preview, another server).
        assert!(policy.refusal(&request("localhost", Some("http://localhost:6274"))).is_some());
        assert!(policy.refusal(&request("localhost", Some("http://127.0.0.1:8765"))).is_some());
        assert!(policy.refusal(&request("localhost", Some("https://app.example.com:8443"))).is_some());
        assert!(policy.refusal(&request("localhost", Some("https://app.example.com"))).is_none());
        assert!(policy.refusal(&request("localhost", Some("https://app.example.com:443"))).is_none());
        let why = policy.refusal(&request("localhost", Some("https://evil.example"))).unwrap();
        assert!(why.contains("--allowed-origin https://evil.example"), "{why}");
        assert!(policy.refusal(&request("localhost", Some("null"))).is_some());
    }

    #[test]
    fn bad_flag_values_are_refused() {
        let bind = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            HostPolicy::new(bind, &[], &["app.example.com".into()]),
            Err(HostsError::BadOrigin(_))
        ));
        assert!(matches!(HostPolicy::new(bind, &["bad host".into()], &[]), Err(HostsError::BadHost(_))));
    }
}
