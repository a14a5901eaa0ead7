//! `atoll create`: allocate, start the network helper (which serves the agent link),
//! start QEMU, wait until the agent answers Info over the link. Any failure, timeout
//! or cancellation (the future dropped, e.g. on Ctrl-C)
//! kills what was started and removes the sandbox directory.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{SandboxError, SandboxInfo};
use crate::vmm::launcher::{self, GuestRam, QEMU, VmSpec};
use crate::vmm::process::{ProcRef, find_in_path};
use crate::vmm::state::{self, Paths, Record, StateLock};
use crate::vmm::template::{self, DEFAULT_TEMPLATE};
use crate::vmm::{dirs, watchdog};

/// Smallest guest memory accepted.
pub const MIN_MEMORY_MIB: u32 = 128;
/// Largest guest memory accepted.
pub const MAX_MEMORY_MIB: u32 = 256 * 1024;
/// Most vCPUs accepted.
pub const MAX_CPUS: u32 = 64;

/// What to create.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CreateOptions {
    /// Template name.
    pub template: String,
    /// Sandbox name; `None`: generated.
    pub name: Option<String>,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// How long to wait for the agent.
    #[serde(with = "secs")]
    pub timeout: Duration,
    /// Whether the guest gets a NIC.
    pub network: crate::sandbox::network::NetworkMode,
    /// Guest ports to publish on the host.
    pub publish: Vec<crate::sandbox::network::PortSpec>,
    /// The egress policy (with a network).
    pub policy: atoll_net::policy::Policy,
    /// Start from this named snapshot instead of booting (a fork); its template,
    /// memory and vCPUs are the snapshot's.
    pub from_snapshot: Option<String>,
    /// Host folders to share and the disk size, already parsed by
    /// [`super::mounts`]; checked again here.
    pub storage: crate::vmm::storage::Storage,
    /// Which MCP identity creates it (`None`: the CLI); MCP tools act only on their own.
    pub created_by: Option<String>,
    /// Do not run the template's start command and ready check (a Dockerfile build VM).
    #[serde(skip)]
    pub no_start: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            template: DEFAULT_TEMPLATE.into(),
            name: None,
            memory_mib: 512,
            cpus: 1,
            timeout: Duration::from_secs(120),
            network: crate::sandbox::network::NetworkMode::Default,
            publish: Vec::new(),
            policy: atoll_net::policy::Policy::default(),
            from_snapshot: None,
            storage: Default::default(),
            created_by: None,
            no_start: false,
        }
    }
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs(u64::deserialize(d)?))
    }
}

/// Starts a sandbox and returns it once its agent answers: from the template's
/// snapshot for this machine shape when there is a usable one (see `template_snap`),
/// else by booting it, after which such a snapshot is saved.
///
/// A boot that wedges (see [`watchdog`]) is undone and tried once more, within the
/// same `timeout`.
pub async fn create(opts: &CreateOptions) -> Result<SandboxInfo, SandboxError> {
    if let Some(snapshot) = &opts.from_snapshot {
        if opts.storage != Default::default() {
            return Err(SandboxError::BadResources(
                "a fork keeps its snapshot's disk and has no host folders; leave out --mount and --disk with --from".into(),
            ));
        }
        return super::fork::create_from(snapshot, opts).await;
    }
    check_resources(opts)?;
    let key = super::template_snap::key(opts);
    if let Some(key) = &key
        && let Some(info) = super::template_snap::try_restore(key, opts).await?
    {
        return Ok(info);
    }
    // The first sandbox of a shape stays `starting` (no face lists it as usable or reaches
    // its agent) until it is saved as the template snapshot: nothing can run in it that
    // every later sandbox of that shape would inherit.
    let record = boot_retrying(opts, key.is_none()).await?;
    match &key {
        Some(key) => super::template_snap::save_after_boot(key, &record.id).await,
        None => Ok(SandboxInfo::of(&record)),
    }
}

/// Boots, and boots once more if the first wedged; returns the sandbox's record once its
/// agent answered. It is marked ready (usable by every face) only when `announce`; else
/// it stays `starting` until the caller marks it.
pub(super) async fn boot_retrying(opts: &CreateOptions, announce: bool) -> Result<Record, SandboxError> {
    let deadline = std::time::Instant::now() + opts.timeout;
    match boot(opts, opts.timeout, announce).await {
        Err(wedged @ SandboxError::BootWedged { .. }) => {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(wedged);
            }
            tracing::warn!("{wedged}\nbooting it once more");
            boot(opts, left, announce).await
        }
        other => other,
    }
}

