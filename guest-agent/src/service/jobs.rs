//! Background jobs: the wire messages to and from [`crate::jobs`]'s own types, and the
//! mapping of [`JobError`] to gRPC codes.

use atoll_proto::agent::v1 as pb;
use tonic::{Code, Status};

use atoll_proto::reason::Reason;

use super::exec::{command, exit_status};
use super::{AgentService, with_reason};
use crate::jobs::{JobError, JobSnapshot, LogTail, StartJob};
use crate::placement::in_place_unless_remote;
use crate::report::error_chain;

pub(super) async fn start(svc: &AgentService, req: pb::StartJobRequest) -> Result<pb::Job, Status> {
    // Starting a job touches its cwd, its program and the job directory: off the
    // runtime thread when a mount could hang (see `in_place_unless_remote`).
    let svc = svc.clone();
    let req = StartJob { command: req.command.map(command), timeout_ms: req.timeout_ms };
    Ok(job(in_place_unless_remote(move || svc.jobs().start(&req)).await?))
}

pub(super) async fn get(svc: &AgentService, req: pb::JobRef) -> Result<pb::Job, Status> {
    Ok(job(svc.jobs().get(&req.id)?))
}

pub(super) async fn wait(svc: &AgentService, req: pb::WaitJobRequest) -> Result<pb::Job, Status> {
    Ok(job(svc.jobs().wait(&req.id, req.timeout_ms).await?))
}

pub(super) async fn signal(svc: &AgentService, req: pb::SignalJobRequest) -> Result<pb::Job, Status> {
    Ok(job(svc.jobs().signal(&req.id, req.signal)?))
}

pub(super) async fn list(
    svc: &AgentService,
    _req: pb::ListJobsRequest,
) -> Result<pb::ListJobsResponse, Status> {
    Ok(pb::ListJobsResponse { jobs: svc.jobs().list().into_iter().map(job).collect() })
}

fn job(snap: JobSnapshot) -> pb::Job {
    let state = if snap.status.is_some() { pb::JobState::Exited } else { pb::JobState::Running };
    pb::Job {
        id: snap.id,
        state: state.into(),
        pid: snap.pid,
        command: snap.command,
        started_at_unix_ms: snap.started_at_unix_ms,
        status: snap.status.as_ref().map(exit_status),
        stdout: Some(log_tail(snap.stdout)),
        stderr: Some(log_tail(snap.stderr)),
    }
}

fn log_tail(log: LogTail) -> pb::JobOutput {
    pb::JobOutput { log_path: log.log_path, total_bytes: log.total_bytes, tail: log.tail.into() }
}

impl From<JobError> for Status {
    fn from(e: JobError) -> Self {
        let code = match e {
            JobError::Exec(e) => return e.into(),
            JobError::Unknown(_) => Code::NotFound,
            JobError::WaitTooLong { .. } | JobError::BadSignal(_) => Code::InvalidArgument,
            JobError::Exited(_) => Code::FailedPrecondition,
            JobError::Signal { ref source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Code::PermissionDenied
            }
            JobError::Signal { .. } => Code::FailedPrecondition,
            JobError::JobDir { .. } | JobError::LogFile { .. } => Code::FailedPrecondition,
        };
        let reason = matches!(e, JobError::Unknown(_)).then_some(Reason::UnknownJob);
        with_reason(Status::new(code, error_chain(&e)), reason)
    }
}
