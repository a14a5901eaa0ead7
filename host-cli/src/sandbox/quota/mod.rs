//! Quotas on what the sandboxes of one state directory may take together: how many run,
//! their guest memory, their vCPUs and their disks; and on what snapshots and templates
//! take. Defaults are sized from the machine; each can be set in the config file
//! ([`crate::config`]), with an environment variable, or with a flag of the command line
//! ([`limits`]; for `atoll mcp`, the flags it was started with cap every tool call). A start over a
//! quota (create, fork, template snapshot restore, unpark, snapshot restore) or a
//! snapshot or template save over the snapshot quota is refused at once, before
//! anything is made, saying what to park, kill or remove; checked under the state lock,
//! so two cannot both slip under. A start the check lets through gets an [`Admission`],
//! which the jail's doors take: no start path reaches QEMU or the network helper
//! without the check.
//!
//! A parked sandbox holds no QEMU and counts for nothing in the running quotas; a
//! paused one keeps its memory, so it counts; so does one still starting (its record
//! saved under the lock, its QEMU not yet there), as long as the process starting it
//! lives (`holds_a_vm`). Every sandbox, running or not, counts for disk ([`usage`]),
//! a starting one at the size it asked for; one started from a snapshot also counts the
//! private copy of guest RAM its QEMU maps, while it holds a VM.

pub mod limits;
pub mod usage;

use std::path::Path;

pub use limits::{
    Flags, Limit, Limits, MAX_DISK_ENV, MAX_MEMORY_ENV, MAX_SANDBOXES_ENV, MAX_SNAPSHOT_DISK_ENV,
    MAX_VCPUS_ENV, Source, set_flags,
};

use crate::vmm::state::{self, Record};

/// What a sandbox about to start asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// vCPUs.
    pub cpus: u32,
    /// What its disk will hold, bytes: a new disk at full size, or, for a sandbox that
    /// has a record already, what it will hold once started (its own, or the one a
    /// snapshot restore puts in its place).
    pub disk_bytes: u64,
    /// The private copy of guest RAM a start from a snapshot makes, as stored
    /// ([`ram_copy_bytes`]); 0 for a boot.
    pub ram_copy_bytes: u64,
}

/// Proof that the quotas let one start go ahead: made only by [`check`], and taken by
/// each door of the jail that starts a sandbox's processes (`jail::start_helper` borrows
/// it; `jail::start_qemu` and `jail::hold_qemu` use it up), so a start path that skipped
/// the check does not compile, and one check starts one QEMU.
#[derive(Debug)]
pub struct Admission(());

/// Refuses starting a sandbox asking `ask` next to those of `state` (leaving out
/// `starting`, the sandbox being started, if it already has a record), with a message
/// that says what to do; else admits it. Call under the state lock, and save the
/// starting sandbox's record (with `ask`'s disk and RAM copy) before letting it go, so
/// that the next check counts it.
pub fn check(state: &Path, ask: Ask, starting: Option<&str>) -> Result<Admission, String> {
    let limits = Limits::of_host(state)?;
    let others: Vec<Record> =
        state::load_all(state).into_iter().flatten().filter(|r| Some(r.id.as_str()) != starting).collect();
    let running: Vec<&Record> = others.iter().filter(|r| holds_a_vm(r)).collect();
    judge(&running, ask, &limits)?;
    let need = ask.disk_bytes.saturating_add(ask.ram_copy_bytes);
    // A sandbox with a record that takes nothing more (an unpark) is not judged on disk.
    if starting.is_none() || need > 0 {
        let held: u64 = others.iter().map(sandbox_bytes).sum();
        judge_disk(held, need, &limits.disk)?;
    }
    Ok(Admission(()))
}

/// What the private copy of `ram` (a snapshot's guest RAM) takes once made: its
/// allocated bytes (the copy keeps holes).
pub fn ram_copy_bytes(ram: &Path) -> u64 {
    usage::allocated(ram)
}

