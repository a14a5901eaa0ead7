//! Snapshots: saving a sandbox (memory, devices, disk) under a name, listing and
//! removing them, starting new sandboxes from one (forks), and putting a sandbox back
//! to one. The QEMU side is in [`crate::vmm::migrate`], the files in
//! [`crate::vmm::snapfile`], the steps shared with parking in `machine`.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::control::{live, stop_processes};
use super::network::lifecycle::RestoredNet;
use super::{SandboxError, SandboxInfo, machine};
use crate::vmm::snapfile::{self, Snapshot, SnapshotMeta, Staging};
use crate::vmm::state::{self, Record, StateLock};
use crate::vmm::template::{self, Template};
use crate::vmm::{dirs, now_unix_ms};

/// How long a VM that was saved gets to run on with its agent answering.
const RUN_ON_LIMIT: Duration = Duration::from_secs(60);
/// How long QEMU's threads get to stop when a paused sandbox is paused again.
const FREEZE_GRACE: Duration = Duration::from_secs(5);

/// What `atoll snapshot ls` and the MCP tools report about a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotInfo {
    /// Its name.
    pub name: String,
    /// The sandbox it was taken from (its name then).
    pub source_sandbox: String,
    /// That sandbox's id.
    pub source_id: String,
    /// Its template.
    pub template: String,
    /// Guest memory.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// Bytes on disk: the blocks its files take (device state, guest RAM without its
    /// zero pages, disk overlay).
    pub size_bytes: u64,
    /// When it was taken (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Seconds since then.
    pub age_secs: u64,
    /// Which face made it: `None` for the CLI, else the MCP identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

impl SnapshotInfo {
    fn of(snap: &Snapshot) -> SnapshotInfo {
        let m = &snap.meta;
        SnapshotInfo {
            name: m.name.clone(),
            source_sandbox: m.source_name.clone(),
            source_id: m.source_id.clone(),
            template: m.template.clone(),
            memory_mib: m.memory_mib,
            cpus: m.cpus,
            size_bytes: snap.size_on_disk(),
            created_unix_ms: m.created_unix_ms,
            age_secs: u64::try_from((now_unix_ms() - m.created_unix_ms) / 1000).unwrap_or(0),
            created_by: m.created_by.clone(),
        }
    }
}

/// How to take a snapshot.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SnapshotOptions {
    /// Its name; `None`: `<sandbox>-<unix seconds>`.
    pub name: Option<String>,
    /// Remove the sandbox once saved, instead of letting it run on.
    pub stop: bool,
    /// Who asks, recorded in the snapshot: `None` for the CLI, else the MCP identity.
    pub created_by: Option<String>,
}

/// Saves sandbox `name_or_id` as a named snapshot: its memory, device state and disk.
/// The sandbox runs on (a paused one stays paused) unless `stop`, which removes it once
/// the snapshot is safe. A parked sandbox is brought back first. Connections to its
/// agent open meanwhile are reset.
pub async fn create(name_or_id: &str, opts: &SnapshotOptions) -> Result<SnapshotInfo, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = live(&state, name_or_id)?;
    // At most its memory and its disk as stored (what `save_into` stages room for).
    let disk = record.paths.overlay.as_ref().and_then(|o| std::fs::metadata(o).ok()).map_or(0, |m| m.len());
    let need = (u64::from(record.memory_mib) << 20) + disk;
    super::quota::check_snapshot(&state, need).map_err(SandboxError::Quota)?;
    if record.parked {
        // As any command aimed at a parked sandbox, this brings it back first.
        super::park::unpark(&mut record).await?;
    }
    let name = opts.name.clone().unwrap_or_else(|| format!("{}-{}", record.name, now_unix_ms() / 1000));
    if !template::is_plain_name(&name) {
        return Err(SandboxError::BadSnapshotName(name));
    }
    let target = snapfile::named_dir(&state).join(&name);
    if target.exists() {
        return Err(SandboxError::SnapshotExists(name));
    }
    let tpl = template::load(&dirs::templates_dir()?, &record.template)?;
    let by = opts.created_by.clone();
    let snap = save_into(&mut record, &target, &name, &tpl, true, !opts.stop, by).await?;
    if opts.stop {
        stop_processes(&record, false).await;
        super::control::remove_dir(&record.paths.dir)?;
    }
    Ok(SnapshotInfo::of(&snap))
}

