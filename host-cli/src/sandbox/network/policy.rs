//! The egress policy of a sandbox: showing it (from `net.json`, so a dead helper's is
//! still shown) and changing it live through the helper.

use atoll_net::policy::{Policy, Rule};
use serde::Serialize;

use super::config::NetConfig;
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

/// A change of the rules: each list given replaces the current one; `None` keeps it.
#[derive(Debug, Clone, Default)]
pub struct PolicyUpdate {
    /// The new `allow_out`.
    pub allow_out: Option<Vec<Rule>>,
    /// The new `deny_out`.
    pub deny_out: Option<Vec<Rule>>,
}

/// The sandbox's policy as recorded in its `net.json`.
pub fn show(name_or_id: &str) -> Result<PolicyView, NetError> {
    let record = lookup(name_or_id)?;
    let config = NetConfig::load(&record.paths.dir)?;
    let helper = super::view(&record).helper;
    Ok(PolicyView::of(record.name, config.network, &config.policy, helper))
}

/// Changes the policy of a running (or paused) sandbox; connections and DNS queries
/// from now on follow it, connections already open are left alone.
pub async fn set(name_or_id: &str, update: PolicyUpdate) -> Result<PolicyView, NetError> {
    let record = with_helper(name_or_id).await?;
    let config = NetConfig::load(&record.paths.dir)?;
    let mut policy = config.policy;
    if let Some(allow) = update.allow_out {
        policy.allow_out = allow;
    }
    if let Some(deny) = update.deny_out {
        policy.deny_out = deny;
    }
    let policy: Policy = ask(&record, &Request::SetPolicy { policy }).await?;
    Ok(PolicyView::of(record.name, config.network, &policy, "running".into()))
}
