//! The host's use-cases: what a sandbox can be asked to do, written once under both
//! faces (the `atoll` subcommands in [`crate::cmd`] and the MCP tools in [`crate::mcp`]).
//! Plain library functions that return serde-serializable structs and know nothing of
//! clap or MCP; they call [`crate::vmm`] (QEMU, processes, state files) and
//! [`crate::client`] (the agent), never a face.
//!
//! A new capability (network policy, published ports, snapshots, mounts) is one module
//! here, with a thin CLI command in `cmd/` and a thin MCP tool in `mcp/tools/` on top.
//!
//! - [`mod@create`]: [`create()`], booting a sandbox and undoing everything on failure.
//! - [`control`]: [`pause()`], [`resume()`], [`remove()`], [`inspect()`] and [`resolve()`].
//! - [`snapshot`]: named snapshots (create, list, remove, restore a sandbox to one);
//!   `fork` starts a sandbox from one (`atoll create --from`); [`park`]: `atoll pause
//!   --to-disk` and bringing a parked sandbox back; `machine`: the save, run-on and
//!   restore steps they share; `own`: a restored guest made a machine of its own
//!   (clock, hostname, randomness); [`template_snap`]: a plain `atoll create` restoring its
//!   template's snapshot instead of booting, and making one ahead (`atoll template
//!   snapshot`).
//! - [`metrics`]: CPU, memory, disk, network and uptime (`atoll stats`).
//! - [`run_code`]: a snippet run by python3, node or sh (MCP `sandbox_run_code`).
//! - [`save_template`]: a sandbox's disk as a new template (`atoll template save`).
//! - [`files`]: reading a guest file into memory, with its size, under a cap.
//! - [`mounts`]: host folders (`--mount`) and the disk size (`--disk`): parsing, checks,
//!   which folders MCP clients may share.
//! - [`mode`]: the one rule for permission modes given as octal text.
//! - [`target`]: which agent a call goes to ([`Target`]), for both faces.
//! - [`network`]: the sandbox's network and published ports: its helper process
//!   (`atoll net-helper`), the egress policy, the audit log.
//! - [`list()`] and [`get()`], and [`SandboxInfo`], what both faces report about one.

pub mod control;
pub mod create;
pub mod files;
mod fork;
mod machine;
pub mod metrics;
pub mod mode;
pub mod mounts;
pub mod network;
mod own;
pub mod park;
pub mod quota;
pub mod run_code;
pub mod save_template;
pub mod snapshot;
pub mod target;
pub mod template_snap;

use std::path::PathBuf;

use atoll_proto::Address;
use serde::Serialize;

use crate::vmm::{dirs, launcher, process, qmp, state, template, watchdog};

pub use crate::vmm::template::DEFAULT_TEMPLATE;
pub use control::{Inspection, RemoveOptions, Removed, Resumed, inspect, pause, remove, resolve, resume};
pub use create::{CreateOptions, create};
pub use target::{Target, TargetError};

