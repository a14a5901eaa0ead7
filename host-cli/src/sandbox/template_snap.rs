//! Template snapshots: a plain `atoll create` restores a snapshot of its template, taken
//! right after a guest booted from it answered, instead of booting (a fraction of a
//! boot's time; the restored guest is made its own machine as a fork is).
//!
//! The first `atoll create` of a template that has none boots as usual, then saves one
//! (the new sandbox runs on). One is kept per machine shape: template, memory, vCPUs,
//! NIC or not, and accelerator (`<state>/.template-snapshots/<key>/`), since a restore
//! cannot change any of them. One that cannot be used (damaged, its template rebuilt,
//! `atoll` or QEMU changed, or its restore failed) is removed: that create boots, says
//! why with `-v`, and saves a new one. One that was altered (its disk naming another
//! file for QEMU to open, a link or FIFO in a file's place) is removed the same way,
//! before anything is started from it, and said without `-v`.
//! `ATOLL_TEMPLATE_SNAPSHOT=off` turns all of this off (always boot, save nothing).
//!
//! [`make`] (`atoll template snapshot`, also run by `atoll template build` and
//! `rootfs/setup.sh`) makes one ahead of any create: it boots a sandbox of the shape,
//! saves it, and removes it, leaving only the snapshot.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::control::{remove_dir, stop_processes};
use super::create::{Cleanup, CreateOptions};
use super::network::NetworkMode;
use super::network::config::NetConfig;
use super::network::lifecycle::RestoredNet;
use super::{SandboxError, SandboxInfo, fork, snapshot};
use crate::vmm::snapfile::{self, Snapshot};
use crate::vmm::state::{self, StateLock};
use crate::vmm::template::{self, Template};
use crate::vmm::{dirs, launcher};

/// What `atoll inspect` shows as `started_from` for such a sandbox.
const STARTED_FROM: &str = "template snapshot";

/// The directory of template snapshots.
fn root(state: &Path) -> PathBuf {
    state.join(".template-snapshots")
}

/// Whether template snapshots are used (`ATOLL_TEMPLATE_SNAPSHOT=off` says no).
pub fn enabled() -> bool {
    !matches!(std::env::var("ATOLL_TEMPLATE_SNAPSHOT").as_deref(), Ok("off" | "0" | "no"))
}

/// The options a template snapshot is keyed on or applies itself (the rest of a create's
/// options must be at their defaults for one to be used).
/// (`created_by` is who asked, recorded on the new sandbox; it does not change the machine.)
const HANDLED: [&str; 9] =
    ["template", "memory_mib", "cpus", "network", "name", "timeout", "publish", "policy", "created_by"];

/// The key of the machine `opts` asks for, or `None` when template snapshots are off or
/// `opts` asks for something a snapshot's machine may not have: any option other than
/// those in [`HANDLED`] (disks or mounts, say) set away from its default.
pub(super) fn key(opts: &CreateOptions) -> Option<String> {
    let given = serde_json::to_value(opts).ok()?;
    let default = serde_json::to_value(CreateOptions::default()).ok()?;
    let other = given
        .as_object()?
        .iter()
        .find(|(k, v)| !HANDLED.contains(&k.as_str()) && default.get(k.as_str()) != Some(*v));
    if let Some((option, _)) = other {
        tracing::info!("`{option}` is set: booting without a template snapshot");
        return None;
    }
    enabled().then(|| shape_key(opts))
}

/// The directory name of `opts`'s machine shape: template, memory, vCPUs, network and
/// accelerator.
fn shape_key(opts: &CreateOptions) -> String {
    format!(
        "{}-{}m-{}c-{}-{}",
        opts.template,
        opts.memory_mib,
        opts.cpus,
        opts.network.as_str(),
        launcher::probe_accel().as_str()
    )
}

/// Starts the sandbox `opts` asks for from the template snapshot `key`: `Ok(Some)`
/// when it did; `Ok(None)` when there is none or it cannot be used (then it is removed,
/// and the caller boots and saves a new one); `Err` for a failure that a boot would
/// meet too (a name taken, a host port in use), which leaves the snapshot alone.
pub(super) async fn try_restore(
    key: &str,
    opts: &CreateOptions,
) -> Result<Option<SandboxInfo>, SandboxError> {
    let state = dirs::ensure_state_dir()?;
    let dir = root(&state).join(key);
    if !dir.is_dir() {
        tracing::info!(
            "template `{}` has no snapshot for this machine shape yet; booting, then saving one \
             (`atoll template snapshot` makes one ahead)",
            opts.template
        );
        return Ok(None);
    }
    let (snap, tpl) = match open(&dir) {
        Ok(found) => found,
        Err(unusable) => {
            discard(&dir, &opts.template, &unusable);
            return Ok(None);
        }
    };
    let net = RestoredNet {
        config: NetConfig {
            network: opts.network,
            policy: opts.policy.clone(),
            ..RestoredNet::of(snap.meta.network.as_ref()).config
        },
        ports: opts.publish.clone(),
        ports_required: true,
    };
    match fork::start(&snap, &tpl, opts, &net, STARTED_FROM.into()).await {
        Ok(info) => Ok(Some(info)),
        Err(e) if boot_meets_it_too(&e) => Err(e),
        Err(e) => {
            let altered = matches!(e, SandboxError::AlteredSnapshot { .. });
            discard(&dir, &opts.template, &Unusable { why: format!("restoring it failed: {e}"), altered });
            Ok(None)
        }
    }
}

