//! A cgroup per sandbox, holding its QEMU (and the bwrap that watches it): memory
//! (guest RAM plus [`OVERHEAD_MIB`]), pids and CPU weight, so one guest that fills its
//! memory hits its own limit and never the host's. cgroup v2 where the host mounts it
//! with those controllers (`/sys/fs/cgroup/atoll/<id>`), else the v1 `memory`, `pids`
//! and `cpu` hierarchies (`/sys/fs/cgroup/<controller>/atoll/<id>`). Where none is
//! writable (an ordinary user without a delegated subtree, some containers), the
//! sandbox runs without one and `atoll info` says so.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Memory a QEMU takes beyond guest RAM: TCG's translation cache, device state, 9p
/// and migration buffers (a booted TCG guest of 512 MiB used about 150 MiB more here).
pub const OVERHEAD_MIB: u64 = 512;
/// Most tasks (threads included) one sandbox's QEMU may have.
pub const PIDS_MAX: u32 = 512;
/// The memory of a sandbox's network helper: its stack's buffers at most (1024 flows of
/// 384 KiB, 384 MiB), DNS and the TLS of the secrets swap, and the program.
pub const HELPER_MEMORY_MIB: u64 = 768;
/// Most tasks (threads included) a network helper may have.
pub const HELPER_PIDS_MAX: u32 = 256;
/// The suffix of a network helper's group, beside its sandbox's (`<id>.net`).
const HELPER_SUFFIX: &str = ".net";
/// The v1 controllers used, each its own hierarchy.
const V1: [&str; 3] = ["memory", "pids", "cpu"];
/// Where cgroups are mounted.
const ROOT: &str = "/sys/fs/cgroup";
/// The directory under each hierarchy that holds atoll's sandboxes.
const PARENT: &str = "atoll";

/// Why a sandbox's cgroup could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A limit could not be written.
    #[error("could not set up the sandbox's cgroup at {}; remove it by hand if it is stale", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Which cgroup version this host lets atoll use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One unified hierarchy with memory, pids and cpu.
    V2,
    /// Separate memory, pids and cpu hierarchies.
    V1,
}

/// A sandbox's cgroup: one directory (v2) or one per controller (v1).
#[derive(Debug)]
pub struct Cgroup {
    dirs: Vec<PathBuf>,
}

fn kind() -> Option<Kind> {
    let root = Path::new(ROOT);
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if has("memory") && has("pids") && has("cpu") {
        return Some(Kind::V2);
    }
    V1.iter().all(|c| root.join(c).join("cgroup.procs").is_file()).then_some(Kind::V1)
}

