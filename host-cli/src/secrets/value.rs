//! A secret's value when the swap needs it: the stored one, or the output of its host
//! command, run again once its cache time has passed (kept in this process's memory
//! only, never written). A jailed helper gets values from its runner,
//! [`super::runner`], which resolves them here.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::store::{Source, check_value};

/// How long a `--from-command` command may run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// One command's output: (command, when it ran, its output).
type Cached = (String, Instant, String);

/// The outputs by secret name.
static CACHE: Mutex<Option<HashMap<String, Cached>>> = Mutex::new(None);

/// The value of the secret `name` from `source`.
pub fn resolve(name: &str, source: &Source) -> Result<String, String> {
    match source {
        Source::Value { value, .. } => Ok(value.clone()),
        Source::Command { command, cache_secs } => {
            let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
            let cache = cache.get_or_insert_with(HashMap::new);
            if let Some((cmd, at, value)) = cache.get(name)
                && cmd == command
                && at.elapsed() < Duration::from_secs(*cache_secs)
            {
                return Ok(value.clone());
            }
            let value = run(command)?;
            cache.insert(name.to_owned(), (command.clone(), Instant::now(), value.clone()));
            Ok(value)
        }
    }
}

/// Runs `command` with `sh -c` on the host, in a process group of its own; its stdout,
/// without the trailing newline, must be a valid value. It may run for
/// [`COMMAND_TIMEOUT`]; when `sh` ends, what is left of its group (a background child
/// still holding the output, say) is killed, and the output is read for at most
/// `AFTER_EXIT` more: nothing the command starts can keep the caller waiting. At
/// most [`store::VALUE_MAX`](super::store::VALUE_MAX) + 1 bytes of stdout and
/// `ERR_KEPT` of stderr are kept; the rest is read and dropped.
pub fn run(command: &str) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut command_line = Command::new("/bin/sh");
    command_line
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Nothing of this process's but the three pipes reaches the command (nor what it
    // leaves running): a descriptor it was handed open across exec (the runner's line
    // to its helper) is marked close-on-exec in the child, after the pipes are in place.
    // SAFETY: close_range is async-signal-safe and allocates nothing.
    unsafe {
        command_line.pre_exec(|| {
            // CLOSE_RANGE_CLOEXEC (Linux 5.11); an older kernel leaves them as they are.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
    let mut child = command_line.spawn().map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let group = child.id();
    let pipes = [child.stdout.take().map(OwnedFd::from), child.stderr.take().map(OwnedFd::from)];
    let mut output = Output::new(pipes);
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let mut ended: Option<(std::process::ExitStatus, Instant)> = None;
    loop {
        if ended.is_none() {
            // Seen ended but not reaped yet: its pid, the group's number, cannot be
            // taken by another process before the group is killed.
            match exited_unreaped(group) {
                Ok(true) => {
                    kill_group(group);
                    let status = child.wait().map_err(|e| format!("waiting for `{command}`: {e}"))?;
                    ended = Some((status, Instant::now() + AFTER_EXIT));
                }
                Ok(false) => {}
                Err(e) => {
                    kill_group(group);
                    let _ = child.wait();
                    return Err(format!("waiting for `{command}`: {e}"));
                }
            }
        }
        let limit = ended.map_or(deadline, |(_, until)| until);
        if ended.is_some() && output.done() {
            break;
        }
        let now = Instant::now();
        if now >= limit {
            if ended.is_some() {
                break;
            }
            kill_group(group);
            let _ = child.wait();
            return Err(format!("`{command}` ran longer than {} s", COMMAND_TIMEOUT.as_secs()));
        }
        output.read_some((limit - now).min(POLL_STEP));
    }
    let (status, _) = ended.expect("the loop ends only once sh has");
    let [out, err] = output.kept;
    if !status.success() {
        let err: String = String::from_utf8_lossy(&err).trim().chars().take(300).collect();
        return Err(format!("`{command}` failed ({status}): {err}"));
    }
    let out = String::from_utf8(out)
        .map_err(|_| format!("`{command}` printed no usable value: it is not UTF-8"))?;
    let value = out.trim_end_matches(['\n', '\r']).to_owned();
    check_value(&value).map_err(|e| format!("`{command}` printed no usable value: {e}"))?;
    Ok(value)
}

/// `close_range`'s flag that marks the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// How long the output may still be read once `sh` has ended.
pub const AFTER_EXIT: Duration = Duration::from_millis(500);
/// How much of stderr is kept (for the error message).
pub const ERR_KEPT: usize = 4096;
/// How often the command's end is checked while its output is awaited.
const POLL_STEP: Duration = Duration::from_millis(20);

/// Whether the child `pid` has ended, leaving it unreaped (`waitid(WNOWAIT)`).
fn exited_unreaped(pid: u32) -> std::io::Result<bool> {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let pid = Pid::from_raw(pid.cast_signed()).ok_or(std::io::ErrorKind::InvalidInput)?;
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    Ok(waitid(WaitId::Pid(pid), options)?.is_some())
}

/// SIGKILLs what is left of the process group `group`.
fn kill_group(group: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(group.cast_signed()) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// A command's stdout and stderr, read as they come, each kept up to its cap.
struct Output {
    /// The pipes still open: stdout, stderr.
    pipes: [Option<OwnedFd>; 2],
    /// What was kept of each.
    kept: [Vec<u8>; 2],
}

impl Output {
    fn new(pipes: [Option<OwnedFd>; 2]) -> Output {
        for fd in pipes.iter().flatten() {
            let _ = rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK);
        }
        Output { pipes, kept: [Vec::new(), Vec::new()] }
    }

    /// Both pipes are at their end.
    fn done(&self) -> bool {
        self.pipes.iter().all(Option::is_none)
    }

    /// Waits up to `wait` for output and reads what there is.
    fn read_some(&mut self, wait: Duration) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let open: Vec<usize> = (0..2).filter(|&i| self.pipes[i].is_some()).collect();
        if open.is_empty() {
            std::thread::sleep(wait);
            return;
        }
        let mut fds: Vec<PollFd<'_>> =
            open.iter().map(|&i| PollFd::new(self.pipes[i].as_ref().expect("open"), PollFlags::IN)).collect();
        let timeout = Timespec::try_from(wait).ok();
        if poll(&mut fds, timeout.as_ref()).unwrap_or(0) == 0 {
            return;
        }
        let ready: Vec<usize> =
            open.into_iter().zip(&fds).filter(|(_, f)| !f.revents().is_empty()).map(|(i, _)| i).collect();
        drop(fds);
        for i in ready {
            self.drain(i);
        }
    }

    /// Reads pipe `i` until it would block, closing it at its end.
    fn drain(&mut self, i: usize) {
        let cap = if i == 0 { super::store::VALUE_MAX + 1 } else { ERR_KEPT };
        let mut buf = [0u8; 8192];
        loop {
            let Some(fd) = &self.pipes[i] else { return };
            match rustix::io::read(fd, &mut buf) {
                Ok(0) => {
                    self.pipes[i] = None;
                    return;
                }
                Ok(n) => {
                    let room = cap.saturating_sub(self.kept[i].len());
                    self.kept[i].extend_from_slice(&buf[..n.min(room)]);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return,
                Err(_) => {
                    self.pipes[i] = None;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run;

    fn gone(pid: &str) -> bool {
        let stat = std::path::Path::new("/proc").join(pid.trim()).join("stat");
        (0..200).any(|_| {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            let gone =
                state.is_empty() || state.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z'));
            if !gone {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            gone
        })
    }

    #[test]
    fn a_background_child_holding_the_output_neither_keeps_the_caller_waiting_nor_outlives_it() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let command = format!("sleep 600 & echo $! > {}; echo value-from-a-command", pidfile.display());
        assert_eq!(run(&command).unwrap(), "value-from-a-command");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(gone(&pid), "the command's background child {pid} still runs");
    }

    #[test]
    fn a_child_in_another_session_holding_the_output_keeps_nobody_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let command =
            format!("setsid sleep 600 & echo $! > {}; echo value-from-a-command", pidfile.display());
        let value = run(&command);
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        assert_eq!(value.unwrap(), "value-from-a-command");
    }

    #[test]
    fn a_descriptor_kept_open_across_exec_does_not_reach_the_command() {
        use std::os::fd::AsRawFd;
        // As the runner's line to its helper arrives: open across exec.
        // (Numbered high: the shell's own listing of /proc/self/fd takes a low one.)
        let (pair, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let line = rustix::io::fcntl_dupfd_cloexec(&pair, 200).unwrap();
        rustix::io::fcntl_setfd(&line, rustix::io::FdFlags::empty()).unwrap();
        let open = run("cd /proc/self/fd && echo x *").unwrap();
        let fd = line.as_raw_fd().to_string();
        assert!(!open.split(' ').any(|n| n == fd), "fd {fd} is open in the command: {open}");
    }

    #[test]
    fn output_larger_than_a_value_is_refused_without_waiting_for_the_time_limit() {
        let err = run("head -c 300000 /dev/zero | tr '\\0' a").unwrap_err();
        assert!(err.contains("8193 bytes") && err.contains("8 to 8192"), "{err}");
        let err = run("echo short; echo oops >&2; exit 3").unwrap_err();
        assert!(err.contains("failed") && err.contains("oops"), "{err}");
    }
}
