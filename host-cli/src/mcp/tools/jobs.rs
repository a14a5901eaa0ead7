//! Background jobs: `sandbox_exec_background`, `sandbox_job_status`, `sandbox_job_kill`
//! and `sandbox_job_list`.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{Json, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::client::{ClientError, Job, JobOutput, JobState};
use crate::mcp::error::{ToolError, human_bytes};
use crate::mcp::progress::run_with_progress;
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::{lossy_note, lossy_text, parse_signal, rfc3339_ms};
use crate::mcp::tools::exec::{checked_ms, shell_spec};

/// Arguments of `sandbox_exec_background`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackgroundArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Shell command line, run as `/bin/sh -c COMMAND` inside the sandbox.
    pub command: String,
    /// Working directory, an absolute path. Default: `/`.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables, added to the sandbox's own.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Milliseconds after which the job is killed. Default: it runs until it ends or is
    /// killed with sandbox_job_kill.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// Arguments of `sandbox_job_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// The job_id sandbox_exec_background returned.
    pub job_id: String,
    /// Wait up to this many milliseconds for the job to exit before answering (at most
    /// 600000). Default: answer at once.
    #[serde(default)]
    #[schemars(range(min = 1, max = 600_000))]
    pub wait_ms: Option<u64>,
}

/// Arguments of `sandbox_job_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// The job_id sandbox_exec_background returned.
    pub job_id: String,
    /// Signal to send to the job's whole process group: a name ("TERM", "INT", "KILL",
    /// "HUP") or a number. Default: "KILL".
    #[serde(default)]
    pub signal: Option<String>,
}

/// Arguments of `sandbox_job_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
}

/// Whether a job runs: "running", "exited" (exit_code or signal says how) or "unknown"
/// (the agent did not say).
// Output types are inlined (no `$ref`) and this enum has no per-variant docs, so its schema
// is a plain string enum: cheap for clients that validate every result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum JobStateView {
    Running,
    Exited,
    Unknown,
}

/// A background job as a model sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct JobView {
    /// The job's id, for sandbox_job_status and sandbox_job_kill.
    pub job_id: String,
    /// Whether the job is still running.
    pub state: JobStateView,
    /// The job's process id in the sandbox.
    pub pid: u32,
    /// The command, on one line.
    pub command: String,
    /// When the job started (RFC 3339, UTC).
    pub started_at: String,
    /// Exit code once the job has exited; absent while it runs or when a signal ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the job, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// True when the job was killed because its timeout passed.
    pub timed_out: bool,
    /// How long the job ran, once it has exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The last few KiB of standard output.
    pub stdout_tail: String,
    /// The last few KiB of standard error.
    pub stderr_tail: String,
    /// Bytes written to stdout so far.
    pub stdout_bytes: u64,
    /// Bytes written to stderr so far.
    pub stderr_bytes: u64,
    /// Sandbox path of the log holding all of stdout (read it with sandbox_files_read).
    pub stdout_log: String,
    /// Sandbox path of the log holding all of stderr.
    pub stderr_log: String,
    /// What to know about this result (partial tails, invalid UTF-8).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Result of `sandbox_job_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    /// Every job this sandbox's agent started, oldest first.
    pub jobs: Vec<JobView>,
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        let stdout = lossy_text(&job.stdout.tail);
        let stderr = lossy_text(&job.stderr.tail);
        let mut notes = Vec::new();
        notes.extend(lossy_note(&[("stdout_tail", stdout.lossy), ("stderr_tail", stderr.lossy)]));
        notes.extend(partial_tail_note("stdout", &job.stdout));
        notes.extend(partial_tail_note("stderr", &job.stderr));
        let state = match job.state {
            JobState::Running => JobStateView::Running,
            JobState::Exited => JobStateView::Exited,
            JobState::Unknown => JobStateView::Unknown,
        };
        let status = job.status;
        JobView {
            job_id: job.id,
            state,
            pid: job.pid,
            command: job.command,
            started_at: rfc3339_ms(job.started_at_unix_ms),
            exit_code: status.and_then(|s| s.code),
            signal: status.and_then(|s| s.signal),
            timed_out: status.is_some_and(|s| s.timed_out),
            duration_ms: status.map(|s| s.duration_ms),
            stdout_tail: stdout.text,
            stderr_tail: stderr.text,
            stdout_bytes: job.stdout.total_bytes,
            stderr_bytes: job.stderr.total_bytes,
            stdout_log: job.stdout.log_path,
            stderr_log: job.stderr.log_path,
            notes,
        }
    }
}