/// What sandbox `r` holds on disk: [`usage::sandbox_bytes`] (every file of its
/// directory as stored, whatever its name), and the private copy of guest RAM its QEMU
/// maps while it holds a VM (the copy's name is removed once QEMU has it open, its
/// blocks are not; while a restore still has it named, for a moment, it counts twice).
fn sandbox_bytes(r: &Record) -> u64 {
    usage::sandbox_bytes(r) + if holds_a_vm(r) { r.ram_copy } else { 0 }
}

/// Whether `r` counts in the running quotas: its QEMU lives, or it is still starting (a
/// create or fork saves the record under the state lock and starts QEMU after letting
/// the lock go: not counting it then would let creates made at once all pass) by a
/// process that lives. A parked sandbox holds no VM.
fn holds_a_vm(r: &Record) -> bool {
    match r.qemu {
        Some(q) => q.is_alive(),
        None => !r.parked && !r.ready && !r.is_abandoned(),
    }
}

/// Refuses a snapshot or template save that may store up to `need` bytes, when
/// what [`snapshot_bytes`] counts would pass the snapshot quota. Call under the state
/// lock.
pub fn check_snapshot(state: &Path, need: u64) -> Result<(), String> {
    let limits = Limits::of_host(state)?;
    judge_snapshot(snapshot_bytes(state)?, need, &limits.snapshot_disk)
}

/// [`check_snapshot`] for a caller that does not hold the state lock (a template
/// build, on a blocking thread): takes the lock, checks, and returns the lock, so that
/// what is stored next is stored before another check can pass.
pub fn check_snapshot_locked(need: u64) -> Result<state::StateLock, String> {
    let state = crate::vmm::dirs::state_dir().map_err(|e| e.to_string())?;
    let lock = state::StateLock::acquire(&state).map_err(|e| e.to_string())?;
    check_snapshot(&state, need)?;
    Ok(lock)
}

/// [`check_snapshot_locked`] for async code (a Dockerfile build's step cache): the lock
/// is waited for off the runtime's thread ([`state::StateLock::lock`]), since `atoll mcp`
/// serves every call on one thread and a call holding the lock across an await runs
/// there too.
pub async fn check_snapshot_locked_async(need: u64) -> Result<state::StateLock, String> {
    let state = crate::vmm::dirs::state_dir().map_err(|e| e.to_string())?;
    let lock = state::StateLock::lock(&state).await.map_err(|e| e.to_string())?;
    check_snapshot(&state, need)?;
    Ok(lock)
}

/// What the snapshot quota counts, as stored (each file once): named snapshots,
/// templates with their snapshots (and builds staged beside them), the Dockerfile step
/// cache (`images/steps`) and the image blob cache (`images/blobs`).
pub fn snapshot_bytes(state: &Path) -> Result<u64, String> {
    let templates = crate::vmm::dirs::templates_dir().map_err(|e| e.to_string())?;
    let data = crate::vmm::dirs::data_dir().map_err(|e| e.to_string())?;
    let (steps, blobs) = (data.join("images/steps"), data.join("images/blobs"));
    let named = crate::vmm::snapfile::named_dir(state);
    Ok(usage::stored_bytes_of(&[&named, &templates, &steps, &blobs]))
}

/// What the sandboxes of `state` hold on disk, counted as [`check`] does.
pub fn sandbox_disk_bytes(state: &Path) -> u64 {
    state::load_all(state).into_iter().flatten().map(|r| sandbox_bytes(&r)).sum()
}

/// One quota as `atoll info` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuotaUse {
    /// Its config key.
    pub key: &'static str,
    /// In use now (sandboxes counted at their disks' full size).
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// `count`, `MiB` or `bytes`.
    pub unit: &'static str,
    /// Where the limit came from.
    pub source: String,
}

/// Every quota with what is in use.
pub fn report(state: &Path) -> Result<Vec<QuotaUse>, String> {
    let limits = Limits::of_host(state)?;
    let all: Vec<Record> = state::load_all(state).into_iter().flatten().collect();
    let running: Vec<&Record> = all.iter().filter(|r| holds_a_vm(r)).collect();
    let used = [
        (running.len() as u64, "count"),
        (running.iter().map(|r| u64::from(r.memory_mib)).sum(), "MiB"),
        (running.iter().map(|r| u64::from(r.cpus)).sum(), "count"),
        (all.iter().map(sandbox_bytes).sum(), "bytes"),
        (snapshot_bytes(state)?, "bytes"),
    ];
    Ok(limits
        .all()
        .into_iter()
        .zip(used)
        .map(|(l, (used, unit))| QuotaUse {
            key: l.key,
            used,
            limit: l.value,
            unit,
            source: l.source.to_string(),
        })
        .collect())
}

