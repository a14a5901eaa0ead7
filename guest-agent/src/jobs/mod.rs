//! Detached background jobs whose full output goes to log files.
//!
//! A job is a command started like an Exec (own session and process group, same
//! validation) but with stdin from /dev/null and stdout/stderr written by the command
//! straight into `<job_dir>/<id>.stdout` and `.stderr`, so the agent holds none of its
//! output. A watcher task per job records the exit status; status queries read the size
//! and the last [`JOB_TAIL_BYTES`](atoll_proto::limits::JOB_TAIL_BYTES) of each log.
//!
//! - `log`: the log files, and [`LogTail`], what a status shows of each.

mod log;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use atoll_proto::limits::MAX_TIMEOUT_MS;
use rustix::process::Signal;
use tokio::sync::watch;

use crate::exec::process::{self, ProcessGroup};
use crate::exec::spawn::StdioSetup;
use crate::exec::{Command, ExecError, Outcome, Spec};

pub use log::LogTail;

/// Why a job request failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The command itself was refused or could not start.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// No job has this id.
    #[error("there is no job `{0}`; the agent knows only the jobs it started since it came up")]
    Unknown(String),
    /// The job directory could not be created.
    #[error("cannot create the job log directory {}; check the agent's --job-dir", dir.display())]
    JobDir {
        /// The directory.
        dir: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// A log file could not be created.
    #[error("cannot create the job log file {}", path.display())]
    LogFile {
        /// The file.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// WaitJob asked to wait longer than the cap.
    #[error("a wait of {asked} ms is over the maximum of {max} ms; wait again after it returns")]
    WaitTooLong {
        /// What the request asked for.
        asked: u32,
        /// The cap.
        max: u32,
    },
    /// The signal number is not one the agent can send.
    #[error(
        "{0} is not a signal number this agent can send; use e.g. 15 (SIGTERM), 9 (SIGKILL) or 2 (SIGINT)"
    )]
    BadSignal(i32),
    /// The job has already exited.
    #[error("job `{0}` has already exited; there is nothing to signal")]
    Exited(String),
    /// The kernel refused the signal.
    #[error("cannot signal job `{id}`")]
    Signal {
        /// The job.
        id: String,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
}

/// A job to start.
#[derive(Debug, Clone, Default)]
pub struct StartJob {
    /// What to run; `None` is refused.
    pub command: Option<Command>,
    /// Milliseconds; 0: until it ends or is killed.
    pub timeout_ms: u32,
}

/// A job's state at one moment.
#[derive(Debug, Clone)]
pub struct JobSnapshot {
    /// Its id (`job-N`).
    pub id: String,
    /// Its process id.
    pub pid: u32,
    /// The command, rendered on one line.
    pub command: String,
    /// When it started.
    pub started_at_unix_ms: i64,
    /// `None` while it runs, then how it ended.
    pub status: Option<Outcome>,
    /// Its stdout log.
    pub stdout: LogTail,
    /// Its stderr log.
    pub stderr: LogTail,
}

/// Every background job this agent started.
pub struct Jobs {
    dir: PathBuf,
    next: AtomicU64,
    table: Mutex<Vec<Arc<Job>>>,
}

struct Job {
    id: String,
    pid: u32,
    command: String,
    started_at_unix_ms: i64,
    logs: log::LogFiles,
    group: ProcessGroup,
    /// `None` while running, then the exit status.
    status: watch::Receiver<Option<Outcome>>,
}

