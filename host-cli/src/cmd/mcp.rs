//! `atoll mcp`: serve the agent's abilities as MCP tools on stdin/stdout, for Claude Code,
//! Cursor, VS Code, Windsurf, Codex or any MCP client, or with `--http ADDR` over
//! Streamable HTTP for many clients at once. On stdio, stdout carries only the protocol;
//! logs go to stderr.

use std::io::IsTerminal;

use anyhow::{Result, bail};

use crate::cli::McpArgs;
use crate::cmd::{Ctx, UsageError};
use crate::mcp::http::auth::BearerToken;
use crate::mcp::http::{HttpOptions, serve_http};
use crate::mcp::{AtollMcp, serve_stdio};
use crate::sandbox::Target;

/// The environment variable that gives the HTTP bearer token inline.
const TOKEN_ENV: &str = "ATOLL_MCP_TOKEN";

/// The token file `atoll mcp --http` makes in the state directory when given no token.
const MADE_TOKEN_FILE: &str = "mcp-token";

/// Runs the MCP server until the client closes stdin (or, over HTTP, until SIGINT or
/// SIGTERM). `--agent` (or `ATOLL_AGENT`) pins the agent that guest tools act on when a
/// call names no sandbox; `--sandbox` (or `ATOLL_SANDBOX`) pins a sandbox instead.
pub(crate) async fn mcp(ctx: &Ctx, args: McpArgs) -> Result<u8> {
    let mut allowed = Vec::new();
    for dir in &args.allow_mount {
        let real = crate::sandbox::mounts::canonical_dir(dir)
            .map_err(|e| UsageError(format!("--allow-mount: {e}")))?;
        allowed.push(real);
    }
    let pinned =
        Target::from_flags(ctx.global.agent.as_deref(), ctx.global.sandbox.as_deref())?.map(pin_by_id);
    if let Some(pinned) = &pinned {
        tracing::info!("atoll mcp: guest tools default to {pinned}");
    }
    let server = AtollMcp::new(pinned, ctx.global.connect_timeout)
        .idle_timeout(args.idle_timeout)
        .allow_mounts(allowed)
        .allow_private_egress(args.allow_private_egress.clone())
        .allow_registry_credentials(args.registry_credentials)
        .allow_secrets(if args.allow_all_secrets {
            crate::mcp::tools::secrets::SecretGrant::All
        } else {
            crate::mcp::tools::secrets::SecretGrant::Named(args.secrets.clone())
        })
        .share(crate::mcp::access::Shared {
            sandboxes: shared_ids(&args.share_sandbox)?,
            cli_sandboxes: args.share_cli_sandboxes,
        });
    if let Some(bind) = args.http {
        let (token, made_token_file) = match token(&args)? {
            Some(token) => (token, None),
            None => {
                let path = crate::sandbox::state_file(MADE_TOKEN_FILE)?;
                (crate::mcp::http::auth::made_token(&path)?, Some(path))
            }
        };
        let options = HttpOptions {
            bind,
            token,
            made_token_file,
            max_sessions: args.max_sessions as usize,
            max_in_flight: args.max_in_flight as usize,
            allowed_hosts: args.allowed_host,
            allowed_origins: args.allowed_origin,
        };
        serve_http(server, options).await?;
        return Ok(0);
    }
    if std::io::stdin().is_terminal() {
        eprintln!(
            "atoll mcp speaks the Model Context Protocol on stdin/stdout; an MCP client starts it, \
             e.g. `claude mcp add atoll -- atoll mcp` (see docs/mcp.md), or serve it over HTTP with \
             `atoll mcp --http 127.0.0.1:8765`. Waiting for a client; Ctrl-D ends."
        );
    }
    serve_stdio(server).await?;
    Ok(0)
}

/// The token from `--token-file` or `ATOLL_MCP_TOKEN`, never both.
fn token(args: &McpArgs) -> Result<Option<BearerToken>> {
    let inline = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    Ok(match (&args.token_file, inline) {
        (Some(_), Some(_)) => {
            bail!(
                "both --token-file and {TOKEN_ENV} give a token; keep one (unset {TOKEN_ENV}, or drop --token-file)"
            )
        }
        (Some(path), None) => Some(BearerToken::from_file(path)?),
        (None, Some(text)) => Some(BearerToken::new(&text, TOKEN_ENV)?),
        (None, None) => None,
    })
}

/// The exact ids of the sandboxes `--share-sandbox` names, resolved once, now: a sandbox
/// made later under a shared name (after the shared one was removed, by a client that
/// wants the others to use its sandbox) is not handed over with it.
fn shared_ids(names: &[String]) -> Result<Vec<String>> {
    names
        .iter()
        .map(|name| match crate::sandbox::get(name) {
            Ok(info) => Ok(info.id),
            Err(e) => Err(UsageError(format!("--share-sandbox {name}: {e}")).into()),
        })
        .collect()
}

/// A sandbox pinned by name is pinned by its id when it exists now: a sandbox made later
/// under that name (once the pinned one is removed, by any client) is not the pinned
/// one. One that does not exist yet stays pinned by name.
fn pin_by_id(pinned: Target) -> Target {
    match pinned {
        Target::Sandbox(name) => match crate::sandbox::get(&name) {
            Ok(info) => Target::Sandbox(info.id),
            Err(_) => Target::Sandbox(name),
        },
        agent => agent,
    }
}
