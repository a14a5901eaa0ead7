//! Which `allow_out` rules open a built-in denied range (loopback, the host's own
//! addresses, private, shared, link-local with the metadata services, ...). Opening one is
//! the operator's decision alone: callers that take rules from a model (the MCP tools)
//! refuse such a rule unless the operator granted the range. The ranges are
//! [`Builtins`]' own, so there is one definition of "private".

use ipnet::IpNet;

use super::builtin::{BuiltinRange, Builtins};
use super::rule::{Rule, Target};

/// An `allow_out` rule that would open a built-in denied range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpensPrivate {
    /// The rule.
    pub rule: Rule,
    /// The range it opens.
    pub range: BuiltinRange,
}

impl Builtins {
    /// The built-in ranges plus the host's addresses as they are now (read at each call,
    /// so an address added since the last check counts).
    pub fn current() -> std::io::Result<Builtins> {
        Ok(Builtins::with_host_addrs(crate::hostaddr::host_addrs()?))
    }

    /// The first of `rules` that opens a built-in range (an IP or CIDR rule inside one,
    /// which is what lets a connection through the built-in deny), unless one of
    /// `granted` (the operator's networks) holds the rule's whole network.
    pub fn first_opened<'a>(
        &self,
        rules: impl IntoIterator<Item = &'a Rule>,
        granted: &[IpNet],
    ) -> Option<OpensPrivate> {
        rules.into_iter().find_map(|rule| {
            let Target::Net(net) = &rule.target else { return None };
            let range = self.ranges().iter().find(|b| b.net.contains(net))?;
            let covered = granted.iter().any(|g| g.contains(net));
            (!covered).then(|| OpensPrivate { rule: rule.clone(), range: range.clone() })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| r.parse().expect("rule")).collect()
    }

    #[test]
    fn rules_inside_a_builtin_range_are_found_unless_granted() {
        let b = Builtins::with_host_addrs(["203.0.113.9".parse().unwrap()]);
        for (rule, what) in [
            ("127.0.0.1", "loopback"),
            ("169.254.169.254:80", "link-local"),
            ("10.1.0.0/16", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared"),
            ("::1", "loopback"),
            ("fd00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("203.0.113.9", "host"),
        ] {
            let found = b.first_opened(&rules(&[rule]), &[]).unwrap_or_else(|| panic!("{rule}"));
            assert_eq!(found.range.what, what, "{rule}");
        }
        // A broad rule does not open the ranges inside it (the built-in deny stays).
        for rule in ["pypi.org", "*.example.com", "8.8.8.8", "1.1.1.0/24:443", "2001:db8::1", "0.0.0.0/0"] {
            assert!(b.first_opened(&rules(&[rule]), &[]).is_none(), "{rule}");
        }
        let granted: Vec<IpNet> = vec!["10.1.0.0/16".parse().unwrap()];
        assert!(b.first_opened(&rules(&["10.1.2.3"]), &granted).is_none());
        assert!(b.first_opened(&rules(&["10.2.0.1"]), &granted).is_some());
    }
}