/// One boot, given `timeout` to become ready (see [`boot_retrying`] for `announce`).
async fn boot(opts: &CreateOptions, timeout: Duration, announce: bool) -> Result<Record, SandboxError> {
    let started = std::time::Instant::now();
    let step =
        |what: &str| tracing::debug!("create: {what} at {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    check_resources(opts)?;
    if let Some(name) = opts.name.as_deref().filter(|n| !template::is_plain_name(n)) {
        return Err(state::StateError::BadName(name.to_string()).into());
    }
    let template = template::load(&dirs::templates_dir()?, &opts.template)?;
    check_disk(opts.storage.disk_bytes, opts.memory_mib, &template)?;
    if let (Some(size), None) = (opts.storage.display, template.display) {
        return Err(SandboxError::BadResources(format!(
            "--display {size} needs a template with a screen, and `{}` has none; use --template desktop",
            template.name
        )));
    }
    // Missing programs are reported before anything is allocated.
    find_in_path(QEMU).map_err(launcher::LaunchError::from)?;
    find_in_path(crate::jail::BWRAP).map_err(launcher::LaunchError::from)?;
    let accel = launcher::probe_accel();
    step("template loaded, programs found, accelerator probed");

    let state_dir = dirs::ensure_state_dir()?;
    let lock = StateLock::lock(&state_dir).await?;
    let ask = quota_ask(opts, &template);
    let admitted = super::quota::check(&state_dir, ask, None).map_err(SandboxError::Quota)?;
    let alloc = state::allocate(&state_dir, opts.name.as_deref())?;
    let paths = Paths::in_dir(&alloc.dir, template.rootfs.is_some());
    let record = Record {
        storage: opts.storage.clone(),
        disk_reserved: ask.disk_bytes,
        created_by: opts.created_by.clone(),
        ..Record::starting(
            alloc,
            template.name.clone(),
            opts.memory_mib,
            opts.cpus,
            accel.as_str().into(),
            paths.clone(),
        )
    };
    // From here on, dropping `guard` undoes everything.
    let mut guard = Cleanup { record: record.clone(), armed: true };
    guard.save()?;
    drop(lock);
    step("state allocated and saved");

    if let (Some(base), Some(overlay)) = (&template.rootfs, &paths.overlay) {
        launcher::create_overlay(base, overlay, opts.storage.disk_bytes).await?;
    }
    let mut helper_child =
        crate::sandbox::network::lifecycle::spawn(&admitted, &paths.dir, opts.network, &opts.policy)?;
    guard.set(|r| {
        r.net_helper = helper_child.id().and_then(ProcRef::of);
        r.secret_runner = helper_child.runner;
    });
    guard.save()?;
    crate::sandbox::network::lifecycle::wait_ready(&mut helper_child, &paths.dir).await?;
    crate::sandbox::network::lifecycle::publish_at_create(&paths.dir, &opts.publish).await?;
    step("network helper ready");

    let spec = VmSpec {
        id: &record.id,
        name: &record.name,
        template: &template,
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        accel,
        paths: &paths,
        network: opts.network == crate::sandbox::network::NetworkMode::Default,
        storage: &opts.storage,
        ram: GuestRam::Fresh,
    };
    let jailed = crate::jail::start_qemu(admitted, &spec, false).await?;
    let mut qemu_child = jailed.child;
    let mut qemu_log = jailed.log;
    let qemu_pid = jailed.qemu.pid;
    guard.set(|r| r.qemu = Some(jailed.qemu));
    guard.save()?;
    step("QEMU spawned");

    // Ready: the agent answered Info over its link (the helper's `agent.sock`).
    let agent = super::agent_address(&record);
    let version = tokio::select! {
        v = super::machine::wait_for_agent(&agent) => v,
        status = qemu_child.wait() => {
            return Err(SandboxError::BootExited {
                status: status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                qemu_log: qemu_log.tail(&paths.qemu_log, 5).await,
                console: launcher::tail(&paths.console_log, 20),
            });
        }
        status = helper_child.wait() => {
            let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
            return Err(crate::sandbox::network::lifecycle::HelperStartError::NotReady {
                why: format!("it exited while the VM booted ({status}); it serves the agent link"),
                log: launcher::tail(&crate::sandbox::network::config::helper_log_path(&paths.dir), 10),
            }.into());
        }
        () = watchdog::wedged(qemu_pid, &paths.qmp_socket) => {
            return Err(SandboxError::BootWedged {
                qemu_log: launcher::tail(&paths.qemu_log, 10),
                console: launcher::tail(&paths.console_log, 20),
            });
        }
        () = tokio::time::sleep(timeout) => {
            return Err(SandboxError::BootTimeout {
                secs: opts.timeout.as_secs(),
                console: launcher::tail(&paths.console_log, 20),
            });
        }
    };
    step("agent answered over its link");
    if opts.storage.display.or(template.display).is_some() {
        // A desktop is ready once its X session is (so that its template snapshot has it).
        let left = timeout.saturating_sub(started.elapsed());
        crate::desktop::wait_session(&agent, left)
            .await
            .map_err(|log| SandboxError::DesktopNotReady { log })?;
        step("desktop session ready");
    }
    crate::jail::restrict_sockets(&paths);
    // The template's start command and ready check (`template build --start
    // --ready-cmd`), before the sandbox counts as ready (and before any snapshot of it).
    if !opts.no_start {
        crate::template::start::at_boot(&record.template, &agent).await.map_err(Box::new)?;
        step("template's start command ready");
    }
    guard.set(|r| {
        r.ready = announce;
        r.agent_version = Some(version);
    });
    guard.save()?;
    step("ready state saved");
    Ok(guard.disarm())
}

pub(super) fn check_resources(opts: &CreateOptions) -> Result<(), SandboxError> {
    if !(MIN_MEMORY_MIB..=MAX_MEMORY_MIB).contains(&opts.memory_mib) {
        return Err(SandboxError::BadResources(format!(
            "--memory {} MiB is out of range; give {MIN_MEMORY_MIB} to {MAX_MEMORY_MIB} MiB",
            opts.memory_mib
        )));
    }
    if !(1..=MAX_CPUS).contains(&opts.cpus) {
        return Err(SandboxError::BadResources(format!(
            "--cpus {} is out of range; give 1 to {MAX_CPUS}",
            opts.cpus
        )));
    }
    if opts.timeout.is_zero() {
        return Err(SandboxError::BadResources("--timeout must be more than 0 s".into()));
    }
    super::mounts::check(&opts.storage.mounts)?;
    // Shares no unprivileged QEMU can serve are refused before anything is made.
    crate::jail::user::for_qemu(&opts.storage, crate::jail::shares::path_owner)
        .map_err(crate::jail::JailError::from)?;
    if let Some(bytes) = opts.storage.disk_bytes
        && !(super::mounts::MIN_DISK_BYTES..=super::mounts::MAX_DISK_BYTES).contains(&bytes)
    {
        return Err(SandboxError::BadResources(format!(
            "--disk {bytes} bytes is out of range; give 64M to 16T"
        )));
    }
    if opts.network == crate::sandbox::network::NetworkMode::None
        && opts.policy != atoll_net::policy::Policy::default()
    {
        return Err(SandboxError::BadResources(
            "egress rules (--allow-out/--deny-out, or allow_out/deny_out) need a network; leave out --net none (network: \"none\"), or the rules".into(),
        ));
    }
    Ok(())
}

/// What `opts` asks of the host quotas: its disk is the template's image, or `--disk`
/// when larger (the overlay's size).
fn quota_ask(opts: &CreateOptions, template: &template::Template) -> super::quota::Ask {
    let image = template.rootfs.as_ref().map(|b| std::fs::metadata(b).map_or(0, |m| m.len()));
    let disk_bytes = image.map_or(0, |i| i.max(opts.storage.disk_bytes.unwrap_or(0)));
    super::quota::Ask { memory_mib: opts.memory_mib, cpus: opts.cpus, disk_bytes, ram_copy_bytes: 0 }
}

/// Guest memory a memory-backed root (`minimal`'s tmpfs) never takes: the kernel, the
/// agent and the commands it runs need it. A tmpfs page cannot be reclaimed, so a root
/// that could fill all of RAM leaves the out-of-memory killer nothing to free but the
/// agent (PID 1) and the guest kernel panics ("System is deadlocked on memory").
pub const MEMORY_ROOT_RESERVE_MIB: u32 = 192;

/// The largest `--disk` a memory-backed root may have in a guest of `memory_mib`: all
/// but [`MEMORY_ROOT_RESERVE_MIB`] (or a quarter of the memory, when that is more).
pub fn max_memory_disk_bytes(memory_mib: u32) -> u64 {
    let reserve = MEMORY_ROOT_RESERVE_MIB.max(memory_mib / 4);
    u64::from(memory_mib.saturating_sub(reserve)) << 20
}

/// A disk template's disk can grow, not shrink: its filesystem fills the image. A
/// memory-backed root (no disk image) must fit in the guest's memory with room to spare.
fn check_disk(disk: Option<u64>, memory_mib: u32, template: &template::Template) -> Result<(), SandboxError> {
    let Some(bytes) = disk else { return Ok(()) };
    let Some(base) = &template.rootfs else {
        let max = max_memory_disk_bytes(memory_mib);
        if bytes <= max {
            return Ok(());
        }
        // The memory that would hold this disk plus the reserve, rounded up to 256 MiB.
        let need_mib =
            ((bytes >> 20) + u64::from(MEMORY_ROOT_RESERVE_MIB)).max(((bytes >> 20) * 4).div_ceil(3));
        let need_mib = need_mib.div_ceil(256) * 256;
        return Err(SandboxError::BadResources(format!(
            "--disk {} MiB does not fit: template `{}` keeps its root in guest memory, and with --memory              {memory_mib} MiB the root may hold at most {} MiB (the kernel and your commands need the              rest); give --memory {need_mib} or more, a smaller --disk, or a disk-backed template such              as --template debian",
            bytes >> 20,
            template.name,
            max >> 20,
        )));
    };
    let image = std::fs::metadata(base).map(|m| m.len()).unwrap_or(0);
    if bytes < image {
        return Err(SandboxError::BadResources(format!(
            "--disk {} MiB is smaller than template `{}`'s disk ({} MiB); give at least that, or leave --disk out",
            bytes >> 20,
            template.name,
            image >> 20
        )));
    }
    Ok(())
}

/// Owns a half-built sandbox: kills its processes and removes its directory when
/// dropped, unless disarmed.
pub(super) struct Cleanup {
    pub(super) record: Record,
    pub(super) armed: bool,
}

impl Cleanup {
    pub(super) fn set(&mut self, f: impl FnOnce(&mut Record)) {
        f(&mut self.record);
    }

    pub(super) fn save(&self) -> Result<(), SandboxError> {
        Ok(self.record.save()?)
    }

    pub(super) fn disarm(mut self) -> Record {
        self.armed = false;
        self.record.clone()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let record = &self.record;
        let monitors: Vec<ProcRef> = record.qemu.iter().filter_map(crate::jail::monitor_of).collect();
        for p in record.processes().chain(monitors.iter().copied()) {
            p.kill_now();
        }
        // Drop cannot await; the kernel ends SIGKILLed processes within moments.
        for p in record.processes().chain(monitors.iter().copied()) {
            for _ in 0..200 {
                if !p.is_alive() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        crate::jail::cgroup::remove(&record.id);
        if let Err(e) = std::fs::remove_dir_all(&record.paths.dir) {
            tracing::warn!("could not remove {}: {e}", record.paths.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_out_of_range_are_refused_with_the_range() {
        let o = CreateOptions { memory_mib: 16, ..CreateOptions::default() };
        let e = check_resources(&o).unwrap_err().to_string();
        assert!(e.contains("128") && e.contains("--memory"), "{e}");
        let o = CreateOptions { cpus: 0, ..CreateOptions::default() };
        assert!(check_resources(&o).unwrap_err().to_string().contains("--cpus"));
        assert!(check_resources(&CreateOptions::default()).is_ok());
    }

    #[test]
    fn a_memory_root_leaves_the_guest_its_reserve_and_a_refusal_says_what_fits() {
        assert_eq!(max_memory_disk_bytes(512), 320 << 20);
        assert_eq!(max_memory_disk_bytes(4096), 3072 << 20, "a quarter kept when that is more");
        assert_eq!(max_memory_disk_bytes(128), 0, "too small for any --disk");
        let minimal = template::Template {
            name: "minimal".into(),
            kernel: "/k".into(),
            initrd: Some("/i".into()),
            rootfs: None,
            cmdline: String::new(),
            init: template::InitKind::Agent,
            display: None,
        };
        assert!(check_disk(Some(256 << 20), 512, &minimal).is_ok());
        assert!(check_disk(None, 128, &minimal).is_ok());
        let e = check_disk(Some(2 << 30), 512, &minimal).unwrap_err().to_string();
        assert!(e.contains("at most 320 MiB") && e.contains("--memory 2816") && e.contains("debian"), "{e}");
        // What the refusal proposes is enough.
        for disk_mib in [64u64, 300, 321, 1000, 2048, 5000, 100_000] {
            let e = check_disk(Some(disk_mib << 20), 128, &minimal).unwrap_err().to_string();
            let need: u32 =
                e.split("--memory ").nth(2).and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
            assert!(check_disk(Some(disk_mib << 20), need, &minimal).is_ok(), "{disk_mib} MiB: {e}");
        }
    }
}