/// Why a template snapshot is not used.
struct Unusable {
    /// What is wrong, as a clause.
    why: String,
    /// Its files were altered (a disk naming other files for QEMU to open, a link or FIFO
    /// in a file's place): never what atoll or a full disk leaves, so said without `-v`.
    altered: bool,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// The snapshot in `dir` and its template, when both can be used here: its files as
/// [`snapfile::open`] checks them, its template unchanged, the same programs, and its
/// disk naming no file but the template's image for QEMU to open (checked before
/// anything is made for a sandbox, as for a fork).
fn open(dir: &Path) -> Result<(Snapshot, Template), Unusable> {
    let plain = |why: String| Unusable { why, altered: false };
    let snap = snapfile::open(dir).map_err(|e| Unusable {
        altered: matches!(e, snapfile::SnapFileError::NotRegular { .. }),
        why: e.to_string(),
    })?;
    let tpl = snapshot::usable(&snap).map_err(|e| plain(e.to_string()))?;
    if snap.meta.programs != snapfile::programs_fingerprint() {
        return Err(plain("atoll or QEMU changed since it was saved".into()));
    }
    if let Some(disk) = snap.disk() {
        let base = snapshot::template_image(&snap.meta.name, &tpl).map_err(|e| plain(e.to_string()))?;
        crate::vmm::qcow2::check_backing(&disk, base).map_err(|e| Unusable {
            why: format!("its disk was altered (or its template moved): {e}"),
            altered: true,
        })?;
    }
    Ok((snap, tpl))
}

/// Removes the unusable template snapshot in `dir`; the caller boots instead. An altered
/// one is warned about (the state directory's owner should know someone wrote there);
/// any other is said with `-v`.
fn discard(dir: &Path, template: &str, unusable: &Unusable) {
    if unusable.altered {
        tracing::warn!(
            "the snapshot of template `{template}` was altered and is not used ({unusable}); \
             nothing was started from it and it is removed: this create boots, then saves a new one"
        );
    } else {
        tracing::info!(
            "the snapshot of template `{template}` is not used ({unusable}); booting, then saving a new one"
        );
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::warn!("could not remove {}: {e}", dir.display());
    }
}

/// Errors about the request rather than the snapshot.
fn boot_meets_it_too(e: &SandboxError) -> bool {
    matches!(
        e,
        SandboxError::State(state::StateError::NameTaken(_) | state::StateError::BadName(_))
            | SandboxError::BadResources(_)
            | SandboxError::Quota(_)
            | SandboxError::Publish { .. }
    )
}

/// Saves sandbox `id`, just booted, answering and still `starting` (no face can reach
/// it yet), as the template snapshot `key`; then marks it ready, and it runs on. A failed
/// save is only warned about: the sandbox is fine either way. Should this future be
/// dropped halfway, the sandbox is marked ready all the same (it is the caller's).
pub(super) async fn save_after_boot(key: &str, id: &str) -> Result<SandboxInfo, SandboxError> {
    let pending = Unannounced(Some(id.to_owned()));
    if let Err(e) = save(key, id).await {
        tracing::warn!("could not save a snapshot of this template for the next atoll create: {e}");
    }
    pending.announce().await
}

/// A sandbox booted but not yet marked ready; marked when dropped, if not before.
struct Unannounced(Option<String>);

impl Unannounced {
    async fn announce(mut self) -> Result<SandboxInfo, SandboxError> {
        let id = self.0.take().unwrap_or_default();
        let state = dirs::state_dir()?;
        let lock = StateLock::lock(&state).await?;
        mark_ready_locked(&state, &id, lock)
    }
}

/// Marks a dropped create's sandbox ready on a thread of its own: the state lock may be
/// busy, and in `atoll mcp` the thread this runs on serves every call, the lock's holder
/// perhaps among them, across an await (waiting here would stop it, and the server, for
/// good). The command waits for the thread before it exits ([`finish_marking`]).
impl Drop for Unannounced {
    fn drop(&mut self) {
        let Some(id) = self.0.take() else { return };
        let mark = |id: &str| {
            if let Err(e) = mark_ready(id) {
                tracing::warn!("could not mark sandbox {id} ready: {e}");
            }
        };
        let theirs = id.clone();
        match std::thread::Builder::new().name("atoll-mark-ready".into()).spawn(move || mark(&theirs)) {
            Ok(marking) => MARKING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(marking),
            // A process out of threads marks it here, as a last resort.
            Err(_) => mark(&id),
        }
    }
}

/// The threads marking dropped creates' sandboxes ready ([`Unannounced`]'s drop).
static MARKING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Waits until every sandbox a dropped create left is marked ready: called when a
/// command's work is done, before the process exits, so none is left `starting`.
pub fn finish_marking() {
    let pending = std::mem::take(&mut *MARKING.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for marking in pending {
        let _ = marking.join();
    }
}

/// Marks sandbox `id` ready: from now on every face may reach it. Blocks for the state
/// lock: only for a dropped future's clean-up, on a thread of its own.
fn mark_ready(id: &str) -> Result<SandboxInfo, SandboxError> {
    let state = dirs::state_dir()?;
    let lock = StateLock::acquire(&state)?;
    mark_ready_locked(&state, id, lock)
}

/// [`mark_ready`] under the state lock, `_lock`.
fn mark_ready_locked(state: &Path, id: &str, _lock: StateLock) -> Result<SandboxInfo, SandboxError> {
    let mut record = state::find(state, id)?;
    record.ready = true;
    record.save()?;
    Ok(SandboxInfo::of(&record))
}

async fn save(key: &str, id: &str) -> Result<(), SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = state::find(&state, id)?;
    let tpl = template::load(&dirs::templates_dir()?, &record.template)?;
    let target = root(&state).join(key);
    if target.exists() {
        // Another create saved one meanwhile.
        return Ok(());
    }
    snapshot::save_into(&mut record, &target, key, &tpl, true, true, None).await?;
    tracing::info!("saved a snapshot of template `{}`: the next atoll create restores it", record.template);
    Ok(())
}

/// What [`make`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// There was none: one was made.
    Made,
    /// The one there is up to date: kept as it was.
    Kept,
    /// The one there could not be used (see `replaced_because`): a new one replaced it.
    Replaced,
}

