//! ReadFile, WriteFile, ListDir, Stat, Remove, Move, MakeDir; and the one mapping of
//! [`FsError`] to a gRPC status.

use std::path::PathBuf;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sbx_proto::agent::v1::{self as pb, write_file_request::Part};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::BoxStream;
use crate::files::{self, FsError};
use crate::report::error_chain;

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
    let pieces = input.map(|msg| match msg {
        Ok(pb::WriteFileRequest { part: Some(Part::Data(data)) }) => Ok(Piece::Data(data)),
        Ok(pb::WriteFileRequest { part: Some(Part::End(_)) }) => Ok(Piece::End),
        Ok(pb::WriteFileRequest { part: Some(Part::Header(_)) }) => Ok(Piece::SecondHeader),
        Ok(pb::WriteFileRequest { part: None }) => Ok(Piece::Data(Bytes::new())),
        Err(status) => Err(status.message().to_owned()),
    });
    Ok(files::write::write(header, until_end(pieces, path)).await?)
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

/// One message of an upload stream (WriteFile, UploadDir) after its header.
pub(super) enum Piece {
    Data(Bytes),
    End,
    SecondHeader,
}

/// The data of an upload stream, up to its explicit `end` message.
///
/// hyper ends the request body of a client that cancelled (`RST_STREAM` with `CANCEL`)
/// just as if the client had ended it cleanly, so "the stream ended" cannot mean
/// "commit". Only the `end` message does: a stream that stops without it yields
/// [`FsError::StreamBroken`], and the write or extraction leaves nothing behind.
/// An `Err` item is the transport's error message.
pub(super) fn until_end<S>(pieces: S, path: PathBuf) -> impl Stream<Item = Result<Bytes, FsError>>
where
    S: Stream<Item = Result<Piece, String>> + Send + 'static,
{
    futures::stream::unfold((Box::pin(pieces), false), move |(mut pieces, done)| {
        let path = path.clone();
        async move {
            if done {
                return None;
            }
            let item = match pieces.next().await {
                Some(Ok(Piece::Data(data))) => return Some((Ok(data), (pieces, false))),
                Some(Ok(Piece::End)) => return None,
                Some(Ok(Piece::SecondHeader)) => Err(FsError::SecondHeader),
                Some(Err(reason)) => Err(FsError::StreamBroken { path, reason }),
                None => Err(FsError::StreamBroken {
                    path,
                    reason: "the client stopped before sending `end`".to_owned(),
                }),
            };
            Some((item, (pieces, true)))
        }
    })
}
