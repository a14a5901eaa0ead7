//! `atoll shell` and `atoll exec -t`: a command on a pseudo-terminal in the guest, driven
//! from the host's terminal in raw mode. Keystrokes (Ctrl-C and Ctrl-Z included) go to
//! the guest as bytes; the screen comes back; SIGWINCH becomes a resize; the exit code
//! passes through. The terminal is put back however the session ends.

use std::io::Write;

use anyhow::Result;
use futures::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::Ctx;
use crate::cli::ShellArgs;
use crate::client::{Client, ClientError, ExecEvent, ExecSpec, TerminalInput, WindowSize};
use crate::tty::{self, RawMode, SessionSignal, SessionSignals, TtyError};

/// The guest's shell: bash where the image has it, else sh; both as login shells.
const SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l";

/// Keystroke chunks queued for the guest before reading more from the terminal.
const KEY_QUEUE: usize = 16;

/// `atoll shell [NAME]`.
pub(super) async fn shell(ctx: &Ctx, args: ShellArgs) -> Result<u8> {
    if !tty::stdin_is_terminal() {
        return Err(TtyError::NotATerminal {
            what: "`atoll shell`",
            instead: "pipe the input to `atoll exec -- CMD` (`atoll exec --sh LINE` for a shell line) instead",
        }.into());
    }
    let client = ctx.client_for(args.name.as_deref()).await?;
    let mut spec = ExecSpec::shell(SHELL);
    super::exec::set_process(&mut spec, &args.process);
    session(&client, &spec).await
}

/// Runs `spec` on a terminal in the guest, with the host's terminal in raw mode, and
/// returns its exit code (128+N for signal N; 128+N too when signal N ended atoll).
pub(super) async fn session(client: &Client, spec: &ExecSpec) -> Result<u8> {
    let size = tty::window_size().unwrap_or(WindowSize { rows: 24, cols: 80 });
    let mut signals = SessionSignals::install()?;
    let (keys, queue) = mpsc::channel(KEY_QUEUE);
    let mut events = client.exec_terminal(spec, &tty::term(), size, ReceiverStream::new(queue)).await?;
    // Raw mode only once the command runs: a refusal is printed on a sane terminal.
    let _raw = RawMode::enter()?;
    tokio::spawn(forward_keys(keys.clone()));
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(ExecEvent::Stdout(b) | ExecEvent::Stderr(b))) => {
                    // Blocking writes: a terminal takes them at once, and the echo of a
                    // keystroke should not wait for a thread hand-off.
                    stdout.write_all(&b)?;
                    stdout.flush()?;
                }
                Some(Ok(ExecEvent::Started { pid })) => tracing::debug!("terminal session is pid {pid} in the guest"),
                Some(Ok(ExecEvent::Exited(status))) => return Ok(status.shell_code()),
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(ClientError::Protocol { rpc: "ExecStream", what: "the stream ended without an exit status" }.into());
                }
            },
            signal = signals.next() => match signal {
                SessionSignal::Resize => {
                    if let Some(size) = tty::window_size() {
                        let _ = keys.send(TerminalInput::Resize(size)).await;
                    }
                }
                SessionSignal::End(n) => {
                    tracing::debug!("signal {n}: ending the terminal session");
                    return Ok(128 | u8::try_from(n).unwrap_or(0x7f));
                }
            },
        }
    }
}

/// Reads the terminal byte-wise as it comes and queues it for the guest.
async fn forward_keys(keys: mpsc::Sender<TerminalInput>) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0; 4096];
    while let Ok(n @ 1..) = stdin.read(&mut buf).await {
        if keys.send(TerminalInput::Keys(bytes::Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
            return;
        }
    }
}
