//! Quotas on what the sandboxes of one state directory may take together: how many run,
//! their guest memory and their vCPUs. Defaults are sized from the machine; each can be
//! set with an environment variable. A start over a quota (create, fork, template
//! snapshot restore, unpark) is refused at once, before anything is made, saying what to
//! park or kill; checked under the state lock, so two starts cannot both slip under.
//!
//! A parked sandbox holds no QEMU and counts for nothing; a paused one keeps its
//! memory, so it counts.

use std::path::Path;

use crate::vmm::state::{self, Record};

/// Sandboxes that may run at once (default: the host's memory in 256 MiB units, at
/// least 4).
pub const MAX_SANDBOXES_ENV: &str = "ATOLL_MAX_SANDBOXES";
/// Guest memory, MiB, all running sandboxes together (default: the host's memory).
pub const MAX_MEMORY_ENV: &str = "ATOLL_MAX_MEMORY_MIB";
/// vCPUs, all running sandboxes together (default: 8 per host CPU, at least 32: most
/// sandboxes idle, and a vCPU is only a thread).
pub const MAX_VCPUS_ENV: &str = "ATOLL_MAX_VCPUS";

/// The limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Running sandboxes.
    pub sandboxes: u64,
    /// Guest memory, MiB.
    pub memory_mib: u64,
    /// vCPUs.
    pub vcpus: u64,
}

impl Limits {
    /// The machine's defaults, overridden by the environment.
    pub fn of_host() -> Result<Limits, String> {
        let host_mib = host_memory_mib().unwrap_or(4096);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Ok(Limits {
            sandboxes: from_env(MAX_SANDBOXES_ENV)?.unwrap_or((host_mib / 256).max(4)),
            memory_mib: from_env(MAX_MEMORY_ENV)?.unwrap_or(host_mib),
            vcpus: from_env(MAX_VCPUS_ENV)?.unwrap_or((8 * cpus).max(32)),
        })
    }
}

fn from_env(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v.trim().parse().map(Some).map_err(|_| {
            format!("${name} is `{v}`; give a whole number, or unset it for the machine's default")
        }),
    }
}

fn host_memory_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// Refuses starting a sandbox of `memory_mib` and `cpus` next to those of `state`
/// (leaving out `starting`, the sandbox being started, if it already has a record),
/// with a message that says what to do. Call under the state lock.
pub fn check(state: &Path, memory_mib: u32, cpus: u32, starting: Option<&str>) -> Result<(), String> {
    let limits = Limits::of_host()?;
    let running: Vec<Record> = state::load_all(state)
        .into_iter()
        .flatten()
        .filter(|r| Some(r.id.as_str()) != starting && r.qemu.is_some_and(|q| q.is_alive()))
        .collect();
    judge(&running, memory_mib, cpus, limits)
}

/// [`check`] on a known list of running sandboxes.
fn judge(running: &[Record], memory_mib: u32, cpus: u32, limits: Limits) -> Result<(), String> {
    let what = "Park (`atoll park NAME`) or kill (`atoll kill NAME`) a sandbox (`atoll ls` lists them), or retry later";
    let n = running.len() as u64;
    if n + 1 > limits.sandboxes {
        return Err(format!(
            "Sandbox quota reached: {n} sandboxes run, at most {} may (${MAX_SANDBOXES_ENV}). {what}.",
            limits.sandboxes
        ));
    }
    let mem: u64 = running.iter().map(|r| u64::from(r.memory_mib)).sum();
    if mem + u64::from(memory_mib) > limits.memory_mib {
        return Err(format!(
            "Memory quota reached: running sandboxes hold {mem} MiB, this one asks {memory_mib} MiB, at most {} MiB may be given out (${MAX_MEMORY_ENV}). {what}, or ask for less with --memory.",
            limits.memory_mib
        ));
    }
    let used: u64 = running.iter().map(|r| u64::from(r.cpus)).sum();
    if used + u64::from(cpus) > limits.vcpus {
        return Err(format!(
            "vCPU quota reached: running sandboxes have {used} vCPUs, this one asks {cpus}, at most {} may run (${MAX_VCPUS_ENV}). {what}, or ask for fewer with --cpus.",
            limits.vcpus
        ));
    }
    Ok(())
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

    #[test]
    fn each_quota_refuses_saying_what_to_do() {
        let limits = Limits { sandboxes: 2, memory_mib: 1024, vcpus: 3 };
        let one = [running("a", 512, 1)];
        assert!(judge(&one, 512, 2, limits).is_ok(), "exactly at every limit is allowed");
        let err = judge(&[running("a", 256, 1), running("b", 256, 1)], 256, 1, limits).unwrap_err();
        assert!(err.starts_with("Sandbox quota reached: 2 sandboxes run, at most 2"), "{err}");
        assert!(
            err.contains("atoll park") && err.contains("atoll kill") && err.contains("ATOLL_MAX_SANDBOXES")
        );
        let err = judge(&one, 513, 1, limits).unwrap_err();
        assert!(err.contains("Memory quota reached") && err.contains("--memory"), "{err}");
        let err = judge(&one, 256, 3, limits).unwrap_err();
        assert!(err.contains("vCPU quota reached") && err.contains("--cpus"), "{err}");
    }
}
