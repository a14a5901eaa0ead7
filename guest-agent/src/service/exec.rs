//! Exec and ExecStream: the wire messages to and from [`crate::exec`]'s own types, and
//! the one mapping of [`ExecError`] to gRPC codes.

use atoll_proto::agent::v1 as pb;
use futures::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use atoll_proto::reason::Reason;

use super::{AgentService, BoxStream, with_reason};
use crate::exec::{self, Ended, Event, ExecError, Outcome, StreamInput};
use crate::report::error_chain;

pub(super) async fn exec(svc: &AgentService, req: pb::ExecRequest) -> Result<pb::ExecResponse, Status> {
    let _slot = svc.limits().exec()?;
    let done = exec::exec(request(req)).await?;
    Ok(pb::ExecResponse {
        status: Some(exit_status(&done.outcome)),
        stdout: Some(captured(done.stdout)),
        stderr: Some(captured(done.stderr)),
    })
}

pub(super) async fn exec_stream(
    svc: &AgentService,
    input: Streaming<pb::ExecStreamInput>,
) -> Result<BoxStream<pb::ExecEvent>, Status> {
    let slot = svc.limits().exec()?;
    let input = input.map(|msg| msg.map(stream_input));
    let events = exec::stream::exec_stream(input).await?;
    let events =
        Box::pin(ReceiverStream::new(events).map(|event| event.map(exec_event).map_err(Status::from)));
    // The slot is held while the client reads the command's events.
    Ok(super::limits::holding(events, slot))
}

/// The agent's form of a wire command.
pub(super) fn command(cmd: pb::Command) -> exec::Command {
    exec::Command { shell: cmd.shell, argv: cmd.argv, cwd: cmd.cwd, env: cmd.env, user: cmd.user }
}

fn request(req: pb::ExecRequest) -> exec::Request {
    exec::Request {
        command: req.command.map(command),
        stdin: req.stdin,
        timeout_ms: req.timeout_ms,
        output_limit: req.output_limit,
        tty: req.tty.map(|t| {
            let size = t.size.unwrap_or_default();
            exec::Tty { term: t.term, size: window_size(&size) }
        }),
    }
}

/// A wire size as the kernel's `u16`s: 0 (or an absurd value) means the default.
fn window_size(size: &pb::WindowSize) -> exec::WindowSize {
    let cells = |n: u32| u16::try_from(n).ok().filter(|n| *n > 0);
    match (cells(size.rows), cells(size.cols)) {
        (Some(rows), Some(cols)) => exec::WindowSize { rows, cols },
        _ => exec::WindowSize::default(),
    }
}

fn stream_input(msg: pb::ExecStreamInput) -> StreamInput {
    use pb::exec_stream_input::Input;
    match msg.input {
        Some(Input::Start(req)) => StreamInput::Start(request(req)),
        Some(Input::Stdin(data)) => StreamInput::Stdin(data),
        Some(Input::StdinEof(true)) => StreamInput::StdinEof,
        Some(Input::StdinEof(false)) | None => StreamInput::Nothing,
        Some(Input::Resize(size)) => StreamInput::Resize(window_size(&size)),
    }
}

fn exec_event(event: Event) -> pb::ExecEvent {
    use pb::exec_event::{Event as E, Started};
    let event = match event {
        Event::Started { pid } => E::Started(Started { pid }),
        Event::Stdout(data) => E::Stdout(data),
        Event::Stderr(data) => E::Stderr(data),
        Event::Exited(outcome) => E::Exited(exit_status(&outcome)),
    };
    pb::ExecEvent { event: Some(event) }
}

fn captured(out: exec::Captured) -> pb::CapturedOutput {
    pb::CapturedOutput { data: out.data.into(), truncated: out.truncated, total_bytes: out.total_bytes }
}

/// The wire form of an [`Outcome`].
pub(super) fn exit_status(outcome: &Outcome) -> pb::ExitStatus {
    let kind = match outcome.ended {
        Ended::Code(code) => pb::exit_status::Kind::Code(code),
        Ended::Signal(sig) => pb::exit_status::Kind::Signal(sig),
    };
    pb::ExitStatus {
        kind: Some(kind),
        timed_out: outcome.timed_out,
        duration_ms: outcome.duration.as_millis().try_into().unwrap_or(u64::MAX),
        oom_killed: outcome.oom_killed.is_some(),
        memory_total_bytes: outcome.oom_killed.unwrap_or(0),
    }
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
            | E::TtyNeedsStream
            | E::CommandTooLong { .. } => Code::InvalidArgument,
            E::CwdMissing(_) | E::ProgramNotFound { .. } => Code::NotFound,
            E::StartDenied { .. } => Code::PermissionDenied,
            E::CwdUnusable { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Code::PermissionDenied
            }
            E::NoShell | E::CwdUnusable { .. } | E::UserDb { .. } | E::NoPty { .. } => {
                Code::FailedPrecondition
            }
            E::NoResources { .. } => Code::ResourceExhausted,
            E::Spawn { .. } | E::ReaperGone { .. } => Code::Internal,
        };
        let reason = match e {
            E::CwdMissing(_) => Some(Reason::CwdMissing),
            E::ProgramNotFound { .. } => Some(Reason::ProgramNotFound),
            _ => None,
        };
        with_reason(Status::new(code, error_chain(&e)), reason)
    }
}
