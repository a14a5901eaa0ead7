//! ReadFile, WriteFile, ListDir, Stat, Remove, Move, MakeDir.

use sbx_proto::agent::v1 as pb;
use tonic::{Status, Streaming};

use super::BoxStream;

pub(super) async fn read(_req: pb::ReadFileRequest) -> Result<BoxStream<pb::ReadFileChunk>, Status> {
    Err(Status::unimplemented("ReadFile is not implemented yet"))
}

pub(super) async fn write(_input: Streaming<pb::WriteFileRequest>) -> Result<pb::WriteFileResponse, Status> {
    Err(Status::unimplemented("WriteFile is not implemented yet"))
}

pub(super) async fn list(_req: pb::ListDirRequest) -> Result<pb::ListDirResponse, Status> {
    Err(Status::unimplemented("ListDir is not implemented yet"))
}

pub(super) async fn stat(_req: pb::StatRequest) -> Result<pb::FileEntry, Status> {
    Err(Status::unimplemented("Stat is not implemented yet"))
}

pub(super) async fn remove(_req: pb::RemoveRequest) -> Result<pb::RemoveResponse, Status> {
    Err(Status::unimplemented("Remove is not implemented yet"))
}

pub(super) async fn rename(_req: pb::MoveRequest) -> Result<pb::MoveResponse, Status> {
    Err(Status::unimplemented("Move is not implemented yet"))
}

pub(super) async fn make_dir(_req: pb::MakeDirRequest) -> Result<pb::MakeDirResponse, Status> {
    Err(Status::unimplemented("MakeDir is not implemented yet"))
}
