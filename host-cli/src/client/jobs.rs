//! The records of background jobs: [`Job`], its state and its two output streams.

use atoll_proto::agent::v1 as pb;
use bytes::Bytes;
use serde::Serialize;

use super::exec::{ExitStatus, lossy};

/// Whether a background job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Still running.
    Running,
    /// Ended; see [`Job::status`].
    Exited,
    /// The agent did not say.
    Unknown,
}

/// One stream of a background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobOutput {
    /// Guest path of the log file with the whole stream.
    pub log_path: String,
    /// Bytes written so far.
    pub total_bytes: u64,
    /// The last few KiB.
    #[serde(serialize_with = "lossy")]
    pub tail: Bytes,
}

impl From<Option<pb::JobOutput>> for JobOutput {
    fn from(o: Option<pb::JobOutput>) -> Self {
        let o = o.unwrap_or_default();
        JobOutput { log_path: o.log_path, total_bytes: o.total_bytes, tail: o.tail }
    }
}

/// A background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// The agent's id for it.
    pub id: String,
    /// Running or exited.
    pub state: JobState,
    /// Its process id.
    pub pid: u32,
    /// The command, on one line.
    pub command: String,
    /// When it started.
    pub started_at_unix_ms: i64,
    /// How it ended, once it has.
    pub status: Option<ExitStatus>,
    /// Its stdout.
    pub stdout: JobOutput,
    /// Its stderr.
    pub stderr: JobOutput,
}

impl From<pb::Job> for Job {
    fn from(j: pb::Job) -> Self {
        let state = match pb::JobState::try_from(j.state) {
            Ok(pb::JobState::Running) => JobState::Running,
            Ok(pb::JobState::Exited) => JobState::Exited,
            _ => JobState::Unknown,
        };
        Job {
            id: j.id,
            state,
            pid: j.pid,
            command: j.command,
            started_at_unix_ms: j.started_at_unix_ms,
            status: j.status.map(Into::into),
            stdout: j.stdout.into(),
            stderr: j.stderr.into(),
        }
    }
}
