//! `sbx run`, `sbx jobs`, `sbx job status|wait|kill|logs`: background jobs, whose whole
//! output the agent keeps in log files in the guest.

use anyhow::Result;
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::Ctx;
use crate::cli::{JobCommand, JobKillArgs, JobLogsArgs, JobWaitArgs, RunArgs};
use crate::client::{Client, Job, JobState, ReadOpts, TIMEOUT_EXIT_CODE};

/// Cap on a log read into memory for `sbx job logs --json`.
const JSON_LOG_LIMIT: u64 = 16 * 1024 * 1024;

/// `sbx run`: start a job; with `-d` return at once, else wait and print its output.
pub(super) async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    let mut spec = super::exec::spec(&args.command);
    spec.timeout = args.timeout;
    let client = ctx.client().await?;
    let job = client.start_job(&spec).await?;
    if args.detach {
        if ctx.out.json {
            ctx.out.json(&job)?;
        } else {
            ctx.out.text(&job.id)?;
        }
        return Ok(0);
    }
    let job = wait_until_exited(&client, &job.id).await?;
    if ctx.out.json {
        ctx.out.json(&job)?;
    } else {
        copy_log(&client, &job.stdout.log_path, &mut tokio::io::stdout()).await?;
        copy_log(&client, &job.stderr.log_path, &mut tokio::io::stderr()).await?;
    }
    Ok(exit_code(&job))
}

async fn wait_until_exited(client: &Client, id: &str) -> Result<Job> {
    loop {
        let job = client.wait_job(id, None).await?;
        if job.state != JobState::Running {
            return Ok(job);
        }
    }
}

fn exit_code(job: &Job) -> u8 {
    match (&job.state, &job.status) {
        (JobState::Running, _) => TIMEOUT_EXIT_CODE,
        (_, Some(status)) => status.shell_code(),
        (_, None) => crate::cli::EXIT_FAILURE,
    }
}

/// `sbx jobs`.
pub(super) async fn list(ctx: &Ctx) -> Result<u8> {
    let jobs = ctx.client().await?.jobs().await?;
    if ctx.out.json {
        ctx.out.json(&jobs)?;
        return Ok(0);
    }
    let mut text = format!("{:<14} {:<8} {:>7} {:>5}  COMMAND\n", "ID", "STATE", "PID", "EXIT");
    for j in &jobs {
        text.push_str(&format!("{:<14} {:<8} {:>7} {:>5}  {}\n", j.id, state(j), j.pid, exit(j), j.command));
    }
    ctx.out.text(&text)?;
    Ok(0)
}

fn state(j: &Job) -> &'static str {
    match j.state {
        JobState::Running => "running",
        JobState::Exited => "exited",
        JobState::Unknown => "unknown",
    }
}

fn exit(j: &Job) -> String {
    match j.status {
        Some(s) if s.timed_out => "tmo".to_string(),
        Some(s) => match (s.code, s.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("sig{sig}"),
            _ => "-".to_string(),
        },
        None => "-".to_string(),
    }
}

/// `sbx job ...`.
pub(super) async fn job(ctx: &Ctx, cmd: JobCommand) -> Result<u8> {
    match cmd {
        JobCommand::Status(a) => {
            let job = ctx.client().await?.job(&a.id).await?;
            show(ctx, &job)?;
            Ok(0)
        }
        JobCommand::Wait(JobWaitArgs { id, timeout }) => {
            let job = ctx.client().await?.wait_job(&id, timeout).await?;
            show(ctx, &job)?;
            Ok(exit_code(&job))
        }
        JobCommand::Kill(JobKillArgs { id, signal }) => {
            let job = ctx.client().await?.signal_job(&id, signal).await?;
            show(ctx, &job)?;
            Ok(0)
        }
        JobCommand::Logs(a) => logs(ctx, a).await,
    }
}

fn show(ctx: &Ctx, job: &Job) -> Result<()> {
    if ctx.out.json {
        ctx.out.json(job)?;
        return Ok(());
    }
    let mut text = format!(
        "id:       {}\nstate:    {}\npid:      {}\nexit:     {}\ncommand:  {}\nstdout:   {} ({} bytes)\nstderr:   {} ({} bytes)\n",
        job.id,
        state(job),
        job.pid,
        exit(job),
        job.command,
        job.stdout.log_path,
        job.stdout.total_bytes,
        job.stderr.log_path,
        job.stderr.total_bytes
    );
    for (name, out) in [("stdout", &job.stdout), ("stderr", &job.stderr)] {
        if !out.tail.is_empty() {
            text.push_str(&format!("--- tail of {name}\n{}", String::from_utf8_lossy(&out.tail)));
            if !out.tail.ends_with(b"\n") {
                text.push('\n');
            }
        }
    }
    ctx.out.text(&text)?;
    Ok(())
}

/// `sbx job logs`: the whole log file, streamed.
async fn logs(ctx: &Ctx, args: JobLogsArgs) -> Result<u8> {
    let client = ctx.client().await?;
    let job = client.job(&args.id).await?;
    let log = if args.stderr { &job.stderr.log_path } else { &job.stdout.log_path };
    if ctx.out.json {
        let data = client.read_to_vec(log, ReadOpts::default(), JSON_LOG_LIMIT).await?;
        let doc = serde_json::json!({
            "id": job.id,
            "stream": if args.stderr { "stderr" } else { "stdout" },
            "log_path": log,
            "data": String::from_utf8_lossy(&data),
        });
        ctx.out.json(&doc)?;
    } else {
        copy_log(&client, log, &mut tokio::io::stdout()).await?;
    }
    Ok(0)
}

async fn copy_log<W: AsyncWrite + Unpin>(client: &Client, path: &str, out: &mut W) -> Result<()> {
    let mut read = client.read_file(path, ReadOpts::default()).await?;
    while let Some(chunk) = read.chunks.next().await {
        out.write_all(&chunk?).await?;
    }
    out.flush().await?;
    Ok(())
}
