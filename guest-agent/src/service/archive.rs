//! DownloadDir and UploadDir; and the one mapping of [`ArchiveError`] to a gRPC status.

use futures::StreamExt;
use sbx_proto::agent::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use super::upload::header_then_data;
use crate::archive::{self, ArchiveError};
use crate::report::error_chain;

pub(super) async fn download(req: pb::DownloadDirRequest) -> Result<BoxStream<pb::DownloadDirChunk>, Status> {
    let chunks = archive::download::download(req).await?;
    Ok(Box::pin(ReceiverStream::new(chunks).map(|c| c.map_err(Status::from))))
}

pub(super) async fn upload(input: Streaming<pb::UploadDirRequest>) -> Result<pb::UploadDirResponse, Status> {
    let (header, data) = header_then_data(input).await?;
    Ok(archive::upload::upload(header, data).await?)
}

impl From<ArchiveError> for Status {
    fn from(e: ArchiveError) -> Status {
        let msg = error_chain(&e);
        match e {
            ArchiveError::Fs(fs) => fs.into(),
            ArchiveError::TooLarge { .. } => Status::resource_exhausted(msg),
            ArchiveError::NotZip(_) | ArchiveError::BadEntry { .. } | ArchiveError::Corrupt { .. } => {
                Status::invalid_argument(msg)
            }
            ArchiveError::Build { .. } => Status::internal(msg),
        }
    }
}