impl Outcome {
    /// `made`, `kept` or `replaced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Made => "made",
            Outcome::Kept => "kept",
            Outcome::Replaced => "replaced",
        }
    }
}

/// A template snapshot, as `atoll template snapshot` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateSnapshotInfo {
    /// The template.
    pub template: String,
    /// Guest memory of the machine shape.
    pub memory_mib: u32,
    /// Guest vCPUs of the machine shape.
    pub cpus: u32,
    /// With a NIC (`default`) or without (`none`).
    pub network: NetworkMode,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Its directory.
    pub path: PathBuf,
    /// Bytes on disk (memory stream and disk).
    pub size_bytes: u64,
    /// Whether it was made, kept or replaced.
    pub outcome: Outcome,
    /// Why the one there before could not be used, when it was replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_because: Option<String>,
}

/// Makes the snapshot of template `opts.template` for the machine shape `opts` gives
/// (memory, vCPUs, network; its timeout bounds the boot), the one a plain `atoll create`
/// of that shape restores: boots a sandbox, saves it, and removes it. An up-to-date one
/// is kept; one that cannot be used is replaced. Any failure, or the future dropped,
/// leaves no sandbox, process or partial snapshot (a replaced one is gone, as a create
/// would have removed it).
pub async fn make(opts: &CreateOptions) -> Result<TemplateSnapshotInfo, SandboxError> {
    if !enabled() {
        return Err(SandboxError::TemplateSnapshotsOff);
    }
    let opts = CreateOptions {
        template: opts.template.clone(),
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        network: opts.network,
        timeout: opts.timeout,
        ..CreateOptions::default()
    };
    super::create::check_resources(&opts)?;
    let tpl = template::load(&dirs::templates_dir()?, &opts.template)?;
    let key = shape_key(&opts);
    let state = dirs::ensure_state_dir()?;
    let dir = root(&state).join(&key);
    let mut replaced_because = None;
    if dir.is_dir() {
        match open(&dir) {
            Ok((snap, _)) => return Ok(describe(&opts, &snap, Outcome::Kept, None)),
            Err(unusable) => {
                remove_dir(&dir)?;
                replaced_because = Some(unusable.why);
            }
        }
    }
    tracing::info!("booting template `{}` to save its snapshot", opts.template);
    // From here on, dropping `guard` kills the sandbox and removes its directory.
    let mut guard = Cleanup { record: super::create::boot_retrying(&opts, false).await?, armed: true };
    let lock = StateLock::lock(&state).await?;
    let snap = match open(&dir) {
        // A create of the same shape saved one meanwhile.
        Ok((snap, _)) => snap,
        Err(_) => {
            if dir.exists() {
                remove_dir(&dir)?;
            }
            snapshot::save_into(&mut guard.record, &dir, &key, &tpl, true, false, None).await?
        }
    };
    stop_processes(&guard.record, false).await;
    remove_dir(&guard.record.paths.dir)?;
    guard.disarm();
    drop(lock);
    let outcome = if replaced_because.is_some() { Outcome::Replaced } else { Outcome::Made };
    Ok(describe(&opts, &snap, outcome, replaced_because))
}

