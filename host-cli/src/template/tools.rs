//! The host tools a build runs (skopeo, mkfs.ext4, tar, cp), run so that none outlives
//! the build and none writes after an interrupted build cleans up.
//!
//! Each tool gets SIGKILL when the thread that started it ends (atoll exiting
//! included), and is known by a pidfd while it runs. [`stop_all`] (Ctrl-C during
//! `create --image`) refuses new tools, kills the running ones and waits until their
//! waiters have reaped them, so a staging directory removed after it stays removed:
//! skopeo, killed only by atoll's exit, could otherwise create its layout again between
//! the clean-up and the exit.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};

struct Running {
    /// Set by [`Tools::stop_all`]: no tool starts after it.
    stopping: bool,
    /// The tools started and not yet reaped, by pid.
    tools: BTreeMap<u32, OwnedFd>,
}

/// The tools one process's builds run.
struct Tools {
    running: Mutex<Running>,
    reaped: Condvar,
}

/// This process's.
static TOOLS: Tools = Tools::new();

/// Runs `cmd` to the end as [`Command::output`] does (stdout and stderr captured), as a
/// tool that dies with atoll and is killed by [`stop_all`].
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    TOOLS.output(cmd)
}

/// Refuses new tools, kills every running one and waits (up to `bound`) until each is
/// reaped; whether all were.
pub fn stop_all(bound: Duration) -> bool {
    TOOLS.stop_all(bound)
}

/// Makes `cmd`'s process get SIGKILL when the thread that starts it ends.
fn dies_with_its_thread(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and makes one prctl call, which is
    // async-signal-safe; it touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)
        })
    }
}

impl Tools {
    const fn new() -> Self {
        Self {
            running: Mutex::new(Running { stopping: false, tools: BTreeMap::new() }),
            reaped: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn output(&self, cmd: &mut Command) -> std::io::Result<Output> {
        dies_with_its_thread(cmd).stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = {
            let mut state = self.lock();
            if state.stopping {
                return Err(std::io::Error::other("the build was interrupted"));
            }
            // Started under the lock, so stop_all sees every tool that runs.
            let child = cmd.spawn()?;
            let pid = Pid::from_raw(child.id().cast_signed()).expect("a child's pid is positive");
            match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
                Ok(fd) => {
                    state.tools.insert(child.id(), fd);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no pidfd for a build tool; an interrupt cannot stop it early")
                }
            }
            child
        };
        let pid = child.id();
        let out = child.wait_with_output();
        self.lock().tools.remove(&pid);
        self.reaped.notify_all();
        out
    }

    fn stop_all(&self, bound: Duration) -> bool {
        let mut state = self.lock();
        state.stopping = true;
        for fd in state.tools.values() {
            // A pidfd names its process even after the pid is reused, so this kills only
            // our tool; one that has already exited makes it fail, which changes nothing.
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
        let deadline = Instant::now() + bound;
        while !state.tools.is_empty() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            state =
                self.reaped.wait_timeout(state, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_tool_dies_with_the_thread_that_started_it() {
        let child =
            std::thread::spawn(|| dies_with_its_thread(Command::new("sleep").arg("30")).spawn().unwrap())
                .join()
                .unwrap();
        let mut child = child;
        let started = Instant::now();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(20), "sleep outlived its thread");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn stop_all_kills_and_reaps_a_running_tool_and_refuses_the_next() {
        let tools: &'static Tools = Box::leak(Box::new(Tools::new()));
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("started");
        let script = format!("touch {}; exec sleep 30", marker.display());
        let waiter = std::thread::spawn(move || tools.output(Command::new("sh").args(["-c", &script])));
        let started = Instant::now();
        while !marker.exists() {
            assert!(started.elapsed() < Duration::from_secs(20), "the tool never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(tools.stop_all(Duration::from_secs(20)), "the tool was not reaped");
        // Reaped before stop_all returned: its waiter has its status already.
        let out = waiter.join().unwrap().unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGKILL));
        assert!(started.elapsed() < Duration::from_secs(20));
        let refused = tools.output(&mut Command::new("true")).unwrap_err();
        assert!(refused.to_string().contains("interrupted"), "{refused}");
    }
}
