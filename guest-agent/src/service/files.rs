//! ReadFile, WriteFile, ListDir, Stat, Remove, Move, MakeDir: the wire messages to and
//! from [`crate::files`]' own types; and the one mapping of [`FsError`] to a gRPC status.

use atoll_proto::agent::v1 as pb;
use futures::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use atoll_proto::reason::Reason;

use super::upload::header_then_data;
use super::{BoxStream, with_reason};
use crate::files::{self, Entry, FileKind, FsError};
use crate::report::error_chain;

pub(super) async fn read(req: pb::ReadFileRequest) -> Result<BoxStream<pb::ReadFileChunk>, Status> {
    let req = files::read::ReadFile {
        path: req.path,
        offset: req.offset,
        length: req.length,
        max_bytes: req.max_bytes,
    };
    let chunks = files::read::read(req).await?;
    let chunk = |c: files::read::Chunk| pb::ReadFileChunk { data: c.data, file_size: c.file_size };
    Ok(Box::pin(ReceiverStream::new(chunks).map(move |c| c.map(chunk).map_err(Status::from))))
}

pub(super) async fn write(input: Streaming<pb::WriteFileRequest>) -> Result<pb::WriteFileResponse, Status> {
    let (header, data) = header_then_data(input).await?;
    let header = files::write::WriteHeader {
        path: header.path,
        mode: header.mode,
        append: header.append,
        no_create_parents: header.no_create_parents,
        sync: header.sync,
    };
    let done = files::write::write(header, data).await?;
    Ok(pb::WriteFileResponse { bytes_written: done.bytes_written, file_size: done.file_size })
}

pub(super) async fn list(req: pb::ListDirRequest) -> Result<pb::ListDirResponse, Status> {
    let req = files::list::ListDir {
        path: req.path,
        recursive: req.recursive,
        max_depth: req.max_depth,
        max_entries: req.max_entries,
        names_only: req.names_only,
    };
    let listing = files::list::list(req).await?;
    Ok(pb::ListDirResponse {
        entries: listing.entries.into_iter().map(file_entry).collect(),
        truncated: listing.truncated,
    })
}

pub(super) async fn stat(req: pb::StatRequest) -> Result<pb::FileEntry, Status> {
    Ok(file_entry(files::ops::stat(&req.path).await?))
}

pub(super) async fn remove(req: pb::RemoveRequest) -> Result<pb::RemoveResponse, Status> {
    files::ops::remove(&req.path, req.recursive).await?;
    Ok(pb::RemoveResponse {})
}

pub(super) async fn rename(req: pb::MoveRequest) -> Result<pb::MoveResponse, Status> {
    files::rename::rename(&req.from, &req.to, req.overwrite).await?;
    Ok(pb::MoveResponse {})
}

pub(super) async fn make_dir(req: pb::MakeDirRequest) -> Result<pb::MakeDirResponse, Status> {
    files::ops::make_dir(&req.path, req.parents, req.mode).await?;
    Ok(pb::MakeDirResponse {})
}

/// The wire form of an [`Entry`].
pub(super) fn file_entry(e: Entry) -> pb::FileEntry {
    let kind = match e.kind {
        FileKind::File => pb::FileType::File,
        FileKind::Dir => pb::FileType::Dir,
        FileKind::Symlink => pb::FileType::Symlink,
        FileKind::Other => pb::FileType::Other,
    };
    pb::FileEntry {
        path: e.path,
        r#type: kind.into(),
        size: e.size,
        mode: e.mode,
        mtime_unix_ms: e.mtime_unix_ms,
        symlink_target: e.symlink_target,
        raw_path: e.raw_path.into(),
    }
}

impl From<FsError> for Status {
    fn from(e: FsError) -> Status {
        use FsError as E;
        let msg = error_chain(&e);
        let reason = match e {
            E::NotFound(_) => Some(Reason::NotFound),
            E::IsADirectory { .. } => Some(Reason::IsADirectory),
            E::NotADirectory { .. } => Some(Reason::NotADirectory),
            E::ParentMissing { .. } => Some(Reason::ParentMissing),
            E::DestinationExists(_) => Some(Reason::DestinationExists),
            _ => None,
        };
        let status = match e {
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
            E::AlreadyExists { .. } | E::DestinationExists(_) => Status::already_exists(msg),
            E::TooLarge { .. } | E::TooLargeUnsized { .. } | E::NoSpace { .. } => {
                Status::resource_exhausted(msg)
            }
            E::DirNeedsRecursive(_) | E::NotEmpty(_) => Status::failed_precondition(msg),
            E::StreamBroken { .. } => Status::cancelled(msg),
            E::Io { .. } | E::WorkerGone => Status::internal(msg),
        };
        with_reason(status, reason)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::files::list::wire_len;

    #[test]
    fn the_listing_budget_counts_each_entry_as_protobuf_encodes_it() {
        let plain = Entry { path: "a".into(), kind: FileKind::File, ..Default::default() };
        let full = Entry {
            path: "x".repeat(200),
            raw_path: vec![0xff; 130],
            kind: FileKind::Symlink,
            size: u64::MAX,
            mode: 0o7777,
            mtime_unix_ms: -1,
            symlink_target: "t".repeat(20_000),
        };
        let dir = Entry {
            path: "d".into(),
            kind: FileKind::Dir,
            mtime_unix_ms: 1_700_000_000_000,
            ..plain.clone()
        };
        for entry in [plain, full, dir] {
            assert_eq!(wire_len(&entry), file_entry(entry.clone()).encoded_len(), "{entry:?}");
        }
    }
}