/// The parents to create the sandbox groups in, when writable.
fn parents() -> Result<(Kind, Vec<PathBuf>), String> {
    let Some(kind) = kind() else {
        return Err("no cgroup v2 with memory, pids and cpu, nor v1 memory, pids and cpu hierarchies".into());
    };
    let root = Path::new(ROOT);
    let parents: Vec<PathBuf> = match kind {
        Kind::V2 => vec![root.join(PARENT)],
        Kind::V1 => V1.iter().map(|c| root.join(c).join(PARENT)).collect(),
    };
    for p in &parents {
        if let Err(e) = std::fs::create_dir(p)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(format!("{} is not writable ({e})", p.display()));
        }
        if rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_err() {
            return Err(format!("{} is not writable", p.display()));
        }
    }
    if kind == Kind::V2 {
        // The controllers must be enabled for the children of each level.
        for dir in [root, &parents[0]] {
            let path = dir.join("cgroup.subtree_control");
            std::fs::write(&path, "+memory +pids +cpu").map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok((kind, parents))
}

impl Cgroup {
    /// Makes (or reuses) the group of sandbox `id` with its limits; `None` when this
    /// host has no writable cgroup tree (the sandbox then runs without one).
    pub fn prepare(id: &str, memory_mib: u32, cpus: u32) -> Result<Option<Cgroup>, CgroupError> {
        let memory = (u64::from(memory_mib) + OVERHEAD_MIB) << 20;
        Cgroup::make(id, memory, PIDS_MAX, cpus)
    }

    /// Makes (or reuses) the group of sandbox `id`'s network helper, `<id>.net` beside
    /// the sandbox's: its own limits ([`HELPER_MEMORY_MIB`], [`HELPER_PIDS_MAX`], one
    /// vCPU's weight), so that a helper taken over by its guest meets them and not the
    /// host's, and cannot spend QEMU's (an OOM there ends the helper, not the guest).
    /// `None` without a writable tree, as for QEMU.
    pub fn prepare_helper(id: &str) -> Result<Option<Cgroup>, CgroupError> {
        Cgroup::make(&format!("{id}{HELPER_SUFFIX}"), HELPER_MEMORY_MIB << 20, HELPER_PIDS_MAX, 1)
    }

    fn make(name: &str, memory: u64, pids: u32, cpus: u32) -> Result<Option<Cgroup>, CgroupError> {
        let Ok((kind, parents)) = parents() else { return Ok(None) };
        let dirs: Vec<PathBuf> = parents.iter().map(|p| p.join(name)).collect();
        for d in &dirs {
            if let Err(source) = std::fs::create_dir(d)
                && source.kind() != std::io::ErrorKind::AlreadyExists
            {
                return Err(CgroupError::Write { path: d.clone(), source });
            }
        }
        let limits: Vec<(PathBuf, String)> = match kind {
            Kind::V2 => vec![
                (dirs[0].join("memory.max"), memory.to_string()),
                (dirs[0].join("pids.max"), pids.to_string()),
                (dirs[0].join("cpu.weight"), (100 * cpus).clamp(1, 10_000).to_string()),
            ],
            Kind::V1 => vec![
                (dirs[0].join("memory.limit_in_bytes"), memory.to_string()),
                (dirs[1].join("pids.max"), pids.to_string()),
                (dirs[2].join("cpu.shares"), (1024 * cpus).clamp(2, 262_144).to_string()),
            ],
        };
        let group = Cgroup { dirs };
        for (path, value) in limits {
            if let Err(source) = std::fs::write(&path, value) {
                remove_group(&parents, name);
                return Err(CgroupError::Write { path, source });
            }
        }
        Ok(Some(group))
    }

    /// Each group's `cgroup.procs`, open for writing: the child writes itself there
    /// before it runs anything.
    pub fn procs_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        self.dirs
            .iter()
            .map(|d| {
                let path = d.join("cgroup.procs");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|source| CgroupError::Write { path, source })
            })
            .collect()
    }
}

/// Removes sandbox `id`'s group and its helper's once their processes are gone (bwrap
/// may take a moment to follow QEMU out); leaves one, with a warning, if something
/// still runs in it.
pub fn remove(id: &str) {
    let Ok((_, parents)) = parents() else { return };
    remove_group(&parents, id);
    remove_group(&parents, &format!("{id}{HELPER_SUFFIX}"));
}

fn remove_group(parents: &[PathBuf], name: &str) {
    for dir in parents.iter().map(|p| p.join(name)) {
        for tries in 0.. {
            match std::fs::remove_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if tries >= 400 => {
                    tracing::warn!("could not remove the cgroup {}: {e}", dir.display());
                    break;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    }
}

/// What this host gives sandboxes, for `atoll info`.
pub fn describe() -> String {
    match (kind(), parents()) {
        (Some(Kind::V2), Ok(_)) => format!("cgroup v2 per sandbox ({ROOT}/{PARENT}/<id>: memory, pids, cpu)"),
        (_, Ok(_)) => format!("cgroup v1 per sandbox ({ROOT}/{{memory,pids,cpu}}/{PARENT}/<id>)"),
        (_, Err(why)) => format!("no cgroup: {why}; sandboxes run without memory and pids limits"),
    }
}