/// Saves `record`'s VM into a snapshot at `target`; then, when `run_on`, lets the VM
/// continue (re-frozen if it was paused). `created_by` is recorded as who made it.
/// Shared with parking.
pub(super) async fn save_into(
    record: &mut Record,
    target: &Path,
    name: &str,
    tpl: &Template,
    copy_disk: bool,
    run_on: bool,
    created_by: Option<String>,
) -> Result<Snapshot, SandboxError> {
    super::mounts::refuse_snapshot(record)?;
    let overlay = record.paths.overlay.as_ref().filter(|_| copy_disk);
    let disk_bytes = overlay.and_then(|o| std::fs::metadata(o).ok()).map_or(0, |m| m.len());
    let need = (u64::from(record.memory_mib) << 20) + disk_bytes;
    let staging = Staging::new(target, need)?;
    let was_paused = record.paused;
    if let Some(qemu) = record.qemu {
        qemu.thaw();
    }
    let saved = machine::save(record, &staging, copy_disk).await;
    // The copy (out of QEMU's sight) must name only the template's image: a taken-over
    // QEMU writes its own overlay's header, and a snapshot of it would be refused later.
    let saved = saved.and_then(|saved| match overlay {
        Some(_) => {
            let base = template_image(name, tpl)?;
            crate::vmm::qcow2::check_backing(&staging.disk(), base)
                .map(|()| saved)
                .map_err(|source| SandboxError::AlteredSandboxDisk { name: record.name.clone(), source })
        }
        None => Ok(saved),
    });
    let committed = match saved {
        Ok(saved) => {
            // The guest is stopped: its open connections are what a restore resets.
            let network = crate::sandbox::network::lifecycle::for_snapshot(&record.paths.dir).await;
            let meta = SnapshotMeta {
                format: snapfile::FORMAT,
                name: name.to_string(),
                source_id: record.id.clone(),
                source_name: record.name.clone(),
                template: record.template.clone(),
                template_fingerprint: snapfile::fingerprint(tpl),
                memory_mib: record.memory_mib,
                cpus: record.cpus,
                accel: record.accel.clone(),
                qemu_version: saved.qemu_version,
                programs: snapfile::programs_fingerprint(),
                created_unix_ms: now_unix_ms(),
                memory_bytes: 0,
                disk: overlay.is_some(),
                network,
                created_by,
            };
            staging.commit(meta, false).map_err(SandboxError::from)
        }
        Err(e) => Err(e),
    };
    if run_on || committed.is_err() {
        let back = machine::run_on(record, RUN_ON_LIMIT).await;
        if was_paused && let Some(qemu) = record.qemu {
            qemu.freeze(FREEZE_GRACE).await;
        }
        if let Err(e) = back {
            return Err(match committed {
                Ok(snap) => SandboxError::Revive {
                    name: record.name.clone(),
                    reason: format!(
                        "the snapshot `{}` was saved, but the sandbox did not run on: {e}",
                        snap.meta.name
                    ),
                },
                Err(first) => first,
            });
        }
    }
    committed
}

