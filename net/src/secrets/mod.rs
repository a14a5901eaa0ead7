//! Secrets swapped at egress (docs/secrets.md): the guest holds a placeholder, and on
//! an HTTPS connection to one of the secret's hosts this helper terminates TLS with a
//! leaf of the sandbox's own CA ([`ca`]), replaces the placeholder in each request's
//! headers by the real value, and forwards the request over a new TLS connection that
//! verifies the real server ([`upstream`]); the value in a response's headers goes back
//! as the placeholder (`swap`).
//!
//! The egress policy decides first: a connection the policy refuses is refused, secret
//! or not. Only TCP port 443 connections whose SNI one of the bound secrets names are
//! intercepted; every other connection is carried as before, untouched.

pub mod ca;
mod guest_io;
pub mod headers;
pub(crate) mod swap;
pub mod upstream;

use std::sync::Arc;

/// One secret bound to the sandbox, as the swap needs it.
#[derive(Clone)]
pub struct Bound {
    /// The secret's name (logged; never the value).
    pub name: String,
    /// The placeholder the guest holds.
    pub placeholder: String,
    /// The hosts it may go to: `api.example.com` or `*.example.com` (any name under it).
    pub hosts: Vec<String>,
    /// The real value; `Err` says why it could not be had (the secret was removed, its
    /// command failed): then the placeholder is sent unchanged.
    pub value: Result<String, String>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value, even in a debug print.
        f.debug_struct("Bound")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("hosts", &self.hosts)
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Bound {
    /// Whether `host` (a lower-case name, no port) is one of this secret's hosts.
    pub fn names_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|pattern| host_matches(pattern, host))
    }
}

/// `pattern` is `name` (that name only) or `*.suffix` (any name under `suffix`, not
/// `suffix` itself); compared without case.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => host == pattern,
    }
}

/// Where the sandbox's secrets come from: read again for each connection and each
/// request, so a detach, a removal or a new value counts from the next request on.
pub trait SecretSource: Send + Sync + 'static {
    /// The secrets bound now (hosts and placeholders; values resolved only when
    /// `with_values`). May block (a `--from-command` secret runs its command).
    fn bound(&self, with_values: bool) -> Vec<Bound>;
}

/// What the engine needs to swap secrets.
#[derive(Clone)]
pub struct Secrets {
    /// The bindings.
    pub source: Arc<dyn SecretSource>,
    /// The sandbox's CA (its leaves are what the guest sees).
    pub ca: Arc<ca::LeafIssuer>,
    /// How real servers are verified.
    pub upstream: Arc<upstream::Upstream>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets")
    }
}

impl Secrets {
    /// The bindings now, read off the async runtime (the source may block).
    pub(crate) async fn bound(&self, with_values: bool) -> Vec<Bound> {
        let source = self.source.clone();
        tokio::task::spawn_blocking(move || source.bound(with_values)).await.unwrap_or_default()
    }

    /// Whether a connection to `port` claiming `name` is to be intercepted.
    pub(crate) async fn intercepts(&self, port: u16, name: Option<&str>) -> bool {
        let Some(name) = name.filter(|_| port == 443) else { return false };
        self.bound(false).await.iter().any(|b| b.names_host(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_the_name_or_names_under_the_suffix() {
        assert!(host_matches("api.example.com", "API.example.com."));
        assert!(!host_matches("api.example.com", "xapi.example.com"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
    }
}
