//! `atoll mcp --http ADDR`: the same tools over Streamable HTTP at `/mcp`, for many clients
//! at once (editors, SDK agents, remote agents sharing one sandbox host).
//!
//! The transport is rmcp's [`StreamableHttpService`]: clients speaking 2025-03-26,
//! 2025-06-18 or 2025-11-25 `initialize` and get a session (`Mcp-Session-Id`); clients
//! speaking 2026-07-28 send each request with its own `_meta` and are served statelessly.
//! Every session gets a clone of the one [`AtollMcp`], which keeps no session state, so
//! calls are independent whichever client makes them.
//!
//! In front of rmcp, outermost first:
//! - [`auth`]: the bearer token, always (made and written to a 0600 file when none is
//!   given): 401 otherwise; each token is a client of its own;
//! - [`limits`]: per-client caps on sessions and in-flight requests: 429 over them;
//! - [`hosts`]: `Host` and `Origin` checks against DNS rebinding: 403 otherwise;
//! - [`disconnect`]: a session client that drops its response mid-call cancels the call.

pub mod auth;
pub mod disconnect;
pub mod hosts;
pub mod limits;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::from_fn_with_state;
use axum::middleware::{Next, from_fn};
use axum::response::Response;
use axum::serve::ListenerExt;
use http::{Method, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::mcp::AtollMcp;
use auth::BearerToken;
use disconnect::Watch;
use hosts::{HostPolicy, HostsError};
use limits::Limits;

/// The path the tools are served at.
pub const MCP_PATH: &str = "/mcp";

/// The largest request body accepted: room for the biggest inline argument a tool takes
/// (an 8 MiB stdin, a 10 MiB zip in base64) with JSON's escaping.
pub const MAX_REQUEST_BYTES: usize = 32 << 20;

/// How long a session may go without a message before it is dropped: longer than the
/// longest call (a 10-minute `sandbox_exec` or boot, and the grace after it).
pub const SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// How `atoll mcp --http` serves.
#[derive(Debug)]
pub struct HttpOptions {
    /// The address to listen on (port 0: a free one, printed at start).
    pub bind: SocketAddr,
    /// The tokens clients must send (one per client).
    pub token: BearerToken,
    /// Where the token is when the server made it (printed at start).
    pub made_token_file: Option<std::path::PathBuf>,
    /// Sessions one client may hold open.
    pub max_sessions: usize,
    /// Requests one client may have in flight.
    pub max_in_flight: usize,
    /// `Host` names accepted besides the loopback ones and the bound address.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides loopback ones.
    pub allowed_origins: Vec<String>,
}

/// Why `atoll mcp --http` did not serve.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// An `--allowed-host` or `--allowed-origin` value was refused.
    #[error(transparent)]
    Hosts(#[from] HostsError),
    /// The address could not be bound.
    #[error("could not listen on {bind}; pick another port, or 0 for a free one")]
    Bind {
        /// The address asked for.
        bind: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an error.
    #[error("the HTTP server on {bind} stopped with an error")]
    Serve {
        /// The address served.
        bind: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Serves `server` over Streamable HTTP until SIGINT or SIGTERM.
pub async fn serve_http(server: AtollMcp, options: HttpOptions) -> Result<(), HttpError> {
    let HttpOptions {
        bind,
        token,
        made_token_file,
        max_sessions,
        max_in_flight,
        allowed_hosts,
        allowed_origins,
    } = options;
    let policy = Arc::new(HostPolicy::new(bind, &allowed_hosts, &allowed_origins)?);
    let shutdown = CancellationToken::new();
    let caps = Caps { max_sessions, max_in_flight };
    let router = router(server.over_http(), token, caps, &policy, shutdown.clone());
    let listener =
        tokio::net::TcpListener::bind(bind).await.map_err(|source| HttpError::Bind { bind, source })?;
    let local = listener.local_addr().map_err(|source| HttpError::Bind { bind, source })?;
    let auth = match &made_token_file {
        Some(path) => format!("bearer token required; it is in {} (mode 0600)", path.display()),
        None => "bearer token required".to_owned(),
    };
    // A fixed line on stderr whatever the log level: scripts and tests read the port here.
    // One write, so a reader never sees half the line.
    let line = format!("atoll mcp: serving MCP over Streamable HTTP at http://{local}{MCP_PATH} ({auth})\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    tracing::info!(hosts = ?policy.names(), "accepted Host names (and --allowed-host ones)");
    // Answers go out as several small writes (headers, SSE events); without NODELAY, Nagle
    // holds the later ones for the client's delayed ACK, tens of ms per call.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            wait_for_stop_signal().await;
            tracing::info!("atoll mcp: stopping; open calls are cancelled");
            shutdown.cancel();
        })
        .await
        .map_err(|source| HttpError::Serve { bind: local, source })
}

/// The per-client caps.
struct Caps {
    max_sessions: usize,
    max_in_flight: usize,
}

/// `/mcp` behind the token, host, cap and disconnect layers; cancelling `shutdown` ends
/// every session and stream.
fn router(
    server: AtollMcp,
    token: BearerToken,
    caps: Caps,
    policy: &Arc<HostPolicy>,
    shutdown: CancellationToken,
) -> Router {
    let mut sessions = LocalSessionManager::default();
    // No resumption: a dropped response stream is an abandoned call (see `disconnect`).
    sessions.session_config.sse_retry = None;
    // rmcp closes a session after this long without a message either way; a call that
    // sends no progress (none was asked for) must not outlive its session.
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    let sessions = Arc::new(sessions);
    let config = policy.apply(
        StreamableHttpServerConfig::default()
            .with_sse_retry(None)
            .with_max_request_body_bytes(MAX_REQUEST_BYTES)
            .with_cancellation_token(shutdown),
    );
    let service = StreamableHttpService::new(move || Ok(server.for_session()), sessions.clone(), config);
    let watch = Arc::new(Watch::new(sessions.clone(), MAX_REQUEST_BYTES));
    let limits = Arc::new(Limits::new(sessions, caps.max_sessions, caps.max_in_flight));
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(from_fn(session_end_no_content))
        .layer(from_fn_with_state(watch, disconnect::cancel_on_disconnect))
        .layer(from_fn_with_state(policy.clone(), hosts::check_host_and_origin))
        .layer(from_fn_with_state(limits, limits::cap_per_client))
        .layer(from_fn_with_state(Arc::new(token), auth::require_bearer))
}

/// Returns on SIGINT or SIGTERM (systemd stops a service with SIGTERM).
async fn wait_for_stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            tracing::warn!("could not watch SIGINT/SIGTERM; stop the server with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

/// Middleware: a `DELETE` that ended a session answers `204 No Content` rather than rmcp's
/// `202`, which both official SDKs log as a failed termination.
async fn session_end_no_content(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}
