//! Pausing, resuming, removing, and resolving a sandbox name to its agent's address.

use std::time::Duration;

use atoll_proto::Address;
use serde::Serialize;

use crate::client::{AgentInfo, Client};

use super::{SandboxError, SandboxInfo, SandboxState, agent_address};
use crate::vmm::qmp::{self, Qmp};
use crate::vmm::state::{self, Record, StateLock};
use crate::vmm::{dirs, now_unix_ms};

/// How long QEMU gets to quit when asked before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(5);
/// How long the vhost-device-vsock of a sandbox started by an older atoll gets after
/// SIGTERM.
const VHOST_GRACE: Duration = Duration::from_secs(2);
/// How long QEMU's threads get to stop after SIGSTOP.
const FREEZE_GRACE: Duration = Duration::from_secs(5);
/// How long to wait for the agent when setting the clock after a resume.
const AGENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Looks a sandbox up and checks that it can run guest code (it may be paused or
/// parked).
pub(super) fn live(state: &std::path::Path, name_or_id: &str) -> Result<Record, SandboxError> {
    let record = state::find(state, name_or_id)?;
    match SandboxInfo::of(&record).state {
        SandboxState::Dead if record.is_abandoned() => Err(SandboxError::Abandoned(record.name)),
        SandboxState::Dead => Err(SandboxError::Dead(record.name)),
        SandboxState::Starting => Err(SandboxError::Starting(record.name)),
        SandboxState::Running | SandboxState::Paused | SandboxState::Parked | SandboxState::Stopped => {
            Ok(record)
        }
    }
}

/// Freezes the whole VM: QEMU gets SIGSTOP, so its vCPUs, device emulation and
/// control socket all stand still, and its memory stays as it is. Pausing a paused
/// sandbox does nothing.
///
/// Not QMP `stop`: it froze a VM with a vhost-user vsock device badly (the backend
/// lost its worker thread), and SIGSTOP also stands the control socket still, which
/// makes "paused" plain to see. The guest's clock is not frozen with it, so atoll boots guests with their lockup and
/// RCU-stall detectors off (`launcher::qemu_args`).
pub async fn pause(name_or_id: &str) -> Result<SandboxInfo, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = live(&state, name_or_id)?;
    if record.parked {
        return Ok(SandboxInfo::of(&record));
    }
    let qemu = record.qemu.ok_or_else(|| SandboxError::Dead(record.name.clone()))?;
    // Recorded first: whatever stops this call half-way (Ctrl-C, a cancelled MCP call),
    // a frozen VM is never recorded as running, which guest commands would wait on
    // instead of resuming it.
    record.paused = true;
    record.save()?;
    if !qemu.freeze(FREEZE_GRACE).await {
        qemu.thaw();
        record.paused = false;
        record.save()?;
        return Err(SandboxError::Freeze { name: record.name, secs: FREEZE_GRACE.as_secs() });
    }
    Ok(SandboxInfo::of(&record))
}

/// A resumed sandbox and how far its clock was moved.
#[derive(Debug, Clone, Serialize)]
pub struct Resumed {
    /// The sandbox, now running.
    pub sandbox: SandboxInfo,
    /// How far SetTime moved the guest clock (new minus old), in milliseconds.
    pub clock_adjusted_ms: i64,
}

/// Lets QEMU run again (SIGCONT; QMP `cont` too if its CPUs were stopped some other
/// way), then sets the guest clock to the host's: the guest finds its clock moved on by
/// about the pause, give or take the emulation's drift. Resuming a running sandbox only
/// sets the clock. A parked sandbox is brought back from disk first.
pub async fn resume(name_or_id: &str) -> Result<Resumed, SandboxError> {
    super::park::unpark_if_parked(name_or_id).await?;
    let state = dirs::state_dir()?;
    let record = {
        let _lock = StateLock::lock(&state).await?;
        let mut record = live(&state, name_or_id)?;
        if let Some(qemu) = record.qemu {
            qemu.thaw();
        }
        record.paused = false;
        record.save()?;
        // Only a VM stopped through QMP (by hand, or by an older atoll) needs this; if
        // QMP fails, setting the clock below says whether the guest runs.
        if let Err(e) = cont_if_stopped(&record).await {
            tracing::warn!("sandbox `{}`: could not check its CPUs over QMP: {e}", record.name);
        }
        record
    };
    let clock_adjusted_ms = set_clock(&record).await?;
    Ok(Resumed { sandbox: SandboxInfo::of(&record), clock_adjusted_ms })
}

async fn cont_if_stopped(record: &Record) -> Result<(), qmp::QmpError> {
    let mut qmp = Qmp::connect(&record.paths.qmp_socket).await?;
    if !qmp.is_running().await? {
        qmp.execute("cont").await?;
    }
    Ok(())
}

async fn set_clock(record: &Record) -> Result<i64, SandboxError> {
    let failed = |reason: String| SandboxError::Clock { name: record.name.clone(), reason };
    let client =
        Client::connect(&agent_address(record), AGENT_TIMEOUT).await.map_err(|e| failed(e.to_string()))?;
    client.set_time(now_unix_ms()).await.map_err(|e| failed(e.to_string()))
}

/// A sandbox and, when it runs, what its agent reports.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// The sandbox.
    #[serde(flatten)]
    pub sandbox: SandboxInfo,
    /// The agent's Info, when the sandbox runs and the agent answered.
    pub agent: Option<AgentInfo>,
    /// Why `agent` is missing, when it is.
    pub agent_error: Option<String>,
    /// Its network and published ports, and whether their helper runs.
    pub network: crate::sandbox::network::NetView,
}

