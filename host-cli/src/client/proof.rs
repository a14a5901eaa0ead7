//! The proof that an agent answers, made beside a command's first call rather than
//! before it.
//!
//! Every face bounds reaching an agent by `--connect-timeout`, first answer included, so
//! that an endpoint which takes the connection and then says nothing never holds a
//! command. [`Client::connect`](super::Client::connect) proves it with one Info call
//! before it returns; that is one more round trip before every `atoll exec`.
//! [`Client::open`](super::Client::open) sends the same Info beside the first call
//! instead: [`Proven`] races each call's response against it. A proof that fails first
//! ends the call (its stream is reset, and the agent ends a command whose call went
//! away) with the same error `connect` would have given; a response that comes first
//! still waits for the proof, since response headers are not an answer (an endpoint can
//! start every response and never send a message or a status). Both were sent at once,
//! so the wait costs no round trip.

use std::task::{Context, Poll};
use std::time::Duration;

use atoll_proto::Address;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::connect::{ConnectError, Link};

/// A boxed error, as tonic's services give them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the agent was not shown to answer: what [`ConnectError`] says of it, without the
/// address (which the caller knows) so that it can be shared by every waiting call.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum Unproven {
    /// Nothing came back within the timeout.
    #[error("the agent sent nothing within {}", crate::connect::seconds(*.0))]
    Silent(Duration),
    /// Bytes came back, but no answer within the timeout.
    #[error("the agent did not answer within {}", crate::connect::seconds(*.0))]
    Unanswered(Duration),
    /// The connection broke.
    #[error("the connection was lost: {0}")]
    Lost(String),
    /// An agent link answered for an agent that is not there.
    #[error("the agent link is down: {0}")]
    LinkDown(String),
}

impl Unproven {
    /// The error [`Client::connect`](super::Client::connect) gives for this at `addr`.
    pub(crate) fn at(&self, addr: &Address) -> ConnectError {
        let addr = addr.clone();
        match self.clone() {
            Unproven::Silent(timeout) => ConnectError::Silent { addr, timeout },
            Unproven::Unanswered(timeout) => ConnectError::Unanswered { addr, timeout },
            Unproven::Lost(message) => ConnectError::Lost { addr, message },
            Unproven::LinkDown(message) => ConnectError::LinkDown { addr, message },
        }
    }

    /// The one found in `status`'s source, when a [`Proven`] call ended on it.
    pub(crate) fn in_status(status: &tonic::Status) -> Option<&Unproven> {
        std::error::Error::source(status)?.downcast_ref::<Unproven>()
    }
}

/// What one Info call, answered by `deadline`, shows of the agent behind `link` (`timeout`
/// is how the wait reads in the message). Any status the
/// agent itself sent counts as an answer (a refused token, an older agent): the call
/// that follows reports it. A status an agent link made for the agent behind it, or a
/// transport failure, does not.
pub(crate) async fn answer<T>(
    info: impl Future<Output = Result<T, tonic::Status>>,
    link: &Link,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<(), Unproven> {
    let status = match tokio::time::timeout_at(deadline, info).await {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(status)) => status,
        Err(_) if link.heard_back() => return Err(Unproven::Unanswered(timeout)),
        Err(_) => return Err(Unproven::Silent(timeout)),
    };
    let transport = std::error::Error::source(&status).is_some() || link.is_broken();
    let message = status.message().to_string();
    match status.code() {
        _ if transport => Err(Unproven::Lost(message)),
        tonic::Code::Unavailable | tonic::Code::Cancelled => Err(Unproven::LinkDown(message)),
        _ => Ok(()),
    }
}

/// The shared outcome of one proof, awaited by every call made before it came in.
pub(crate) type Proof = Shared<BoxFuture<'static, Result<(), Unproven>>>;

/// Starts a proof: `info` (a future that sends Info when first polled, which the first
/// call does) judged by [`answer`]. The timeout runs from then, not from now.
pub(crate) fn start<T: Send + 'static>(
    info: impl Future<Output = Result<T, tonic::Status>> + Send + 'static,
    link: Link,
    timeout: Duration,
) -> Proof {
    async move {
        let deadline = tokio::time::Instant::now() + timeout;
        answer(info, &link, deadline, timeout).await
    }
    .boxed()
    .shared()
}

/// A service around the agent's channel whose calls end with the proof's error when it
/// fails before they are answered (see the module's text). Without a proof it is the
/// channel as it is.
#[derive(Clone)]
pub(crate) struct Proven<S> {
    inner: S,
    proof: Option<Proof>,
}

impl<S> Proven<S> {
    /// `inner` with no proof to wait for.
    pub(crate) fn plain(inner: S) -> Self {
        Proven { inner, proof: None }
    }

