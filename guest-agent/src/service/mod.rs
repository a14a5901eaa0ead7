//! The gRPC face of the agent. Every handler is a few lines: it converts the request to
//! the domain module's own types, calls it, converts the answer back and maps the
//! domain error to a `tonic::Status`; the domain modules never see a protobuf type.
//! [`AgentRoutes`] serves it: tonic's generated server, except that ReadFile and
//! DownloadDir replies are framed by `bulk`, which hands each chunk to HTTP/2 without
//! copying it. `upload` reads the header-then-data stream of WriteFile and UploadDir.

mod archive;
mod bulk;
mod exec;
mod files;
mod jobs;
pub mod limits;
mod ports;
mod routes;
mod system;
mod upload;

use std::pin::Pin;
use std::sync::Arc;

use atoll_proto::agent::v1::{self as pb, agent_server::Agent};
use atoll_proto::reason::{REASON_KEY, Reason};
use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

pub use limits::{Capacity, LimitError};
pub use routes::AgentRoutes;

/// `status` with the machine-readable `reason` attached as `atoll-reason` metadata, from
/// which each face (the `atoll` CLI, `atoll mcp`) adds its own next step to the message.
fn with_reason(mut status: Status, reason: Option<Reason>) -> Status {
    if let Some(reason) = reason {
        status
            .metadata_mut()
            .insert(REASON_KEY, tonic::metadata::MetadataValue::from_static(reason.as_str()));
    }
    status
}

/// A boxed server stream, the response type of every streaming RPC.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The agent's state shared by every connection.
#[derive(Clone)]
pub struct AgentService {
    inner: Arc<Shared>,
}

struct Shared {
    jobs: crate::jobs::Jobs,
    started: std::time::Instant,
    limits: limits::Limits,
}

impl AgentService {
    /// A service whose background jobs keep their logs under `job_dir`, with the default caps.
    pub fn new(job_dir: std::path::PathBuf) -> Self {
        Self::with_capacity(job_dir, Capacity::default())
    }

    /// A service with the given caps on concurrent commands and transfers.
    pub fn with_capacity(job_dir: std::path::PathBuf, capacity: Capacity) -> Self {
        AgentService {
            inner: Arc::new(Shared {
                jobs: crate::jobs::Jobs::new(job_dir),
                started: std::time::Instant::now(),
                limits: limits::Limits::new(capacity),
            }),
        }
    }

    pub(crate) fn limits(&self) -> &limits::Limits {
        &self.inner.limits
    }

    /// The gRPC server for this service, with the agreed message size limits.
    pub fn into_server(self) -> AgentRoutes {
        let generated = pb::agent_server::AgentServer::new(self.clone())
            .max_decoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES);
        AgentRoutes::new(self, generated)
    }

    pub(crate) fn jobs(&self) -> &crate::jobs::Jobs {
        &self.inner.jobs
    }

    pub(crate) fn started(&self) -> std::time::Instant {
        self.inner.started
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn exec(&self, req: Request<pb::ExecRequest>) -> Result<Response<pb::ExecResponse>, Status> {
        exec::exec(self, req.into_inner()).await.map(Response::new)
    }

    type ExecStreamStream = BoxStream<pb::ExecEvent>;
    async fn exec_stream(
        &self,
        req: Request<Streaming<pb::ExecStreamInput>>,
    ) -> Result<Response<Self::ExecStreamStream>, Status> {
        exec::exec_stream(self, req.into_inner()).await.map(Response::new)
    }

    async fn start_job(&self, req: Request<pb::StartJobRequest>) -> Result<Response<pb::Job>, Status> {
        jobs::start(self, req.into_inner()).await.map(Response::new)
    }

    async fn get_job(&self, req: Request<pb::JobRef>) -> Result<Response<pb::Job>, Status> {
        jobs::get(self, req.into_inner()).await.map(Response::new)
    }

    async fn wait_job(&self, req: Request<pb::WaitJobRequest>) -> Result<Response<pb::Job>, Status> {
        jobs::wait(self, req.into_inner()).await.map(Response::new)
    }

    async fn signal_job(&self, req: Request<pb::SignalJobRequest>) -> Result<Response<pb::Job>, Status> {
        jobs::signal(self, req.into_inner()).await.map(Response::new)
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        jobs::list(self, req.into_inner()).await.map(Response::new)
    }

    type ReadFileStream = BoxStream<pb::ReadFileChunk>;
    async fn read_file(
        &self,
        req: Request<pb::ReadFileRequest>,
    ) -> Result<Response<Self::ReadFileStream>, Status> {
        let slot = self.limits().transfer()?;
        let chunks = files::read(req.into_inner()).await?;
        Ok(Response::new(limits::holding(chunks, slot)))
    }

    async fn write_file(
        &self,
        req: Request<Streaming<pb::WriteFileRequest>>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let _slot = self.limits().transfer()?;
        files::write(req.into_inner()).await.map(Response::new)
    }

    async fn list_dir(
        &self,
        req: Request<pb::ListDirRequest>,
    ) -> Result<Response<pb::ListDirResponse>, Status> {
        files::list(req.into_inner()).await.map(Response::new)
    }

    async fn stat(&self, req: Request<pb::StatRequest>) -> Result<Response<pb::FileEntry>, Status> {
        files::stat(req.into_inner()).await.map(Response::new)
    }

    async fn remove(&self, req: Request<pb::RemoveRequest>) -> Result<Response<pb::RemoveResponse>, Status> {
        files::remove(req.into_inner()).await.map(Response::new)
    }

    async fn r#move(&self, req: Request<pb::MoveRequest>) -> Result<Response<pb::MoveResponse>, Status> {
        files::rename(req.into_inner()).await.map(Response::new)
    }

    async fn make_dir(
        &self,
        req: Request<pb::MakeDirRequest>,
    ) -> Result<Response<pb::MakeDirResponse>, Status> {
        files::make_dir(req.into_inner()).await.map(Response::new)
    }

    type DownloadDirStream = BoxStream<pb::DownloadDirChunk>;
    async fn download_dir(
        &self,
        req: Request<pb::DownloadDirRequest>,
    ) -> Result<Response<Self::DownloadDirStream>, Status> {
        let slot = self.limits().transfer()?;
        let chunks = archive::download(req.into_inner()).await?;
        Ok(Response::new(limits::holding(chunks, slot)))
    }

    async fn upload_dir(
        &self,
        req: Request<Streaming<pb::UploadDirRequest>>,
    ) -> Result<Response<pb::UploadDirResponse>, Status> {
        let _slot = self.limits().transfer()?;
        archive::upload(req.into_inner()).await.map(Response::new)
    }

    async fn info(&self, req: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        system::info(self, req.into_inner()).await.map(Response::new)
    }

    async fn set_time(
        &self,
        req: Request<pb::SetTimeRequest>,
    ) -> Result<Response<pb::SetTimeResponse>, Status> {
        system::set_time(req.into_inner()).await.map(Response::new)
    }

    async fn restored(
        &self,
        req: Request<pb::RestoredRequest>,
    ) -> Result<Response<pb::RestoredResponse>, Status> {
        system::restored(req.into_inner()).await.map(Response::new)
    }

    type ConnectPortStream = BoxStream<pb::PortData>;
    async fn connect_port(
        &self,
        req: Request<Streaming<pb::PortData>>,
    ) -> Result<Response<Self::ConnectPortStream>, Status> {
        ports::connect_port(req.into_inner()).await.map(Response::new)
    }
}
