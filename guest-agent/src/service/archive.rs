//! DownloadDir and UploadDir.

use sbx_proto::agent::v1 as pb;
use tonic::{Status, Streaming};

use super::BoxStream;

pub(super) async fn download(_req: pb::DownloadDirRequest) -> Result<BoxStream<pb::DownloadDirChunk>, Status> {
    Err(Status::unimplemented("DownloadDir is not implemented yet"))
}

pub(super) async fn upload(_input: Streaming<pb::UploadDirRequest>) -> Result<pb::UploadDirResponse, Status> {
    Err(Status::unimplemented("UploadDir is not implemented yet"))
}
