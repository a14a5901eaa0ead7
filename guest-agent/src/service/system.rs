//! Info and SetTime.

use sbx_proto::agent::v1 as pb;
use tonic::Status;

use super::AgentService;

pub(super) async fn info(_svc: &AgentService, _req: pb::InfoRequest) -> Result<pb::InfoResponse, Status> {
    Err(Status::unimplemented("Info is not implemented yet"))
}

pub(super) async fn set_time(_req: pb::SetTimeRequest) -> Result<pb::SetTimeResponse, Status> {
    Err(Status::unimplemented("SetTime is not implemented yet"))
}
