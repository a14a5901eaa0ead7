//! Starting a command in its own session and process group, and ending it.
//!
//! Every command is a session leader ([`super::spawn`]), so signalling its process
//! group reaches every descendant that did not leave the group on purpose. The group is
//! owned by a [`ProcessGroup`] guard whose `Drop` kills it: when a request is cancelled
//! (the client went away) or finishes, nothing it started is left running. Processes
//! that left the group (`setsid`, daemons) are found by [`super::tree`] and
//! signalled with it.

use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::reaper::{self, Ended};
use super::spawn::{self, StdioSetup};
use super::tree;
use super::{ExecError, Spec};
use crate::placement::in_place_unless_remote;

/// How long a timed-out command gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// After the command exits, how long its descendants may keep its output pipes open
/// before they are killed, and then how long the agent waits for the pipes to close.
pub const SETTLE: Duration = Duration::from_millis(250);

/// A started command.
pub struct Running {
    /// Its pid, also its process group id.
    pub pid: u32,
    /// Write end of its stdin, when piped.
    pub stdin: Option<pipe::Sender>,
    /// Read end of its stdout, when piped.
    pub stdout: Option<pipe::Receiver>,
    /// Read end of its stderr, when piped.
    pub stderr: Option<pipe::Receiver>,
    /// Gets its exit status from the reaper.
    pub exit: oneshot::Receiver<Ended>,
    /// Its process group.
    pub group: ProcessGroup,
    /// When it was started.
    pub started: Instant,
    /// The kernel's count of OOM kills when it started (see [`super::oom`]).
    pub oom_kills: Option<u64>,
}

/// [`spawn()`] where it cannot stall the agent's one worker: in place while every mount
/// is local, else on the blocking pool, since finding the program and the exec that
/// `posix_spawn` waits for may wait on a network filesystem. Gives `spec` back.
pub async fn spawn_placed(spec: Spec, stdio: StdioSetup) -> Result<(Spec, Running), ExecError> {
    in_place_unless_remote(move || spawn(&spec, stdio).map(|run| (spec, run))).await
}

/// [`Spec::from_command`] where it cannot stall the agent (its cwd is checked on the
/// filesystem), as [`spawn_placed`].
pub async fn spec_placed(command: Option<super::Command>) -> Result<Spec, ExecError> {
    in_place_unless_remote(move || Spec::from_command(command.as_ref())).await
}

/// Starts `spec` in a new session, as its user, with the given stdio.
pub fn spawn(spec: &Spec, stdio: StdioSetup) -> Result<Running, ExecError> {
    let tag = tree::new_tag();
    let (child, exit) = reaper::spawn(|| spawn::start(spec, &tag, stdio)).map_err(|e| {
        match ExecError::from_spawn(spec.program(), spec.shell, spec.user_asked.as_deref(), e) {
            ExecError::CommandTooLong { .. } => {
                ExecError::CommandTooLong { bytes: spec.command_line_bytes() }
            }
            other => other,
        }
    })?;
    let oom_kills = super::oom::kills_so_far();
    let started = Instant::now();
    let group = ProcessGroup::new(child.pid, tag.into());
    let to_async = |source| ExecError::Spawn { program: spec.program().to_owned(), source };
    Ok(Running {
        pid: child.pid,
        stdin: child.stdin.map(pipe::Sender::from_owned_fd).transpose().map_err(to_async)?,
        stdout: child.stdout.map(pipe::Receiver::from_owned_fd).transpose().map_err(to_async)?,
        stderr: child.stderr.map(pipe::Receiver::from_owned_fd).transpose().map_err(to_async)?,
        exit,
        group,
        started,
        oom_kills,
    })
}

/// A command's process group and every process it started (see [`tree`]). Dropping an
/// armed guard SIGKILLs them all.
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: Pid,
    tag: std::sync::Arc<str>,
    armed: bool,
}

impl ProcessGroup {
    fn new(pid: u32, tag: std::sync::Arc<str>) -> Self {
        let pgid = i32::try_from(pid).ok().and_then(Pid::from_raw).expect("a child's pid is a positive i32");
        ProcessGroup { pgid, tag, armed: true }
    }

