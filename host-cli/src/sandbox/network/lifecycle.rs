//! The helper's part in a sandbox's life: `atoll create` starts it (atoll binds the
//! sockets QEMU connects to first and hands them to it: `jail::wire`) and waits until its
//! control socket exists; `atoll kill` stops it. Its pid is in the sandbox record. A guest restored from a
//! snapshot (a fork, a restore, a parked sandbox brought back) gets a new helper the
//! same way ([`RestoredNet`]), and a snapshot records what it needs
//! ([`for_snapshot`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::config::{self, NetConfig};
use super::spec::NetworkMode;
use crate::sandbox::quota::Admission;
use crate::vmm::process::ProcRef;

/// How long the helper may take to be ready.
const READY_WAIT: Duration = Duration::from_secs(10);
/// How long it gets after SIGTERM.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why the helper did not come up.
#[derive(Debug, thiserror::Error)]
pub enum HelperStartError {
    /// This program's own path is unknown.
    #[error("could not find the atoll program to start its network helper")]
    OwnPath(#[source] std::io::Error),
    /// It would not start.
    #[error(transparent)]
    Spawn(#[from] crate::jail::JailError),
    /// `net.json` could not be written.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// It exited or never made its control socket.
    #[error("the network helper did not come up ({why}); its log says: {log}")]
    NotReady {
        /// What happened.
        why: String,
        /// The end of its log.
        log: String,
    },
}

/// Writes `net.json` for `network` and `policy` and starts `atoll net-helper` for the
/// sandbox in `dir` (through the jail, which takes the quotas' `admitted` for this
/// start); the caller records the child, then waits with [`wait_ready`].
pub fn spawn(
    admitted: &Admission,
    dir: &Path,
    network: NetworkMode,
    policy: &atoll_net::policy::Policy,
) -> Result<crate::jail::JailedHelper, HelperStartError> {
    spawn_with(admitted, dir, &NetConfig { network, policy: policy.clone(), ..NetConfig::default() })
}

/// Writes `config` as `net.json` (its ports are published afterwards, through the
/// helper) and starts `atoll net-helper` for the sandbox in `dir`, in its jail. The
/// sockets QEMU connects to are listening when this returns (`jail::wire`): QEMU may
/// start before the helper is ready.
pub fn spawn_with(
    admitted: &Admission,
    dir: &Path,
    config: &NetConfig,
) -> Result<crate::jail::JailedHelper, HelperStartError> {
    // Its own directory and `net.json` are the helper's user's (`atoll` when atoll is
    // root), made before it starts.
    let owner = crate::jail::user::for_helper().map_err(|e| HelperStartError::Spawn(e.into()))?;
    config::clear_stale(dir)
        .map_err(|source| config::ConfigError::Stale { path: config::net_dir(dir), source })?;
    // A new helper has published nothing: the ports atoll asks of it are recorded one by
    // one as it takes them ([`publish_at_create`]).
    config::NetAuthority::starting(config.network, config.policy.clone()).save(dir)?;
    NetConfig { ports: Vec::new(), ..config.clone() }.save_for_helper(dir, owner)?;
    let exe = std::env::current_exe().map_err(HelperStartError::OwnPath)?;
    let args = ["net-helper".to_string(), "--dir".to_string(), dir.display().to_string()];
    let network = config.network == NetworkMode::Default;
    Ok(crate::jail::start_helper(admitted, &exe, &args, dir, &config::helper_log_path(dir), network)?)
}

/// Waits until the helper's control socket exists.
pub async fn wait_ready(child: &mut crate::jail::JailedHelper, dir: &Path) -> Result<(), HelperStartError> {
    let deadline = Instant::now() + READY_WAIT;
    let ctl = config::ctl_path(dir);
    let failed = |why: String| HelperStartError::NotReady {
        why,
        log: crate::vmm::launcher::tail(&config::helper_log_path(dir), 10),
    };
    loop {
        if ctl.exists() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!("it exited with {status}")));
        }
        if Instant::now() >= deadline {
            return Err(failed(format!("no control socket after {} s", READY_WAIT.as_secs())));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Stops the helper: SIGTERM (it removes its sockets), SIGKILL after a grace, or at
/// once with `force`; its jail's watcher follows it, and so does its secrets `runner`
/// (it ends when the helper's end of their pair closes, and is killed if it has not
/// within the grace).
pub async fn stop(helper: Option<ProcRef>, runner: Option<ProcRef>, force: bool) {
    if let Some(p) = helper {
        let monitor = crate::jail::monitor_of(&p);
        if force {
            p.kill().await
        } else {
            p.terminate(STOP_GRACE).await
        }
        crate::jail::end_monitor(monitor).await;
    }
    if let Some(r) = runner
        && !r.wait_gone(STOP_GRACE).await
    {
        r.kill().await;
    }
}

/// Publishes `ports` through the helper of the sandbox in `dir`, which is still being
/// created, each recorded in atoll's own record as asked
/// ([`config::NetAuthority::record_published`]); the first refusal is returned (and
/// `atoll create` undoes everything).
pub async fn publish_at_create(
    dir: &Path,
    ports: &[super::PortSpec],
) -> Result<(), crate::sandbox::SandboxError> {
    for spec in ports {
        let failed =
            |reason: String| crate::sandbox::SandboxError::Publish { guest_port: spec.guest_port, reason };
        let req = super::control::Request::Publish { spec: *spec };
        let port = super::control::call::<super::PublishedPort>(&config::ctl_path(dir), &req)
            .await
            .map_err(|e| failed(e.to_string()))?;
        config::NetAuthority::record_published(dir, spec, port.host_port)
            .map_err(|e| failed(e.to_string()))?;
    }
    Ok(())
}

/// What the helper of a guest restored from a snapshot runs with.
#[derive(Debug, Clone)]
pub struct RestoredNet {
    /// The network, policy and stale connections (see [`NetConfig::stale_flows`]).
    pub config: NetConfig,
    /// Ports to publish.
    pub ports: Vec<super::PortSpec>,
    /// Whether a port that cannot be published fails the restore (a fork's `--publish`)
    /// or is only warned about (a sandbox's own ports, put back at their host ports).
    pub ports_required: bool,
}

impl RestoredNet {
    /// The helper of a guest restored from a snapshot taken with `saved` (`None`: the
    /// guest had no NIC), with no ports.
    pub fn of(saved: Option<&crate::vmm::snapfile::SnapshotNet>) -> RestoredNet {
        let config = match saved {
            Some(s) => NetConfig {
                network: NetworkMode::Default,
                policy: s.policy.clone(),
                stale_flows: s.open_flows.clone(),
                ..NetConfig::default()
            },
            None => NetConfig { network: NetworkMode::None, ..NetConfig::default() },
        };
        RestoredNet { config, ports: Vec::new(), ports_required: false }
    }

    /// The same, publishing again the ports `dir`'s sandbox has now, at their host
    /// ports and bind addresses (read before its helper is replaced) as atoll recorded
    /// them ([`config::NetAuthority::own_ports`]), never as the helper's `net.json`
    /// says: a helper taken over by its guest writes that one.
    pub fn with_own_ports(mut self, dir: &Path) -> RestoredNet {
        self.ports = config::NetAuthority::own_ports(dir)
            .iter()
            .map(|p| super::PortSpec { guest_port: p.guest_port, host_port: Some(p.host_port), bind: p.bind })
            .collect();
        self
    }
}

/// Publishes `net`'s ports through the helper of the restored guest in `dir`, which
/// [`spawn_with`] started with `net.config` before its QEMU.
pub async fn publish_restored(dir: &Path, net: &RestoredNet) -> Result<(), crate::sandbox::SandboxError> {
    for spec in &net.ports {
        match publish_at_create(dir, std::slice::from_ref(spec)).await {
            Ok(()) => {}
            Err(e) if net.ports_required => return Err(e),
            Err(e) => tracing::warn!("{e}; the port is no longer published"),
        }
    }
    Ok(())
}

/// What a snapshot of the sandbox in `dir`, whose guest is stopped, records of its
/// network: `None` without a NIC; else its policy and the guest's open connections (a
/// helper that does not answer gives none, with a warning: a restored guest then
/// resets only the connections it writes to).
pub async fn for_snapshot(dir: &Path) -> Option<crate::vmm::snapfile::SnapshotNet> {
    // atoll's own record, not the helper's `net.json` (a helper taken over by its guest
    // writes that one).
    let config = config::NetAuthority::load(dir).ok()?;
    if config.network != NetworkMode::Default {
        return None;
    }
    let req = super::control::Request::Flows;
    let open_flows = match super::control::call(&config::ctl_path(dir), &req).await {
        Ok(flows) => flows,
        Err(e) => {
            tracing::warn!("could not list the guest's open connections for the snapshot: {e}");
            Vec::new()
        }
    };
    Some(crate::vmm::snapfile::SnapshotNet { policy: config.policy, open_flows })
}