/// Why a sandbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The data or state directory.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// The template's start command or ready check failed.
    #[error(transparent)]
    Start(#[from] Box<crate::template::start::StartError>),
    /// The template.
    #[error(transparent)]
    Template(#[from] template::TemplateError),
    /// The state records.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// Starting QEMU.
    #[error(transparent)]
    Launch(#[from] launcher::LaunchError),
    /// QEMU's jail would not start it.
    #[error(transparent)]
    Jail(#[from] crate::jail::JailError),
    /// Talking to QEMU.
    #[error(transparent)]
    Qmp(#[from] qmp::QmpError),
    /// Starting the network helper, or publishing a port at create.
    #[error(transparent)]
    NetHelper(#[from] crate::sandbox::network::lifecycle::HelperStartError),
    /// A port asked for at create could not be published.
    #[error("could not publish guest port {guest_port}: {reason}")]
    Publish {
        /// The guest port.
        guest_port: u16,
        /// Why.
        reason: String,
    },
    /// A host folder or disk size refused.
    #[error(transparent)]
    Mount(#[from] mounts::MountError),
    /// Memory or CPU count out of range.
    #[error("{0}")]
    BadResources(String),
    /// A host quota would be passed ([`quota`]).
    #[error("{0}")]
    Quota(String),
    /// QEMU exited while the guest booted.
    #[error("the VM exited while booting ({status}); QEMU said: {qemu_log}\nlast console lines:\n{console}")]
    BootExited {
        /// How QEMU ended.
        status: String,
        /// The end of QEMU's own log.
        qemu_log: String,
        /// The end of the guest console.
        console: String,
    },
    /// The agent did not announce itself in time.
    #[error(
        "the agent did not answer over its link within {secs} s; everything was cleaned up. Give it longer with --timeout, or check the template: one baked before atoll reached agents over the agent link has an agent that does not serve it (rebake it with rootfs/setup.sh or `atoll template build`). Last console lines:\n{console}"
    )]
    BootTimeout {
        /// The timeout.
        secs: u64,
        /// The end of the guest console.
        console: String,
    },
    /// A desktop sandbox whose agent answered but whose X session did not come up.
    #[error(
        "the desktop session did not start within the boot timeout; everything was cleaned up. Give it longer with --timeout. The guest said:\n{log}"
    )]
    DesktopNotReady {
        /// The end of the guest's session log.
        log: String,
    },
    /// QEMU stopped using CPU and answering its control socket before the agent
    /// announced itself (see [`watchdog`]).
    #[error(
        "the VM wedged while booting: QEMU used no CPU for {} s and did not answer its control socket; everything was cleaned up. QEMU said: {qemu_log}\nlast console lines:\n{console}",
        watchdog::STALL.as_secs()
    )]
    BootWedged {
        /// The end of QEMU's log.
        qemu_log: String,
        /// The end of the guest console.
        console: String,
    },
    /// QEMU is gone.
    #[error("sandbox `{0}` is dead (its VM exited); remove it with `atoll kill {0}`")]
    Dead(String),
    /// Its `atoll create` died before it finished booting; its VM was stopped.
    #[error(
        "sandbox `{0}` never finished booting: the `atoll create` that started it was stopped, so its VM \
         was stopped too; remove it with `atoll kill {0}` and create it again"
    )]
    Abandoned(String),
    /// Still booting.
    #[error("sandbox `{0}` is still booting; wait for `atoll create` to finish")]
    Starting(String),
    /// QEMU is stopped by someone else than `atoll pause`.
    #[error(
        "sandbox `{name}` is stopped: its QEMU process (pid {pid}) was stopped by a signal (SIGSTOP) \
         or a debugger, so nothing in it answers; `atoll resume {name}` continues it"
    )]
    Stopped {
        /// The sandbox.
        name: String,
        /// QEMU's pid.
        pid: u32,
    },
    /// QEMU did not stop on SIGSTOP.
    #[error("sandbox `{name}` could not be paused: its QEMU did not stop within {secs} s; it keeps running")]
    Freeze {
        /// The sandbox.
        name: String,
        /// How long it was given.
        secs: u64,
    },
    /// Resumed, but the guest clock could not be set.
    #[error("sandbox `{name}` resumed, but its clock could not be set: {reason}")]
    Clock {
        /// The sandbox.
        name: String,
        /// Why.
        reason: String,
    },
    /// The sandbox directory could not be removed.
    #[error("could not remove {}; remove it by hand", path.display())]
    RemoveDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Saving or loading a VM's state.
    #[error(transparent)]
    Migrate(#[from] crate::vmm::migrate::MigrateError),
    /// A snapshot on disk.
    #[error(transparent)]
    SnapFile(#[from] crate::vmm::snapfile::SnapFileError),
    /// A sandbox's disk names a file other than its template's image for QEMU to open.
    #[error("{0}; refusing to use it")]
    Qcow2(#[from] crate::vmm::qcow2::Qcow2Error),
    /// A snapshot's disk names a file other than its template's image for QEMU to open.
    #[error(
        "snapshot `{snapshot}` was altered (or its template moved): {source}; nothing was started from it. Remove it with `atoll snapshot rm {snapshot}` and take a new one"
    )]
    AlteredSnapshot {
        /// The snapshot.
        snapshot: String,
        /// What is wrong with its disk.
        #[source]
        source: crate::vmm::qcow2::Qcow2Error,
    },
    /// A running sandbox's disk names another file for QEMU to open: not saved.
    #[error(
        "the disk of sandbox `{name}` was altered (its QEMU may have been taken over): {source}; no snapshot was saved and it runs on. Remove it with `atoll kill {name}`"
    )]
    AlteredSandboxDisk {
        /// The sandbox.
        name: String,
        /// What is wrong with its disk.
        #[source]
        source: crate::vmm::qcow2::Qcow2Error,
    },
    /// A parked sandbox's disk was rewritten to name another file for QEMU to open.
    #[error(
        "the disk of parked sandbox `{name}` was altered while it was parked: {source}; it was not started and stays parked. Remove it with `atoll kill {name}`"
    )]
    AlteredParkedDisk {
        /// The sandbox.
        name: String,
        /// What is wrong with its disk.
        #[source]
        source: crate::vmm::qcow2::Qcow2Error,
    },
    /// A VM came back from a snapshot but its agent did not answer.
    #[error("sandbox `{name}` did not come back from its snapshot: {reason}")]
    Revive {
        /// The sandbox.
        name: String,
        /// Why.
        reason: String,
    },
    /// A file could not be copied.
    #[error("could not copy {} to {}; check free space", from.display(), to.display())]
    Copy {
        /// The source.
        from: PathBuf,
        /// The destination.
        to: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The snapshot cannot start on this host or template any more.
    #[error("snapshot `{snapshot}` cannot be used: {why}")]
    Incompatible {
        /// The snapshot.
        snapshot: String,
        /// Why.
        why: String,
    },
    /// A snapshot name that is not a plain name.
    #[error("`{0}` is not a valid snapshot name; use up to 64 letters, digits, `-`, `_` and `.`")]
    BadSnapshotName(String),
    /// The snapshot name is taken.
    #[error(
        "a snapshot named `{0}` already exists; pick another name or remove it with `atoll snapshot rm {0}`"
    )]
    SnapshotExists(String),
    /// `atoll template snapshot` while template snapshots are turned off.
    #[error(
        "template snapshots are turned off (ATOLL_TEMPLATE_SNAPSHOT=off): nothing was made; unset ATOLL_TEMPLATE_SNAPSHOT to make one"
    )]
    TemplateSnapshotsOff,
    /// The operation was interrupted (Ctrl-C) and undone.
    #[error("interrupted; everything started was cleaned up")]
    Interrupted,
}

