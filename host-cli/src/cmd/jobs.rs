//! `atoll run`, `atoll jobs`, `atoll job status|wait|kill|logs`: background jobs, whose whole
//! output the agent keeps in log files in the guest.

use anyhow::Result;
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::Ctx;
use crate::cli::{JobCommand, JobKillArgs, JobLogsArgs, JobWaitArgs, RunArgs};
use crate::client::{Client, Job, JobState, ReadOpts, TIMEOUT_EXIT_CODE};
use crate::output::escape_controls;
use crate::sandbox::files;

/// Cap on a log read into memory for `atoll job logs --json`.
const JSON_LOG_LIMIT: u64 = 16 * 1024 * 1024;

/// `atoll run`: start a job; with `-d` return at once, else wait and print its output.
pub(super) async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    let mut spec = super::exec::spec(&args.command);
    spec.timeout = args.timeout;
    let client = ctx.client().await?;
    let job = client.start_job(&spec).await?;
    if args.detach {
        if ctx.out.json {
            ctx.out.json(&job)?;
        } else {
            ctx.out.text(&escape_controls(&job.id))?;
        }
        return Ok(0);
    }
    let job = wait_until_exited(&client, &job.id).await?;
    if ctx.out.json {
        ctx.out.json(&job)?;
    } else {
        copy_log(&client, &job.stdout.log_path, &mut crate::output::stdout()).await?;
        copy_log(&client, &job.stderr.log_path, &mut tokio::io::stderr()).await?;
        if let Some(note) = job.status.and_then(|s| s.oom_note(super::exec::CLI_MORE_MEMORY)) {
            eprintln!("atoll: {note}");
        }
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

/// `atoll jobs`.
pub(super) async fn list(ctx: &Ctx) -> Result<u8> {
    let jobs = ctx.client().await?.jobs().await?;
    if ctx.out.json {
        ctx.out.json(&jobs)?;
        return Ok(0);
    }
    let mut text = format!("{:<14} {:<8} {:>7} {:>5}  COMMAND\n", "ID", "STATE", "PID", "EXIT");
    for j in &jobs {
        let (id, command) = (escape_controls(&j.id), escape_controls(&j.command));
        text.push_str(&format!("{id:<14} {:<8} {:>7} {:>5}  {command}\n", state(j), j.pid, exit(j)));
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
        Some(s) if s.oom_killed => "oom".to_string(),
        Some(s) => match (s.code, s.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("sig{sig}"),
            _ => "-".to_string(),
        },
        None => "-".to_string(),
    }
}

/// `atoll job ...`.
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
        escape_controls(&job.id),
        state(job),
        job.pid,
        exit(job),
        escape_controls(&job.command),
        escape_controls(&job.stdout.log_path),
        job.stdout.total_bytes,
        escape_controls(&job.stderr.log_path),
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

/// `atoll job logs`: the whole log file, streamed.
async fn logs(ctx: &Ctx, args: JobLogsArgs) -> Result<u8> {
    if args.follow && ctx.out.json {
        return Err(super::UsageError("--follow prints raw output; drop --json".to_string()).into());
    }
    let client = ctx.client().await?;
    if args.follow {
        return follow(&client, &args.id, args.stderr).await;
    }
    let job = client.job(&args.id).await?;
    let log = if args.stderr { &job.stderr.log_path } else { &job.stdout.log_path };
    if ctx.out.json {
        let data = files::read_to_vec(&client, log, ReadOpts::default(), JSON_LOG_LIMIT).await?.data;
        let doc = serde_json::json!({
            "id": job.id,
            "stream": if args.stderr { "stderr" } else { "stdout" },
            "log_path": log,
            "data": String::from_utf8_lossy(&data),
        });
        ctx.out.json(&doc)?;
    } else {
        copy_log(&client, log, &mut crate::output::stdout()).await?;
    }
    Ok(0)
}

/// `atoll job logs -f`: prints what the log gained since the last look, until the job
/// has exited and its log is printed to the end.
async fn follow(client: &Client, id: &str, stderr: bool) -> Result<u8> {
    let mut out = crate::output::stdout();
    let mut offset = 0;
    loop {
        // The state is taken before reading, so the read after an exit sees every byte.
        let job = client.job(id).await?;
        let log = if stderr { &job.stderr.log_path } else { &job.stdout.log_path };
        offset += copy_log_from(client, log, offset, &mut out).await?;
        if job.state != JobState::Running {
            return Ok(exit_code(&job));
        }
        // Returns early when the job exits; otherwise it paces the polling.
        client.wait_job(id, Some(FOLLOW_INTERVAL)).await?;
    }
}

/// How often `atoll job logs -f` looks for new output while the job runs.
const FOLLOW_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

async fn copy_log<W: AsyncWrite + Unpin>(client: &Client, path: &str, out: &mut W) -> Result<()> {
    copy_log_from(client, path, 0, out).await.map(|_| ())
}

/// Copies the log from `offset` to its current end; returns the bytes copied.
async fn copy_log_from<W: AsyncWrite + Unpin>(
    client: &Client,
    path: &str,
    offset: u64,
    out: &mut W,
) -> Result<u64> {
    let mut read = client.read_file(path, ReadOpts { offset, ..ReadOpts::default() }).await?;
    let mut copied = 0;
    while let Some(chunk) = read.chunks.next().await {
        let chunk = chunk?;
        out.write_all(&chunk).await?;
        copied += chunk.len() as u64;
    }
    out.flush().await?;
    Ok(copied)
}
