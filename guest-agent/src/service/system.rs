//! Info and SetTime; and the one mapping of [`SystemError`] to a gRPC status.

use sbx_proto::agent::v1 as pb;
use tonic::Status;

use super::AgentService;
use crate::report::error_chain;
use crate::system::{self, SystemError};

pub(super) async fn info(svc: &AgentService, _req: pb::InfoRequest) -> Result<pb::InfoResponse, Status> {
    let started = svc.started();
    tokio::task::spawn_blocking(move || system::info(started))
        .await
        .map_err(|_| Status::internal("the agent's worker for Info stopped unexpectedly; retry the call"))
}

pub(super) async fn set_time(req: pb::SetTimeRequest) -> Result<pb::SetTimeResponse, Status> {
    Ok(pb::SetTimeResponse { adjusted_by_ms: system::set_time(req.unix_ms)? })
}

impl From<SystemError> for Status {
    fn from(e: SystemError) -> Status {
        let msg = error_chain(&e);
        match e {
            SystemError::BadTime(_) | SystemError::Refused { .. } => Status::invalid_argument(msg),
            SystemError::NotPermitted => Status::permission_denied(msg),
        }
    }
}