/// An unknown job id also points at sandbox_job_list.
fn job_error(error: ClientError) -> ToolError {
    match error {
        ClientError::Agent { code: tonic::Code::NotFound, message, .. } => {
            ToolError::NoSuchJob { agent: message }
        }
        other => other.into(),
    }
}

fn partial_tail_note(name: &str, output: &JobOutput) -> Option<String> {
    (output.total_bytes > output.tail.len() as u64).then(|| {
        format!(
            "{name}_tail is the last {} of {}; read {} with sandbox_files_read (offset/length) \
             for the rest",
            human_bytes(output.tail.len() as u64),
            human_bytes(output.total_bytes),
            output.log_path
        )
    })
}

#[tool_router(router = jobs_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Starts a command in the background.
    #[tool(
        name = "sandbox_exec_background",
        description = "Start a shell command in the background inside the sandbox and return at \
            once with its job_id, pid and the sandbox paths of its stdout/stderr logs. Use it for \
            servers, watchers and builds that may take longer than sandbox_exec allows. Check it \
            with sandbox_job_status (optionally waiting), stop it with sandbox_job_kill.",
        annotations(
            title = "Start a background command",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_exec_background(
        &self,
        Parameters(args): Parameters<BackgroundArgs>,
    ) -> Result<Json<JobView>, ToolError> {
        let mut spec = shell_spec(args.command, args.cwd, args.env)?;
        spec.timeout = match args.timeout_ms {
            None => None,
            Some(ms @ 1..=0xffff_ffff) => Some(Duration::from_millis(ms)),
            Some(got) => {
                return Err(ToolError::TimeoutOutOfRange { field: "timeout_ms", got, max: 0xffff_ffff });
            }
        };
        let job = self.client(args.sandbox.id()).await?.start_job(&spec).await?;
        Ok(Json(job.into()))
    }

    /// A job's state and the tail of its output.
    #[tool(
        name = "sandbox_job_status",
        description = "Get a background job's state (running or exited), exit code, and the last \
            few KiB of its stdout and stderr, with the byte counts and log paths. Pass wait_ms to \
            wait up to that long for the job to exit first (progress is sent while waiting).",
        annotations(
            title = "Check a background job",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_job_status(
        &self,
        Parameters(args): Parameters<StatusArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<JobView>, ToolError> {
        let wait = args.wait_ms.map(|ms| checked_ms("wait_ms", ms)).transpose()?;
        let wait = wait.map(|ms| Duration::from_millis(u64::from(ms)));
        let client = self.client(args.sandbox.id()).await?;
        let job = match wait {
            None => client.job(&args.job_id).await.map_err(job_error)?,
            Some(wait) => {
                run_with_progress(&context, Some(wait), "waiting", client.wait_job(&args.job_id, Some(wait)))
                    .await?
                    .map_err(job_error)?
            }
        };
        Ok(Json(job.into()))
    }

    /// Signals a job's process group.
    #[tool(
        name = "sandbox_job_kill",
        description = "Send a signal (default KILL) to a background job's whole process group, \
            and return the job's state. Pass signal \"TERM\" or \"INT\" to let it shut down \
            cleanly; the state may still say running for a moment after a polite signal.",
        annotations(
            title = "Stop a background job",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_job_kill(
        &self,
        Parameters(args): Parameters<KillArgs>,
    ) -> Result<Json<JobView>, ToolError> {
        let signal = match args.signal.as_deref() {
            None | Some("") => libc::SIGKILL,
            Some(name) => parse_signal(name)?,
        };
        let job = self
            .client(args.sandbox.id())
            .await?
            .signal_job(&args.job_id, signal)
            .await
            .map_err(job_error)?;
        Ok(Json(job.into()))
    }

    /// Every job the agent started.
    #[tool(
        name = "sandbox_job_list",
        description = "List the background jobs started in the sandbox, oldest first, each with \
            its job_id, state, exit code and output tails.",
        annotations(
            title = "List background jobs",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_job_list(
        &self,
        Parameters(args): Parameters<JobListArgs>,
    ) -> Result<Json<JobList>, ToolError> {
        let jobs = self.client(args.sandbox.id()).await?.jobs().await?;
        Ok(Json(JobList { jobs: jobs.into_iter().map(JobView::from).collect() }))
    }
}
