//! Exec and ExecStream.

use sbx_proto::agent::v1 as pb;
use tonic::{Status, Streaming};

use super::{AgentService, BoxStream};

pub(super) async fn exec(_svc: &AgentService, _req: pb::ExecRequest) -> Result<pb::ExecResponse, Status> {
    Err(Status::unimplemented("Exec is not implemented yet"))
}

pub(super) async fn exec_stream(
    _svc: &AgentService,
    _input: Streaming<pb::ExecStreamInput>,
) -> Result<BoxStream<pb::ExecEvent>, Status> {
    Err(Status::unimplemented("ExecStream is not implemented yet"))
}
