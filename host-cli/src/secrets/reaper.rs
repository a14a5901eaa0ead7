//! The keeper of one `--from-command` command: a process between the caller and the
//! command's `sh` that leaves nothing the command started running once `sh` has ended
//! (or the time limit has passed, or the caller has died), whatever the command did:
//! `setsid`, a double fork, a process group of its own.
//!
//! The keeper is the child `Command::spawn` forks for `sh` ([`keep`] is its `pre_exec`
//! hook): it marks itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), forks again, and
//! the second child goes on to exec `sh`. Every process below it whose parent dies is
//! reparented to the keeper rather than to the host's init, so once `sh` has ended it
//! SIGKILLs each of its own children (read from `/proc/thread-self/children`), reaps
//! them, and goes on with their children as they are reparented to it, until it has no
//! child left (`waitpid` says `ECHILD`). It then writes a [`Report`] on a pipe of the
//! caller's and exits. Only the keeper's own unreaped children are ever signalled, so a
//! pid cannot have been reused by a process that is not the command's: a process that
//! is not the command's descendant is never touched. The caller's other children
//! (QEMU, helpers in a long-lived process) are not the keeper's and are not affected,
//! which a subreaper flag on the caller itself would not give.
//!
//! A fresh PID namespace for the command (whose end kills all of it) was weighed and
//! not chosen: for an ordinary user it needs a user namespace, in which the command's
//! uid is mapped and its view of its own files and agent sockets (`pass`, `gpg`, `op`,
//! a keyring) changes, and unprivileged user namespaces are switched off on some hosts.
//! The keeper needs neither namespaces nor cgroups, and is the same as root and as an
//! ordinary user.
//!
//! What it does not reach: a process started on the command's behalf by another one
//! (`systemd-run`, a D-Bus service, an agent already running) is not a descendant; and
//! a descendant that changed user (through `sudo`, say) cannot be killed by an ordinary
//! user: the keeper tries for [`CLEANUP_MAX`], then reports how many it left.
//!
//! Everything here after the fork runs in a copy of a possibly multi-threaded process:
//! only async-signal-safe system calls, no allocation, no lock.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How long the keeper goes on killing what the command left before it gives up and
/// reports it (a process that changed user; one stuck in the kernel).
pub const CLEANUP_MAX: Duration = Duration::from_secs(5);

/// How a command ended, as its keeper reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `sh` exited with this code.
    Exited(i32),
    /// `sh` was killed by this signal.
    Signalled(i32),
    /// The time limit passed; the keeper killed the command.
    TimedOut,
    /// The caller died; the keeper killed the command.
    CallerGone,
}

/// What a keeper writes on its report pipe at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// How the command ended.
    pub ending: Ending,
    /// How many of the command's processes were still running when the keeper gave up.
    pub left: u32,
    /// The keeper could not list its children (`/proc/thread-self/children` missing:
    /// a kernel without `CONFIG_PROC_CHILDREN`, or no `/proc`).
    pub unlisted: bool,
}

/// The report's size on the pipe: four native-endian `i32`s.
pub const REPORT_LEN: usize = 16;

