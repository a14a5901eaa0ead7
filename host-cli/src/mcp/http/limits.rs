//! Per-client caps of `atoll mcp --http`: how many sessions one client (one token, see
//! [`ClientId`]) may hold open, and how many requests it may have in flight, so one client
//! cannot exhaust the server for the others. Over a cap, the request is answered
//! `429 Too Many Requests` with the limit and what to do, and nothing behind it runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::auth::ClientId;

/// Sessions one client may hold open by default (`--max-sessions`).
pub const DEFAULT_MAX_SESSIONS: u32 = 64;
/// Requests one client may have in flight by default (`--max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 128;

/// The session header (`Mcp-Session-Id`).
const SESSION_HEADER: &str = "mcp-session-id";

/// The caps and what each client holds.
pub struct Limits {
    max_sessions: usize,
    max_in_flight: usize,
    sessions: Arc<LocalSessionManager>,
    held: Mutex<HashMap<ClientId, Held>>,
}

#[derive(Default)]
struct Held {
    sessions: Vec<SessionId>,
    in_flight: usize,
}

impl Limits {
    /// Caps over the sessions of `sessions`.
    pub fn new(sessions: Arc<LocalSessionManager>, max_sessions: usize, max_in_flight: usize) -> Self {
        Limits { max_sessions, max_in_flight, sessions, held: Mutex::default() }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ClientId, Held>> {
        // Counts only; a panic elsewhere cannot leave them torn beyond one request.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Drops the sessions of `client` that rmcp no longer has (ended or expired).
    async fn live_sessions(&self, client: &ClientId) -> usize {
        let ids = self.held().get(client).map(|h| h.sessions.clone()).unwrap_or_default();
        let mut live = Vec::with_capacity(ids.len());
        for id in ids {
            if self.sessions.has_session(&id).await.unwrap_or(false) {
                live.push(id);
            }
        }
        let count = live.len();
        self.held().entry(client.clone()).or_default().sessions = live;
        count
    }
}

/// Gives back one in-flight slot when the response (its whole body) is done.
struct Slot {
    limits: Arc<Limits>,
    client: ClientId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(held) = self.limits.held().get_mut(&self.client) {
            held.in_flight = held.in_flight.saturating_sub(1);
        }
    }
}

fn too_many(what: String) -> Response {
    tracing::warn!("refused an HTTP request: {what}");
    (StatusCode::TOO_MANY_REQUESTS, [(header::CONNECTION, "close")], what).into_response()
}

/// Middleware (inside the token check, which names the client): refuses a new session
/// over the client's session cap and a request over its in-flight cap.
pub async fn cap_per_client(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let Some(client) = request.extensions().get::<ClientId>().cloned() else {
        return next.run(request).await;
    };
    let new_session =
        request.method() == http::Method::POST && !request.headers().contains_key(SESSION_HEADER);
    if new_session && limits.live_sessions(&client).await >= limits.max_sessions {
        return too_many(format!(
            "this client (token {client}) already holds {} MCP sessions, the most a client may; end one \
             (DELETE /mcp with its Mcp-Session-Id) or wait for an idle one to expire; the operator sets \
             the cap with `atoll mcp --max-sessions N`\n",
            limits.max_sessions
        ));
    }
    {
        let mut held = limits.held();
        let mine = held.entry(client.clone()).or_default();
        if mine.in_flight >= limits.max_in_flight {
            drop(held);
            return too_many(format!(
                "this client (token {client}) already has {} requests in flight, the most a client may; \
                 wait for some to finish; the operator sets the cap with `atoll mcp --max-in-flight N`\n",
                limits.max_in_flight
            ));
        }
        mine.in_flight += 1;
    }
    let slot = Slot { limits: limits.clone(), client: client.clone() };
    let response = next.run(request).await;
    if new_session {
        let id = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(SessionId::from);
        if let Some(id) = id {
            limits.held().entry(client).or_default().sessions.push(id);
        }
    }
    let (parts, body) = response.into_parts();
    let body = body.map_frame(move |frame| {
        let _held = &slot;
        frame
    });
    Response::from_parts(parts, Body::new(body))
}
