//! Exec and ExecStream, and the one mapping of [`ExecError`] to gRPC codes.

use futures::StreamExt;
use sbx_proto::agent::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use super::{AgentService, BoxStream};
use crate::exec::{self, ExecError};
use crate::report::error_chain;

pub(super) async fn exec(svc: &AgentService, req: pb::ExecRequest) -> Result<pb::ExecResponse, Status> {
    let _slot = svc.limits().exec()?;
    Ok(exec::exec(&req).await?)
}

pub(super) async fn exec_stream(
    svc: &AgentService,
    input: Streaming<pb::ExecStreamInput>,
) -> Result<BoxStream<pb::ExecEvent>, Status> {
    let slot = svc.limits().exec()?;
    let events = exec::stream::exec_stream(input).await?;
    let events = Box::pin(ReceiverStream::new(events).map(|event| event.map_err(Status::from)));
    // The slot is held while the client reads the command's events.
    Ok(super::limits::holding(events, slot))
}

impl From<ExecError> for Status {
    fn from(e: ExecError) -> Self {
        use ExecError as E;
        let code = match &e {
            E::NoCommand
            | E::ShellAndArgv
            | E::EmptyProgram
            | E::NulByte { .. }
            | E::BadEnvName(_)
            | E::RelativeCwd(_)
            | E::CwdNotDir(_)
            | E::TimeoutTooLong { .. }
            | E::OutputLimitTooLarge { .. }
            | E::UnknownUser(_)
            | E::StreamNotStarted
            | E::StreamRestarted
            | E::CommandTooLong { .. } => Code::InvalidArgument,
            E::CwdMissing(_) | E::ProgramNotFound { .. } => Code::NotFound,
            E::StartDenied { .. } => Code::PermissionDenied,
            E::CwdUnusable { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Code::PermissionDenied
            }
            E::NoShell | E::CwdUnusable { .. } | E::UserDb { .. } => Code::FailedPrecondition,
            E::NoResources { .. } => Code::ResourceExhausted,
            E::Spawn { .. } | E::ReaperGone { .. } => Code::Internal,
        };
        Status::new(code, error_chain(&e))
    }
}
