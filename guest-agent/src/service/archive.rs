//! DownloadDir and UploadDir; and the one mapping of [`ArchiveError`] to a gRPC status.

use futures::StreamExt;
use sbx_proto::agent::v1::{self as pb, upload_dir_request::Part};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use super::files::{Piece, until_end};
use crate::archive::{self, ArchiveError};
use crate::files::FsError;
use crate::report::error_chain;

pub(super) async fn download(req: pb::DownloadDirRequest) -> Result<BoxStream<pb::DownloadDirChunk>, Status> {
    let chunks = archive::download::download(req).await?;
    Ok(Box::pin(ReceiverStream::new(chunks).map(|c| c.map_err(Status::from))))
}

pub(super) async fn upload(
    mut input: Streaming<pb::UploadDirRequest>,
) -> Result<pb::UploadDirResponse, Status> {
    let header = match input.message().await? {
        Some(pb::UploadDirRequest { part: Some(Part::Header(header)) }) => header,
        _ => return Err(FsError::MissingHeader.into()),
    };
    let path = std::path::PathBuf::from(&header.path);
    let pieces = input.map(|msg| match msg {
        Ok(pb::UploadDirRequest { part: Some(Part::Data(data)) }) => Ok(Piece::Data(data)),
        Ok(pb::UploadDirRequest { part: Some(Part::End(_)) }) => Ok(Piece::End),
        Ok(pb::UploadDirRequest { part: Some(Part::Header(_)) }) => Ok(Piece::SecondHeader),
        Ok(pb::UploadDirRequest { part: None }) => Ok(Piece::Data(bytes::Bytes::new())),
        Err(status) => Err(status.message().to_owned()),
    });
    Ok(archive::upload::upload(header, until_end(pieces, path)).await?)
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
