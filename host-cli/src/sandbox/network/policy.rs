//! The egress policy of a sandbox: showing it (from `net.json`, so a dead helper's is
//! still shown) and changing it live through the helper.

use atoll_net::policy::{Policy, Rule};
use serde::Serialize;

use super::config::NetAuthority;
use super::control::Request;
use super::{NetError, NetworkMode, ask, lookup, with_helper};

/// What `atoll net show` prints and `sandbox_update` returns.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PolicyView {
    /// The sandbox's name.
    pub sandbox: String,
    /// `default` or `none`.
    pub network: NetworkMode,
    /// Destinations allowed on top of the default, as written.
    pub allow_out: Vec<String>,
    /// Destinations denied, as written.
    pub deny_out: Vec<String>,
    /// `running`, `dead` or `none`: the helper that enforces the policy.
    pub helper: String,
}

impl PolicyView {
    fn of(sandbox: String, network: NetworkMode, policy: &Policy, helper: String) -> PolicyView {
        let texts = |rules: &[Rule]| rules.iter().map(ToString::to_string).collect();
        PolicyView {
            sandbox,
            network,
            allow_out: texts(&policy.allow_out),
            deny_out: texts(&policy.deny_out),
            helper,
        }
    }
}

/// A change of the rules. Each list given in `allow_out`/`deny_out` replaces the current
/// one (`None` keeps it); then each rule in `allow` joins the allow list (and leaves the
/// deny list, so that afterwards it is allowed), each in `deny` joins the deny list (and
/// leaves the allow list), and each in `remove` leaves whichever list holds it.
#[derive(Debug, Clone, Default)]
pub struct PolicyUpdate {
    /// The new `allow_out`.
    pub allow_out: Option<Vec<Rule>>,
    /// The new `deny_out`.
    pub deny_out: Option<Vec<Rule>>,
    /// Rules to add to `allow_out`.
    pub allow: Vec<Rule>,
    /// Rules to add to `deny_out`.
    pub deny: Vec<Rule>,
    /// Rules to take out of either list; one that is in neither is refused.
    pub remove: Vec<Rule>,
}

impl PolicyUpdate {
    /// `policy` with this change made; a rule to remove that neither list holds (after
    /// the replacements and additions) is an error, and nothing changes.
    pub fn apply(self, mut policy: Policy, sandbox: &str) -> Result<Policy, NetError> {
        if let Some(allow) = self.allow_out {
            policy.allow_out = allow;
        }
        if let Some(deny) = self.deny_out {
            policy.deny_out = deny;
        }
        for rule in self.allow {
            policy.deny_out.retain(|r| r != &rule);
            if !policy.allow_out.contains(&rule) {
                policy.allow_out.push(rule);
            }
        }
        for rule in self.deny {
            policy.allow_out.retain(|r| r != &rule);
            if !policy.deny_out.contains(&rule) {
                policy.deny_out.push(rule);
            }
        }
        for rule in self.remove {
            let before = policy.allow_out.len() + policy.deny_out.len();
            policy.allow_out.retain(|r| r != &rule);
            policy.deny_out.retain(|r| r != &rule);
            if policy.allow_out.len() + policy.deny_out.len() == before {
                return Err(NetError::RuleNotSet { sandbox: sandbox.to_owned(), rule: rule.to_string() });
            }
        }
        Ok(policy)
    }
}

/// The sandbox's policy as atoll last gave it to the helper ([`NetAuthority`]).
pub fn show(name_or_id: &str) -> Result<PolicyView, NetError> {
    let record = lookup(name_or_id)?;
    let config = NetAuthority::load(&record.paths.dir)?;
    let helper = super::view(&record).helper;
    Ok(PolicyView::of(record.name, config.network, &config.policy, helper))
}

/// Changes the policy of a running (or paused) sandbox; connections and DNS queries
/// from now on follow it, connections already open are left alone.
pub async fn set(name_or_id: &str, update: PolicyUpdate) -> Result<PolicyView, NetError> {
    let record = with_helper(name_or_id).await?;
    let config = NetAuthority::load(&record.paths.dir)?;
    let policy = update.apply(config.policy, &record.name)?;
    let _: Policy = ask(&record, &Request::SetPolicy { policy: policy.clone() }).await?;
    // Recorded as atoll asked it, not as the helper answered.
    NetAuthority::update(&record.paths.dir, |a| a.policy = policy.clone())?;
    Ok(PolicyView::of(record.name, config.network, &policy, "running".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| r.parse().unwrap()).collect()
    }

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy { allow_out: rules(allow), deny_out: rules(deny) }
    }

    #[test]
    fn adding_keeps_the_other_rules_and_moves_a_rule_between_lists() {
        let start = policy(&["pypi.org"], &["0.0.0.0/0"]);
        let add = PolicyUpdate { allow: rules(&["github.com", "pypi.org"]), ..Default::default() };
        assert_eq!(
            add.apply(start.clone(), "dev").unwrap(),
            policy(&["pypi.org", "github.com"], &["0.0.0.0/0"])
        );
        let deny = PolicyUpdate { deny: rules(&["pypi.org"]), ..Default::default() };
        assert_eq!(deny.apply(start.clone(), "dev").unwrap(), policy(&[], &["0.0.0.0/0", "pypi.org"]));
        let allow_back = PolicyUpdate { allow: rules(&["0.0.0.0/0"]), ..Default::default() };
        assert_eq!(allow_back.apply(start.clone(), "dev").unwrap(), policy(&["pypi.org", "0.0.0.0/0"], &[]));
        let replace = PolicyUpdate { allow_out: Some(rules(&["github.com"])), ..Default::default() };
        assert_eq!(replace.apply(start, "dev").unwrap(), policy(&["github.com"], &["0.0.0.0/0"]));
    }

    #[test]
    fn removing_a_rule_takes_it_from_either_list_and_an_unknown_one_is_refused() {
        let start = policy(&["pypi.org", "github.com"], &["0.0.0.0/0"]);
        let rm = PolicyUpdate { remove: rules(&["pypi.org", "0.0.0.0/0"]), ..Default::default() };
        assert_eq!(rm.apply(start.clone(), "dev").unwrap(), policy(&["github.com"], &[]));
        let rm = PolicyUpdate { remove: rules(&["github.com", "example.com"]), ..Default::default() };
        let err = rm.apply(start, "dev").unwrap_err().to_string();
        assert!(err.contains("no rule `example.com`") && err.contains("atoll net show dev"), "{err}");
    }
}
