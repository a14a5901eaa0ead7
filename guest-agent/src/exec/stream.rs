//! ExecStream: a command whose output is streamed untruncated as events, with stdin
//! forwarded from the client.
//!
//! Events go through a small bounded channel, so a slow client slows the command (its
//! pipes fill up) instead of growing the agent's memory. When the client goes away the
//! channel closes and the command's process group is killed.

use atoll_proto::limits::CHUNK_SIZE;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::process::{self, Running};
use super::spawn::StdioSetup;
use super::{Event, ExecError, StreamInput, spec};

/// Events buffered between the command and the client; with chunks of at most
/// [`CHUNK_SIZE`] this bounds the agent's memory per stream.
pub(super) const EVENT_BUFFER: usize = 8;

/// The events of one command, or the error that ended the stream.
pub type Events = mpsc::Receiver<Result<Event, ExecError>>;

/// Reads `start` from `input`, starts the command and returns its events: `started`,
/// output chunks as they come, and `exited` last. `output_limit` is ignored. With a
/// `tty` the command runs on a pseudo-terminal ([`super::pty`]).
pub async fn exec_stream<S, E>(mut input: S) -> Result<Events, ExecError>
where
    S: Stream<Item = Result<StreamInput, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    let mut req = match input.next().await {
        Some(Ok(StreamInput::Start(req))) => req,
        _ => return Err(ExecError::StreamNotStarted),
    };
    if let Some(tty) = req.tty.take() {
        return super::pty::exec_on_terminal(req, tty, input).await;
    }
    let spec = process::spec_placed(req.command).await?;
    let timeout = spec::exec_timeout(req.timeout_ms)?;
    let (_, mut run) = process::spawn_placed(spec, StdioSetup::Piped).await?;
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    tx.try_send(Ok(Event::Started { pid: run.pid })).expect("a new channel has room");
    let stdin = run.stdin.take();
    tokio::spawn(async move {
        drive(&mut run, input, (stdin, req.stdin), &tx, timeout).await;
        // `run` drops here: its group guard kills whatever is left.
    });
    Ok(rx)
}

async fn drive<S, E>(
    run: &mut Running,
    input: S,
    stdin: (Option<pipe::Sender>, Bytes),
    tx: &mpsc::Sender<Result<Event, ExecError>>,
    timeout: std::time::Duration,
) where
    S: Stream<Item = Result<StreamInput, E>> + Unpin,
{
    let (pid, stdout, stderr) = (run.pid, run.stdout.take(), run.stderr.take());
    let pumps = async {
        tokio::join!(pump(stdout, tx, Event::Stdout), pump(stderr, tx, Event::Stderr));
    };
    let io = process::alongside(pumps, forward_stdin(input, stdin, tx));
    let last = tokio::select! {
        outcome = process::run_to_end(io, run, Some(timeout)) => outcome.map(Event::Exited),
        () = tx.closed() => {
            tracing::debug!(pid, "ExecStream client went away; killing the command");
            return;
        }
    };
    let _ = tx.send(last).await;
}

/// Sends `pipe`'s bytes as events until EOF or until the client is gone.
async fn pump(
    pipe: Option<pipe::Receiver>,
    tx: &mpsc::Sender<Result<Event, ExecError>>,
    wrap: fn(Bytes) -> Event,
) {
    let Some(mut pipe) = pipe else { return };
    // One buffer, split after each read: its room is reused once the events sent from
    // it are gone, instead of a new allocation per read.
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(CHUNK_SIZE);
        match pipe.read_buf(&mut buf).await {
            Ok(1..) => {
                let data = buf.split().freeze();
                if tx.send(Ok(wrap(data))).await.is_err() {
                    return;
                }
            }
            Ok(0) | Err(_) => return,
        }
    }
}

/// Writes the `stdin` bytes of `start`, then forwards `stdin` messages to the command
/// until `stdin_eof` or the end of the input.
async fn forward_stdin<S, E>(
    mut input: S,
    (mut stdin, first): (Option<pipe::Sender>, Bytes),
    tx: &mpsc::Sender<Result<Event, ExecError>>,
) where
    S: Stream<Item = Result<StreamInput, E>> + Unpin,
{
    if let Some(pipe) = stdin.as_mut()
        && pipe.write_all(&first).await.is_err()
    {
        stdin = None;
    }
    while let Some(Ok(msg)) = input.next().await {
        match msg {
            StreamInput::Stdin(data) => {
                if let Some(pipe) = stdin.as_mut()
                    && pipe.write_all(&data).await.is_err()
                {
                    // The command closed its stdin; later bytes have nowhere to go.
                    stdin = None;
                }
            }
            StreamInput::StdinEof => stdin = None,
            StreamInput::Nothing | StreamInput::Resize(_) => {}
            StreamInput::Start(_) => {
                let _ = tx.send(Err(ExecError::StreamRestarted)).await;
                return;
            }
        }
    }
}
