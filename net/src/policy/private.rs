//! The one definition of what only the operator may open: an `allow_out` rule that opens
//! a built-in denied range (loopback, the host's own addresses, private, shared,
//! link-local with the metadata services, unique-local, ...), or one naming port 25
//! (SMTP, denied by default). Callers that take rules from a model (the MCP tools) refuse
//! such a rule unless the operator granted the range; the CLI (the operator) may give
//! any. The ranges are [`Builtins`]' own, the list the engine denies by, so "private" is
//! defined once for the check and the verdict.

use std::fmt;

use ipnet::IpNet;

use super::builtin::{BuiltinRange, Builtins, SMTP_PORT};
use super::rule::{Rule, Target};

/// What an `allow_out` rule would open that only the operator may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// A built-in denied range.
    Range(BuiltinRange),
    /// Port 25 (SMTP), denied by default whatever the address.
    Smtp,
}

impl fmt::Display for Reserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reserved::Range(r) => write!(f, "the {} range {}", r.what, r.net),
            Reserved::Smtp => write!(f, "port {SMTP_PORT} (SMTP, denied by default)"),
        }
    }
}

/// An `allow_out` rule that would open something only the operator may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpensPrivate {
    /// The rule.
    pub rule: Rule,
    /// What it opens.
    pub reserved: Reserved,
}

impl Builtins {
    /// The built-in ranges plus the host's addresses as they are now (read at each call,
    /// so an address added since the last check counts).
    pub fn current() -> std::io::Result<Builtins> {
        Ok(Builtins::with_host_addrs(crate::hostaddr::host_addrs()?))
    }

