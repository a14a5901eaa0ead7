//! Sandbox networks and published ports: the use-cases that `atoll port ...`, `atoll info`
//! and the MCP tools share. Each sandbox has one helper process (`atoll net-helper`, see
//! [`crate::sandbox::network::helper`]) that holds its published ports (and its network); these
//! functions find the sandbox, check that its helper lives, and ask it over `net.ctl`.
//!
//! - [`spec`]: port specs (`[HOSTPORT:]GUESTPORT`, Docker's order), published ports, network modes.
//! - [`config`]: the network files of a sandbox directory; `net.json`.
//! - [`control`]: the JSON-lines protocol on `net.ctl` and its client.
//! - [`lifecycle`]: starting the helper for `atoll create`, stopping it for `atoll kill`.
//! - [`policy`]: the egress policy: show it, change it live.
//! - [`audit`]: reading and following the audit log of connections.
//! - [`helper`]: the helper process itself (`atoll net-helper`): the control socket, the
//!   port forwarder, the atoll-net engine.

pub mod audit;
pub mod config;
pub mod control;
pub mod helper;
pub mod lifecycle;
pub mod policy;
pub mod spec;

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::sandbox::{SandboxError, SandboxInfo, SandboxState};
use crate::vmm::dirs;
use crate::vmm::state::{self, Record};
use config::NetConfig;
use control::{ControlError, Request};
pub use spec::{NetworkMode, PortSpec, PublishedPort};

/// Why a network operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Finding the sandbox failed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The helper process is gone.
    #[error(
        "the network helper of sandbox `{name}` is not running (it died); its published ports and network are gone. Recreate the sandbox: `atoll kill {name}`, then `atoll create`"
    )]
    HelperDead {
        /// The sandbox.
        name: String,
    },
    /// The sandbox was made by an atoll without network helpers.
    #[error(
        "sandbox `{name}` was created by an older atoll without a network helper; recreate it to publish ports"
    )]
    NoHelper {
        /// The sandbox.
        name: String,
    },
    /// Talking to the helper failed, or it refused.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// `net.json` could not be read.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A rule to remove is in neither list.
    #[error(
        "sandbox `{sandbox}` has no rule `{rule}` to remove; `atoll net show {sandbox}` lists its rules as written"
    )]
    RuleNotSet {
        /// The sandbox.
        sandbox: String,
        /// The rule, as written.
        rule: String,
    },
}

/// What the helper reports about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelperStatus {
    /// Its pid.
    pub pid: u32,
    /// Whether the sandbox has a NIC.
    pub network: NetworkMode,
    /// The egress policy in force.
    pub policy: atoll_net::policy::Policy,
    /// The published ports.
    pub ports: Vec<PublishedPort>,
    /// Whether the audit log is being written (absent: no network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<atoll_net::log::LogHealth>,
}

/// A sandbox's network as `atoll info` shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(inline)]
pub struct NetView {
    /// `default` or `none`.
    pub network: NetworkMode,
    /// `running`, `parked` (it comes back with the sandbox), `dead` (it died: ports and
    /// network are gone), or `none` (a sandbox made without one).
    pub helper: String,
    /// The helper's pid while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper_pid: Option<u32>,
    /// Destinations allowed on top of the default, as written.
    pub allow_out: Vec<String>,
    /// Destinations denied, as written.
    pub deny_out: Vec<String>,
    /// The published ports.
    pub ports: Vec<PublishedPort>,
    /// Why the audit log cannot be written, while it cannot (the sandbox's egress is
    /// refused meanwhile); absent when it is fine or the helper is not running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log_error: Option<String>,
    /// Audit lines that could not be written since the helper started.
    #[serde(skip_serializing_if = "is_zero")]
    pub audit_log_failed_writes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The health of the sandbox's audit log as its running helper reports it; `None` when
/// the helper is not running or the sandbox has no network.
pub async fn log_health(record: &Record) -> Option<atoll_net::log::LogHealth> {
    match record.net_helper {
        Some(p) if p.is_alive() => {}
        _ => return None,
    }
    // `atoll info` must not hang on a wedged helper: a short wait, then "unknown".
    let status = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        ask::<HelperStatus>(record, &Request::Status),
    );
    status.await.ok()?.ok()?.log
}

