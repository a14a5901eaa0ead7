//! `hostile-agent SOCKET MODE [ARG]`: a guest agent taken over by its guest's root, for
//! `tests/tests/attack_copies.rs`. It serves the real contract (atoll-proto's generated
//! tonic server) on the Unix socket SOCKET, answers Info, and Stat, ReadFile and
//! DownloadDir as MODE says; every other call is UNIMPLEMENTED.
//!
//! Modes (what a copy out of the guest meets):
//! - `zip FILE`: every path is a folder; its zip is FILE's bytes, then a summary that
//!   lists 25 entries left out, named with terminal escapes.
//! - `zip-stall`: every path is a folder; one piece of zip, then nothing, for ever.
//! - `zip-endless`: every path is a folder; zip bytes that never end.
//! - `zip-no-summary FILE`: FILE's bytes and then the stream ends without a summary.
//! - `file N`: every path is a file announced as 10 bytes; N bytes are sent.
//! - `file-stall`: a file announced as 10 bytes; 5 are sent, then nothing.
//! - `file-unsized`: a file announced with no size (as /proc files are); bytes never end.

use std::pin::Pin;
use std::time::Duration;

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::agent_server::{Agent, AgentServer};
use bytes::Bytes;
use tokio::sync::mpsc::Sender;
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status, Streaming};

type Answer<T> = Result<Response<T>, Status>;
type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

const PIECE: usize = 1 << 20;

#[derive(Clone)]
struct Hostile {
    mode: String,
    arg: Option<String>,
}

fn nope<T>() -> Answer<T> {
    Err(Status::unimplemented("the hostile agent serves only what a copy needs"))
}

/// A response stream and the sender that feeds it (from a task of its own, which ends
/// when the client goes away).
fn channel<T: Send + 'static>() -> (Sender<Result<T, Status>>, Out<T>) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    (tx, Box::pin(ReceiverStream::new(rx)))
}

fn data(b: Bytes) -> pb::DownloadDirChunk {
    pb::DownloadDirChunk { part: Some(pb::download_dir_chunk::Part::Data(b)) }
}

#[tonic::async_trait]
impl Agent for Hostile {
    async fn info(&self, _: Request<pb::InfoRequest>) -> Answer<pb::InfoResponse> {
        Ok(Response::new(pb::InfoResponse { agent_version: "hostile-1".into(), ..Default::default() }))
    }

    async fn stat(&self, r: Request<pb::StatRequest>) -> Answer<pb::FileEntry> {
        let kind = if self.mode.starts_with("zip") { pb::FileType::Dir } else { pb::FileType::File };
        let size = if self.mode == "file-unsized" { 0 } else { 10 };
        Ok(Response::new(pb::FileEntry {
            path: r.into_inner().path,
            r#type: kind as i32,
            size,
            mode: 0o644,
            ..Default::default()
        }))
    }

