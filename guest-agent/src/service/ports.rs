//! ConnectPort, and the one mapping of [`PortError`] to gRPC codes.

use futures::StreamExt;
use sbx_proto::agent::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use crate::ports::{self, PortError};
use crate::report::error_chain;

pub(super) async fn connect_port(input: Streaming<pb::PortData>) -> Result<BoxStream<pb::PortData>, Status> {
    let received = ports::connect(input).await?;
    Ok(Box::pin(ReceiverStream::new(received).map(|m| m.map_err(Status::from))))
}

impl From<PortError> for Status {
    fn from(e: PortError) -> Self {
        let msg = error_chain(&e);
        match e {
            PortError::NotOpened | PortError::Reopened | PortError::BadPort(_) => {
                Status::invalid_argument(msg)
            }
            PortError::NothingListening(_) => Status::failed_precondition(msg),
            PortError::Connect { .. } => Status::unavailable(msg),
            PortError::Broken { .. } => Status::aborted(msg),
        }
    }
}
