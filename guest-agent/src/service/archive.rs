//! DownloadDir and UploadDir: the wire messages to and from [`crate::archive`]'s own
//! types; and the one mapping of [`ArchiveError`] to a gRPC status.

use atoll_proto::agent::v1 as pb;
use futures::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use super::upload::header_then_data;
use crate::archive::download::ZipPart;
use crate::archive::{self, ArchiveError};
use crate::report::error_chain;

pub(super) async fn download(req: pb::DownloadDirRequest) -> Result<BoxStream<pb::DownloadDirChunk>, Status> {
    let chunks = archive::download::download(&req.path, req.max_bytes).await?;
    Ok(Box::pin(ReceiverStream::new(chunks).map(|c| c.map(zip_part).map_err(Status::from))))
}

pub(super) async fn upload(input: Streaming<pb::UploadDirRequest>) -> Result<pb::UploadDirResponse, Status> {
    let (header, data) = header_then_data(input).await?;
    let header = archive::upload::UploadHeader { path: header.path, sync: header.sync };
    let done = archive::upload::upload(header, data).await?;
    Ok(pb::UploadDirResponse { files: done.files, dirs: done.dirs, file_bytes: done.file_bytes })
}

fn zip_part(part: ZipPart) -> pb::DownloadDirChunk {
    use pb::download_dir_chunk::Part;
    let part = match part {
        ZipPart::Data(data) => Part::Data(data),
        ZipPart::Summary(s) => Part::Summary(pb::ArchiveSummary {
            files: s.files,
            dirs: s.dirs,
            file_bytes: s.file_bytes,
            archive_bytes: s.archive_bytes,
            skipped: s
                .skipped
                .into_iter()
                .map(|e| pb::SkippedEntry { path: e.path, reason: e.reason })
                .collect(),
        }),
    };
    pb::DownloadDirChunk { part: Some(part) }
}

impl From<ArchiveError> for Status {
    fn from(e: ArchiveError) -> Status {
        let msg = error_chain(&e);
        match e {
            ArchiveError::Fs(fs) => fs.into(),
            ArchiveError::TooLarge { .. } => super::with_reason(
                Status::resource_exhausted(msg),
                Some(atoll_proto::reason::Reason::ZipOverCap),
            ),
            ArchiveError::NotZip(_) | ArchiveError::BadEntry { .. } | ArchiveError::Corrupt { .. } => {
                Status::invalid_argument(msg)
            }
            ArchiveError::Build { .. } => Status::internal(msg),
        }
    }
}
