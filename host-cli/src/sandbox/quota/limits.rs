//! The limits in force and where each came from: the machine's default, the config file
//! ([`crate::config`]), an environment variable (over the file), or a command-line flag
//! (`atoll --max-sandboxes N ...`, over both; set once per process with [`set_flags`]).

use std::path::{Path, PathBuf};

/// Sandboxes that may run at once (default: the host's memory in 256 MiB units, at
/// least 4).
pub const MAX_SANDBOXES_ENV: &str = "ATOLL_MAX_SANDBOXES";
/// Guest memory, MiB, all running sandboxes together (default: the host's memory).
pub const MAX_MEMORY_ENV: &str = "ATOLL_MAX_MEMORY_MIB";
/// vCPUs, all running sandboxes together (default: 8 per host CPU, at least 32: most
/// sandboxes idle, and a vCPU is only a thread).
pub const MAX_VCPUS_ENV: &str = "ATOLL_MAX_VCPUS";
/// Sandboxes' disks together, each at its full size (what its guest may fill), with
/// everything else in their directories (default: 3/4 of the state directory's
/// filesystem).
pub const MAX_DISK_ENV: &str = "ATOLL_MAX_DISK";
/// Snapshots and templates together, as stored (default: 1/4 of the state directory's
/// filesystem).
pub const MAX_SNAPSHOT_DISK_ENV: &str = "ATOLL_MAX_SNAPSHOT_DISK";

/// The quota flags of this process's command line (`None`: not given).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--max-sandboxes`.
    pub sandboxes: Option<u64>,
    /// `--max-memory-mib`.
    pub memory_mib: Option<u64>,
    /// `--max-vcpus`.
    pub vcpus: Option<u64>,
    /// `--max-disk`, bytes.
    pub disk: Option<u64>,
    /// `--max-snapshot-disk`, bytes.
    pub snapshot_disk: Option<u64>,
}

static FLAGS: std::sync::OnceLock<Flags> = std::sync::OnceLock::new();

/// Records the quota flags of this process's command line, once, before any quota is
/// judged: every later check (each MCP tool call of `atoll mcp` too) uses them.
pub fn set_flags(flags: Flags) {
    let _ = FLAGS.set(flags);
}

fn flags() -> Flags {
    FLAGS.get().copied().unwrap_or_default()
}

/// Where a limit came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Sized from the machine.
    Default,
    /// The config file.
    File(PathBuf),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("machine default"),
            Source::File(p) => write!(f, "config file {}", p.display()),
            Source::Env(v) => write!(f, "${v}"),
            Source::Flag(v) => write!(f, "flag {v}"),
        }
    }
}

/// One limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The value (a count, MiB or bytes, by the limit).
    pub value: u64,
    /// Where it came from.
    pub source: Source,
    /// Its config key.
    pub key: &'static str,
    /// Its environment variable.
    pub env: &'static str,
}

impl Limit {
    /// How to change it, for messages: `--FLAG, $ENV or KEY in the config file`.
    pub fn how_to_set(&self) -> String {
        format!("{}, ${} or `{}` in the config file", flag_name(self.key), self.env, self.key)
    }
}

/// The limits in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Running sandboxes.
    pub sandboxes: Limit,
    /// Guest memory, MiB.
    pub memory_mib: Limit,
    /// vCPUs.
    pub vcpus: Limit,
    /// Sandboxes' disks, bytes.
    pub disk: Limit,
    /// Snapshots and templates, bytes.
    pub snapshot_disk: Limit,
}

impl Limits {
    /// The machine's defaults (the disk ones sized from the filesystem of `state`),
    /// overridden by the config file, overridden by the environment, overridden by the
    /// command line's flags ([`set_flags`]).
    pub fn of_host(state: &Path) -> Result<Limits, String> {
        let (config, file) = crate::config::load().map_err(|e| e.to_string())?;
        let q = &config.quotas;
        let host_mib = host_memory_mib().unwrap_or(4096);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let fs = filesystem_bytes(state).unwrap_or(1 << 40);
        let flags = flags();
        let pick = |key: &'static str,
                    env,
                    dflt: u64,
                    set: Option<u64>,
                    whole: bool,
                    flag: Option<u64>|
         -> Result<Limit, String> {
            // A flag wins without reading the variable it overrides.
            let env_value = if flag.is_some() { None } else { from_env(env, whole)? };
            let (value, source) = match (flag, env_value, set) {
                (Some(v), _, _) => (v, Source::Flag(flag_name(key))),
                (None, Some(v), _) => (v, Source::Env(env)),
                (None, None, Some(v)) => (v, Source::File(file.clone().unwrap_or_default())),
                (None, None, None) => (dflt, Source::Default),
            };
            Ok(Limit { value, source, key, env })
        };
        Ok(Limits {
            sandboxes: pick(
                "max_sandboxes",
                MAX_SANDBOXES_ENV,
                (host_mib / 256).max(4),
                q.max_sandboxes,
                true,
                flags.sandboxes,
            )?,
            memory_mib: pick(
                "max_memory_mib",
                MAX_MEMORY_ENV,
                host_mib,
                q.max_memory_mib,
                true,
                flags.memory_mib,
            )?,
            vcpus: pick("max_vcpus", MAX_VCPUS_ENV, (8 * cpus).max(32), q.max_vcpus, true, flags.vcpus)?,
            disk: pick("max_disk", MAX_DISK_ENV, fs / 4 * 3, q.max_disk.map(|s| s.0), false, flags.disk)?,
            snapshot_disk: pick(
                "max_snapshot_disk",
                MAX_SNAPSHOT_DISK_ENV,
                fs / 4,
                q.max_snapshot_disk.map(|s| s.0),
                false,
                flags.snapshot_disk,
            )?,
        })
    }

    /// Every limit, in the order `atoll info` shows them.
    pub fn all(&self) -> [&Limit; 5] {
        [&self.sandboxes, &self.memory_mib, &self.vcpus, &self.disk, &self.snapshot_disk]
    }
}

/// The flag of the config key `key`, as `atoll info` shows it.
fn flag_name(key: &str) -> &'static str {
    match key {
        "max_sandboxes" => "--max-sandboxes",
        "max_memory_mib" => "--max-memory-mib",
        "max_vcpus" => "--max-vcpus",
        "max_disk" => "--max-disk",
        _ => "--max-snapshot-disk",
    }
}

/// `$name` read as a whole number (`whole`) or a size with a unit.
fn from_env(name: &str, whole: bool) -> Result<Option<u64>, String> {
    let Ok(v) = std::env::var(name) else { return Ok(None) };
    if whole {
        v.trim().parse().map(Some).map_err(|_| {
            format!("${name} is `{v}`; give a whole number, or unset it for the machine's default")
        })
    } else {
        crate::config::parse_size(&v).map(Some).map_err(|why| {
            format!("${name}: {why}; give a size such as 50G, or unset it for the machine's default")
        })
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

/// The size of the filesystem holding `dir` (or its nearest existing parent).
fn filesystem_bytes(dir: &Path) -> Option<u64> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    let st = rustix::fs::statvfs(existing).ok()?;
    Some(st.f_blocks.saturating_mul(st.f_frsize))
}
