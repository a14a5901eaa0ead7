//! `sbx mcp`: serve the agent's abilities as MCP tools on stdin/stdout, for Claude Code,
//! Cursor, VS Code, Windsurf, Codex or any MCP client. stdout carries only the
//! protocol; logs go to stderr.

use std::io::IsTerminal;

use anyhow::Result;

use crate::cli::McpArgs;
use crate::cmd::{Ctx, UsageError};
use crate::mcp::{SbxMcp, serve_stdio};
use crate::sandbox::Target;

/// Runs the MCP server until the client closes stdin. `--agent` (or `SBX_AGENT`) pins
/// the agent that guest tools act on when a call names no sandbox; `--sandbox` (or
/// `SBX_SANDBOX`) pins a sandbox instead.
pub(crate) async fn mcp(ctx: &Ctx, args: McpArgs) -> Result<u8> {
    let mut allowed = Vec::new();
    for dir in &args.allow_mount {
        let real = crate::sandbox::mounts::canonical_dir(dir)
            .map_err(|e| UsageError(format!("--allow-mount: {e}")))?;
        allowed.push(real);
    }
    let pinned = Target::from_flags(ctx.global.agent.as_deref(), ctx.global.sandbox.as_deref())?;
    if let Some(pinned) = &pinned {
        tracing::info!("sbx mcp: guest tools default to {pinned}");
    }
    if std::io::stdin().is_terminal() {
        eprintln!(
            "sbx mcp speaks the Model Context Protocol on stdin/stdout; an MCP client starts it, \
             e.g. `claude mcp add sbx -- sbx mcp` (see docs/mcp.md). Waiting for a client; Ctrl-D ends."
        );
    }
    serve_stdio(SbxMcp::new(pinned, ctx.global.connect_timeout).allow_mounts(allowed)).await?;
    Ok(0)
}