fn describe(
    opts: &CreateOptions,
    snap: &Snapshot,
    outcome: Outcome,
    replaced_because: Option<String>,
) -> TemplateSnapshotInfo {
    TemplateSnapshotInfo {
        template: snap.meta.template.clone(),
        memory_mib: snap.meta.memory_mib,
        cpus: snap.meta.cpus,
        network: opts.network,
        accel: snap.meta.accel.clone(),
        path: snap.dir.clone(),
        size_bytes: snap.size_on_disk(),
        outcome,
        replaced_because,
    }
}

/// How many template snapshots there are and the bytes they hold on disk, for `atoll
/// kill --all` to say what it leaves.
pub fn held() -> (usize, u64) {
    fn bytes(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => bytes(&e.path()),
                // Allocated blocks: a saved RAM file is sparse.
                Ok(_) => e.metadata().map_or(0, |m| std::os::unix::fs::MetadataExt::blocks(&m) * 512),
                Err(_) => 0,
            })
            .sum()
    }
    let Ok(state) = dirs::state_dir() else { return (0, 0) };
    let Ok(entries) = std::fs::read_dir(root(&state)) else { return (0, 0) };
    let dirs: Vec<PathBuf> = entries.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect();
    (dirs.len(), dirs.iter().map(|d| bytes(d)).sum())
}

/// Removes every snapshot of template `name`, for `atoll template rm`: no create could
/// use them again. Returns how many there were.
pub fn forget(name: &str) -> Result<usize, SandboxError> {
    let state = dirs::state_dir()?;
    let Ok(entries) = std::fs::read_dir(root(&state)) else {
        return Ok(0);
    };
    let _lock = StateLock::acquire(&state)?;
    let mut removed = 0;
    for entry in entries.flatten() {
        if is_key_of(&entry.file_name().to_string_lossy(), name) {
            remove_dir(&entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Whether `key` is a [`shape_key`] of template `name` (names may hold `-`, so the rest
/// must be exactly a shape: `<n>m-<n>c-<network>-<accel>`).
fn is_key_of(key: &str, name: &str) -> bool {
    let Some(shape) = key.strip_prefix(name).and_then(|rest| rest.strip_prefix('-')) else {
        return false;
    };
    let number_then = |part: &str, unit: char| {
        part.strip_suffix(unit).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(
        shape.split('-').collect::<Vec<_>>().as_slice(),
        [memory, cpus, network, accel]
            if number_then(memory, 'm') && number_then(cpus, 'c') && !network.is_empty() && !accel.is_empty()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_machine_shape_and_other_options_mean_none() {
        let opts = CreateOptions { memory_mib: 256, cpus: 2, ..CreateOptions::default() };
        let key = key(&opts).expect("a key");
        assert!(key.starts_with("minimal-256m-2c-default-"), "{key}");
        let named = CreateOptions { name: Some("x".into()), ..opts.clone() };
        assert_eq!(super::key(&named).as_deref(), Some(key.as_str()), "the name is not part of it");
        let fork = CreateOptions { from_snapshot: Some("s".into()), ..opts };
        assert_eq!(super::key(&fork), None, "an option it does not handle");
    }

    #[test]
    fn keys_are_told_apart_from_those_of_templates_with_longer_names() {
        assert!(is_key_of("minimal-512m-1c-none-tcg", "minimal"));
        assert!(is_key_of("my-tpl-1024m-2c-default-kvm", "my-tpl"));
        assert!(!is_key_of("my-tpl-1024m-2c-default-kvm", "my"), "template `my-tpl`, not `my`");
        assert!(!is_key_of("minimal2-512m-1c-none-tcg", "minimal"));
        assert!(!is_key_of(".minimal-512m-1c-none-tcg.staging-7", "minimal"));
        assert!(!is_key_of("minimal-512m-1c-none-tcg.staging-7-x", "minimal"));
    }
}
