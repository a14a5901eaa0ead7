//! The agent's gRPC server: tonic's generated one for every method, except ReadFile and
//! DownloadDir, whose replies [`bulk`](super::bulk) frames without copying their data.
//! Both still run the [`Agent`] methods the generated server would call.

use std::convert::Infallible;
use std::task::{Context, Poll};

use atoll_proto::agent::v1::agent_server::{Agent, AgentServer};
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;
use tower::Service;

use super::{AgentService, bulk};

/// The agent's service as served: what [`AgentService::into_server`] gives.
#[derive(Clone)]
pub struct AgentRoutes {
    svc: AgentService,
    generated: AgentServer<AgentService>,
}

impl AgentRoutes {
    pub(super) fn new(svc: AgentService, generated: AgentServer<AgentService>) -> Self {
        AgentRoutes { svc, generated }
    }
}

impl NamedService for AgentRoutes {
    const NAME: &'static str = <AgentServer<AgentService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for AgentRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The two calls served here need nothing to be ready; the rest go to tonic's.
        Service::<http::Request<Body>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let svc = self.svc.clone();
        match method(req.uri().path()) {
            Some("ReadFile") => {
                Box::pin(async move { Ok(bulk::serve(req, |r| async move { svc.read_file(r).await }).await) })
            }
            Some("DownloadDir") => {
                Box::pin(
                    async move { Ok(bulk::serve(req, |r| async move { svc.download_dir(r).await }).await) },
                )
            }
            _ => self.generated.call(req),
        }
    }
}

/// The method name of a call to this service (`/atoll.agent.v1.Agent/ReadFile` ->
/// `ReadFile`).
fn method(path: &str) -> Option<&str> {
    path.strip_prefix('/')?.strip_prefix(AgentRoutes::NAME)?.strip_prefix('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_service_s_methods_are_picked_out() {
        assert_eq!(method("/atoll.agent.v1.Agent/ReadFile"), Some("ReadFile"));
        assert_eq!(method("/atoll.agent.v1.Agent/DownloadDir"), Some("DownloadDir"));
        assert_eq!(method("/atoll.agent.v1.AgentX/ReadFile"), None);
        assert_eq!(method("/other.Agent/ReadFile"), None);
        assert_eq!(method("/atoll.agent.v1.Agent"), None);
    }
}
