//! The egress policy and the one function that decides every connection.
//!
//! - [`rule`]: [`Rule`] (domain, `*.pattern`, IP or CIDR, optional `:PORT`), parsing.
//! - [`builtin`]: ranges denied unless an IP rule names them (private, loopback, ...).
//!
//! # How a connection is decided ([`Policy::decide`])
//!
//! 1. The destination IP is made canonical (`::ffff:10.0.0.1` is `10.0.0.1`).
//! 2. The names the connection may be judged by, from what its first bytes claim
//!    ([`Claim`]): a name (TLS SNI, HTTP Host) counts only if it resolved to this IP
//!    through the sandbox's DNS, else the connection is judged by no name (no raw-IP
//!    connect "claiming" an allowed name); a TLS or HTTP client that names no host (no
//!    SNI, an IP literal as Host: it connected by IP) is judged by no name. Nothing
//!    parseable claimed in time (ssh, raw TCP, a delayed or oversized ClientHello,
//!    garbage: [`Claim::Unknown`]) fails closed: the verdict is the strictest of the IP
//!    rules alone and of each name that resolved to the IP, so an allowed name sharing
//!    the address never lets it through, and a denied one still denies.
//! 3. The matching rules: domain and pattern rules whose name is among those names, IP
//!    rules holding the IP; all limited to their port when they name one.
//! 4. When the IP is in a built-in range (see [`builtin`]), allow rules count only if
//!    they are IP rules lying inside that range (`allow 10.1.0.0/16` opens it; a domain
//!    rule, or `allow 0.0.0.0/0`, does not: a name rebound to a private address stays
//!    denied).
//! 5. The most specific matching rule decides ([`Rule::specificity`]: exact domain >
//!    pattern, longer suffix first > IP rule, longer prefix first; then with a port >
//!    without). Between an allow and a deny rule of equal specificity, allow wins.
//! 6. No rule matched: a built-in range denies (`private-range`), else the connection is
//!    allowed (`default`).
//! 7. Port 25 (SMTP) is denied (`port-25-blocked`) unless the deciding allow rule names
//!    port 25 (`smtp.example.com:25`).

pub mod builtin;
pub mod private;
pub mod rule;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;

pub use builtin::{BuiltinRange, Builtins, SMTP_PORT};
pub use private::{OpensPrivate, Reserved};
pub use rule::{Rule, RuleError, Target, canonical_ip, is_host_name, normalize_name};

/// The egress policy of one sandbox: rules that add destinations and rules that remove
/// them, on top of the built-in default (public internet allowed, private ranges denied).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Destinations allowed (domains, patterns, IPs, CIDRs).
    #[serde(default)]
    pub allow_out: Vec<Rule>,
    /// Destinations denied; `0.0.0.0/0` and `::/0` make the allow rules an allowlist.
    #[serde(default)]
    pub deny_out: Vec<Rule>,
}

/// A connection attempt, as far as the policy needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The destination address the guest asked for.
    pub ip: IpAddr,
    /// The destination port.
    pub port: u16,
    /// What the client's first bytes claim.
    pub claim: Claim<'a>,
    /// Names that resolved to `ip` through the sandbox's DNS and have not expired.
    pub resolved: &'a [String],
}

/// What a connection's first bytes say about the name it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim<'a> {
    /// Nothing known: a protocol that carries no name (ssh, raw TCP), or not read yet.
    Unknown,
    /// TLS SNI or HTTP Host (without port). An IP literal counts as [`Claim::NoName`].
    Name(&'a str),
    /// TLS without SNI, or HTTP naming no host: the client connected by IP.
    NoName,
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The connection goes out.
    Allow,
    /// The connection is refused (TCP RST, DNS REFUSED).
    Deny,
}

/// What decided a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    /// An `allow_out` rule.
    AllowRule(Rule),
    /// A `deny_out` rule.
    DenyRule(Rule),
    /// A built-in denied range.
    Builtin(BuiltinRange),
    /// A port denied by default ([`SMTP_PORT`]) that no allow rule naming it opened.
    BuiltinPort(u16),
    /// No rule matched and the address is public.
    Default,
}

