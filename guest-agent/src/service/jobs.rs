//! Background jobs.

use sbx_proto::agent::v1 as pb;
use tonic::Status;

use super::AgentService;

pub(super) async fn start(_svc: &AgentService, _req: pb::StartJobRequest) -> Result<pb::Job, Status> {
    Err(Status::unimplemented("StartJob is not implemented yet"))
}

pub(super) async fn get(_svc: &AgentService, _req: pb::JobRef) -> Result<pb::Job, Status> {
    Err(Status::unimplemented("GetJob is not implemented yet"))
}

pub(super) async fn wait(_svc: &AgentService, _req: pb::WaitJobRequest) -> Result<pb::Job, Status> {
    Err(Status::unimplemented("WaitJob is not implemented yet"))
}

pub(super) async fn signal(_svc: &AgentService, _req: pb::SignalJobRequest) -> Result<pb::Job, Status> {
    Err(Status::unimplemented("SignalJob is not implemented yet"))
}

pub(super) async fn list(_svc: &AgentService, _req: pb::ListJobsRequest) -> Result<pb::ListJobsResponse, Status> {
    Err(Status::unimplemented("ListJobs is not implemented yet"))
}
