//! The built-in deny: destinations a sandbox never reaches unless an IP rule inside the
//! range names them (loopback, the host itself, private and shared ranges, link-local
//! with the cloud metadata address, Azure's host endpoint, benchmarking and IETF protocol
//! ranges, multicast, reserved and "this network" addresses), and port 25 (SMTP), which
//! only a rule naming that port opens. Whether a rule would open any of them (what only
//! the operator may grant) is [`Builtins::first_opened`], in `private`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net};

use super::rule::v6;

/// One built-in denied range and the reason it is denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinRange {
    /// The network.
    pub net: IpNet,
    /// What it is ("loopback", "private", "link-local", ...), shown in the audit log.
    pub what: &'static str,
}

fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::new(a, b, c, d), len).expect("built-in IPv4 prefix is valid"))
}

/// The fixed list, most specific first within each family.
fn fixed() -> Vec<BuiltinRange> {
    let r = |net, what| BuiltinRange { net, what };
    vec![
        r(v4(10, 0, 2, 0, 24), "guest-subnet"),
        // Azure's host endpoint (WireServer: VM agent, DHCP, DNS, instance metadata).
        r(v4(168, 63, 129, 16, 32), "cloud-host"),
        r(v4(0, 0, 0, 0, 8), "this-network"),
        r(v4(127, 0, 0, 0, 8), "loopback"),
        r(v4(10, 0, 0, 0, 8), "private"),
        r(v4(172, 16, 0, 0, 12), "private"),
        r(v4(192, 168, 0, 0, 16), "private"),
        r(v4(100, 64, 0, 0, 10), "shared"),
        r(v4(169, 254, 0, 0, 16), "link-local"),
        r(v4(192, 0, 0, 0, 24), "ietf-protocol"),
        r(v4(198, 18, 0, 0, 15), "benchmarking"),
        r(v4(224, 0, 0, 0, 4), "multicast"),
        r(v4(240, 0, 0, 0, 4), "reserved"),
        r(v6(Ipv6Addr::UNSPECIFIED, 128), "unspecified"),
        r(v6(Ipv6Addr::LOCALHOST, 128), "loopback"),
        // IPv4-compatible (deprecated) and NAT64 addresses embed an IPv4 address that a
        // translator on the host's network could turn into a private one.
        r(v6(Ipv6Addr::UNSPECIFIED, 96), "ipv4-compatible"),
        r(v6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96), "nat64"),
        r(v6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), "nat64"),
        r(v6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), "unique-local"),
        r(v6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), "link-local"),
        r(v6(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), "site-local"),
        r(v6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), "multicast"),
    ]
}

/// The built-in denied ranges plus the host's own addresses (given by whoever runs the
/// engine, as it alone knows them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builtins {
    ranges: Vec<BuiltinRange>,
}

impl Default for Builtins {
    fn default() -> Builtins {
        Builtins { ranges: fixed() }
    }
}

impl Builtins {
    /// The fixed ranges plus each of `host_addrs` as a "host" /32 or /128.
    pub fn with_host_addrs(host_addrs: impl IntoIterator<Item = IpAddr>) -> Builtins {
        let mut ranges: Vec<BuiltinRange> = host_addrs
            .into_iter()
            .map(|ip| BuiltinRange { net: IpNet::from(ip.to_canonical()), what: "host" })
            .collect();
        ranges.extend(fixed());
        Builtins { ranges }
    }

    /// The first (most specific) built-in range holding `ip`, if any.
    pub fn find(&self, ip: IpAddr) -> Option<&BuiltinRange> {
        self.ranges.iter().find(|r| r.net.contains(&ip))
    }

    /// Every range, for documentation and `atoll net show`.
    pub fn ranges(&self) -> &[BuiltinRange] {
        &self.ranges
    }
}

/// The port denied by default whatever the address (SMTP: a sandbox is no mail relay);
/// an allow rule naming this port opens it.
pub const SMTP_PORT: u16 = 25;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newer_ranges_are_denied() {
        let b = Builtins::default();
        for (ip, what) in [
            ("168.63.129.16", "cloud-host"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("192.0.0.9", "ietf-protocol"),
            ("169.254.169.254", "link-local"),
        ] {
            assert_eq!(b.find(ip.parse().expect("ip")).map(|r| r.what), Some(what), "{ip}");
        }
        assert!(b.find("198.20.0.1".parse().expect("ip")).is_none());
    }
}