    /// The first of `rules` that opens something only the operator may open: an IP or
    /// CIDR rule inside a built-in range (which is what lets a connection through the
    /// built-in deny), unless one of `granted` (the operator's networks) holds the rule's
    /// whole network; or a rule naming port 25.
    pub fn first_opened<'a>(
        &self,
        rules: impl IntoIterator<Item = &'a Rule>,
        granted: &[IpNet],
    ) -> Option<OpensPrivate> {
        rules.into_iter().find_map(|rule| {
            let found = |reserved| Some(OpensPrivate { rule: rule.clone(), reserved });
            if let Target::Net(net) = &rule.target
                && let Some(range) = self.ranges().iter().find(|b| b.net.contains(net))
                && !granted.iter().any(|g| g.contains(net))
            {
                return found(Reserved::Range(range.clone()));
            }
            if rule.port == Some(SMTP_PORT) {
                return found(Reserved::Smtp);
            }
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| r.parse().expect("rule")).collect()
    }

    fn opened(b: &Builtins, rule: &str) -> Option<String> {
        b.first_opened(&rules(&[rule]), &[]).map(|o| o.reserved.to_string())
    }

    #[test]
    fn each_private_range_is_the_operators_alone() {
        let b = Builtins::with_host_addrs(["203.0.113.9".parse().unwrap(), "2001:db8::9".parse().unwrap()]);
        for (rule, what) in [
            // Loopback, both families, and "this network" (0.0.0.0 reaches loopback).
            ("127.0.0.1", "the loopback range 127.0.0.0/8"),
            ("127.255.255.254/31", "the loopback range 127.0.0.0/8"),
            ("::1", "the loopback range ::1/128"),
            ("0.0.0.0", "the this-network range 0.0.0.0/8"),
            // RFC 1918, at both ends of each range.
            ("10.0.0.1", "the private range 10.0.0.0/8"),
            ("10.255.255.255", "the private range 10.0.0.0/8"),
            ("10.1.0.0/16", "the private range 10.0.0.0/8"),
            ("172.16.0.1", "the private range 172.16.0.0/12"),
            ("172.31.255.255", "the private range 172.16.0.0/12"),
            ("192.168.0.1", "the private range 192.168.0.0/16"),
            ("192.168.255.255", "the private range 192.168.0.0/16"),
            // The guest's own subnet.
            ("10.0.2.2", "the guest-subnet range 10.0.2.0/24"),
            // Link-local with the cloud metadata address, and Azure's host endpoint.
            ("169.254.169.254", "the link-local range 169.254.0.0/16"),
            ("169.254.169.254:80", "the link-local range 169.254.0.0/16"),
            ("169.254.0.1", "the link-local range 169.254.0.0/16"),
            ("fe80::1", "the link-local range fe80::/10"),
            ("168.63.129.16", "the cloud-host range 168.63.129.16/32"),
            // CGNAT (shared address space).
            ("100.64.0.1", "the shared range 100.64.0.0/10"),
            ("100.127.255.255", "the shared range 100.64.0.0/10"),
            // Unique-local IPv6.
            ("fd00::1", "the unique-local range fc00::/7"),
            ("fc00::/8", "the unique-local range fc00::/7"),
            // IPv4-mapped IPv6 is the IPv4 address it maps.
            ("::ffff:127.0.0.1", "the loopback range 127.0.0.0/8"),
            ("::ffff:169.254.169.254", "the link-local range 169.254.0.0/16"),
            ("::ffff:10.0.0.0/104", "the private range 10.0.0.0/8"),
            // The host's own addresses, both families, mapped too.
            ("203.0.113.9", "the host range 203.0.113.9/32"),
            ("::ffff:203.0.113.9", "the host range 203.0.113.9/32"),
            ("2001:db8::9", "the host range 2001:db8::9/128"),
            // Port 25, whatever the address or name.
            ("pypi.org:25", "port 25 (SMTP, denied by default)"),
            ("203.0.113.7:25", "port 25 (SMTP, denied by default)"),
        ] {
            assert_eq!(opened(&b, rule).as_deref(), Some(what), "{rule}");
        }
    }

    #[test]
    fn public_and_broad_rules_open_nothing_private() {
        let b = Builtins::with_host_addrs(["203.0.113.9".parse().unwrap()]);
        // A broad rule does not open the ranges inside it (the built-in deny stays), and
        // the neighbours of each range are public.
        for rule in [
            "pypi.org",
            "*.example.com",
            "8.8.8.8",
            "1.1.1.0/24:443",
            "2001:db8::1",
            "0.0.0.0/0",
            "::/0",
            "10.0.0.0/7",
            "11.0.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.167.255.255",
            "192.169.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "203.0.113.8",
            "203.0.113.7:587",
        ] {
            assert_eq!(opened(&b, rule), None, "{rule}");
        }
    }

    #[test]
    fn a_granted_network_opens_only_what_it_holds() {
        let b = Builtins::default();
        let granted: Vec<IpNet> = vec!["10.1.0.0/16".parse().unwrap()];
        assert!(b.first_opened(&rules(&["10.1.2.3"]), &granted).is_none());
        assert!(b.first_opened(&rules(&["10.1.0.0/16"]), &granted).is_none());
        assert!(b.first_opened(&rules(&["10.0.0.0/15"]), &granted).is_some(), "wider than the grant");
        assert!(b.first_opened(&rules(&["10.2.0.1"]), &granted).is_some());
        // The first offending rule of a list is the one named.
        let found = b.first_opened(&rules(&["pypi.org", "192.168.1.1", "127.0.0.1"]), &granted).unwrap();
        assert_eq!(found.rule.to_string(), "192.168.1.1");
    }

    #[test]
    fn the_current_builtins_hold_every_address_of_this_host() {
        let b = Builtins::current().expect("host addresses");
        for ip in crate::hostaddr::host_addrs().expect("host addresses") {
            assert!(b.find(ip).is_some(), "{ip}");
            let rule: Rule = ip.to_string().parse().expect("rule");
            assert!(b.first_opened(&[rule], &[]).is_some(), "{ip}");
        }
    }
}
