//! A client that goes away mid-call cancels the call, in sessions too.
//!
//! rmcp cancels a stateless (2026-07-28) request when its response stream is dropped.
//! Session requests (2025-03-26 to 2025-11-25) it keeps running, so that a client could
//! resume the stream; atoll offers no resumption (no SSE retry is advertised), so a dropped
//! stream is an abandoned call. This layer watches the SSE response of each session
//! request: when hyper drops it before its end (the connection closed), it delivers a
//! `notifications/cancelled` for that request to the session, exactly what a client's
//! own cancellation does: the call's token fires, the agent call is dropped and the
//! agent kills the command (see [`crate::mcp::progress`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode, header};
use http_body::Frame;
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_server::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The session header (`Mcp-Session-Id`).
const SESSION_HEADER: &str = "mcp-session-id";

/// What the guard needs to cancel one request.
pub struct Watch {
    sessions: Arc<LocalSessionManager>,
    max_body: usize,
}

impl Watch {
    /// Watches requests of `sessions`, whose bodies are at most `max_body` bytes.
    pub fn new(sessions: Arc<LocalSessionManager>, max_body: usize) -> Self {
        Watch { sessions, max_body }
    }
}

/// Middleware: arms a cancel-on-drop guard on the response of every JSON-RPC request sent in
/// a session.
pub async fn cancel_on_disconnect(State(watch): State<Arc<Watch>>, request: Request, next: Next) -> Response {
    let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(SessionId::from);
    let Some(session) = session.filter(|_| request.method() == Method::POST) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    // rmcp reads the whole body too; reading it here first changes nothing but order.
    let Ok(bytes) = axum::body::to_bytes(body, watch.max_body).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("the request is over {} bytes\n", watch.max_body))
            .into_response();
    };
    let id = request_id(&bytes);
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    match id {
        Some(id) if response.status() == StatusCode::OK && streaming => {
            let (parts, body) = response.into_parts();
            let guard = CancelOnDrop { inner: body, armed: Some((watch.sessions.clone(), session, id)) };
            Response::from_parts(parts, Body::new(guard))
        }
        _ => response,
    }
}

/// The id of a JSON-RPC request (a message with both `id` and `method`), if `body` is one.
fn request_id(body: &[u8]) -> Option<RequestId> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<RequestId>,
        method: Option<String>,
    }
    let head: Head = serde_json::from_slice(body).ok()?;
    head.method.and(head.id)
}

/// A response body that, dropped before its end, cancels its request in its session.
struct CancelOnDrop {
    inner: Body,
    armed: Option<(Arc<LocalSessionManager>, SessionId, RequestId)>,
}

impl http_body::Body for CancelOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.armed = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((sessions, session, id)) = self.armed.take() else { return };
        tracing::info!(%session, request = %id, "the client went away mid-call; cancelling the call");
        let cancelled = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the HTTP client disconnected"},
        });
        let Ok(notification) = serde_json::from_value::<ClientJsonRpcMessage>(cancelled) else { return };
        // Drop runs inside the runtime (hyper drops bodies on its connection task).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = sessions.accept_message(&session, notification).await {
                    tracing::debug!(%error, "could not cancel the abandoned call (its session is gone)");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_have_an_id_to_cancel() {
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#;
        assert_eq!(request_id(call), Some(RequestId::Number(7)));
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#), None);
        assert_eq!(request_id(b"not json"), None);
    }
}