impl DecidedBy {
    /// The text the audit log shows as `rule`: the rule as written, `private-range` or
    /// `default`.
    pub fn rule_text(&self) -> String {
        match self {
            DecidedBy::AllowRule(r) | DecidedBy::DenyRule(r) => r.to_string(),
            DecidedBy::Builtin(_) => "private-range".into(),
            DecidedBy::BuiltinPort(p) => format!("port-{p}-blocked"),
            DecidedBy::Default => "default".into(),
        }
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecidedBy::AllowRule(r) => write!(f, "allow_out {r}"),
            DecidedBy::DenyRule(r) => write!(f, "deny_out {r}"),
            DecidedBy::Builtin(b) => write!(f, "built-in deny of {} range {}", b.what, b.net),
            DecidedBy::BuiltinPort(p) => {
                write!(f, "built-in deny of port {p} (open it with a rule naming :{p})")
            }
            DecidedBy::Default => f.write_str("default (public address, no rule matched)"),
        }
    }
}

/// The outcome for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allow or deny.
    pub verdict: Verdict,
    /// What decided it.
    pub by: DecidedBy,
}

impl Policy {
    /// A policy from rule lists as a user writes them (each item may hold several
    /// comma-separated rules); the first bad rule is the error.
    pub fn from_lists<S: AsRef<str>>(allow_out: &[S], deny_out: &[S]) -> Result<Policy, RuleError> {
        Ok(Policy { allow_out: parse_lists(allow_out)?, deny_out: parse_lists(deny_out)? })
    }

    /// Decides one connection; see the module doc for the order.
    pub fn decide(&self, req: &Request<'_>, builtins: &Builtins) -> Decision {
        if req.claim != Claim::Unknown {
            return self.decide_names(req.ip, req.port, &judged_names(req), builtins);
        }
        // Nothing parseable was claimed: the strictest of the IP rules alone and of each
        // name that resolved to the address. Under an allowlist that is the IP rules
        // (never "some name that resolved here"); under a denylist a denied name that
        // shares the address still denies.
        let by_ip = self.decide_names(req.ip, req.port, &[], builtins);
        if by_ip.verdict == Verdict::Deny {
            return by_ip;
        }
        req.resolved
            .iter()
            .filter_map(|n| normalize_name(n).ok())
            .map(|n| self.decide_names(req.ip, req.port, std::slice::from_ref(&n), builtins))
            .find(|d| d.verdict == Verdict::Deny)
            .unwrap_or(by_ip)
    }

    /// The decision for a connection whose first bytes (SNI, Host) are not known yet,
    /// if every name it could still claim leads to the same verdict: then it can be
    /// refused at its SYN, or connected out before the guest sends anything. `None`
    /// means the claim matters, so the caller must read the first bytes first.
    pub fn decide_before_peek(&self, req: &Request<'_>, builtins: &Builtins) -> Option<Decision> {
        let no_claim = self.decide(&Request { claim: Claim::Unknown, ..*req }, builtins);
        // No name, or a name that did not resolve to the IP: judged by no name at all.
        let unverified = self.decide_names(req.ip, req.port, &[], builtins);
        let mut each =
            req.resolved.iter().map(|n| self.decide(&Request { claim: Claim::Name(n), ..*req }, builtins));
        let same = unverified.verdict == no_claim.verdict && each.all(|d| d.verdict == no_claim.verdict);
        same.then_some(no_claim)
    }

