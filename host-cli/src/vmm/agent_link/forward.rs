//! `agent.sock`: every client connection an HTTP/2 server connection whose requests
//! are streams of the one upstream connection. Each passes
//! [`AuthorityFix`] first, as on the agent's own sockets: stock gRPC clients on a Unix
//! socket send its path as `:authority`, which the HTTP/2 server would refuse.

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use atoll_proto::authority::AuthorityFix;
use bytes::Bytes;
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixListener;

use super::AgentLinkError;
use super::h2::{H2_CONNECTION_WINDOW, H2_MAX_FRAME_SIZE, H2_STREAM_WINDOW};
use super::upstream::Upstream;

/// A response: the agent's, or one made here when the link is down.
pub type Body = Either<Incoming, Empty<Bytes>>;

/// Accepts clients on `listener` until accepting fails; a request waits up to `wait`
/// for the link.
pub async fn serve(
    listener: UnixListener,
    path: PathBuf,
    upstream: Upstream,
    wait: Duration,
) -> AgentLinkError {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(source) => return AgentLinkError::Accept { path, source },
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let upstream = upstream.clone();
                async move { Ok::<_, Infallible>(forward(&upstream, req, wait).await) }
            });
            let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(H2_STREAM_WINDOW)
                .initial_connection_window_size(H2_CONNECTION_WINDOW)
                .max_frame_size(H2_MAX_FRAME_SIZE)
                .serve_connection(TokioIo::new(AuthorityFix::new(stream)), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("agent link client connection ended: {e}");
            }
        });
    }
}

/// Sends `req` upstream and returns the agent's response as it streams in. Dropping
/// the returned body (the client reset its stream or went away) resets the upstream
/// stream too.
async fn forward(upstream: &Upstream, req: Request<Incoming>, wait: Duration) -> Response<Body> {
    let Some(mut sender) = upstream.sender(wait).await else {
        return unavailable(format!(
            "the VM did not answer over its agent link within {}: it is stopped, wedged or no longer running",
            humantime::format_duration(wait)
        ));
    };
    match sender.send_request(req).await {
        Ok(response) => response.map(Either::Left),
        Err(e) => unavailable(format!("the agent link failed during the call ({e}); try again")),
    }
}

/// A trailers-only gRPC response with status UNAVAILABLE.
fn unavailable(message: String) -> Response<Body> {
    tonic::Status::unavailable(message).into_http::<Empty<Bytes>>().map(Either::Right)
}
