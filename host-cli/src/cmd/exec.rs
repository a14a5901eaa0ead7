//! `atoll exec`: run a command in the guest. By default its output streams live and its
//! stdin is forwarded (when stdin is not a terminal); `--capture` (and `--json`) use the
//! unary call and print the capped result, as the MCP tool sees it.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Ctx;
use super::UsageError;
use crate::cli::{CommandArgs, ExecArgs, ProcessArgs};
use crate::client::{ClientError, ExecEvent, ExecSpec};

/// Stdin bytes `--capture` accepts: one gRPC message, minus room for the rest.
const CAPTURE_STDIN_LIMIT: u64 = (atoll_proto::limits::MAX_MESSAGE_BYTES - 64 * 1024) as u64;

/// Builds the spec for `exec` and `run`.
pub(super) fn spec(args: &CommandArgs) -> ExecSpec {
    let mut spec = match &args.shell {
        Some(line) => ExecSpec::shell(line.clone()),
        None => ExecSpec::argv(args.argv.iter().cloned()),
    };
    set_process(&mut spec, &args.process);
    spec
}

/// Sets where, with what environment and as whom `spec` runs (exec, run and shell).
pub(super) fn set_process(spec: &mut ExecSpec, process: &ProcessArgs) {
    spec.cwd = process.cwd.clone();
    spec.env = process.env.iter().cloned().collect();
    spec.user = process.user.clone();
}

/// How a CLI user gives a sandbox more memory.
pub(super) const CLI_MORE_MEMORY: &str = "create the sandbox with more, e.g. `atoll create --memory 2048`";

/// `atoll exec`.
pub(super) async fn exec(ctx: &Ctx, args: ExecArgs) -> Result<u8> {
    let mut spec = spec(&args.command);
    spec.timeout = args.timeout;
    spec.output_limit = args.output_limit;
    if args.tty {
        if !crate::tty::stdin_is_terminal() {
            return Err(crate::tty::TtyError::NotATerminal {
                what: "`atoll exec -t`",
                instead: "drop -t and pipe the input to `atoll exec -- CMD` instead",
            }
            .into());
        }
        return super::shell::session(&ctx.client().await?, &spec).await;
    }
    let forward_stdin = args.interactive || !std::io::stdin().is_terminal();
    if args.capture || ctx.out.json {
        if forward_stdin {
            spec.stdin = read_stdin_capped().await?.into();
        }
        return capture(ctx, &spec).await;
    }
    let client = ctx.client().await?;
    let stdin = forward_stdin.then(tokio::io::stdin);
    let mut events = client.exec_stream(&spec, stdin).await?;
    let mut stdout = crate::output::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(event) = events.next().await {
        match event? {
            ExecEvent::Started { pid } => tracing::debug!("started as pid {pid} in the guest"),
            ExecEvent::Stdout(b) => {
                stdout.write_all(&b).await?;
                stdout.flush().await?;
            }
            ExecEvent::Stderr(b) => {
                stderr.write_all(&b).await?;
                stderr.flush().await?;
            }
            ExecEvent::Exited(status) => {
                if status.timed_out {
                    stderr
                        .write_all(b"atoll: the command hit its timeout and was killed (exit code 124); raise --timeout (at most 10m) or use `atoll run -d`\n")
                        .await?;
                }
                if let Some(note) = status.oom_note(CLI_MORE_MEMORY) {
                    stderr.write_all(format!("atoll: {note}\n").as_bytes()).await?;
                }
                // tokio's stderr hands writes to a thread: flush, or `main` may return first.
                stderr.flush().await?;
                return Ok(status.shell_code());
            }
        }
    }
    Err(ClientError::Protocol { rpc: "ExecStream", what: "the stream ended without an exit status" }.into())
}

async fn capture(ctx: &Ctx, spec: &ExecSpec) -> Result<u8> {
    let client = ctx.client().await?;
    let r = client.exec(spec).await?;
    if ctx.out.json {
        ctx.out.json(&r)?;
    } else {
        let mut stdout = crate::output::stdout();
        stdout.write_all(&r.stdout.data).await?;
        stdout.flush().await?;
        let mut stderr = tokio::io::stderr();
        stderr.write_all(&r.stderr.data).await?;
        for (name, c) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if c.truncated {
                let note = format!(
                    "atoll: {name} was {} bytes; only its head and tail are shown (drop --capture to stream all of it)\n",
                    c.total_bytes
                );
                stderr.write_all(note.as_bytes()).await?;
            }
        }
        if let Some(note) = r.status.oom_note(CLI_MORE_MEMORY) {
            stderr.write_all(format!("atoll: {note}\n").as_bytes()).await?;
        }
        stderr.flush().await?;
    }
    Ok(r.status.shell_code())
}

async fn read_stdin_capped() -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    tokio::io::stdin()
        .take(CAPTURE_STDIN_LIMIT + 1)
        .read_to_end(&mut buf)
        .await
        .context("could not read stdin to send to the command")?;
    if buf.len() as u64 > CAPTURE_STDIN_LIMIT {
        return Err(UsageError(format!(
            "stdin is over {CAPTURE_STDIN_LIMIT} bytes, too much for --capture/--json; drop them to stream stdin instead"
        ))
        .into());
    }
    Ok(buf)
}