/// [`view`] with the audit log's health asked of the running helper.
pub async fn view_live(record: &Record) -> NetView {
    let mut view = view(record);
    if let Some(health) = log_health(record).await {
        view.audit_log_error = health.error;
        view.audit_log_failed_writes = health.failed_writes;
    }
    view
}

/// The network view of `record`: its network and policy from atoll's own record
/// ([`config::NetAuthority`]), and its helper's liveness. Its ports: for a parked
/// sandbox, those atoll publishes again when it comes back (atoll's own record,
/// [`config::NetAuthority::own_ports`]); else those its helper lists in its `net.json`,
/// what it holds now (read as hostile, only shown).
pub fn view(record: &Record) -> NetView {
    let config = NetConfig::load(&record.paths.dir).unwrap_or_default();
    let authority = config::NetAuthority::load(&record.paths.dir).unwrap_or(config::NetAuthority {
        network: config.network,
        policy: config.policy.clone(),
        ports: None,
    });
    let ports = if record.parked { config::NetAuthority::own_ports(&record.paths.dir) } else { config.ports };
    let (helper, helper_pid) = match record.net_helper {
        Some(p) if p.is_alive() => ("running", Some(p.pid)),
        None if record.parked => ("parked", None),
        Some(_) => ("dead", None),
        None => ("none", None),
    };
    let texts = |rules: &[atoll_net::policy::Rule]| rules.iter().map(ToString::to_string).collect();
    NetView {
        network: authority.network,
        helper: helper.into(),
        helper_pid,
        allow_out: texts(&authority.policy.allow_out),
        deny_out: texts(&authority.policy.deny_out),
        ports: ports.into_iter().map(|p| p.named(&record.name)).collect(),
        audit_log_error: None,
        audit_log_failed_writes: 0,
    }
}

/// The record of a sandbox, in whatever state.
fn lookup(name_or_id: &str) -> Result<Record, NetError> {
    Ok(state::find(&dirs::state_dir().map_err(SandboxError::from)?, name_or_id)
        .map_err(SandboxError::from)?)
}

/// The record of a sandbox whose helper can take requests: it exists, is not dead or
/// still booting, and its helper lives. A parked sandbox is brought back first, as for
/// any command aimed at it.
async fn with_helper(name_or_id: &str) -> Result<Record, NetError> {
    let record = crate::sandbox::park::unpark_if_parked(name_or_id).await?;
    match SandboxInfo::of(&record).state {
        SandboxState::Dead => return Err(SandboxError::Dead(record.name).into()),
        SandboxState::Starting => return Err(SandboxError::Starting(record.name).into()),
        SandboxState::Running | SandboxState::Paused | SandboxState::Parked | SandboxState::Stopped => {}
    }
    match record.net_helper {
        Some(p) if p.is_alive() => Ok(record),
        Some(_) => Err(NetError::HelperDead { name: record.name }),
        None => Err(NetError::NoHelper { name: record.name }),
    }
}

async fn ask<T: serde::de::DeserializeOwned>(record: &Record, req: &Request) -> Result<T, NetError> {
    let ctl = config::ctl_path(&record.paths.dir);
    control::call(&ctl, req).await.map_err(|e| match e {
        // The pid lived a moment ago; a helper that cannot be reached has died since.
        ControlError::Connect { .. } => NetError::HelperDead { name: record.name.clone() },
        e => e.into(),
    })
}

/// A port just published, and whether something in the guest listens on it yet.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Publication {
    /// Where it is published.
    #[serde(flatten)]
    pub port: PublishedPort,
    /// True when a connection to the guest port succeeded just now; false when nothing
    /// listens there yet (the port stays published and works once a server listens);
    /// absent when the sandbox is paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listening: Option<bool>,
}

