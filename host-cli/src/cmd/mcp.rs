//! `sbx mcp`: serve the agent's abilities as MCP tools on stdin/stdout, for Claude Code,
//! Cursor, VS Code, Windsurf, Codex or any MCP client. stdout carries only the
//! protocol; logs go to stderr.

use std::io::IsTerminal;

use anyhow::Result;

use crate::cmd::Ctx;
use crate::mcp::{Pinned, SbxMcp, serve_stdio};
use crate::target::TargetError;

/// Runs the MCP server until the client closes stdin. `--agent` (or `SBX_AGENT`) pins
/// the agent that guest tools act on when a call names no sandbox; `--sandbox` (or
/// `SBX_SANDBOX`) pins a sandbox instead.
pub(crate) async fn mcp(ctx: &Ctx) -> Result<u8> {
    let pinned = match (ctx.global.agent.as_deref(), ctx.global.sandbox.as_deref()) {
        (Some(agent), Some(sandbox)) => {
            return Err(TargetError::Conflict { agent: agent.to_owned(), sandbox: sandbox.to_owned() }.into());
        }
        (Some(agent), None) => Some(Pinned::Agent(agent.parse().map_err(TargetError::BadAddress)?)),
        (None, Some(sandbox)) => Some(Pinned::Sandbox(sandbox.to_owned())),
        (None, None) => None,
    };
    if let Some(pinned) = &pinned {
        tracing::info!("sbx mcp: guest tools default to {pinned}");
    }
    if std::io::stdin().is_terminal() {
        eprintln!(
            "sbx mcp speaks the Model Context Protocol on stdin/stdout; an MCP client starts it, \
             e.g. `claude mcp add sbx -- sbx mcp` (see docs/mcp.md). Waiting for a client; Ctrl-D ends."
        );
    }
    serve_stdio(SbxMcp::new(pinned, ctx.global.connect_timeout)).await?;
    Ok(0)
}