/// Everything about one sandbox: its record and, if it is running, its agent's Info,
/// waited for at most `timeout`. A paused sandbox is not resumed for this.
pub async fn inspect(name_or_id: &str, timeout: Duration) -> Result<Inspection, SandboxError> {
    let state = dirs::state_dir()?;
    let record = state::find(&state, name_or_id)?;
    let sandbox = SandboxInfo::of(&record);
    let (agent, agent_error) = match sandbox.state {
        SandboxState::Running => match Client::connect(&agent_address(&record), timeout).await {
            Ok(client) => match client.info().await {
                Ok(info) => (Some(info), None),
                Err(e) => (None, Some(e.to_string())),
            },
            // QEMU runs and is not stopped (else the state would say so): the guest is
            // wedged, or too busy to answer.
            Err(e) if e.is_silent() => (None, Some(format!("the VM is wedged: its QEMU runs, but {e}"))),
            Err(e) => (None, Some(e.to_string())),
        },
        other => (None, Some(format!("the sandbox is {}", other.as_str()))),
    };
    Ok(Inspection { sandbox, agent, agent_error, network: crate::sandbox::network::view_live(&record).await })
}

/// The agent address of a sandbox that can run guest code, resuming it first if it is
/// paused. Dead or still-booting sandboxes are refused with what to do.
pub async fn resolve(name_or_id: &str) -> Result<Address, SandboxError> {
    let state = dirs::state_dir()?;
    let record = live(&state, name_or_id)?;
    if let Some(qemu) = record.qemu.filter(|q| !record.paused && q.is_frozen()) {
        return Err(SandboxError::Stopped { name: record.name, pid: qemu.pid });
    }
    if record.paused || record.parked {
        match resume(&record.id).await {
            // The guest runs again; a clock left behind is worth a warning, not a refusal.
            Ok(_) => {}
            Err(e @ SandboxError::Clock { .. }) => tracing::warn!("{e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(agent_address(&record))
}

/// How `remove` behaves.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
#[serde(default)]
pub struct RemoveOptions {
    /// Remove every sandbox (the names list may then be empty).
    pub all: bool,
    /// SIGKILL at once instead of asking QEMU to quit, and skip names that do not exist.
    pub force: bool,
}

/// A removed sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The state it was in.
    pub was: SandboxState,
}

/// Stops every process of the named sandboxes (or all) and removes their directories.
/// Every name is looked up before anything is removed, so a typo removes nothing.
pub async fn remove(names: &[String], opts: RemoveOptions) -> Result<Vec<Removed>, SandboxError> {
    let state = dirs::state_dir()?;
    if !state.is_dir() {
        return match (names.first(), opts.all || opts.force) {
            (Some(n), false) => Err(state::StateError::NotFound(n.clone()).into()),
            _ => Ok(Vec::new()),
        };
    }
    let _lock = StateLock::lock(&state).await?;
    let all = state::load_all(&state);
    let mut targets: Vec<Record> = Vec::new();
    let mut stale_dirs = Vec::new();
    if opts.all {
        for entry in all {
            match entry {
                Ok(r) => targets.push(r),
                Err(dir) => stale_dirs.push(dir),
            }
        }
    }
    for name in names {
        match state::find(&state, name) {
            Ok(r) if targets.iter().any(|t| t.id == r.id) => {}
            Ok(r) => targets.push(r),
            // `--force` skips names no sandbox has; an ambiguous prefix is still refused.
            Err(state::StateError::NotFound(_)) if opts.force => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut removed = Vec::new();
    for record in targets {
        let was = SandboxInfo::of(&record).state;
        stop_processes(&record, opts.force).await;
        remove_dir(&record.paths.dir)?;
        removed.push(Removed { id: record.id, name: record.name, was });
    }
    for dir in stale_dirs {
        remove_dir(&dir)?;
    }
    Ok(removed)
}

pub(super) async fn stop_processes(record: &Record, force: bool) {
    // A sandbox still booting or being restored is killed at once: its creator may hold
    // QEMU's only control connection, so a polite `quit` would wait, and meanwhile the
    // creator could finish and report a sandbox that is about to go.
    let force = force || !record.ready;
    if let Some(qemu) = record.qemu.filter(|p| p.is_alive()) {
        let monitor = crate::jail::monitor_of(&qemu);
        // A paused QEMU neither answers QMP nor acts on SIGTERM until it runs again.
        qemu.thaw();
        let asked = !force && qmp::run(&record.paths.qmp_socket, "quit").await.is_ok();
        if !(asked && qemu.wait_gone(QUIT_GRACE).await) {
            qemu.kill().await;
        }
        crate::jail::end_monitor(monitor).await;
    }
    if let Some(vhost) = record.vhost {
        if force { vhost.kill().await } else { vhost.terminate(VHOST_GRACE).await }
    }
    crate::sandbox::network::lifecycle::stop(record.net_helper, record.secret_runner, force).await;
    crate::jail::cgroup::remove(&record.id);
}

pub(super) fn remove_dir(dir: &std::path::Path) -> Result<(), SandboxError> {
    // Its bindings and CA (no values) go with it.
    crate::secrets::binding::forget(dir);
    match crate::vmm::safe_fs::remove_tree(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SandboxError::RemoveDir { path: dir.to_path_buf(), source }),
    }
}
