//! Long calls: progress notifications while they run, and cancellation.
//!
//! Clients reset their tool timeout when progress arrives, so a command that runs for
//! minutes is not abandoned. A `notifications/cancelled` cancels the request's token;
//! the call's future is then dropped, which drops the gRPC call, and the agent kills the
//! command's process group when its client goes away.

use std::future::Future;
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;

use crate::mcp::error::ToolError;

/// How often a running call reports progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long past a call's own timeout we wait for the agent before giving up on it.
pub const AGENT_GRACE: Duration = Duration::from_secs(15);

/// Runs `call`, reporting progress every [`PROGRESS_EVERY`] when the request asked for it
/// (it carried a `progressToken`), and abandoning it when the client cancels.
///
/// `total` is the most the call can take (its timeout), reported so clients can draw a
/// bar; `verb` starts the message ("running 3 s"). Should the agent stay silent for
/// [`AGENT_GRACE`] past `total`, the call is dropped with [`ToolError::AgentSilent`]
/// rather than left hanging.
pub async fn run_with_progress<F: Future>(
    context: &RequestContext<RoleServer>,
    total: Option<Duration>,
    verb: &str,
    call: F,
) -> Result<F::Output, ToolError> {
    run_ticking(context, total, verb, None, call).await
}

/// One phase of a call made of several (fetch and build, then boot): like
/// [`run_with_progress`], but a notification names the phase as soon as it starts, and
/// the progress counts fractional seconds since `since`, the call's start, so it keeps
/// increasing from one phase to the next as the protocol requires.
pub async fn run_phase<F: Future>(
    context: &RequestContext<RoleServer>,
    total: Option<Duration>,
    verb: &str,
    since: Instant,
    call: F,
) -> Result<F::Output, ToolError> {
    run_ticking(context, total, verb, Some(since), call).await
}

async fn run_ticking<F: Future>(
    context: &RequestContext<RoleServer>,
    total: Option<Duration>,
    verb: &str,
    since: Option<Instant>,
    call: F,
) -> Result<F::Output, ToolError> {
    let token = context.meta.get_progress_token();
    if let (Some(token), Some(since)) = (token.clone(), since) {
        let param = ProgressNotificationParam::new(token, since.elapsed().as_secs_f64())
            .with_message(format!("{verb}: started"));
        if let Err(error) = context.peer.notify_progress(param).await {
            tracing::debug!(%error, "could not send a progress notification");
        }
    }
    let started = Instant::now();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let give_up = total.map(|total| total + AGENT_GRACE);
    let deadline = tokio::time::sleep(give_up.unwrap_or(Duration::from_secs(365 * 24 * 3600)));
    tokio::pin!(call, deadline);
    loop {
        tokio::select! {
            output = &mut call => return Ok(output),
            () = &mut deadline, if give_up.is_some() => {
                let secs = give_up.map_or(0, |d| d.as_secs());
                tracing::warn!("the agent did not answer within {secs} s; dropping the call");
                return Err(ToolError::AgentSilent { secs });
            }
            () = context.ct.cancelled() => {
                tracing::info!("tool call cancelled by the client; dropping the agent call");
                return Err(ToolError::Cancelled);
            }
            _ = ticks.tick(), if token.is_some() => {
                let Some(token) = token.clone() else { continue };
                let secs = started.elapsed().as_secs();
                let done = since.map_or(secs as f64, |since| since.elapsed().as_secs_f64());
                let mut param = ProgressNotificationParam::new(token, done)
                    .with_message(format!("{verb} {secs} s"));
                if let Some(total) = total {
                    param = param.with_total(total.as_secs_f64().ceil());
                }
                if let Err(error) = context.peer.notify_progress(param).await {
                    tracing::debug!(%error, "could not send a progress notification");
                }
            }
        }
    }
}