impl SandboxError {
    /// The name asked for, when no sandbox has it.
    pub fn not_found(&self) -> Option<&str> {
        match self {
            SandboxError::State(state::StateError::NotFound(name)) => Some(name),
            _ => None,
        }
    }
}

/// A sandbox's life state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// Booting: `atoll create` has not seen the agent yet.
    Starting,
    /// The guest runs.
    Running,
    /// The whole VM is frozen (`atoll pause`).
    Paused,
    /// QEMU is stopped though atoll did not pause it (SIGSTOP, a debugger): nothing in
    /// the guest runs or answers; `atoll resume` continues it.
    Stopped,
    /// Saved to disk with QEMU ended (`atoll pause --to-disk`); any use brings it back.
    Parked,
    /// QEMU is gone, or its `atoll create` died before it was ready; `atoll kill` cleans up.
    Dead,
}

impl SandboxState {
    /// `running`, `paused`...
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Starting => "starting",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Stopped => "stopped",
            SandboxState::Parked => "parked",
            SandboxState::Dead => "dead",
        }
    }
}

/// What `atoll ls` / `atoll inspect` / the MCP tools report about a sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxInfo {
    /// Short hex id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// Template it booted from.
    pub template: String,
    /// Life state.
    pub state: SandboxState,
    /// Guest memory.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Creation time (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Seconds since creation.
    pub age_secs: u64,
    /// The agent's address, for `atoll --agent`.
    pub address: String,
    /// QEMU's pid, while it runs.
    pub qemu_pid: Option<u32>,
    /// The network helper's pid, while it runs.
    pub net_helper_pid: Option<u32>,
    /// The agent version it announced.
    pub agent_version: Option<String>,
    /// What its VM started from: `boot`, `snapshot NAME` (a fork) or `template
    /// snapshot` (restored from its template's snapshot instead of booting).
    pub started_from: String,
    /// Which face created it: `None` for the CLI, else the MCP identity.
    pub created_by: Option<String>,
    /// The sandbox directory (console.log is there).
    pub dir: PathBuf,
    /// Host folders shared into it.
    pub mounts: Vec<crate::vmm::storage::Mount>,
    /// The writable disk's size in bytes, when set at create (else the template's).
    pub disk_bytes: Option<u64>,
    /// The secrets bound to it: variable, secret name, placeholder (never a value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::secrets::Binding>,
}

