//! One egress rule: a domain (`pypi.org`), a domain pattern (`*.githubusercontent.com`),
//! an IP or a CIDR (v4 or v6), each optionally with `:PORT` (`[v6]:PORT` for IPv6).
//! Parsed once by [`FromStr`], printed back by [`Display`](fmt::Display) in the same form (so it
//! round-trips through serde as a plain string), normalised on the way in: names are
//! lowercase without a trailing dot, IPs are CIDRs, IPv4-mapped IPv6 becomes IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// What every rule error message ends with: the forms a rule may take.
pub const RULE_FORMS: &str = "a rule is a domain (pypi.org), a pattern (*.example.com), an IP \
     (203.0.113.7, 2001:db8::1) or a CIDR (10.0.0.0/8, fc00::/7), optionally followed by :PORT \
     (pypi.org:443, [2001:db8::1]:22)";

/// A rule that could not be parsed; the message names the rule and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rule `{rule}`: {reason}; {RULE_FORMS}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Exactly this name (lowercase, no trailing dot).
    Domain(String),
    /// Any name strictly below this suffix: `*.example.com` holds `a.example.com` and
    /// `a.b.example.com`, not `example.com` itself.
    Pattern(String),
    /// Any address in this network (a single IP is a /32 or /128).
    Net(IpNet),
}

/// A rule: a target and, optionally, the one destination port it is limited to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What the rule matches.
    pub target: Target,
    /// The destination port it is limited to; `None` is every port.
    pub port: Option<u16>,
}

impl Rule {
    /// True when `port` is one this rule covers.
    pub fn covers_port(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// How specific the rule is, for "the most specific matching rule wins": an exact
    /// domain beats any pattern, a pattern beats any IP rule; among patterns the longer
    /// suffix wins, among IP rules the longer prefix; then a rule with a port beats the
    /// same rule without one.
    pub fn specificity(&self) -> (u8, u8, bool) {
        let (class, detail) = match &self.target {
            Target::Domain(_) => (3, 0),
            Target::Pattern(suffix) => (2, label_count(suffix)),
            Target::Net(net) => (1, net.prefix_len()),
        };
        (class, detail, self.port.is_some())
    }
}

fn label_count(name: &str) -> u8 {
    u8::try_from(name.split('.').count()).unwrap_or(u8::MAX)
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Rule, RuleError> {
        let fail = |reason: &str| RuleError { rule: text.to_owned(), reason: reason.to_owned() };
        let s = text.trim();
        if s.is_empty() {
            return Err(fail("it is empty"));
        }
        if s.contains("://") || s.contains('@') || s.contains('?') || s.contains('#') {
            return Err(fail("it looks like a URL; write only the host, e.g. `example.com`"));
        }
        if s.chars().any(char::is_whitespace) {
            return Err(fail("it contains spaces; pass one rule per argument or separate rules with commas"));
        }
        let (host, port) = split_port(s).map_err(|reason| fail(&reason))?;
        let target = parse_target(host).map_err(|reason| fail(&reason))?;
        Ok(Rule { target, port })
    }
}

/// Splits `HOST[:PORT]`, `[V6]:PORT` or a bare IPv6 address/CIDR (which has no port).
fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or("`[` without a closing `]`")?;
        if after.is_empty() {
            return Ok((inner, None));
        }
        let port = after.strip_prefix(':').ok_or("after `]` only `:PORT` may follow")?;
        if !inner.contains(':') {
            return Err("brackets are only for IPv6 addresses".into());
        }
        return Ok((inner, Some(parse_port(port)?)));
    }
    match s.matches(':').count() {
        0 => Ok((s, None)),
        1 => {
            let (host, port) = s.split_once(':').unwrap_or((s, ""));
            Ok((host, Some(parse_port(port)?)))
        }
        // Several colons: an IPv6 address or CIDR, which takes a port only in brackets.
        _ => Ok((s, None)),
    }
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() {
        return Err("the port after `:` is missing".into());
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port `{port}` is not a number"));
    }
    match port.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(u16::try_from(p).unwrap_or_default()),
        _ => Err(format!("port `{port}` is out of range; a port is 1 to 65535")),
    }
}

fn parse_target(host: &str) -> Result<Target, String> {
    if host.is_empty() {
        return Err("the host before `:` is missing".into());
    }
    if let Some((addr, len)) = host.split_once('/') {
        let ip: IpAddr = addr.parse().map_err(|_| format!("`{addr}` before `/` is not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("prefix length `/{len}` is out of range; it is 0 to {max}"))?;
        let net = IpNet::new(ip, len).map_err(|e| e.to_string())?;
        if net.trunc() != net {
            return Err(format!("`{host}` has bits set past the prefix; did you mean `{}`?", net.trunc()));
        }
        return Ok(Target::Net(canonical_net(net)));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Target::Net(canonical_net(IpNet::from(ip))));
    }
    if host.contains(':') {
        return Err(format!("`{host}` is not an IPv6 address"));
    }
    if matches!(host, "*." | "*..") {
        return Err("the pattern names no domain after `*.`".into());
    }
    let name = normalize_name(host)?;
    if let Some(suffix) = name.strip_prefix("*.") {
        if suffix.contains('*') {
            return Err("`*` may only be the whole first label, as in `*.example.com`".into());
        }
        validate_name(suffix)?;
        return Ok(Target::Pattern(suffix.to_owned()));
    }
    if name.contains('*') {
        return Err("`*` may only be the whole first label, as in `*.example.com`".into());
    }
    validate_name(&name)?;
    Ok(Target::Domain(name))
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) is the IPv4 network it maps.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(v4net) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(v4net);
    }
    net
}

/// The address a connection really goes to: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) reaches
/// the IPv4 host, so it is decided as that IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// Lowercases a DNS name and drops one trailing dot (`Example.COM.` is `example.com`).
pub fn normalize_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    Ok(name.to_ascii_lowercase())
}

/// True when `name` is a valid DNS host name as rules accept them (labels of a-z, 0-9,
/// `-`, `_`, at most 63 bytes each, 253 in all; not all numeric), a trailing dot
/// allowed. SNI and Host values that are not are judged as no name.
pub fn is_host_name(name: &str) -> bool {
    normalize_name(name).is_ok_and(|n| validate_name(&n).is_ok())
}

fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the pattern names no domain after `*.`".into());
    }
    if name.len() > 253 {
        return Err("the name is longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("the name has an empty label (`..` or a leading dot)".into());
        }
        if label.len() > 63 {
            return Err(format!("label `{label}` is longer than 63 characters"));
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(format!(
                "label `{label}` has a character other than a-z, 0-9, `-` or `_` (write IDNs in punycode, xn--...)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label `{label}` starts or ends with `-`"));
        }
    }
    if name.split('.').all(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return Err("it is all numbers but not a valid IP address".into());
    }
    Ok(())
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Domain(name) => f.write_str(name),
            Target::Pattern(suffix) => write!(f, "*.{suffix}"),
            Target::Net(net) if net.prefix_len() == net.max_prefix_len() => write!(f, "{}", net.addr()),
            Target::Net(net) => write!(f, "{net}"),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.port, &self.target) {
            (None, t) => write!(f, "{t}"),
            (Some(p), t @ Target::Net(IpNet::V6(_))) => write!(f, "[{t}]:{p}"),
            (Some(p), t) => write!(f, "{t}:{p}"),
        }
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rule, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A whole IPv6 net, for the built-in ranges.
pub(crate) fn v6(addr: Ipv6Addr, len: u8) -> IpNet {
    IpNet::V6(Ipv6Net::new(addr, len).expect("built-in IPv6 prefix is valid"))
}