    type ReadFileStream = Out<pb::ReadFileChunk>;
    async fn read_file(&self, _: Request<pb::ReadFileRequest>) -> Answer<Self::ReadFileStream> {
        let (me, (tx, out)) = (self.clone(), channel());
        tokio::spawn(async move {
            let chunk =
                |n: usize, size| pb::ReadFileChunk { data: Bytes::from(vec![b'x'; n]), file_size: size };
            match me.mode.as_str() {
                "file" => {
                    let mut left: usize = me.arg.as_deref().unwrap_or("10").parse().unwrap();
                    let mut first = true;
                    while left > 0 {
                        let n = left.min(PIECE);
                        let size = if first { 10 } else { 0 };
                        first = false;
                        if tx.send(Ok(chunk(n, size))).await.is_err() {
                            return;
                        }
                        left -= n;
                    }
                }
                "file-stall" => {
                    let _ = tx.send(Ok(chunk(5, 10))).await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                _ => while tx.send(Ok(chunk(PIECE, 0))).await.is_ok() {},
            }
        });
        Ok(Response::new(out))
    }

    type DownloadDirStream = Out<pb::DownloadDirChunk>;
    async fn download_dir(&self, _: Request<pb::DownloadDirRequest>) -> Answer<Self::DownloadDirStream> {
        let (me, (tx, out)) = (self.clone(), channel());
        tokio::spawn(async move {
            match me.mode.as_str() {
                "zip" | "zip-no-summary" => {
                    let zip = std::fs::read(me.arg.as_deref().expect("zip FILE")).expect("read the zip");
                    let zip = Bytes::from(zip);
                    for at in (0..zip.len()).step_by(PIECE) {
                        if tx.send(Ok(data(zip.slice(at..zip.len().min(at + PIECE))))).await.is_err() {
                            return;
                        }
                    }
                    if me.mode == "zip" {
                        // Entries "left out", named with terminal escapes, more than are shown.
                        let skipped = (0..25)
                            .map(|i| pb::SkippedEntry {
                                path: format!("s{i}\x1b]0;pwned\x07"),
                                reason: "\x1b[2Ja link".into(),
                            })
                            .collect();
                        let summary = pb::ArchiveSummary {
                            files: 1,
                            archive_bytes: zip.len() as u64,
                            skipped,
                            ..Default::default()
                        };
                        let part = pb::download_dir_chunk::Part::Summary(summary);
                        let _ = tx.send(Ok(pb::DownloadDirChunk { part: Some(part) })).await;
                    }
                }
                "zip-stall" => {
                    let _ = tx.send(Ok(data(Bytes::from_static(b"PK\x03\x04")))).await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                _ => {
                    let junk = Bytes::from(vec![0x5a; PIECE]);
                    while tx.send(Ok(data(junk.clone()))).await.is_ok() {}
                }
            }
        });
        Ok(Response::new(out))
    }

    async fn exec(&self, _: Request<pb::ExecRequest>) -> Answer<pb::ExecResponse> {
        nope()
    }
    type ExecStreamStream = Out<pb::ExecEvent>;
    async fn exec_stream(
        &self,
        _: Request<Streaming<pb::ExecStreamInput>>,
    ) -> Answer<Self::ExecStreamStream> {
        nope()
    }
    async fn start_job(&self, _: Request<pb::StartJobRequest>) -> Answer<pb::Job> {
        nope()
    }
    async fn get_job(&self, _: Request<pb::JobRef>) -> Answer<pb::Job> {
        nope()
    }
    async fn wait_job(&self, _: Request<pb::WaitJobRequest>) -> Answer<pb::Job> {
        nope()
    }
    async fn signal_job(&self, _: Request<pb::SignalJobRequest>) -> Answer<pb::Job> {
        nope()
    }
    async fn list_jobs(&self, _: Request<pb::ListJobsRequest>) -> Answer<pb::ListJobsResponse> {
        nope()
    }
    async fn write_file(&self, _: Request<Streaming<pb::WriteFileRequest>>) -> Answer<pb::WriteFileResponse> {
        nope()
    }
    async fn list_dir(&self, _: Request<pb::ListDirRequest>) -> Answer<pb::ListDirResponse> {
        nope()
    }
    async fn remove(&self, _: Request<pb::RemoveRequest>) -> Answer<pb::RemoveResponse> {
        nope()
    }
    async fn r#move(&self, _: Request<pb::MoveRequest>) -> Answer<pb::MoveResponse> {
        nope()
    }
    async fn make_dir(&self, _: Request<pb::MakeDirRequest>) -> Answer<pb::MakeDirResponse> {
        nope()
    }
    async fn upload_dir(&self, _: Request<Streaming<pb::UploadDirRequest>>) -> Answer<pb::UploadDirResponse> {
        nope()
    }
    async fn set_time(&self, _: Request<pb::SetTimeRequest>) -> Answer<pb::SetTimeResponse> {
        nope()
    }
    async fn restored(&self, _: Request<pb::RestoredRequest>) -> Answer<pb::RestoredResponse> {
        nope()
    }
    type ConnectPortStream = Out<pb::PortData>;
    async fn connect_port(&self, _: Request<Streaming<pb::PortData>>) -> Answer<Self::ConnectPortStream> {
        nope()
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (socket, mode) = (args.next().expect("SOCKET"), args.next().expect("MODE"));
    let agent = Hostile { mode, arg: args.next() };
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind the socket");
    let server = AgentServer::new(agent)
        .max_decoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES);
    tonic::transport::Server::builder()
        .add_service(server)
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await
        .expect("serve");
}