impl SandboxInfo {
    /// The view of `record` now. A boot whose `atoll create` died is stopped here (see
    /// `reap_if_abandoned`), so what this calls dead runs nothing.
    pub fn of(record: &state::Record) -> SandboxInfo {
        reap_if_abandoned(record);
        let qemu_alive = record.qemu.is_some_and(|p| p.is_alive());
        let state = match (qemu_alive && !record.is_abandoned(), record.ready, record.paused) {
            _ if record.parked && !qemu_alive => SandboxState::Parked,
            (false, ..) => SandboxState::Dead,
            (true, false, _) => SandboxState::Starting,
            (true, true, true) => SandboxState::Paused,
            (true, true, false) if record.qemu.is_some_and(|p| p.is_frozen()) => SandboxState::Stopped,
            (true, true, false) => SandboxState::Running,
        };
        let alive_pid = |p: Option<process::ProcRef>| p.filter(|p| p.is_alive()).map(|p| p.pid);
        SandboxInfo {
            id: record.id.clone(),
            name: record.name.clone(),
            template: record.template.clone(),
            state,
            memory_mib: record.memory_mib,
            cpus: record.cpus,
            accel: record.accel.clone(),
            created_unix_ms: record.created_unix_ms,
            age_secs: u64::try_from((crate::vmm::now_unix_ms() - record.created_unix_ms) / 1000).unwrap_or(0),
            address: agent_address(record).to_string(),
            qemu_pid: alive_pid(record.qemu),
            net_helper_pid: alive_pid(record.net_helper),
            agent_version: record.agent_version.clone(),
            started_from: record.started_from.clone().unwrap_or_else(|| "boot".into()),
            created_by: record.created_by.clone(),
            dir: record.paths.dir.clone(),
            mounts: record.storage.mounts.clone(),
            disk_bytes: record.storage.disk_bytes,
            secrets: crate::secrets::binding::load(&record.paths.dir),
        }
    }
}

/// Ends the processes of a boot whose `atoll create` died before the agent announced
/// itself (killed, or its machine's OOM killer): nobody would finish or use that boot,
/// and its VM would otherwise run unseen, called dead. Whoever looks at the sandbox
/// next (`atoll ls`, `atoll info`, any command or tool aimed at it) does this; the
/// directory stays, with its console log, until `atoll kill`.
pub(crate) fn reap_if_abandoned(record: &state::Record) {
    if !record.is_abandoned() {
        return;
    }
    let monitors: Vec<process::ProcRef> = record.qemu.iter().filter_map(crate::jail::monitor_of).collect();
    for p in record.processes().chain(monitors).filter(process::ProcRef::is_alive) {
        tracing::info!(sandbox = %record.name, pid = p.pid, "stopping a boot whose atoll create died");
        p.kill_now();
    }
}

/// What walls this host's sandboxes run in (seccomp, namespaces, cgroup), for `atoll info`.
pub fn jail_status() -> String {
    crate::jail::describe()
}