    /// A second handle on the same group that never kills it on drop.
    pub fn handle(&self) -> ProcessGroup {
        ProcessGroup { pgid: self.pgid, tag: self.tag.clone(), armed: false }
    }

    /// Leaves the group running when the guard is dropped (background jobs).
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Sends `sig` to every process in the group, and to the command's processes that
    /// left it. An error means the group is gone and nothing else was found.
    pub fn signal(&self, sig: Signal) -> std::io::Result<()> {
        let group = rustix::process::kill_process_group(self.pgid, sig);
        let others = tree::signal_all(self.pgid.as_raw_nonzero().get(), &self.tag, sig);
        match group {
            Err(e) if others == 0 => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// SIGKILLs every process the command started; none left is not an error.
    pub fn kill(&self) {
        let _ = self.signal(Signal::KILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Exit code or signal.
    pub ended: Ended,
    /// True when the agent killed it because its timeout passed.
    pub timed_out: bool,
    /// From start to exit.
    pub duration: Duration,
    /// When the guest's out-of-memory killer ended it: the guest's memory, in bytes.
    pub oom_killed: Option<u64>,
}

/// Waits for the command to exit; once `timeout` passes, SIGTERMs its group, and after
/// [`KILL_GRACE`] SIGKILLs it.
pub async fn supervise(
    pid: u32,
    exit: &mut oneshot::Receiver<Ended>,
    group: &ProcessGroup,
    started: Instant,
    timeout: Option<Duration>,
    oom_kills: Option<u64>,
) -> Result<Outcome, ExecError> {
    let gone = |_| ExecError::ReaperGone { pid };
    let (ended, timed_out) = match timeout {
        None => (exit.await.map_err(gone)?, false),
        Some(limit) => match tokio::time::timeout_at((started + limit).into(), &mut *exit).await {
            Ok(ended) => (ended.map_err(gone)?, false),
            Err(_) => {
                let _ = group.signal(Signal::TERM);
                let ended = match tokio::time::timeout(KILL_GRACE, &mut *exit).await {
                    Ok(ended) => ended,
                    Err(_) => {
                        group.kill();
                        exit.await
                    }
                };
                (ended.map_err(gone)?, true)
            }
        },
    };
    let duration = started.elapsed();
    let oom_killed = super::oom::was_oom_killed(ended, timed_out, oom_kills, super::oom::kills_so_far())
        .then(crate::system::memory_total_bytes);
    Ok(Outcome { ended, timed_out, duration, oom_killed })
}

/// Runs `io` (draining the output pipes) while supervising the command. Once the command
/// has exited, its descendants get [`SETTLE`] to close the pipes; then the group is
/// killed and the pipes get another [`SETTLE`]. Whatever `io` has not read by then is
/// dropped: a descendant that left the group cannot hold the request open.
pub async fn run_to_end(
    io: impl Future<Output = ()>,
    run: &mut Running,
    timeout: Option<Duration>,
) -> Result<Outcome, ExecError> {
    let mut io = pin!(io);
    let mut io_done = false;
    let mut supervisor =
        pin!(supervise(run.pid, &mut run.exit, &run.group, run.started, timeout, run.oom_kills));
    let outcome = loop {
        tokio::select! {
            outcome = &mut supervisor => break outcome?,
            () = &mut io, if !io_done => io_done = true,
        }
    };
    if !io_done && tokio::time::timeout(SETTLE, &mut io).await.is_err() {
        run.group.kill();
        let _ = tokio::time::timeout(SETTLE, &mut io).await;
    }
    Ok(outcome)
}

/// Runs `main` to completion while also polling `side` (e.g. feeding stdin), whose
/// completion does not matter and which is dropped when `main` is done.
pub async fn alongside<T>(main: impl Future<Output = T>, side: impl Future<Output = ()>) -> T {
    let side = async {
        side.await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        biased;
        out = main => out,
        () = side => unreachable!("`side` never completes"),
    }
}
