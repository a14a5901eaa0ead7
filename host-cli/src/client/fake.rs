//! An agent for unit tests of code that drives [`Client`]: on a Unix socket in a temp
//! dir, it answers Info, SetTime, Exec and (when built as a current agent) Restored with
//! canned answers, records each call, and answers UNIMPLEMENTED to everything else, as
//! an agent that lacks a call does. The real agent is tested in tests/tests/agent_*.rs.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use atoll_proto::agent::v1 as pb;
use futures::future::BoxFuture;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::Client;

/// A call the fake agent received.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    Restored(pb::RestoredRequest),
    Info,
    SetTime(i64),
    Exec(pb::ExecRequest),
}

/// The fake agent; it serves until dropped.
pub(crate) struct FakeAgent {
    calls: Arc<Mutex<Vec<Call>>>,
    dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl FakeAgent {
    /// Starts one; `knows_restored: false` makes it an agent from before Restored.
    pub(crate) async fn start(knows_restored: bool) -> FakeAgent {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let svc = Routes { knows_restored, calls: calls.clone() };
        let server = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let _ = tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await;
        });
        FakeAgent { calls, dir, server }
    }

    /// A client connected to it.
    pub(crate) async fn client(&self) -> Client {
        let addr = format!("unix://{}", self.dir.path().join("agent.sock").display()).parse().unwrap();
        // As a restore reaches it: the greeting is the first call.
        Client::dial(&addr, Duration::from_secs(5)).await.unwrap()
    }

    /// The calls so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Clone)]
struct Routes {
    knows_restored: bool,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl NamedService for Routes {
    const NAME: &'static str = "atoll.agent.v1.Agent";
}

impl tower::Service<http::Request<Body>> for Routes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let calls = self.calls.clone();
        let record = move |call| calls.lock().unwrap().push(call);
        let method = req.uri().path().rsplit('/').next().unwrap_or_default().to_string();
        let knows_restored = self.knows_restored;
        Box::pin(async move {
            Ok(match method.as_str() {
                "Restored" => {
                    unary(req, move |r: pb::RestoredRequest| {
                        record(Call::Restored(r.clone()));
                        if !knows_restored {
                            return Err(Status::unimplemented("unknown method Restored"));
                        }
                        if r.hostname.contains('/') {
                            return Err(Status::invalid_argument("`a/b` cannot be a hostname"));
                        }
                        Ok(pb::RestoredResponse { adjusted_by_ms: 0, agent_version: "fake-1".into() })
                    })
                    .await
                }
                "Info" => {
                    unary(req, move |_: pb::InfoRequest| {
                        record(Call::Info);
                        Ok(pb::InfoResponse { agent_version: "fake-1".into(), ..Default::default() })
                    })
                    .await
                }
                "SetTime" => {
                    unary(req, move |r: pb::SetTimeRequest| {
                        record(Call::SetTime(r.unix_ms));
                        Ok(pb::SetTimeResponse { adjusted_by_ms: 0 })
                    })
                    .await
                }
                "Exec" => {
                    unary(req, move |r: pb::ExecRequest| {
                        record(Call::Exec(r));
                        let code = pb::exit_status::Kind::Code(0);
                        let status = pb::ExitStatus { kind: Some(code), ..Default::default() };
                        Ok(pb::ExecResponse { status: Some(status), ..Default::default() })
                    })
                    .await
                }
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            })
        })
    }
}

/// Answers one unary call with `f`.
async fn unary<Req, Resp, F>(req: http::Request<Body>, f: F) -> http::Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Req) -> Result<Resp, Status> + Send + 'static,
{
    Grpc::new(tonic_prost::ProstCodec::default()).unary(Once(Some(f)), req).await
}

/// A [`UnaryService`] answering with a function, once.
struct Once<F>(Option<F>);

impl<Req, Resp, F> UnaryService<Req> for Once<F>
where
    F: FnOnce(Req) -> Result<Resp, Status>,
{
    type Response = Resp;
    type Future = Ready<Result<Response<Resp>, Status>>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let f = self.0.take().expect("a unary call is answered once");
        ready(f(request.into_inner()).map(Response::new))
    }
}
