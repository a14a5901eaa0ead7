//! ReadFile, WriteFile, ListDir, Stat, Remove, Move, MakeDir; and the one mapping of
//! [`FsError`] to a gRPC status.

use std::path::PathBuf;

use futures::{Stream, StreamExt};
use sbx_proto::agent::v1::{self as pb, write_file_request::Part};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use crate::files::{self, FsError};

pub(super) async fn read(req: pb::ReadFileRequest) -> Result<BoxStream<pb::ReadFileChunk>, Status> {
    let chunks = files::read::read(req).await?;
    Ok(Box::pin(ReceiverStream::new(chunks).map(|c| c.map_err(Status::from))))
}

pub(super) async fn write(
    mut input: Streaming<pb::WriteFileRequest>,
) -> Result<pb::WriteFileResponse, Status> {
    let header = match input.message().await? {
        Some(pb::WriteFileRequest { part: Some(Part::Header(header)) }) => header,
        _ => return Err(FsError::MissingHeader.into()),
    };
    let path = PathBuf::from(&header.path);
    let data = input.map(move |msg| match msg {
        Ok(pb::WriteFileRequest { part: Some(Part::Data(data)) }) => Ok(data),
        Ok(pb::WriteFileRequest { part: Some(Part::Header(_)) }) => Err(FsError::SecondHeader),
        Ok(pb::WriteFileRequest { part: None }) => Ok(Vec::new()),
        Err(status) => Err(FsError::StreamBroken { path: path.clone(), reason: status.message().to_owned() }),
    });
    Ok(files::write::write(header, settled(data)).await?)
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

/// A client stream that, after its last message, yields to the transport once before
/// reporting its end.
///
/// hyper ends the request body of a client that cancelled (`RST_STREAM` with `CANCEL`)
/// exactly as if the client had ended it cleanly; it tells the two apart only by
/// dropping the handler the next time the handler returns `Pending`. Yielding once
/// here gives it that chance before a write or an upload is committed, so a client
/// that went away mid-stream leaves nothing behind.
pub(super) fn settled<S: Stream>(stream: S) -> impl Stream<Item = S::Item> {
    stream.chain(futures::stream::once(tokio::task::yield_now()).filter_map(|()| async { None }))
}

/// An error and its causes as one line: "cannot read /x: Input/output error (os error 5)".
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
