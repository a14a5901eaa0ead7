//! ReadFile, WriteFile, ListDir, Stat, Remove, Move, MakeDir; and the one mapping of
//! [`FsError`] to a gRPC status.

use futures::StreamExt;
use sbx_proto::agent::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use super::upload::header_then_data;
use crate::files::{self, FsError};
use crate::report::error_chain;

pub(super) async fn read(req: pb::ReadFileRequest) -> Result<BoxStream<pb::ReadFileChunk>, Status> {
    let chunks = files::read::read(req).await?;
    Ok(Box::pin(ReceiverStream::new(chunks).map(|c| c.map_err(Status::from))))
}

pub(super) async fn write(input: Streaming<pb::WriteFileRequest>) -> Result<pb::WriteFileResponse, Status> {
    let (header, data) = header_then_data(input).await?;
    Ok(files::write::write(header, data).await?)
}

pub(super) async fn list(req: pb::ListDirRequest) -> Result<pb::ListDirResponse, Status> {
    Ok(files::list::list(req).await?)
}

pub(super) async fn stat(req: pb::StatRequest) -> Result<pb::FileEntry, Status> {
    Ok(files::ops::stat(req).await?)
}

pub(super) async fn remove(req: pb::RemoveRequest) -> Result<pb::RemoveResponse, Status> {
    files::ops::remove(req).await?;
    Ok(pb::RemoveResponse {})
}

pub(super) async fn rename(req: pb::MoveRequest) -> Result<pb::MoveResponse, Status> {
    files::rename::rename(req).await?;
    Ok(pb::MoveResponse {})
}

pub(super) async fn make_dir(req: pb::MakeDirRequest) -> Result<pb::MakeDirResponse, Status> {
    files::ops::make_dir(req).await?;
    Ok(pb::MakeDirResponse {})
}

impl From<FsError> for Status {
    fn from(e: FsError) -> Status {
        use FsError as E;
        let msg = error_chain(&e);
        match e {
            E::EmptyPath
            | E::Relative(_)
            | E::NulByte(_)
            | E::IsADirectory { .. }
            | E::NotADirectory { .. }
            | E::NotRegular { .. }
            | E::OffsetPastEnd { .. }
            | E::RemoveRoot
            | E::MoveIntoItself { .. }
            | E::CannotCopySpecial { .. }
            | E::BadName(_)
            | E::MissingHeader
            | E::SecondHeader => Status::invalid_argument(msg),
            E::NotFound(_) | E::ParentMissing { .. } => Status::not_found(msg),
            E::PermissionDenied { .. } | E::ReadOnly { .. } | E::CannotCreateIn(_) => {
                Status::permission_denied(msg)
            }
            E::AlreadyExists { .. } => Status::already_exists(msg),
            E::TooLarge { .. } | E::TooLargeUnsized { .. } | E::NoSpace { .. } => {
                Status::resource_exhausted(msg)
            }
            E::DirNeedsRecursive(_) | E::NotEmpty(_) => Status::failed_precondition(msg),
            E::StreamBroken { .. } => Status::cancelled(msg),
            E::Io { .. } | E::WorkerGone => Status::internal(msg),
        }
    }
}
