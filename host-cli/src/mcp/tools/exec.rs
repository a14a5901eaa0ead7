//! `sandbox_exec`: run a command to completion and return its capped output.

use std::collections::BTreeMap;
use std::time::Duration;

use atoll_proto::limits::{DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS};
use bytes::Bytes;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{Json, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::client::{Captured, ExecResult, ExecSpec};
use crate::mcp::error::{MAX_INLINE_WRITE, ToolError, human_bytes};
use crate::mcp::progress::run_with_progress;
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::{lossy_note, lossy_text};

/// Arguments of `sandbox_exec`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Shell command line, run as `/bin/sh -c COMMAND` inside the sandbox; pipes,
    /// redirects and `&&` work.
    pub command: String,
    /// Working directory, an absolute path. Default: `/`.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables, added to the sandbox's own.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Text fed to the command's standard input, which is then closed; at most 8 MiB.
    /// Default: empty.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Milliseconds before the command's whole process group is killed. Default 60000,
    /// at most 600000; for longer work use sandbox_exec_background.
    #[serde(default)]
    #[schemars(range(min = 1, max = 600_000))]
    pub timeout_ms: Option<u64>,
}

/// Result of `sandbox_exec`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecOutput {
    /// The command's exit code; absent when a signal ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the command, when one did (TERM or KILL after a timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// True when the command was killed because timeout_ms passed.
    pub timed_out: bool,
    /// True when the guest's out-of-memory killer ended the command (signal 9); the
    /// notes say how much memory the sandbox has.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
    /// How long the command ran, in milliseconds.
    pub duration_ms: u64,
    /// Standard output; at most 32 KiB, the head and the tail with a marker between.
    pub stdout: String,
    /// Standard error; at most 32 KiB, the head and the tail with a marker between.
    pub stderr: String,
    /// True when part of stdout was left out.
    pub stdout_truncated: bool,
    /// True when part of stderr was left out.
    pub stderr_truncated: bool,
    /// Bytes the command wrote to stdout in all.
    pub stdout_bytes: u64,
    /// Bytes the command wrote to stderr in all.
    pub stderr_bytes: u64,
    /// What to know about this result (truncation, invalid UTF-8, timeout).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ExecArgs {
    /// The spec to run, or why these arguments cannot run.
    fn spec(self) -> Result<(ExecSpec, Duration), ToolError> {
        let mut spec = shell_spec(self.command, self.cwd, self.env)?;
        let stdin_bytes = self.stdin.as_ref().map_or(0, |stdin| stdin.len() as u64);
        if stdin_bytes > MAX_INLINE_WRITE {
            return Err(ToolError::StdinTooLarge { bytes: stdin_bytes });
        }
        let timeout_ms = checked_timeout(self.timeout_ms)?;
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        spec.timeout = Some(timeout);
        spec.output_limit = Some(DEFAULT_OUTPUT_LIMIT);
        spec.stdin = self.stdin.map(Bytes::from).unwrap_or_default();
        Ok((spec, timeout))
    }
}

/// The `/bin/sh -c COMMAND` spec of a tool's `command`, `cwd` (empty is the default) and
/// `env`, or [`ToolError::EmptyCommand`]: sandbox_exec and sandbox_exec_background both
/// start here.
pub(crate) fn shell_spec(
    command: String,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
) -> Result<ExecSpec, ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::EmptyCommand);
    }
    let mut spec = ExecSpec::shell(command);
    spec.cwd = cwd.filter(|cwd| !cwd.is_empty());
    spec.env = env.unwrap_or_default();
    Ok(spec)
}

/// `timeout_ms` checked against the agent's range; `None` is the default.
pub(crate) fn checked_timeout(timeout_ms: Option<u64>) -> Result<u32, ToolError> {
    timeout_ms.map_or(Ok(DEFAULT_TIMEOUT_MS), |got| checked_ms("timeout_ms", got))
}

/// `got` milliseconds checked against the agent's range (1 to [`MAX_TIMEOUT_MS`]); out
/// of it, the error names the argument `field`.
pub(crate) fn checked_ms(field: &'static str, got: u64) -> Result<u32, ToolError> {
    u32::try_from(got)
        .ok()
        .filter(|ms| (1..=MAX_TIMEOUT_MS).contains(ms))
        .ok_or(ToolError::TimeoutOutOfRange { field, got, max: u64::from(MAX_TIMEOUT_MS) })
}