/// The agent's address: `unix://<dir>/net/agent.sock`, the agent link that the sandbox's
/// `atoll net-helper` serves over the VM's virtio-serial port ([`crate::vmm::agent_link`]).
pub fn agent_address(record: &state::Record) -> Address {
    if record.vhost.is_some() {
        // Started by an atoll from before the agent link: its agent is on vsock, behind
        // its own vhost-device-vsock.
        let path = record.paths.dir.join("vm.vsock");
        return Address::HybridVsock { path, port: atoll_proto::limits::DEFAULT_AGENT_PORT };
    }
    Address::Unix(crate::sandbox::network::config::agent_socket_path(&record.paths.dir))
}

/// The command defaults (an image's Env, WorkingDir, User) of the template the sandbox
/// whose agent is at `addr` booted from; `None` for an address that is not a sandbox's,
/// or a template without any. Read from the operator's own files (the sandbox record and
/// the template's `template.json`), never from the guest.
pub fn command_defaults(addr: &Address) -> Option<crate::vmm::template::CommandDefaults> {
    let Address::Unix(socket) = addr else { return None };
    let dir = crate::sandbox::network::config::sandbox_dir_of_agent_socket(socket)?;
    let record: state::Record =
        serde_json::from_slice(&std::fs::read(dir.join(state::RECORD_FILE)).ok()?).ok()?;
    let template = template_defaults(&record);
    // Bound secrets add their placeholders and the TLS trust variables (docs/secrets.md).
    let secrets = crate::secrets::binding::env_defaults(dir);
    if secrets.is_empty() {
        return template;
    }
    let mut defaults = template.unwrap_or_default();
    defaults.env.extend(secrets);
    Some(defaults)
}

fn template_defaults(record: &state::Record) -> Option<crate::vmm::template::CommandDefaults> {
    if !crate::vmm::template::is_plain_name(&record.template) {
        return None;
    }
    let path = dirs::templates_dir().ok()?.join(&record.template).join("template.json");
    let file: crate::vmm::template::TemplateFile = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    file.defaults
}

/// Where `atoll mcp --http` keeps the token it makes when given none (`NAME` in the
/// state directory, which is created if missing).
pub fn state_file(name: &str) -> Result<std::path::PathBuf, SandboxError> {
    Ok(dirs::ensure_state_dir()?.join(name))
}

/// Every sandbox, oldest first.
pub fn list() -> Result<Vec<SandboxInfo>, SandboxError> {
    let state = dirs::state_dir()?;
    Ok(state::load_all(&state).iter().flatten().map(SandboxInfo::of).collect())
}

/// One sandbox, by id, name or unique id prefix.
pub fn get(name_or_id: &str) -> Result<SandboxInfo, SandboxError> {
    let state = dirs::state_dir()?;
    Ok(SandboxInfo::of(&state::find(&state, name_or_id)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::process::ProcRef;
    use crate::vmm::state::{Allocation, Paths, Record};

    #[test]
    fn a_boot_whose_creator_died_shows_dead_and_is_stopped() {
        let d = tempfile::tempdir().unwrap();
        let mut vm = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let alloc = Allocation { id: "cc000001".into(), name: "booting".into(), dir: d.path().into() };
        let paths = Paths::in_dir(d.path(), false);
        let mut r = Record::starting(alloc, "minimal".into(), 512, 1, "tcg".into(), paths);
        r.qemu = ProcRef::of(vm.id());
        assert_eq!(SandboxInfo::of(&r).state, SandboxState::Starting);
        assert!(r.qemu.unwrap().is_alive(), "a boot whose creator lives is left alone");
        // The creator is gone (a pid now running something else counts as gone).
        r.creator = r.creator.map(|p| ProcRef { start_ticks: p.start_ticks + 1, ..p });
        assert_eq!(SandboxInfo::of(&r).state, SandboxState::Dead);
        let status = vm.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "the boot was stopped");
        r.ready = true;
        r.qemu = ProcRef::of(std::process::id());
        assert_eq!(SandboxInfo::of(&r).state, SandboxState::Running);
    }
}
