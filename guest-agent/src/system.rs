//! Info and SetTime: what the guest is, and setting its clock.
//!
//! Info never fails: it is the host's health check. A figure the guest cannot give
//! (no `/proc/meminfo` when `/proc` is not mounted, a root file system without
//! `statvfs`) is reported as 0 and logged.

use std::io::Read;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rustix::time::{ClockId, Timespec};

/// Setting the clock failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// The requested time cannot be a wall-clock time.
    #[error("unix_ms {0} is before 1970; send milliseconds since the Unix epoch")]
    BadTime(i64),
    /// The agent lacks the right to set the clock.
    #[error("setting the clock needs root (CAP_SYS_TIME); run the agent as root")]
    NotPermitted,
    /// The kernel refused the time for another reason.
    #[error("the kernel refused to set the clock to unix_ms {unix_ms}")]
    Refused {
        /// The requested time.
        unix_ms: i64,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
}

/// What the guest is.
#[derive(Debug, Clone, Default)]
pub struct Info {
    /// This agent's version.
    pub agent_version: String,
    /// Milliseconds since the agent started.
    pub uptime_ms: u64,
    /// The guest's hostname.
    pub hostname: String,
    /// Kernel name and release.
    pub kernel: String,
    /// CPUs the agent may run on.
    pub cpus: u32,
    /// Memory, in bytes.
    pub memory_total_bytes: u64,
    /// Memory available without swapping, in bytes.
    pub memory_available_bytes: u64,
    /// Size of the root file system, in bytes.
    pub disk_total_bytes: u64,
    /// Free bytes on the root file system.
    pub disk_free_bytes: u64,
    /// True when the agent is PID 1.
    pub pid1: bool,
    /// The guest's wall clock, in milliseconds since the epoch.
    pub time_unix_ms: i64,
}

/// Describes the guest. `started` is when the agent started.
pub fn info(started: Instant) -> Info {
    let uname = rustix::system::uname();
    let (memory_total_bytes, memory_available_bytes) = memory();
    let (disk_total_bytes, disk_free_bytes) = disk();
    Info {
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        hostname: uname.nodename().to_string_lossy().into_owned(),
        kernel: format!("{} {}", uname.sysname().to_string_lossy(), uname.release().to_string_lossy()),
        cpus: cpus(),
        memory_total_bytes,
        memory_available_bytes,
        disk_total_bytes,
        disk_free_bytes,
        pid1: std::process::id() == 1,
        time_unix_ms: now_unix_ms(),
    }
}

/// Sets the wall clock to `unix_ms`; returns how far it moved (new minus old), in ms.
pub fn set_time(unix_ms: i64) -> Result<i64, SystemError> {
    if unix_ms < 0 {
        return Err(SystemError::BadTime(unix_ms));
    }
    let target = Timespec { tv_sec: unix_ms / 1000, tv_nsec: (unix_ms % 1000) * 1_000_000 };
    let before = now_unix_ms();
    rustix::time::clock_settime(ClockId::Realtime, target).map_err(|e| match e {
        rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => SystemError::NotPermitted,
        other => SystemError::Refused { unix_ms, source: other.into() },
    })?;
    Ok(unix_ms - before)
}

fn now_unix_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// CPUs the agent may run on: one `sched_getaffinity`, where `available_parallelism`
/// would also open and read the cgroup files on every call.
fn cpus() -> u32 {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => set.count().max(1),
        Err(_) => 1,
    }
}

/// (MemTotal, MemAvailable) in bytes from `/proc/meminfo`; zeros if unreadable.
fn memory() -> (u64, u64) {
    // Room for the whole file up front: one read(2), where `read_to_string`'s growing
    // buffer took eight for its 1.5 KiB.
    let mut text = String::with_capacity(8 * 1024);
    match std::fs::File::open("/proc/meminfo").and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => parse_meminfo(&text),
        Err(e) => {
            tracing::warn!("cannot read /proc/meminfo ({e}); reporting memory as 0");
            (0, 0)
        }
    }
}

/// The guest's memory (MemTotal) in bytes; 0 when `/proc/meminfo` cannot be read.
pub(crate) fn memory_total_bytes() -> u64 {
    memory().0
}

fn parse_meminfo(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("MemTotal"), field("MemAvailable"))
}

/// (total, available to unprivileged users) bytes of the file system holding `/`.
fn disk() -> (u64, u64) {
    match rustix::fs::statvfs("/") {
        Ok(st) => (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize),
        Err(e) => {
            tracing::warn!("cannot statvfs / ({e}); reporting disk as 0");
            (0, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_parsed() {
        let text = "MemTotal:        8048576 kB\nMemFree:  1 kB\nMemAvailable:    4024288 kB\n";
        assert_eq!(parse_meminfo(text), (8_048_576 * 1024, 4_024_288 * 1024));
        assert_eq!(parse_meminfo("garbage"), (0, 0));
    }

    #[test]
    fn negative_times_are_refused() {
        assert!(matches!(set_time(-1), Err(SystemError::BadTime(-1))));
    }
}
