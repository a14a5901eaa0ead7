//! ExecStream on a pseudo-terminal: the command gets a new session whose controlling
//! terminal is the slave side of a pty (its stdin, stdout and stderr too); the agent
//! keeps the master side. Keystrokes from the client are written to the master, so the
//! terminal's line discipline turns Ctrl-C into SIGINT for the foreground program just
//! as a local terminal would; whatever the programs write comes back as `stdout`
//! events; a resize sets the size on the master, and the kernel sends SIGWINCH.
//!
//! The output ends when every holder of the slave has closed it (the master then reads
//! EIO); [`process::run_to_end`] bounds how long descendants may keep it open after
//! the command exits.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use atoll_proto::limits::CHUNK_SIZE;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::process::{self, Running};
use super::request::DEFAULT_TERM;
use super::spawn::StdioSetup;
use super::stream::{EVENT_BUFFER, Events};
use super::{Event, ExecError, Request, StreamInput, Tty, WindowSize, spec};

/// Starts `req` on a new pseudo-terminal and returns its events, as
/// [`super::stream::exec_stream`] does; `input` carries keystrokes and resizes.
pub async fn exec_on_terminal<S, E>(req: Request, tty: Tty, input: S) -> Result<Events, ExecError>
where
    S: Stream<Item = Result<StreamInput, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    let mut spec = process::spec_placed(req.command).await?;
    // An interactive session lasts as long as its user, unless a timeout was asked for.
    let timeout = match req.timeout_ms {
        0 => None,
        ms => Some(spec::exec_timeout(ms)?),
    };
    let term = if tty.term.is_empty() { DEFAULT_TERM.to_owned() } else { tty.term };
    spec.env.retain(|(k, _)| k != "TERM");
    spec.env.push(("TERM".to_owned(), term));
    let (master, slave) = open(tty.size).map_err(|source| ExecError::NoPty { source })?;
    let (_, mut run) = process::spawn_placed(spec, StdioSetup::Terminal(slave)).await?;
    // SAFETY: the AsyncFd owns the OwnedFd, so the fd stays open and the same for the
    // AsyncFd's whole life.
    let master = unsafe { AsyncFd::register_with_interest(master, Interest::READABLE | Interest::WRITABLE) }
        .map_err(|e| ExecError::NoPty { source: e.into_parts().1 })?;
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    tx.try_send(Ok(Event::Started { pid: run.pid })).expect("a new channel has room");
    tokio::spawn(async move {
        drive(&mut run, &master, input, req.stdin, &tx, timeout).await;
        // `run` drops here: its group guard kills whatever is left.
    });
    Ok(rx)
}

/// A new pty of `size`: the master (non-blocking, for the agent) and the slave (for the
/// command; the agent closes its copy once the command has started).
fn open(size: WindowSize) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    resize(&master, size)?;
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok((master, slave))
}

/// Sets the terminal's size; the kernel sends SIGWINCH to its foreground group.
fn resize(master: impl AsFd, size: WindowSize) -> std::io::Result<()> {
    let winsize = Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    Ok(rustix::termios::tcsetwinsize(master, winsize)?)
}

async fn drive<S, E>(
    run: &mut Running,
    master: &AsyncFd<OwnedFd>,
    input: S,
    first: Bytes,
    tx: &mpsc::Sender<Result<Event, ExecError>>,
    timeout: Option<Duration>,
) where
    S: Stream<Item = Result<StreamInput, E>> + Unpin,
{
    let pid = run.pid;
    let io = process::alongside(pump(master, tx), forward_input(master, input, first, tx));
    let last = tokio::select! {
        outcome = process::run_to_end(io, run, timeout) => outcome.map(Event::Exited),
        () = tx.closed() => {
            tracing::debug!(pid, "ExecStream client went away; killing the terminal's command");
            return;
        }
    };
    let _ = tx.send(last).await;
}

/// Sends what the terminal shows as `stdout` events until every holder of the slave
/// has closed it (EIO) or the client is gone.
async fn pump(master: &AsyncFd<OwnedFd>, tx: &mpsc::Sender<Result<Event, ExecError>>) {
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(CHUNK_SIZE);
        let Ok(mut ready) = master.readable().await else { return };
        let read = ready.try_io(|fd| {
            let spare = buf.spare_capacity_mut();
            Ok(rustix::io::read(fd.get_ref(), spare)?.0.len())
        });
        match read {
            Err(_would_block) => {}
            Ok(Ok(n @ 1..)) => {
                // SAFETY: `read` initialised the first `n` bytes of the spare capacity.
                unsafe { buf.set_len(buf.len() + n) };
                if tx.send(Ok(Event::Stdout(buf.split().freeze()))).await.is_err() {
                    return;
                }
            }
            // EIO: no process has the slave open any more.
            Ok(Ok(0) | Err(_)) => return,
        }
    }
}

/// Types `first`, then each `stdin` message, into the terminal, and applies resizes,
/// until the end of the input.
async fn forward_input<S, E>(
    master: &AsyncFd<OwnedFd>,
    mut input: S,
    first: Bytes,
    tx: &mpsc::Sender<Result<Event, ExecError>>,
) where
    S: Stream<Item = Result<StreamInput, E>> + Unpin,
{
    let mut open = write_all(master, &first).await.is_ok();
    while let Some(Ok(msg)) = input.next().await {
        match msg {
            StreamInput::Stdin(data) if open => open = write_all(master, &data).await.is_ok(),
            StreamInput::Resize(size) => {
                if let Err(e) = resize(master, size) {
                    tracing::debug!("could not resize the terminal: {e}");
                }
            }
            StreamInput::Start(_) => {
                let _ = tx.send(Err(ExecError::StreamRestarted)).await;
                return;
            }
            // Closing the master would hang the terminal up: EOF is the user's Ctrl-D.
            StreamInput::Stdin(_) | StreamInput::StdinEof | StreamInput::Nothing => {}
        }
    }
}

/// Writes all of `data` to the master, waiting while the terminal's input queue is full.
async fn write_all(master: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut ready = master.writable().await?;
        match ready.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), data)?)) {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}