impl Report {
    fn encode(self) -> [u8; REPORT_LEN] {
        let (kind, value) = match self.ending {
            Ending::Exited(c) => (0, c),
            Ending::Signalled(s) => (1, s),
            Ending::TimedOut => (2, 0),
            Ending::CallerGone => (3, 0),
        };
        let mut out = [0u8; REPORT_LEN];
        let words = [kind, value, self.left.cast_signed(), i32::from(self.unlisted)];
        for (chunk, w) in out.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// The report in `bytes`, if it is one.
    pub fn decode(bytes: &[u8]) -> Option<Report> {
        if bytes.len() != REPORT_LEN {
            return None;
        }
        let word = |i: usize| i32::from_ne_bytes(bytes[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let ending = match (word(0), word(1)) {
            (0, c) => Ending::Exited(c),
            (1, s) => Ending::Signalled(s),
            (2, _) => Ending::TimedOut,
            (3, _) => Ending::CallerGone,
            _ => return None,
        };
        Some(Report { ending, left: word(2).cast_unsigned(), unlisted: word(3) != 0 })
    }
}

/// Makes the process `Command::spawn` forked (a `pre_exec` hook, run last) the
/// command's keeper: it returns `Ok` only in a new child, which goes on to exec the
/// command; the keeper itself watches that child for up to `limit`, kills whatever of
/// the command is left, writes its [`Report`] on `report` and exits. It stops at once,
/// killing the command, when the process `caller` that spawned it dies.
///
/// # Safety
/// To be called only between fork and exec in a child of `caller`, with `report` the
/// write end of a pipe open in it.
pub unsafe fn keep(report: RawFd, caller: libc::pid_t, limit: Duration) -> io::Result<()> {
    let start = Instant::now();
    // SAFETY: plain system calls on this process's own signal state, attributes and
    // descriptors; sigset_t is plain data for which all zeros is a valid value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        // An ignored SIGCHLD (inherited) would have the kernel reap the children, the
        // command among them, before the keeper could read how it ended; a handler of
        // the caller's would run in this copy. Both are blocked and taken synchronously.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != caller {
            // The caller died before the death signal was asked for: nothing to run.
            libc::_exit(1);
        }
        let command = libc::fork();
        if command < 0 {
            return Err(io::Error::last_os_error());
        }
        if command == 0 {
            // The command's process: no blocked signal, no death signal (fork cleared it),
            // not a subreaper (fork does not pass it on); std execs `sh` next.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            return Ok(());
        }
        // The keeper keeps only its report pipe: std's own pipe (whose end tells the
        // caller the exec happened) and the command's stdout and stderr must not wait
        // for it.
        close_all_but(report);
        let ending = watch(command, caller, &set, start + limit);
        let (left, unlisted) = kill_all(Instant::now() + CLEANUP_MAX);
        let bytes = Report { ending, left, unlisted }.encode();
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// Closes every descriptor of this process but `keep`.
fn close_all_but(keep: RawFd) {
    let keep = keep.cast_unsigned();
    let close_range = |first: u32, last: u32| {
        // SAFETY: closes descriptors of this (single-threaded, forked) process only.
        first > last || unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0
    };
    let ok = (keep == 0 || close_range(0, keep - 1)) && close_range(keep + 1, u32::MAX);
    if !ok {
        // A kernel before close_range (5.9): one by one up to the descriptor limit.
        // SAFETY: as above; getrlimit writes into the struct given.
        let max = unsafe {
            let mut lim: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            RawFd::try_from(lim.rlim_cur.min(1 << 20)).unwrap_or(1 << 20)
        };
        for fd in (0..max).filter(|&fd| fd != keep.cast_signed()) {
            // SAFETY: as above.
            unsafe { libc::close(fd) };
        }
    }
}

/// Reaps what ends until the child `command` has, the caller dies, a SIGTERM comes
/// (PDEATHSIG or someone's), or `deadline` passes.
fn watch(command: libc::pid_t, caller: libc::pid_t, set: &libc::sigset_t, deadline: Instant) -> Ending {
    loop {
        loop {
            let mut status = 0;
            // SAFETY: waits for this process's own children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == command {
                return if libc::WIFEXITED(status) {
                    Ending::Exited(libc::WEXITSTATUS(status))
                } else {
                    Ending::Signalled(libc::WTERMSIG(status))
                };
            }
            if pid <= 0 {
                break;
            }
        }
        // SAFETY: reads this process's parent.
        if unsafe { libc::getppid() } != caller {
            return Ending::CallerGone;
        }
        let now = Instant::now();
        if now >= deadline {
            return Ending::TimedOut;
        }
        let wait = (deadline - now).min(Duration::from_millis(200));
        let ts = libc::timespec { tv_sec: 0, tv_nsec: libc::c_long::from(wait.subsec_nanos()) };
        // SAFETY: waits for one of the blocked signals in `set`, up to `ts`.
        if unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) } == libc::SIGTERM {
            return Ending::CallerGone;
        }
    }
}

/// SIGKILLs and reaps this process's children, and the children reparented to it as
/// their parents die, until it has none or `deadline` passes. Returns how many were
/// still there then, and whether they could not be listed.
fn kill_all(deadline: Instant) -> (u32, bool) {
    loop {
        let mut unlisted = false;
        let listed = for_each_child(|pid| {
            // SAFETY: `pid` is an unreaped child of this process (only this process reaps
            // its children, and not while this runs), so it is no other process's pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let children = listed.unwrap_or_else(|()| {
            unlisted = true;
            0
        });
        loop {
            let mut status = 0;
            // SAFETY: reaps this process's own children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid > 0 {
                continue;
            }
            if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                return (0, false);
            }
            break;
        }
        if Instant::now() >= deadline {
            return (children.max(1), unlisted);
        }
        // A killed process needs a moment to die, and its children to be reparented.
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Calls `f` with each pid in `/proc/thread-self/children` (this single-threaded
/// process's children); returns how many there were, or `Err` if the list cannot be read.
fn for_each_child(mut f: impl FnMut(libc::pid_t)) -> Result<u32, ()> {
    // SAFETY: opens a file read-only; the path is a NUL-terminated literal.
    let fd = unsafe { libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(());
    }
    let mut buf = [0u8; 4096];
    let (mut count, mut number, mut digits) = (0u32, libc::pid_t::default(), false);
    loop {
        // SAFETY: reads into `buf`, within its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        for &b in &buf[..n.cast_unsigned()] {
            if b.is_ascii_digit() {
                number = number.saturating_mul(10).saturating_add(libc::pid_t::from(b - b'0'));
                digits = true;
            } else if digits {
                f(number);
                count += 1;
                (number, digits) = (0, false);
            }
        }
    }
    if digits {
        f(number);
        count += 1;
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        for ending in [Ending::Exited(3), Ending::Signalled(9), Ending::TimedOut, Ending::CallerGone] {
            let r = Report { ending, left: 2, unlisted: true };
            assert_eq!(Report::decode(&r.encode()), Some(r));
        }
        assert_eq!(Report::decode(&[0; 15]), None);
        assert_eq!(Report::decode(&[9; REPORT_LEN]), None);
    }

    #[test]
    fn the_children_list_names_a_child_of_this_thread() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut seen = Vec::new();
        for_each_child(|pid| seen.push(pid)).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(seen.contains(&(child.id().cast_signed())), "{seen:?} lacks {}", child.id());
    }
}
