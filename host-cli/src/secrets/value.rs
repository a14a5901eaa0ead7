//! A secret's value when the swap needs it: the stored one, or the output of its host
//! command, run again once its cache time has passed (kept in this process's memory
//! only, never written). A jailed helper gets values from its runner,
//! [`super::runner`], which resolves them here.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reaper::{Ending, REPORT_LEN, Report};
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

/// Runs `command` with `sh -c` on the host, under a keeper of its own
/// ([`super::reaper`]); its stdout, without the trailing newline, must be a valid value.
/// It may run for [`COMMAND_TIMEOUT`]. When `sh` ends (or the time is up, or this
/// process dies), the keeper SIGKILLs every process the command started that is still
/// running, wherever it moved (`setsid`, a double fork, a process group of its own),
/// and reaps them all before it ends; the output is then read for at most `AFTER_EXIT`
/// more: nothing the command starts outlives its run or keeps the caller waiting. At
/// most [`store::VALUE_MAX`](super::store::VALUE_MAX) + 1 bytes of stdout and
/// `ERR_KEPT` of stderr are kept; the rest is read and dropped. A process the keeper
/// could not kill (one that changed user, for an ordinary user) fails the run.
pub fn run(command: &str) -> Result<String, String> {
    run_for(command, COMMAND_TIMEOUT)
}

