//! ConnectPort, and the one mapping of [`PortError`] to gRPC codes.

use atoll_proto::agent::v1 as pb;
use futures::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use atoll_proto::agent::v1::port_data::Part;

use super::BoxStream;
use crate::ports::{self, FromHost, PortError, ToHost};
use crate::report::error_chain;

pub(super) async fn connect_port(input: Streaming<pb::PortData>) -> Result<BoxStream<pb::PortData>, Status> {
    // Messages with no part (or `eof: false`) carry nothing and are skipped.
    let input = input.filter_map(|m| {
        let m = match m {
            Ok(pb::PortData { part: Some(Part::Open(port)) }) => Some(Ok(FromHost::Open(port))),
            Ok(pb::PortData { part: Some(Part::Data(bytes)) }) => Some(Ok(FromHost::Data(bytes))),
            Ok(pb::PortData { part: Some(Part::Eof(true)) }) => Some(Ok(FromHost::Eof)),
            Ok(_) => None,
            Err(status) => Some(Err(status)),
        };
        std::future::ready(m)
    });
    let received = ports::connect(Box::pin(input)).await?;
    Ok(Box::pin(ReceiverStream::new(received).map(|m| {
        let part = match m? {
            ToHost::Data(bytes) => Part::Data(bytes),
            ToHost::Eof => Part::Eof(true),
        };
        Ok(pb::PortData { part: Some(part) })
    })))
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