/// Every named snapshot, by name. Damaged ones are left out with a warning.
pub fn list() -> Result<Vec<SnapshotInfo>, SandboxError> {
    let state = dirs::state_dir()?;
    let mut out = Vec::new();
    for snap in snapfile::list(&state) {
        match snap {
            Ok(s) => out.push(SnapshotInfo::of(&s)),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    Ok(out)
}

/// Removes named snapshots. Every name is checked first, so a typo removes nothing;
/// a damaged snapshot can be removed too.
pub async fn remove(names: &[String]) -> Result<Vec<String>, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let dirs: Vec<_> = names
        .iter()
        .map(|n| {
            let dir = snapfile::named_dir(&state).join(n);
            if template::is_plain_name(n) && dir.is_dir() {
                Ok(dir)
            } else {
                Err(snapfile::SnapFileError::NotFound(n.clone()))
            }
        })
        .collect::<Result<_, _>>()?;
    for dir in &dirs {
        super::control::remove_dir(dir)?;
    }
    Ok(names.to_vec())
}

/// The allow rules a sandbox started from named snapshot `name` would run under (a fork
/// or a restore takes the snapshot's egress policy), so that a face can check them
/// against what its caller may open before anything starts.
pub fn egress_allowed(name: &str) -> Result<Vec<atoll_net::policy::Rule>, SandboxError> {
    let dir = snapfile::named_dir(&dirs::state_dir()?).join(name);
    if !template::is_plain_name(name) || !dir.is_dir() {
        return Err(snapfile::SnapFileError::NotFound(name.to_string()).into());
    }
    let snap = snapfile::open(&dir)?;
    Ok(snap.meta.network.map(|n| n.policy.allow_out).unwrap_or_default())
}

/// Opens named snapshot `name` and checks that it can start here: its template is
/// installed and unchanged.
pub(super) fn open_named(state: &Path, name: &str) -> Result<(Snapshot, Template), SandboxError> {
    let dir = snapfile::named_dir(state).join(name);
    if !template::is_plain_name(name) || !dir.is_dir() {
        return Err(snapfile::SnapFileError::NotFound(name.to_string()).into());
    }
    let snap = snapfile::open(&dir)?;
    let tpl = usable(&snap)?;
    Ok((snap, tpl))
}

/// The template `snap` needs, when it is installed and unchanged since.
pub(super) fn usable(snap: &Snapshot) -> Result<Template, SandboxError> {
    let incompatible = |why: String| SandboxError::Incompatible { snapshot: snap.meta.name.clone(), why };
    let tpl = template::load(&dirs::templates_dir()?, &snap.meta.template)
        .map_err(|e| incompatible(format!("its template is not usable: {e}")))?;
    if snapfile::fingerprint(&tpl) != snap.meta.template_fingerprint {
        return Err(incompatible(format!(
            "template `{}` was rebuilt since it was taken; take a new snapshot",
            tpl.name
        )));
    }
    let accel = crate::vmm::launcher::probe_accel();
    if accel.as_str() != snap.meta.accel {
        return Err(incompatible(format!(
            "it was taken under {}, this host runs {}",
            snap.meta.accel,
            accel.as_str()
        )));
    }
    Ok(tpl)
}

/// Puts sandbox `name_or_id` back to snapshot `snap_name`: its VM is replaced by one
/// restored from the snapshot (memory, processes and disk); its name and id stay. The
/// snapshot is checked before anything is stopped.
pub async fn restore(
    name_or_id: &str,
    snap_name: &str,
    timeout: Duration,
) -> Result<SandboxInfo, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = state::find(&state, name_or_id)?;
    // A create (or fork) still at work on it owns its VM: the first sandbox of a shape is
    // saved as the template snapshot once booted, and a restore slipped in before that
    // would make the snapshot's memory and disk every later sandbox's of that shape.
    if !record.ready && !record.is_abandoned() {
        return Err(SandboxError::Starting(record.name));
    }
    let (snap, tpl) = open_named(&state, snap_name)?;
    // Its VM is replaced by one of the snapshot's size: judged as a start next to the
    // others (a parked sandbox, which counts for nothing, would otherwise come back past
    // the quotas, and a small one grow into a large snapshot's memory).
    // Its disk is replaced by the snapshot's, at that disk's full size.
    let disk_bytes = snap
        .disk()
        .filter(|_| record.paths.overlay.is_some())
        .and_then(|d| super::quota::usage::qcow2_virtual_size(&d))
        .unwrap_or(0);
    let ask = super::quota::Ask {
        memory_mib: snap.meta.memory_mib,
        cpus: snap.meta.cpus,
        disk_bytes,
        ram_copy_bytes: super::quota::ram_copy_bytes(&snap.ram()),
    };
    let admitted = super::quota::check(&state, ask, Some(&record.id)).map_err(SandboxError::Quota)?;
    if snap.meta.disk != record.paths.overlay.is_some() {
        return Err(SandboxError::Incompatible {
            snapshot: snap.meta.name.clone(),
            why: format!(
                "its template `{}` does not match the sandbox's `{}`",
                snap.meta.template, record.template
            ),
        });
    }
    // A disk that would make QEMU open another file is refused while the sandbox still
    // runs as it was.
    let disk = snap.disk().filter(|_| record.paths.overlay.is_some());
    if let Some(disk) = &disk {
        check_snapshot_disk(&snap, disk, &tpl)?;
    }
    // The sandbox keeps its published ports (at the same host ports); the network and
    // the policy are the snapshot's.
    let net = RestoredNet::of(snap.meta.network.as_ref()).with_own_ports(&record.paths.dir);
    stop_processes(&record, false).await;
    let _ = std::fs::remove_dir_all(record.paths.parked());
    record.net_helper = None;
    record.secret_runner = None;
    record.qemu = None;
    record.paused = false;
    record.parked = false;
    record.template = snap.meta.template.clone();
    record.memory_mib = snap.meta.memory_mib;
    record.cpus = snap.meta.cpus;
    record.disk_reserved = disk_bytes;
    record.ram_copy = ask.ram_copy_bytes;
    record.save()?;
    if let (Some(disk), Some(overlay)) = (disk, &record.paths.overlay) {
        copy_snapshot_disk(&snap, &disk, overlay, &tpl)?;
    }
    let mut persist = |r: &Record| Ok(r.save()?);
    if let Err(e) = machine::bring_up(admitted, &mut record, &mut persist, &snap, &tpl, &net, timeout).await {
        // Nothing half-running is left: the sandbox shows as dead and `atoll kill` removes it.
        stop_processes(&record, true).await;
        return Err(e);
    }
    Ok(SandboxInfo::of(&record))
}