    /// `inner`, each call raced against `proof`.
    pub(crate) fn with(inner: S, proof: Proof) -> Self {
        Proven { inner, proof: Some(proof) }
    }
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Proven<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let call = self.inner.call(req);
        let call = async move { call.await.map_err(Into::<BoxError>::into) };
        let Some(proof) = self.proof.clone() else {
            return call.boxed();
        };
        async move {
            // A proof already made costs nothing here.
            if let Some(Ok(())) = proof.peek() {
                return call.await;
            }
            let mut proof = proof;
            tokio::pin!(call);
            let unproven = |u: Unproven| -> BoxError { Box::new(u) };
            // Whichever comes first, the proof decides: headers are not an answer (an
            // endpoint can start every response and never send a message, and a status in
            // them may be an agent link's, not the agent's), and a dead connection fails
            // the proof too, which says what was reached. Both were sent at once, so
            // waiting for the proof after the call costs no round trip.
            tokio::select! {
                answered = &mut call => {
                    proof.await.map_err(unproven)?;
                    answered
                }
                proven = &mut proof => {
                    proven.map_err(unproven)?;
                    call.await
                }
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Service, ServiceExt};

    type Answer = Result<http::Response<()>, BoxError>;

    /// A channel whose every call ends as `answer` says, after `after`.
    fn channel(
        answer: fn() -> Answer,
        after: Duration,
    ) -> impl Service<
        http::Request<()>,
        Response = http::Response<()>,
        Error = BoxError,
        Future: Send + 'static,
    > + Clone {
        tower::service_fn(move |_req: http::Request<()>| async move {
            tokio::time::sleep(after).await;
            answer()
        })
    }

    fn proof_after(after: Duration, outcome: Result<(), Unproven>) -> Proof {
        async move {
            tokio::time::sleep(after).await;
            outcome
        }
        .boxed()
        .shared()
    }

    async fn call<S>(mut svc: Proven<S>) -> Answer
    where
        Proven<S>: Service<http::Request<()>, Response = http::Response<()>, Error = BoxError>,
    {
        svc.ready().await?.call(http::Request::new(())).await
    }

    fn unproven(answer: Answer) -> Option<Unproven> {
        answer.err()?.downcast_ref::<Unproven>().cloned()
    }

    /// Response headers with no status are not an answer: the call gets the proof's
    /// error, when it comes, not a response whose messages may never come.
    #[tokio::test]
    async fn a_response_that_comes_first_still_waits_for_the_proof() {
        let unanswered = Unproven::Unanswered(Duration::from_secs(5));
        let svc = Proven::with(
            channel(|| Ok(http::Response::new(())), Duration::from_millis(10)),
            proof_after(Duration::from_millis(200), Err(unanswered)),
        );
        assert!(matches!(unproven(call(svc).await), Some(Unproven::Unanswered(_))));
        let svc = Proven::with(
            channel(|| Ok(http::Response::new(())), Duration::from_millis(10)),
            proof_after(Duration::from_millis(20), Ok(())),
        );
        assert!(call(svc).await.is_ok());
    }

    #[tokio::test]
    async fn a_proof_that_fails_first_ends_the_call_with_its_error() {
        let silent = Unproven::Silent(Duration::from_secs(5));
        let svc = Proven::with(
            channel(|| Ok(http::Response::new(())), Duration::from_secs(3600)),
            proof_after(Duration::from_millis(50), Err(silent)),
        );
        let started = tokio::time::Instant::now();
        assert!(matches!(unproven(call(svc).await), Some(Unproven::Silent(_))));
        assert!(started.elapsed() < Duration::from_secs(60));
    }

    #[tokio::test]
    async fn a_call_that_breaks_first_gives_the_proofs_error() {
        let lost = Unproven::Lost("reset".into());
        let svc = Proven::with(
            channel(|| Err("connection reset".into()), Duration::from_millis(1)),
            proof_after(Duration::from_millis(5), Err(lost)),
        );
        assert!(matches!(unproven(call(svc).await), Some(Unproven::Lost(_))));
    }

    #[tokio::test]
    async fn a_status_in_the_headers_waits_for_the_proof() {
        fn link_status() -> Answer {
            let mut r = http::Response::new(());
            r.headers_mut().insert("grpc-status", http::HeaderValue::from_static("14"));
            Ok(r)
        }
        let down = Unproven::LinkDown("no VM".into());
        let svc = Proven::with(
            channel(link_status, Duration::from_millis(1)),
            proof_after(Duration::from_millis(5), Err(down)),
        );
        assert!(matches!(unproven(call(svc).await), Some(Unproven::LinkDown(_))));
        // The agent's own status (the proof made) is the call's answer.
        let svc = Proven::with(
            channel(link_status, Duration::from_millis(1)),
            proof_after(Duration::from_millis(5), Ok(())),
        );
        assert!(call(svc).await.is_ok());
    }

    #[tokio::test]
    async fn a_call_that_breaks_after_the_proof_keeps_its_own_error() {
        let svc = Proven::with(
            channel(|| Err("connection reset".into()), Duration::from_millis(10)),
            proof_after(Duration::from_millis(1), Ok(())),
        );
        let e = call(svc).await.unwrap_err();
        assert!(e.downcast_ref::<Unproven>().is_none());
        assert_eq!(e.to_string(), "connection reset");
    }
}