impl From<ExecResult> for ExecOutput {
    fn from(result: ExecResult) -> Self {
        let stdout = lossy_text(&result.stdout.data);
        let stderr = lossy_text(&result.stderr.data);
        let mut notes = Vec::new();
        notes.extend(lossy_note(&[("stdout", stdout.lossy), ("stderr", stderr.lossy)]));
        notes.extend(truncation_note("stdout", &result.stdout));
        notes.extend(truncation_note("stderr", &result.stderr));
        if result.status.timed_out {
            notes.push(format!(
                "the command was killed after {} ms because timeout_ms passed; raise timeout_ms \
                 (at most {MAX_TIMEOUT_MS}) or start it with sandbox_exec_background",
                result.status.duration_ms
            ));
        }
        notes.extend(result.status.oom_note(
            "create a sandbox with more (sandbox_create with memory_mib, e.g. 2048) and run it there",
        ));
        ExecOutput {
            oom_killed: result.status.oom_killed,
            exit_code: result.status.code,
            signal: result.status.signal,
            timed_out: result.status.timed_out,
            duration_ms: result.status.duration_ms,
            stdout: stdout.text,
            stderr: stderr.text,
            stdout_truncated: result.stdout.truncated,
            stderr_truncated: result.stderr.truncated,
            stdout_bytes: result.stdout.total_bytes,
            stderr_bytes: result.stderr.total_bytes,
            notes,
        }
    }
}

fn truncation_note(name: &str, captured: &Captured) -> Option<String> {
    captured.truncated.then(|| {
        format!(
            "{name} was {}; only its head and tail are shown. Narrow the command (grep, head, \
             tail) or redirect {name} to a file and read slices of it with sandbox_files_read",
            human_bytes(captured.total_bytes)
        )
    })
}

#[tool_router(router = exec_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Runs a shell command to completion inside the sandbox.
    #[tool(
        name = "sandbox_exec",
        description = "Run a shell command inside the sandbox and wait for it to finish. Returns \
            exit_code, stdout and stderr (each capped at 32 KiB: head and tail kept, with \
            stdout_truncated/stderr_truncated and the full byte counts), timed_out and \
            duration_ms. The command runs as `/bin/sh -c`, in cwd (default /), with a timeout \
            of timeout_ms (default 60000, at most 600000). Sends progress while it runs. For \
            servers and anything longer, use sandbox_exec_background.",
        annotations(
            title = "Run a command",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_exec(
        &self,
        Parameters(args): Parameters<ExecArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<ExecOutput>, ToolError> {
        let sandbox_id = args.sandbox.sandbox_id.clone();
        let (spec, timeout) = args.spec()?;
        let client = self.client(sandbox_id.as_deref()).await?;
        let result = run_with_progress(&context, Some(timeout), "running", client.exec(&spec)).await??;
        Ok(Json(result.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ExitStatus;

    fn captured(data: &[u8], truncated: bool, total_bytes: u64) -> Captured {
        Captured { data: Bytes::copy_from_slice(data), truncated, total_bytes }
    }

    #[test]
    fn timeouts_default_and_are_bounded() {
        assert_eq!(checked_timeout(None).unwrap(), DEFAULT_TIMEOUT_MS);
        assert_eq!(checked_timeout(Some(600_000)).unwrap(), 600_000);
        assert!(checked_timeout(Some(0)).is_err());
        assert!(checked_timeout(Some(600_001)).is_err());
    }

    #[test]
    fn invalid_utf8_and_truncation_are_explained() {
        let result = ExecResult {
            status: ExitStatus {
                code: Some(3),
                signal: None,
                timed_out: false,
                duration_ms: 5,
                oom_killed: false,
                memory_total_bytes: None,
            },
            stdout: captured(b"bin\xff", false, 4),
            stderr: captured(b"head...tail", true, 100_000),
        };
        let out = ExecOutput::from(result);
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.stdout, "bin\u{fffd}");
        assert!(out.stderr_truncated);
        assert_eq!(out.stderr_bytes, 100_000);
        assert_eq!(out.notes.len(), 2, "{:?}", out.notes);
        assert!(out.notes[0].starts_with("stdout was not valid UTF-8"));
        assert!(out.notes[1].starts_with("stderr was 97.7 KiB"));
    }

    #[test]
    fn an_oom_kill_is_flagged_with_the_memory_and_the_fix_in_mcp_terms() {
        let result = ExecResult {
            status: ExitStatus {
                code: None,
                signal: Some(9),
                timed_out: false,
                duration_ms: 900,
                oom_killed: true,
                memory_total_bytes: Some(480 << 20),
            },
            stdout: captured(b"", false, 0),
            stderr: captured(b"", false, 0),
        };
        let out = ExecOutput::from(result);
        assert!(out.oom_killed);
        assert_eq!(out.signal, Some(9));
        assert_eq!(out.notes.len(), 1, "{:?}", out.notes);
        let note = &out.notes[0];
        assert!(note.contains("out-of-memory killer") && note.contains("480 MiB"), "{note}");
        assert!(note.contains("sandbox_create with memory_mib") && !note.contains("atoll "), "{note}");
    }
}