impl Jobs {
    /// An empty table whose jobs log under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Jobs { dir, next: AtomicU64::new(1), table: Mutex::new(Vec::new()) }
    }

    /// Starts a job; `timeout_ms` 0 lets it run until it ends or is killed.
    pub fn start(&self, req: &StartJob) -> Result<JobSnapshot, JobError> {
        let spec = Spec::from_command(req.command.as_ref())?;
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms.into()));
        log::ensure_dir(&self.dir)?;
        let (id, logs, stdout, stderr) = loop {
            let id = format!("job-{}", self.next.fetch_add(1, Ordering::Relaxed));
            if let Some((logs, stdout, stderr)) = log::create(&self.dir, &id)? {
                break (id, logs, stdout, stderr);
            }
        };
        let mut run = match process::spawn(&spec, StdioSetup::Files { stdout, stderr }) {
            Ok(run) => run,
            Err(e) => {
                let _ = std::fs::remove_file(&logs.stdout);
                let _ = std::fs::remove_file(&logs.stderr);
                return Err(e.into());
            }
        };
        run.group.disarm();
        let started_at_unix_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis().try_into().unwrap_or(i64::MAX));
        let (tx, status) = watch::channel(None);
        let job = Arc::new(Job {
            id,
            pid: run.pid,
            command: spec.display,
            started_at_unix_ms,
            logs,
            group: run.group.handle(),
            status,
        });
        tracing::info!(id = %job.id, pid = job.pid, cmd = %job.command, "job started");
        let id = job.id.clone();
        tokio::spawn(async move {
            let outcome =
                process::supervise(run.pid, &mut run.exit, &run.group, run.started, timeout, run.oom_kills)
                    .await;
            match outcome {
                Ok(outcome) => {
                    tracing::info!(%id, ended = ?outcome.ended, "job ended");
                    tx.send_replace(Some(outcome));
                }
                Err(e) => tracing::error!(%id, "job lost: {e}"),
            }
        });
        let snapshot = job.snapshot();
        self.table.lock().unwrap_or_else(|p| p.into_inner()).push(job);
        Ok(snapshot)
    }

    /// The job's current state.
    pub fn get(&self, id: &str) -> Result<JobSnapshot, JobError> {
        Ok(self.find(id)?.snapshot())
    }

    /// Waits until the job exits or `timeout_ms` (0: the maximum) passes; either way
    /// returns its state then.
    pub async fn wait(&self, id: &str, timeout_ms: u32) -> Result<JobSnapshot, JobError> {
        let limit = match timeout_ms {
            0 => MAX_TIMEOUT_MS,
            ms if ms > MAX_TIMEOUT_MS => {
                return Err(JobError::WaitTooLong { asked: ms, max: MAX_TIMEOUT_MS });
            }
            ms => ms,
        };
        let job = self.find(id)?;
        let mut status = job.status.clone();
        let wait = status.wait_for(Option::is_some);
        // Timing out is an answer (the job is still running), and so is a lost watcher.
        let _ = tokio::time::timeout(Duration::from_millis(limit.into()), wait).await;
        Ok(job.snapshot())
    }

    /// Sends `signal` (0: SIGKILL) to the job's whole process group.
    pub fn signal(&self, id: &str, signal: i32) -> Result<JobSnapshot, JobError> {
        let sig = match signal {
            0 => Signal::KILL,
            n => Signal::from_named_raw(n).ok_or(JobError::BadSignal(n))?,
        };
        let job = self.find(id)?;
        if job.status.borrow().is_some() {
            return Err(JobError::Exited(job.id.clone()));
        }
        job.group.signal(sig).map_err(|source| JobError::Signal { id: job.id.clone(), source })?;
        Ok(job.snapshot())
    }

    /// Every job, oldest first.
    pub fn list(&self) -> Vec<JobSnapshot> {
        let jobs: Vec<Arc<Job>> = self.table.lock().unwrap_or_else(|p| p.into_inner()).clone();
        jobs.iter().map(|j| j.snapshot()).collect()
    }

    fn find(&self, id: &str) -> Result<Arc<Job>, JobError> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.iter().find(|j| j.id == id).cloned().ok_or_else(|| JobError::Unknown(id.to_owned()))
    }
}

impl Job {
    fn snapshot(&self) -> JobSnapshot {
        JobSnapshot {
            id: self.id.clone(),
            pid: self.pid,
            command: self.command.clone(),
            started_at_unix_ms: self.started_at_unix_ms,
            status: *self.status.borrow(),
            stdout: log::output(&self.logs.stdout),
            stderr: log::output(&self.logs.stderr),
        }
    }
}