const PARK_OR_KILL: &str = "Park (`atoll pause --to-disk NAME`) or kill (`atoll kill NAME`) a sandbox (`atoll ls` lists them), or retry later";

/// [`check`]'s running quotas on a known list of running sandboxes.
fn judge(running: &[&Record], ask: Ask, limits: &Limits) -> Result<(), String> {
    let what = PARK_OR_KILL;
    let n = running.len() as u64;
    let l = &limits.sandboxes;
    if n + 1 > l.value {
        let runs = if n == 1 { "sandbox runs" } else { "sandboxes run" };
        return Err(format!(
            "Sandbox quota reached: {n} {runs}, at most {} may ({}). {what}.",
            l.value,
            l.how_to_set()
        ));
    }
    let mem: u64 = running.iter().map(|r| u64::from(r.memory_mib)).sum();
    let l = &limits.memory_mib;
    if mem + u64::from(ask.memory_mib) > l.value {
        return Err(format!(
            "Memory quota reached: running sandboxes hold {mem} MiB, this one asks {} MiB, at most {} MiB may be given out ({}). {what}, or ask for less with --memory.",
            ask.memory_mib,
            l.value,
            l.how_to_set()
        ));
    }
    let used: u64 = running.iter().map(|r| u64::from(r.cpus)).sum();
    let l = &limits.vcpus;
    if used + u64::from(ask.cpus) > l.value {
        return Err(format!(
            "vCPU quota reached: running sandboxes have {used} vCPUs, this one asks {}, at most {} may run ({}). {what}, or ask for fewer with --cpus.",
            ask.cpus,
            l.value,
            l.how_to_set()
        ));
    }
    Ok(())
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

/// The disk quota: sandboxes hold `held` bytes, a new one asks `ask`.
fn judge_disk(held: u64, ask: u64, l: &Limit) -> Result<(), String> {
    if held.saturating_add(ask) <= l.value {
        return Ok(());
    }
    Err(format!(
        "Disk quota reached: sandboxes hold {} MiB of disk (each disk at its full size), this one needs {} MiB, at most {} MiB may ({}). Kill a sandbox (`atoll kill NAME`; `atoll ls` lists them; parking keeps its disk), ask for less with --disk, or retry later.",
        mib(held),
        mib(ask),
        mib(l.value),
        l.how_to_set()
    ))
}

/// The snapshot quota: what [`snapshot_bytes`] counts is `held` bytes, a save may add
/// `need`.
fn judge_snapshot(held: u64, need: u64, l: &Limit) -> Result<(), String> {
    if held.saturating_add(need) <= l.value {
        return Ok(());
    }
    Err(format!(
        "Snapshot quota reached: snapshots, templates and the image caches store {} MiB, this save may need up to {} MiB, at most {} MiB may be kept ({}). Remove a snapshot (`atoll snapshot rm NAME`; `atoll snapshot ls` lists them) or a template (`atoll template rm NAME`), empty the image and Dockerfile step caches (`atoll image prune`), or retry later.",
        mib(held),
        mib(need),
        mib(l.value),
        l.how_to_set()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::state::{Allocation, Paths};

    fn running(id: &str, memory_mib: u32, cpus: u32) -> Record {
        let dir = std::path::PathBuf::from("/s").join(id);
        let alloc = Allocation { id: id.into(), name: id.into(), dir: dir.clone() };
        Record::starting(alloc, "minimal".into(), memory_mib, cpus, "tcg".into(), Paths::in_dir(&dir, false))
    }

    fn limit(value: u64, key: &'static str, env: &'static str) -> Limit {
        Limit { value, source: Source::Default, key, env }
    }

    fn limits(sandboxes: u64, memory_mib: u64, vcpus: u64) -> Limits {
        Limits {
            sandboxes: limit(sandboxes, "max_sandboxes", MAX_SANDBOXES_ENV),
            memory_mib: limit(memory_mib, "max_memory_mib", MAX_MEMORY_ENV),
            vcpus: limit(vcpus, "max_vcpus", MAX_VCPUS_ENV),
            disk: limit(1 << 30, "max_disk", MAX_DISK_ENV),
            snapshot_disk: limit(1 << 30, "max_snapshot_disk", MAX_SNAPSHOT_DISK_ENV),
        }
    }

    fn ask(memory_mib: u32, cpus: u32) -> Ask {
        Ask { memory_mib, cpus, ..Ask::default() }
    }

    #[test]
    fn each_quota_refuses_saying_what_to_do() {
        let limits = limits(2, 1024, 3);
        let a = running("a", 512, 1);
        let one = [&a];
        assert!(judge(&one, ask(512, 2), &limits).is_ok(), "exactly at every limit is allowed");
        let (a, b) = (running("a", 256, 1), running("b", 256, 1));
        let err = judge(&[&a, &b], ask(256, 1), &limits).unwrap_err();
        assert!(err.starts_with("Sandbox quota reached: 2 sandboxes run, at most 2"), "{err}");
        assert!(
            err.contains("atoll pause --to-disk")
                && err.contains("atoll kill")
                && err.contains("$ATOLL_MAX_SANDBOXES or `max_sandboxes` in the config file")
        );
        let err = judge(&one, ask(513, 1), &limits).unwrap_err();
        assert!(err.contains("Memory quota reached") && err.contains("--memory"), "{err}");
        let err = judge(&one, ask(256, 3), &limits).unwrap_err();
        assert!(err.contains("vCPU quota reached") && err.contains("--cpus"), "{err}");
    }

    #[test]
    fn a_starting_sandbox_counts_until_its_creator_is_gone() {
        let mut r = running("a", 512, 1);
        assert!(holds_a_vm(&r), "started by this process, no QEMU yet: it counts");
        r.parked = true;
        assert!(!holds_a_vm(&r), "a parked sandbox holds no VM");
        r.parked = false;
        // pid_max is at most 2^22: this pid never runs.
        r.creator = Some(crate::vmm::process::ProcRef { pid: 99_999_999, start_ticks: 1 });
        assert!(!holds_a_vm(&r), "a create that died holds nothing");
        r.creator = crate::vmm::process::ProcRef::of(std::process::id());
        r.ready = true;
        assert!(!holds_a_vm(&r), "a ready sandbox without a QEMU (stopped) holds nothing");
    }

    #[test]
    fn a_private_copy_of_guest_ram_counts_while_its_sandbox_holds_a_vm() {
        let mut r = running("a", 512, 1);
        (r.disk_reserved, r.ram_copy) = (100 << 20, 40 << 20);
        assert_eq!(sandbox_bytes(&r), 140 << 20, "starting: its disk and its copy of guest RAM");
        r.parked = true;
        assert_eq!(sandbox_bytes(&r), 100 << 20, "parked: no QEMU holds a copy");
    }

    #[test]
    fn disk_and_snapshot_quotas_refuse_saying_what_to_do() {
        let l = limits(1, 1, 1);
        assert!(judge_disk(512 << 20, 512 << 20, &l.disk).is_ok(), "exactly at the limit is allowed");
        let err = judge_disk(512 << 20, (512 << 20) + 1, &l.disk).unwrap_err();
        assert!(err.starts_with("Disk quota reached: sandboxes hold 512 MiB"), "{err}");
        assert!(
            err.contains("atoll kill") && err.contains("--disk") && err.contains("$ATOLL_MAX_DISK"),
            "{err}"
        );
        assert!(judge_snapshot(1 << 29, 1 << 29, &l.snapshot_disk).is_ok());
        let err = judge_snapshot(1 << 29, (1 << 29) + 1, &l.snapshot_disk).unwrap_err();
        assert!(err.starts_with("Snapshot quota reached"), "{err}");
        assert!(
            err.contains("atoll snapshot rm")
                && err.contains("atoll template rm")
                && err.contains("atoll image prune"),
            "{err}"
        );
        assert!(err.contains("`max_snapshot_disk` in the config file"), "{err}");
    }
}
