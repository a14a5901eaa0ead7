//! The processes a sandbox owns (QEMU and its network helper): telling whether they
//! still live, and ending them. They are started by [`crate::jail`], the one door.
//!
//! A process is recorded as its pid plus its start time (field 22 of
//! `/proc/<pid>/stat`), so a pid reused by an unrelated process is never taken for
//! ours, and never killed.

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program is not in `PATH`.
    #[error("`{program}` was not found in PATH or ~/.cargo/bin; install it with `rootfs/setup.sh`")]
    NotInstalled {
        /// The program.
        program: String,
    },
    /// `spawn` failed.
    #[error("could not start `{program}`")]
    Spawn {
        /// The program.
        program: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Its log file could not be created.
    #[error("could not create the log file {}", path.display())]
    Log {
        /// The log file.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// A process we started, identified by pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRef {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

impl ProcRef {
    /// Takes the identity of a live pid.
    pub fn of(pid: u32) -> Option<ProcRef> {
        let (state, start_ticks) = stat(pid)?;
        (state != 'Z').then_some(ProcRef { pid, start_ticks })
    }

    /// True while this very process runs (not a zombie, not a reused pid).
    pub fn is_alive(&self) -> bool {
        matches!(stat(self.pid), Some((state, ticks)) if ticks == self.start_ticks && state != 'Z' && state != 'X')
    }

    /// Sends `signal` if the process is still ours; false when it is already gone.
    pub fn signal(&self, signal: Signal) -> bool {
        if !self.is_alive() {
            return false;
        }
        let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else { return false };
        rustix::process::kill_process(pid, signal).is_ok()
    }

    /// Waits up to `grace` for the process to end; true when it did.
    pub async fn wait_gone(&self, grace: Duration) -> bool {
        poll_until(grace, Duration::from_millis(50), || !self.is_alive()).await
    }

    /// Asks with SIGTERM, then SIGKILLs after `grace`; returns once it is gone.
    pub async fn terminate(&self, grace: Duration) {
        if self.signal(Signal::TERM) && !self.wait_gone(grace).await {
            self.kill().await;
        }
    }

    /// SIGKILLs the process and waits until the kernel has ended it.
    pub async fn kill(&self) {
        if self.signal(Signal::KILL) {
            self.wait_gone(Duration::from_secs(10)).await;
        }
    }

    /// Stops every thread of the process (SIGSTOP) and waits until the kernel has
    /// stopped them all; false when the process is gone or did not stop within `grace`.
    pub async fn freeze(&self, grace: Duration) -> bool {
        self.signal(Signal::STOP)
            && poll_until(grace, Duration::from_millis(2), || self.is_frozen() || !self.is_alive()).await
            && self.is_frozen()
    }

    /// True when every thread of this process is stopped: by a signal (state `T`), or
    /// by a debugger attached to it (`t`).
    pub fn is_frozen(&self) -> bool {
        if !self.is_alive() {
            return false;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else { return false };
        let mut any = false;
        for task in tasks.flatten() {
            let stopped = stat_fields_at(&task.path().join("stat"))
                .and_then(|fields| Some(fields.first()?.starts_with(['T', 't'])));
            // A thread that ended meanwhile has no stat: it does not hold the process up.
            if stopped == Some(false) {
                return false;
            }
            any |= stopped == Some(true);
        }
        any
    }

    /// Lets a stopped process run again (SIGCONT); does nothing to a running one.
    pub fn thaw(&self) -> bool {
        self.signal(Signal::CONT)
    }

    /// SIGKILL without waiting, for clean-up paths that cannot await.
    pub fn kill_now(&self) {
        self.signal(Signal::KILL);
    }
}

/// Checks `done` every `every` until it holds (true) or `grace` has passed (false).
async fn poll_until(grace: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + grace;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Reads (state, start time) from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let fields = stat_fields(pid)?;
    let state = fields.first()?.chars().next()?;
    // `fields` starts at field 3 (state); start time is field 22.
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((state, start))
}

/// CPU time `pid` has used, user and system, in clock ticks (`utime` + `stime`).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(field(14)? + field(15)?)
}

/// The fields of `/proc/<pid>/stat` from field 3 (state) on.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    stat_fields_at(Path::new(&format!("/proc/{pid}/stat")))
}

/// The fields of a `stat` file under `/proc` (a process's or a thread's) from field 3 on.
fn stat_fields_at(path: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Finds `program` in `PATH`, then in `~/.cargo/bin` (where `cargo install` puts
/// programs).
pub fn find_in_path(program: &str) -> Result<std::path::PathBuf, ProcessError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cargo_bin = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin"));
    std::env::split_paths(&path)
        .chain(cargo_bin)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
        .ok_or_else(|| ProcessError::NotInstalled { program: program.to_string() })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// A child in its own session, as the jail starts them.
    fn spawn_detached(
        program: &Path,
        args: &[String],
        _log: &Path,
    ) -> std::io::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
        }
        cmd.spawn()
    }

    #[tokio::test]
    async fn tracks_and_kills_a_detached_child() {
        let d = tempfile::tempdir().unwrap();
        let sleep = find_in_path("sleep").unwrap();
        let mut child = spawn_detached(&sleep, &["30".into()], &d.path().join("log")).unwrap();
        let me = ProcRef::of(child.id().unwrap()).unwrap();
        assert!(me.is_alive());
        let other = ProcRef { start_ticks: me.start_ticks + 1, ..me };
        assert!(!other.is_alive(), "a different start time is a different process");
        me.terminate(Duration::from_secs(5)).await;
        child.wait().await.unwrap();
        assert!(!me.is_alive());
        assert!(!me.signal(Signal::KILL));
    }

    #[tokio::test]
    async fn freezes_and_thaws_every_thread() {
        let d = tempfile::tempdir().unwrap();
        // A shell spinning on a CPU, so a stop shows as CPU time that no longer grows.
        let sh = find_in_path("sh").unwrap();
        let mut child =
            spawn_detached(&sh, &["-c".into(), "while :; do :; done".into()], &d.path().join("log")).unwrap();
        let me = ProcRef::of(child.id().unwrap()).unwrap();
        assert!(!me.is_frozen());
        assert!(me.freeze(Duration::from_secs(10)).await, "SIGSTOP did not stop the process");
        assert!(me.is_frozen());
        let frozen_ticks = cpu_ticks(me.pid).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(cpu_ticks(me.pid).unwrap(), frozen_ticks, "a frozen process used CPU");
        assert!(me.thaw());
        let start = Instant::now();
        while me.is_frozen() {
            assert!(start.elapsed() < Duration::from_secs(10), "SIGCONT did not restart the process");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        me.kill().await;
        child.wait().await.unwrap();
        assert!(!me.freeze(Duration::from_secs(1)).await, "a gone process cannot be frozen");
    }

    #[test]
    fn missing_program_names_setup() {
        let err = find_in_path("atoll-no-such-program").unwrap_err().to_string();
        assert!(err.contains("rootfs/setup.sh"), "{err}");
    }
}
