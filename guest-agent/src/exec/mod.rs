//! Running commands: to completion with capped output ([`exec`]), or streamed
//! ([`stream`]), each in its own process group with a timeout.
//!
//! - [`request`]: what callers ask and get back ([`Request`], [`Finished`], [`Event`]).
//! - [`spec`]: validating a request (shell or argv, cwd, env, user, limits).
//! - [`user`]: resolving a user name or uid from /etc/passwd and /etc/group.
//! - [`spawn`]: starting a command in a new session, as its user.
//! - [`process`]: the started command, its process-group guard, timeouts.
//! - [`reaper`]: the agent's only `waitpid`, for its own children and for orphans.
//! - [`oom`]: whether the guest's out-of-memory killer ended a command.
//! - [`tree`]: every process a command started, even those that left its group.
//! - [`capture`]: keeping the head and tail of an output stream in bounded memory.
//! - [`stream`]: ExecStream, with stdin forwarding and back-pressure.
//! - [`pty`]: ExecStream on a pseudo-terminal (keystrokes in, screen out, resizes).
//! - [`error`]: what can go wrong, as [`ExecError`].

pub mod capture;
pub mod error;
pub mod oom;
pub mod process;
pub mod pty;
pub mod reaper;
pub mod request;
pub mod spawn;
pub mod spec;
pub mod stream;
pub mod tree;
pub mod user;

use atoll_proto::limits::CHUNK_SIZE;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

pub use error::ExecError;
pub use process::Outcome;
pub use reaper::{Ended, start as start_reaper};
pub use request::{Captured, Command, Event, Finished, Request, StreamInput, Tty, WindowSize};
pub use spec::Spec;

use capture::Capture;
use spawn::StdioSetup;

/// Runs a command to completion and returns its status and capped output.
///
/// Dropping the returned future (the client went away) kills the command's group.
pub async fn exec(req: Request) -> Result<Finished, ExecError> {
    if req.tty.is_some() {
        return Err(ExecError::TtyNeedsStream);
    }
    let spec = process::spec_placed(req.command).await?;
    let timeout = spec::exec_timeout(req.timeout_ms)?;
    let limit = spec::output_limit(req.output_limit)?;
    let (spec, mut run) = process::spawn_placed(spec, StdioSetup::Piped).await?;
    let mut out = Capture::new(limit);
    let mut err = Capture::new(limit);
    let (stdin, stdout, stderr) = (run.stdin.take(), run.stdout.take(), run.stderr.take());
    let outcome = {
        let drain_both = async {
            tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
        };
        let io = process::alongside(drain_both, feed(stdin, &req.stdin));
        process::run_to_end(io, &mut run, Some(timeout)).await?
    };
    tracing::debug!(pid = run.pid, cmd = %spec.display, stdout = out.total(), stderr = err.total(), "exec done");
    Ok(Finished { outcome, stdout: out.finish(), stderr: err.finish() })
}

/// Reads `pipe` to its end into `capture`. A read error ends the stream like EOF.
async fn drain(pipe: Option<pipe::Receiver>, capture: &mut Capture) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0; CHUNK_SIZE];
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        capture.push(&buf[..n]);
    }
}

/// Writes `data` to the command's stdin, then closes it. A command that exits
/// without reading it all is not an error.
async fn feed(stdin: Option<pipe::Sender>, data: &[u8]) {
    let Some(mut stdin) = stdin else { return };
    let _ = stdin.write_all(data).await;
}
