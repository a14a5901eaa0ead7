//! `sandbox_run_code`: a snippet run by an interpreter in the sandbox, with the same
//! capped result as `sandbox_exec` (see [`crate::sandbox::run_code`]).

use std::time::Duration;

use atoll_proto::limits::DEFAULT_OUTPUT_LIMIT;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{Json, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::mcp::error::{MAX_INLINE_WRITE, ToolError};
use crate::mcp::progress::run_with_progress;
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::AtollMcp;
use crate::mcp::tools::exec::{ExecOutput, checked_timeout};
use crate::sandbox::run_code::{Language, run_code};

/// Arguments of `sandbox_run_code`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// "python" (python3), "node" or "sh".
    pub language: Language,
    /// The program text, at most 8 MiB; it is passed to the interpreter on its own
    /// input, not through a command line, so no quoting is needed.
    pub code: String,
    /// Milliseconds before the interpreter's whole process group is killed. Default
    /// 60000, at most 600000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 600_000))]
    pub timeout_ms: Option<u64>,
}

#[tool_router(router = run_code_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Runs a snippet of code with an interpreter in the sandbox.
    #[tool(
        name = "sandbox_run_code",
        description = "Run a snippet of code inside the sandbox with python3, node or sh and wait \
            for it. Returns the same result as sandbox_exec: exit_code, stdout and stderr (each \
            capped at 32 KiB, head and tail kept), timed_out, duration_ms. The code is given to \
            the interpreter as is (no quoting); its own standard input is empty; it runs in / \
            with a timeout of timeout_ms (default 60000). An interpreter the sandbox lacks is an \
            error naming the templates that have one.",
        annotations(
            title = "Run code",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_run_code(
        &self,
        Parameters(args): Parameters<RunCodeArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<ExecOutput>, ToolError> {
        let bytes = args.code.len() as u64;
        if bytes > MAX_INLINE_WRITE {
            return Err(ToolError::CodeTooLarge { bytes });
        }
        let timeout = Duration::from_millis(u64::from(checked_timeout(args.timeout_ms)?));
        let mut spec = args.language.spec(&args.code);
        spec.timeout = Some(timeout);
        spec.output_limit = Some(DEFAULT_OUTPUT_LIMIT);
        let client = self.client(args.sandbox.id()).await?;
        let run = run_code(&client, args.language, &spec);
        let result = run_with_progress(&context, Some(timeout), "running", run).await??;
        Ok(Json(result.into()))
    }
}