/// [`run`], with `limit` for [`COMMAND_TIMEOUT`].
fn run_for(command: &str, limit: Duration) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (report, report_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    // Above stdin, stdout and stderr, which the child's own pipes are put on before the
    // keeper runs (a caller started with one of them closed gets it from `pipe`).
    let report_end = rustix::io::fcntl_dupfd_cloexec(&report_end, 3)
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let report_fd = report_end.as_raw_fd();
    let caller = rustix::process::getpid().as_raw_nonzero().get();
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
    // SAFETY: close_range is async-signal-safe and allocates nothing; `keep` is made to
    // run between fork and exec, in a child of this process, with the report pipe's
    // write end open in it.
    unsafe {
        command_line.pre_exec(|| {
            // CLOSE_RANGE_CLOEXEC (Linux 5.11); an older kernel leaves them as they are.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
        command_line.pre_exec(move || super::reaper::keep(report_fd, caller, limit));
    }
    let spawned = command_line.spawn();
    drop(report_end);
    let mut keeper = spawned.map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let pipes = [keeper.stdout.take().map(OwnedFd::from), keeper.stderr.take().map(OwnedFd::from)];
    let mut output = Output::new(pipes);
    // The keeper ends the command itself at `limit`; this is a backstop only.
    let deadline = Instant::now() + limit + super::reaper::CLEANUP_MAX + KEEPER_SLACK;
    let mut ended: Option<Instant> = None;
    loop {
        if ended.is_none() {
            match keeper.try_wait() {
                Ok(Some(_)) => ended = Some(Instant::now() + AFTER_EXIT),
                Ok(None) => {}
                Err(e) => {
                    let _ = keeper.kill();
                    let _ = keeper.wait();
                    return Err(format!("waiting for `{command}`: {e}"));
                }
            }
        }
        if ended.is_some() && output.done() {
            break;
        }
        let limit = ended.unwrap_or(deadline);
        let now = Instant::now();
        if now >= limit {
            if ended.is_some() {
                break;
            }
            let _ = keeper.kill();
            let _ = keeper.wait();
            return Err(format!("`{command}` was not ended in time by its keeper; it may still run"));
        }
        output.read_some((limit - now).min(POLL_STEP));
    }
    let report = read_report(&report)
        .ok_or_else(|| format!("`{command}` was not run to its end (its keeper ended without a report)"))?;
    let [out, err] = output.kept;
    let err: String = String::from_utf8_lossy(&err).trim().chars().take(300).collect();
    if report.unlisted || report.left > 0 {
        return Err(format!(
            "`{command}` left {} process(es) running that atoll could not kill{}; find them with `ps -ef` and end them",
            report.left,
            if report.unlisted {
                " (this kernel has no /proc/PID/task/TID/children: CONFIG_PROC_CHILDREN)"
            } else {
                " (a program that changed user, such as sudo, or one stuck in the kernel)"
            },
        ));
    }
    match report.ending {
        Ending::Exited(0) => {}
        Ending::Exited(code) => return Err(format!("`{command}` failed (exit status {code}): {err}")),
        Ending::Signalled(sig) => return Err(format!("`{command}` failed (killed by signal {sig}): {err}")),
        Ending::TimedOut => {
            return Err(format!("`{command}` ran longer than {} s", limit.as_secs()));
        }
        Ending::CallerGone => return Err(format!("`{command}` was stopped (its keeper was told to stop)")),
    }
    let out = String::from_utf8(out)
        .map_err(|_| format!("`{command}` printed no usable value: it is not UTF-8"))?;
    let value = out.trim_end_matches(['\n', '\r']).to_owned();
    check_value(&value).map_err(|e| format!("`{command}` printed no usable value: {e}"))?;
    Ok(value)
}

/// The keeper's report from the read end of its pipe (the keeper has ended: all
/// there is to read is there).
fn read_report(pipe: &OwnedFd) -> Option<Report> {
    let _ = rustix::fs::fcntl_setfl(pipe, rustix::fs::OFlags::NONBLOCK);
    let mut buf = [0u8; REPORT_LEN + 1];
    let mut n = 0;
    while n < buf.len() {
        match rustix::io::read(pipe, &mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    Report::decode(&buf[..n])
}

/// `close_range`'s flag that marks the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// How long the output may still be read once the keeper has ended.
pub const AFTER_EXIT: Duration = Duration::from_millis(500);
/// How much of stderr is kept (for the error message).
pub const ERR_KEPT: usize = 4096;
/// How often the keeper's end is checked while the output is awaited.
const POLL_STEP: Duration = Duration::from_millis(20);
/// How much longer than the command and its cleanup the keeper itself is given.
const KEEPER_SLACK: Duration = Duration::from_secs(2);

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

    /// A `sleep` argument no other process on the host has: this test's pid, a counter
    /// and the time, as a fraction of a second (`sleep 977.<digits>`).
    fn marker() -> String {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        format!("977.{}{n}{nanos}", std::process::id())
    }

    /// The processes whose command line holds `marker` (killed, so a failed
    /// test leaves nothing behind).
    fn running_with(marker: &str) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
            if cmdline.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                let pid = entry.file_name().to_string_lossy().into_owned();
                let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
                found.push(format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
            }
        }
        found
    }

    #[test]
    fn nothing_the_command_starts_outlives_its_run_whatever_group_or_session_it_moves_to() {
        // Each leaves a `sleep` holding the output: in a new session (setsid forks
        // when it is a group leader), double-forked into one, under nohup, in a process
        // group of its own (perl's setpgrp), and a daemon that left a child of its own
        // behind. A keeper that killed only the command's own process group left each.
        // Each escapee says it has moved ({r}) before the command prints its value.
        let shapes = [
            "setsid sh -c ': > {r}; exec sleep {m}' &",
            "(setsid sh -c ': > {r}; exec sleep {m}' &)",
            "nohup setsid sh -c ': > {r}; exec sleep {m}' >/dev/null 2>&1 &",
            "(perl -e 'setpgrp(0, 0); exec @ARGV' sh -c ': > {r}; exec sleep {m}' &)",
            "(setsid sh -c '(sleep {m} &) ; : > {r}; exec sleep {m}' &)",
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut wrong = Vec::new();
        for shape in shapes {
            let m = marker();
            let ready = dir.path().join(&m);
            let command = format!(
                "{}\nuntil [ -e {r} ]; do sleep 0.01; done; echo value-from-a-command",
                shape.replace("{m}", &m),
                r = ready.display()
            )
            .replace("{r}", &ready.display().to_string());
            let started = std::time::Instant::now();
            let value = run(&command);
            let took = started.elapsed();
            let left = running_with(&m);
            if value.as_deref() != Ok("value-from-a-command") {
                wrong.push(format!("`{command}` gave {value:?}"));
            }
            if !left.is_empty() {
                wrong.push(format!("`{command}` left {left:?} running after its run"));
            }
            // A bound on hanging, not a timing: well under the command's time limit.
            if took > std::time::Duration::from_secs(10) {
                wrong.push(format!("`{command}` took {took:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_command_past_its_time_limit_is_ended_with_what_it_started() {
        // Not the 30 s of COMMAND_TIMEOUT: the keeper's limit is the same code path.
        let m = marker();
        let m2 = marker();
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let command =
            format!("setsid sleep {m} & (setsid sleep {m2} &); touch {}; exec sleep {m}", ready.display());
        let keeper = std::thread::spawn(move || super::run_for(&command, std::time::Duration::from_secs(1)));
        let err = keeper.join().unwrap().unwrap_err();
        assert!(ready.exists(), "the command did not run: {err}");
        assert!(err.contains("ran longer than"), "{err}");
        let left = [running_with(&m), running_with(&m2)].concat();
        assert!(left.is_empty(), "left {left:?} running after the time limit");
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