/// Asks the helper of `record` to publish `spec`, and records the port in atoll's own
/// record as asked ([`config::NetAuthority::record_published`]): the capability behind
/// `atoll port publish` and the MCP tools.
async fn publish_recorded(record: &Record, spec: PortSpec) -> Result<PublishedPort, NetError> {
    let port: PublishedPort = ask(record, &Request::Publish { spec }).await?;
    config::NetAuthority::record_published(&record.paths.dir, &spec, port.host_port)?;
    Ok(port)
}

/// Publishes a guest port of the sandbox on the host.
pub async fn publish(name_or_id: &str, spec: PortSpec) -> Result<Publication, NetError> {
    let record = with_helper(name_or_id).await?;
    let port = publish_recorded(&record, spec).await?;
    let listening = listens(&record, port.guest_port).await;
    Ok(Publication { port: port.named(&record.name), listening })
}

/// The publication of `guest_port`, publishing it on an ephemeral loopback port first if
/// it is not published (what `sandbox_preview_url` does).
pub async fn ensure_published(name_or_id: &str, guest_port: u16) -> Result<Publication, NetError> {
    let record = with_helper(name_or_id).await?;
    let ports: Vec<PublishedPort> = ask(&record, &Request::Ports).await?;
    let port = match ports.into_iter().find(|p| p.guest_port == guest_port) {
        Some(p) => p,
        None => {
            let spec = PortSpec { guest_port, host_port: None, bind: spec::DEFAULT_BIND };
            publish_recorded(&record, spec).await?
        }
    };
    let listening = listens(&record, guest_port).await;
    Ok(Publication { port: port.named(&record.name), listening })
}

/// Stops publishing a guest port; connections through it are closed. atoll's own
/// record drops the port first, so it is not published again by a later unpark or
/// restore even when the helper does not answer.
pub async fn unpublish(name_or_id: &str, guest_port: u16) -> Result<PublishedPort, NetError> {
    let record = with_helper(name_or_id).await?;
    config::NetAuthority::record_unpublished(&record.paths.dir, guest_port)?;
    ask(&record, &Request::Unpublish { guest_port }).await
}

/// A sandbox's published ports, and whether anything listens on them now.
#[derive(Debug, Clone, Serialize)]
pub struct PortList {
    /// The ports, as published.
    pub ports: Vec<PublishedPort>,
    /// The sandbox is parked: no process listens on its host ports until it is
    /// resumed (any command or `resume` brings it back, and them with it).
    pub parked: bool,
}

/// The sandbox's published ports.
pub async fn ports(name_or_id: &str) -> Result<PortList, NetError> {
    let record = lookup(name_or_id)?;
    if record.parked {
        // Listed without waking it, from atoll's own record: they are published again,
        // as listed, when it comes back.
        let ports = config::NetAuthority::own_ports(&record.paths.dir);
        return Ok(PortList {
            ports: ports.into_iter().map(|p| p.named(&record.name)).collect(),
            parked: true,
        });
    }
    let record = with_helper(name_or_id).await?;
    let ports: Vec<PublishedPort> = ask(&record, &Request::Ports).await?;
    Ok(PortList { ports: ports.into_iter().map(|p| p.named(&record.name)).collect(), parked: false })
}

/// Whether a connection to `guest_port` on the guest's loopback succeeds now (the probe
/// connection is closed at once); `None` for a paused sandbox, which is not woken for it.
async fn listens(record: &Record, guest_port: u16) -> Option<bool> {
    if record.paused {
        return None;
    }
    let addr = crate::sandbox::agent_address(record);
    let Ok(client) = Client::connect(&addr, std::time::Duration::from_secs(5)).await else {
        return Some(false);
    };
    let (probe, other_end) = tokio::io::duplex(64);
    drop(other_end);
    Some(client.forward_port(guest_port, probe).await.is_ok())
}