/// Refuses a snapshot's disk whose qcow2 header names any backing file but `tpl`'s
/// image read as `raw` (or an external data file): QEMU would open whatever it names.
pub(super) fn check_snapshot_disk(snap: &Snapshot, disk: &Path, tpl: &Template) -> Result<(), SandboxError> {
    let base = template_image(&snap.meta.name, tpl)?;
    crate::vmm::qcow2::check_backing(disk, base)
        .map_err(|source| SandboxError::AlteredSnapshot { snapshot: snap.meta.name.clone(), source })
}

/// Copies snapshot `snap`'s checked disk to `overlay` and checks the copy too: it is
/// what QEMU opens.
pub(super) fn copy_snapshot_disk(
    snap: &Snapshot,
    disk: &Path,
    overlay: &Path,
    tpl: &Template,
) -> Result<(), SandboxError> {
    machine::copy_file(disk, overlay)?;
    check_snapshot_disk(snap, overlay, tpl)
}

/// The image `tpl`'s disks are backed by; `snapshot` names the snapshot (or parked
/// sandbox) that needs one.
pub(super) fn template_image<'a>(snapshot: &str, tpl: &'a Template) -> Result<&'a Path, SandboxError> {
    tpl.rootfs.as_deref().ok_or_else(|| SandboxError::Incompatible {
        snapshot: snapshot.to_string(),
        why: format!("it has a disk but template `{}` has no disk image", tpl.name),
    })
}