    fn decide_names(&self, ip: IpAddr, port: u16, names: &[String], builtins: &Builtins) -> Decision {
        let ip = canonical_ip(ip);
        let builtin = builtins.find(ip);
        let matches = |rule: &Rule| {
            rule.covers_port(port)
                && match &rule.target {
                    Target::Domain(d) => names.iter().any(|n| n == d),
                    Target::Pattern(s) => names.iter().any(|n| under(n, s)),
                    Target::Net(net) => net.contains(&ip),
                }
        };
        let allow_counts = |rule: &Rule| match (builtin, &rule.target) {
            (None, _) => true,
            (Some(b), Target::Net(net)) => b.net.contains(net),
            (Some(_), _) => false,
        };
        let best_allow =
            self.allow_out.iter().filter(|r| matches(r) && allow_counts(r)).max_by_key(|r| r.specificity());
        let best_deny = self.deny_out.iter().filter(|r| matches(r)).max_by_key(|r| r.specificity());
        let by = match (best_allow, best_deny) {
            (Some(a), Some(d)) if d.specificity() > a.specificity() => DecidedBy::DenyRule(d.clone()),
            (Some(a), _) => DecidedBy::AllowRule(a.clone()),
            (None, Some(d)) => DecidedBy::DenyRule(d.clone()),
            (None, None) => match builtin {
                Some(b) => DecidedBy::Builtin(b.clone()),
                None => DecidedBy::Default,
            },
        };
        let by = match by {
            // Port 25 is opened only by an allow rule that names it.
            DecidedBy::AllowRule(r) if port == SMTP_PORT && r.port != Some(SMTP_PORT) => {
                DecidedBy::BuiltinPort(SMTP_PORT)
            }
            DecidedBy::Default if port == SMTP_PORT => DecidedBy::BuiltinPort(SMTP_PORT),
            by => by,
        };
        let verdict = match by {
            DecidedBy::AllowRule(_) | DecidedBy::Default => Verdict::Allow,
            DecidedBy::DenyRule(_) | DecidedBy::Builtin(_) | DecidedBy::BuiltinPort(_) => Verdict::Deny,
        };
        Decision { verdict, by }
    }

    /// Whether a DNS query for `name` is refused outright: when the most specific domain
    /// or pattern rule (portless) matching it is a deny rule, or when no domain rule
    /// matches it, no IP rule allows anything and `deny_out` holds both `0.0.0.0/0` and
    /// `::/0` (a strict allowlist the name is not on). `None` means "answer it"; the
    /// connections that follow are still decided one by one.
    pub fn refuses_name(&self, name: &str) -> Option<DecidedBy> {
        let name = normalize_name(name).ok()?;
        let named = |r: &&Rule| {
            r.port.is_none()
                && match &r.target {
                    Target::Domain(d) => *d == name,
                    Target::Pattern(s) => under(&name, s),
                    Target::Net(_) => false,
                }
        };
        let best_allow = self.allow_out.iter().filter(named).max_by_key(|r| r.specificity());
        let best_deny = self.deny_out.iter().filter(named).max_by_key(|r| r.specificity());
        match (best_allow, best_deny) {
            (Some(a), Some(d)) if d.specificity() > a.specificity() => Some(DecidedBy::DenyRule(d.clone())),
            (Some(_), _) => None,
            (None, Some(d)) => Some(DecidedBy::DenyRule(d.clone())),
            (None, None) => self.denies_every_ip(),
        }
    }

    fn denies_every_ip(&self) -> Option<DecidedBy> {
        let any_ip_allow = self.allow_out.iter().any(|r| matches!(r.target, Target::Net(_)));
        if any_ip_allow {
            return None;
        }
        let whole = |v4: bool| {
            self.deny_out.iter().find(|r| {
                r.port.is_none()
                    && matches!(&r.target, Target::Net(n) if n.prefix_len() == 0 && n.addr().is_ipv4() == v4)
            })
        };
        match (whole(true), whole(false)) {
            (Some(r), Some(_)) => Some(DecidedBy::DenyRule(r.clone())),
            _ => None,
        }
    }
}

/// True when `name` is strictly below `suffix` (`a.example.com` under `example.com`).
fn under(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// The names a connection is judged by (step 2 of the module doc).
fn judged_names(req: &Request<'_>) -> Vec<String> {
    let resolved = req.resolved.iter().filter_map(|n| normalize_name(n).ok());
    match req.claim {
        Claim::Unknown | Claim::NoName => Vec::new(),
        Claim::Name(claim) => match claimed_name(claim) {
            Some(claim) => resolved.filter(|n| *n == claim).take(1).collect(),
            None => Vec::new(),
        },
    }
}

/// A claimed name (SNI or Host) made comparable; `None` for an IP literal.
fn claimed_name(claim: &str) -> Option<String> {
    let bare = claim.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return None;
    }
    normalize_name(claim).ok()
}

fn parse_lists<S: AsRef<str>>(items: &[S]) -> Result<Vec<Rule>, RuleError> {
    let mut rules = Vec::new();
    for item in items {
        for part in item.as_ref().split(',') {
            rules.push(part.parse()?);
        }
    }
    Ok(rules)
}
