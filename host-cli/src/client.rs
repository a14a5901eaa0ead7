//! [`Client`]: the one typed client of the agent. The `atoll` subcommands and the MCP
//! tools are both thin callers of it, so a capability is written once and reaches both.
//!
//! Methods take plain Rust types ([`ExecSpec`], [`ReadOpts`], readers) and return domain
//! results ([`ExecResult`], [`FileEntry`], streams of [`Bytes`]); errors are
//! [`ClientError`], which keeps the agent's gRPC code and message.
//!
//! The records, with their conversions from and to the generated messages, one file per
//! area: `exec` (commands), `jobs` (background jobs), `files` (entries, listings, read
//! and write options), `archive` (directory downloads and uploads), `system`
//! ([`AgentInfo`]). They serialize to the JSON `atoll --json` prints.

mod archive;
mod error;
mod exec;
#[cfg(test)]
pub(crate) mod fake;
mod files;
mod jobs;
mod ports;
mod proof;
mod system;
mod terminal;

use std::io;
use std::time::Duration;

use atoll_proto::Address;
use atoll_proto::agent::v1::{self as pb, agent_client::AgentClient};
use atoll_proto::limits::{CHUNK_SIZE, MAX_MESSAGE_BYTES, UPLOAD_CHUNK_SIZE};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use tokio::io::AsyncRead;
use tokio::sync::oneshot;
use tonic::transport::Channel;

use crate::connect::Link;

pub use archive::{ArchivePart, ArchiveSummary, SkippedEntry, UploadSummary};
pub use error::ClientError;
pub use exec::{Captured, ExecEvent, ExecResult, ExecSpec, ExitStatus, Program, TIMEOUT_EXIT_CODE};
pub use files::{FileEntry, FileKind, ListOpts, Listing, ReadOpts, WriteOpts, WriteResult};
pub use jobs::{Job, JobOutput, JobState};
pub use ports::PortTraffic;
pub use system::{AgentInfo, Restored};
pub use terminal::{TerminalInput, WindowSize};

/// Result of a client call.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A file being read: its size, then its bytes in chunks.
pub struct FileRead {
    /// Size of the whole file (not just the slice).
    pub file_size: u64,
    /// The slice's bytes.
    pub chunks: BoxStream<'static, Result<Bytes>>,
}

/// The channel to an agent, with its token.
type Agent = tonic::service::interceptor::InterceptedService<Channel, crate::connect::Bearer>;

/// A connected agent.
#[derive(Clone)]
pub struct Client {
    rpc: AgentClient<proof::Proven<Agent>>,
    addr: Address,
    /// Whether the connection under `rpc` broke (see [`Link`]).
    link: Link,
    /// What commands get when their spec does not say (a template's image config).
    defaults: Option<std::sync::Arc<crate::vmm::template::CommandDefaults>>,
    /// How long a transfer out of the guest may go without a message.
    idle: Duration,
}

/// How long a transfer out of the guest (a file read, a directory download) may go
/// without a message before it is given up: a guest that stalls must not hold a copy
/// (or an MCP tool call) for ever.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl Client {
    /// Reaches the agent at `addr`: dial, handshake, HTTP/2 session and one answered
    /// call, all within `timeout` (`atoll --connect-timeout`). Every face connects
    /// through here or [`Client::open`], so no command or tool waits longer than that on
    /// an endpoint that takes the connection and then says nothing.
    pub async fn connect(addr: &Address, timeout: Duration) -> Result<Client> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (channel, link) = crate::connect::connect(addr, timeout).await?;
        let mut client = Self::from_channel(channel, addr.clone());
        client.link = link;
        client.answer_by(deadline, timeout).await?;
        Ok(client)
    }

    /// Reaches the agent at `addr` as [`Client::connect`] does, bounded the same, but
    /// proves that it answers beside the first call rather than before it
    /// (`client::proof`): a command's first call does not wait one more round trip. What the
    /// proof finds wrong is that call's error, the one `connect` would have given. For a
    /// caller that makes its calls at once (an `atoll` command); one that keeps a client
    /// or asks whether the agent answers uses `connect`.
    pub async fn open(addr: &Address, timeout: Duration) -> Result<Client> {
        let (channel, link) = crate::connect::connect(addr, timeout).await?;
        let agent = Agent::new(channel, crate::connect::Bearer::for_address(addr));
        let mut info = AgentClient::new(agent.clone());
        let proof = proof::start(async move { info.info(pb::InfoRequest {}).await }, link.clone(), timeout);
        let mut client = Self::over(proof::Proven::with(agent, proof), addr.clone());
        client.link = link;
        Ok(client)
    }

    /// Dials the agent at `addr` and starts the HTTP/2 session within `timeout`, without
    /// waiting for an answered call: for a caller that bounds its own first call (a
    /// restore greets the agent with its own first call, and an extra one would cost it
    /// time).
    pub async fn dial(addr: &Address, timeout: Duration) -> Result<Client> {
        let (channel, link) = crate::connect::connect(addr, timeout).await?;
        let mut client = Self::from_channel(channel, addr.clone());
        client.link = link;
        Ok(client)
    }

    /// Proves that the agent still answers: one small call, waited for at most
    /// `timeout`. A kept client checks this before reuse (`atoll mcp`).
    pub async fn check(&self, timeout: Duration) -> Result<()> {
        self.answer_by(tokio::time::Instant::now() + timeout, timeout).await
    }

    /// The agent answers one Info call by `deadline` ([`proof::answer`]; `timeout` is
    /// how the wait reads in the message).
    async fn answer_by(&self, deadline: tokio::time::Instant, timeout: Duration) -> Result<()> {
        let mut rpc = self.rpc.clone();
        let call = rpc.info(pb::InfoRequest {});
        proof::answer(call, &self.link, deadline, timeout).await.map_err(|u| u.at(&self.addr).into())
    }

    /// Wraps a channel that is already connected to `addr`.
    pub fn from_channel(channel: Channel, addr: Address) -> Client {
        let agent = Agent::new(channel, crate::connect::Bearer::for_address(&addr));
        Self::over(proof::Proven::plain(agent), addr)
    }

    fn over(service: proof::Proven<Agent>, addr: Address) -> Client {
        let rpc = AgentClient::new(service)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Client { rpc, addr, link: Link::default(), defaults: None, idle: DEFAULT_IDLE_TIMEOUT }
    }

    /// This client giving up on a transfer out of the guest after `idle` without a message.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Client {
        self.idle = idle;
        self
    }

    /// `stream`, ended with [`ClientError::Idle`] when no item comes for `self.idle`.
    fn idle_bounded<T: Send + 'static>(
        &self,
        rpc: &'static str,
        stream: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        let idle = self.idle;
        stream::unfold(Some(stream), move |state| async move {
            let mut inner = state?;
            match tokio::time::timeout(idle, inner.next()).await {
                Ok(Some(item)) => Some((item, Some(inner))),
                Ok(None) => None,
                Err(_) => Some((Err(ClientError::Idle { rpc, idle }), None)),
            }
        })
        .boxed()
    }

    /// `call` (a stream's opening), bounded as its messages are.
    async fn idle_call<T>(&self, rpc: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.idle, call).await.unwrap_or(Err(ClientError::Idle { rpc, idle: self.idle }))
    }

    /// This client with `defaults` for every command it runs (exec, jobs, terminals)
    /// whose spec leaves env entries, cwd or user unset.
    pub fn with_defaults(mut self, defaults: Option<crate::vmm::template::CommandDefaults>) -> Client {
        self.defaults = defaults.map(std::sync::Arc::new);
        self
    }

    /// `spec` with this client's defaults filled in.
    fn complete(&self, spec: &ExecSpec) -> ExecSpec {
        match &self.defaults {
            Some(d) => spec.with_defaults(d),
            None => spec.clone(),
        }
    }

    /// Where the agent is.
    pub fn address(&self) -> &Address {
        &self.addr
    }

    fn err(&self, rpc: &'static str) -> impl Fn(tonic::Status) -> ClientError + Send + Sync + 'static {
        let (addr, link) = (self.addr.clone(), self.link.clone());
        move |status| ClientError::from_status(status, &addr, rpc, link.is_broken())
    }

    // ------------------------------------------------------------ commands

    /// Runs a command to completion; its output comes back capped (head and tail).
    pub async fn exec(&self, spec: &ExecSpec) -> Result<ExecResult> {
        let r = self
            .rpc
            .clone()
            .exec(self.complete(spec).request())
            .await
            .map_err(self.err("Exec"))?
            .into_inner();
        let status = r.status.ok_or(ClientError::Protocol { rpc: "Exec", what: "no exit status" })?;
        Ok(ExecResult { status: status.into(), stdout: r.stdout.into(), stderr: r.stderr.into() })
    }

    /// Runs a command and streams its output untruncated. `stdin`, when given, is
    /// forwarded until its end; otherwise the command's stdin is closed at once.
    /// Dropping the stream kills the command's process group in the guest.
    pub async fn exec_stream<R>(
        &self,
        spec: &ExecSpec,
        stdin: Option<R>,
    ) -> Result<BoxStream<'static, Result<ExecEvent>>>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        use pb::exec_stream_input::Input;
        let start = pb::ExecStreamInput { input: Some(Input::Start(self.complete(spec).request())) };
        let eof = pb::ExecStreamInput { input: Some(Input::StdinEof(true)) };
        let data: BoxStream<'static, pb::ExecStreamInput> = match stdin {
            Some(r) => tokio_util::io::ReaderStream::with_capacity(r, CHUNK_SIZE)
                .scan((), |(), chunk| {
                    std::future::ready(match chunk {
                        Ok(b) => Some(pb::ExecStreamInput { input: Some(Input::Stdin(b)) }),
                        Err(e) => {
                            tracing::warn!("stopped forwarding stdin: {e}");
                            None
                        }
                    })
                })
                .boxed(),
            None => stream::empty().boxed(),
        };
        // The request stays open after stdin's end so that the agent never mistakes a
        // half-closed stream for a client that went away.
        let body = stream::once(async { start })
            .chain(data)
            .chain(stream::once(async { eof }))
            .chain(stream::pending());
        self.exec_events(body).await
    }

    /// Opens ExecStream with `body` and maps its events.
    async fn exec_events(
        &self,
        body: impl Stream<Item = pb::ExecStreamInput> + Send + 'static,
    ) -> Result<BoxStream<'static, Result<ExecEvent>>> {
        let events = self.rpc.clone().exec_stream(body).await.map_err(self.err("ExecStream"))?.into_inner();
        let err = self.err("ExecStream");
        Ok(events
            .filter_map(move |ev| {
                use pb::exec_event::Event;
                let out = match ev {
                    Err(status) => Some(Err(err(status))),
                    Ok(pb::ExecEvent { event: Some(Event::Started(s)) }) => {
                        Some(Ok(ExecEvent::Started { pid: s.pid }))
                    }
                    Ok(pb::ExecEvent { event: Some(Event::Stdout(b)) }) => Some(Ok(ExecEvent::Stdout(b))),
                    Ok(pb::ExecEvent { event: Some(Event::Stderr(b)) }) => Some(Ok(ExecEvent::Stderr(b))),
                    Ok(pb::ExecEvent { event: Some(Event::Exited(s)) }) => {
                        Some(Ok(ExecEvent::Exited(s.into())))
                    }
                    Ok(pb::ExecEvent { event: None }) => None,
                };
                async move { out }
            })
            .boxed())
    }

    // ------------------------------------------------------------ jobs

    /// Starts a detached background job (`spec.timeout`: `None` runs until it ends).
    pub async fn start_job(&self, spec: &ExecSpec) -> Result<Job> {
        let spec = self.complete(spec);
        let req = pb::StartJobRequest { command: Some(spec.command()), timeout_ms: spec.timeout_ms() };
        Ok(self.rpc.clone().start_job(req).await.map_err(self.err("StartJob"))?.into_inner().into())
    }

    /// A job's current state and output tails.
    pub async fn job(&self, id: &str) -> Result<Job> {
        let req = pb::JobRef { id: id.to_string() };
        Ok(self.rpc.clone().get_job(req).await.map_err(self.err("GetJob"))?.into_inner().into())
    }

    /// Waits until the job exits or `timeout` passes (`None`: the agent's 600 s).
    pub async fn wait_job(&self, id: &str, timeout: Option<Duration>) -> Result<Job> {
        let timeout_ms = timeout.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX)).unwrap_or(0);
        let req = pb::WaitJobRequest { id: id.to_string(), timeout_ms };
        Ok(self.rpc.clone().wait_job(req).await.map_err(self.err("WaitJob"))?.into_inner().into())
    }

    /// Sends `signal` (0: SIGKILL) to the job's process group.
    pub async fn signal_job(&self, id: &str, signal: i32) -> Result<Job> {
        let req = pb::SignalJobRequest { id: id.to_string(), signal };
        Ok(self.rpc.clone().signal_job(req).await.map_err(self.err("SignalJob"))?.into_inner().into())
    }

    /// Every job the agent started, newest last.
    pub async fn jobs(&self) -> Result<Vec<Job>> {
        let r = self.rpc.clone().list_jobs(pb::ListJobsRequest {}).await.map_err(self.err("ListJobs"))?;
        Ok(r.into_inner().jobs.into_iter().map(Into::into).collect())
    }

    // ------------------------------------------------------------ files

    /// Starts reading a file (or a slice of it): its size now, its bytes as they come.
    pub async fn read_file(&self, path: &str, opts: ReadOpts) -> Result<FileRead> {
        let req = pb::ReadFileRequest {
            path: path.to_string(),
            offset: opts.offset,
            length: opts.length.unwrap_or(0),
            max_bytes: opts.max_bytes.unwrap_or(0),
        };
        let err = self.err("ReadFile");
        let mut rpc = self.rpc.clone();
        let (first, chunks) = self
            .idle_call("ReadFile", async {
                let mut chunks = rpc.read_file(req).await.map_err(&err)?.into_inner();
                let first = chunks.message().await.map_err(&err)?;
                Ok((first, chunks))
            })
            .await?;
        let file_size = first.as_ref().map(|c| c.file_size).unwrap_or(0);
        let first = first.map(|c| Ok(c.data));
        let rest = chunks.map(move |c| c.map(|c| c.data).map_err(&err));
        let chunks = self.idle_bounded("ReadFile", stream::iter(first).chain(rest).boxed());
        Ok(FileRead { file_size, chunks })
    }

    /// Writes `data` to a guest file atomically: the file appears only if every byte
    /// arrived. A failure reading `data` abandons the call and the guest keeps nothing.
    pub async fn write_file<R>(&self, path: &str, opts: WriteOpts, data: R) -> Result<WriteResult>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        self.write_chunks(path, opts, tokio_util::io::ReaderStream::with_capacity(data, UPLOAD_CHUNK_SIZE))
            .await
    }

    /// Writes bytes already in memory to a guest file (see [`Client::write_file`]); they
    /// go out as slices of `data`, not copied into a read buffer first.
    pub async fn write_bytes(&self, path: &str, opts: WriteOpts, data: Bytes) -> Result<WriteResult> {
        self.write_chunks(path, opts, stream::iter(bulk_slices(data).map(Ok))).await
    }

    async fn write_chunks<S>(&self, path: &str, opts: WriteOpts, chunks: S) -> Result<WriteResult>
    where
        S: Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static,
    {
        use pb::write_file_request::Part;
        let header = pb::WriteFileRequest {
            part: Some(Part::Header(pb::WriteFileHeader {
                path: path.to_string(),
                mode: opts.mode.unwrap_or(0),
                append: opts.append,
                no_create_parents: opts.no_create_parents,
                sync: opts.sync,
            })),
        };
        let (body, failed) = upload_body(
            header,
            chunks,
            |b| pb::WriteFileRequest { part: Some(Part::Data(b)) },
            pb::WriteFileRequest { part: Some(Part::End(true)) },
        );
        let call = async { self.rpc.clone().write_file(body).await };
        let r = abandon_on_source_error(call, failed).await?.map_err(self.err("WriteFile"))?.into_inner();
        Ok(WriteResult { bytes_written: r.bytes_written, file_size: r.file_size })
    }

    /// Lists a directory.
    pub async fn list(&self, path: &str, opts: ListOpts) -> Result<Listing> {
        let req = pb::ListDirRequest {
            path: path.to_string(),
            recursive: opts.recursive,
            max_depth: opts.max_depth.unwrap_or(0),
            max_entries: opts.max_entries.unwrap_or(0),
            names_only: opts.names_only,
        };
        let r = self.rpc.clone().list_dir(req).await.map_err(self.err("ListDir"))?.into_inner();
        Ok(Listing { entries: r.entries.into_iter().map(Into::into).collect(), truncated: r.truncated })
    }

    /// A file's metadata (a symlink itself, not its target).
    pub async fn stat(&self, path: &str) -> Result<FileEntry> {
        let req = pb::StatRequest { path: path.to_string() };
        Ok(self.rpc.clone().stat(req).await.map_err(self.err("Stat"))?.into_inner().into())
    }

    /// Removes a file, or a directory and everything in it when `recursive`.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let req = pb::RemoveRequest { path: path.to_string(), recursive };
        self.rpc.clone().remove(req).await.map_err(self.err("Remove"))?;
        Ok(())
    }

    /// Moves `from` to `to`; an existing `to` is refused unless `overwrite`.
    pub async fn mv(&self, from: &str, to: &str, overwrite: bool) -> Result<()> {
        let req = pb::MoveRequest { from: from.to_string(), to: to.to_string(), overwrite };
        self.rpc.clone().r#move(req).await.map_err(self.err("Move"))?;
        Ok(())
    }

    /// Creates a directory (`parents`: and its missing parents, fine if it exists).
    pub async fn mkdir(&self, path: &str, parents: bool, mode: Option<u32>) -> Result<()> {
        let req = pb::MakeDirRequest { path: path.to_string(), parents, mode: mode.unwrap_or(0) };
        self.rpc.clone().make_dir(req).await.map_err(self.err("MakeDir"))?;
        Ok(())
    }

    // ------------------------------------------------------------ archives

    /// Streams a guest directory as a zip; the last part is the summary.
    /// `max_bytes` caps the archive (RESOURCE_EXHAUSTED past it).
    pub async fn download_dir(
        &self,
        path: &str,
        max_bytes: Option<u64>,
    ) -> Result<BoxStream<'static, Result<ArchivePart>>> {
        use pb::download_dir_chunk::Part;
        let req = pb::DownloadDirRequest { path: path.to_string(), max_bytes: max_bytes.unwrap_or(0) };
        let err = self.err("DownloadDir");
        let mut rpc = self.rpc.clone();
        let call = async { rpc.download_dir(req).await.map_err(&err) };
        let parts = self.idle_call("DownloadDir", call).await?.into_inner();
        let parts = parts
            .filter_map(move |p| {
                let out = match p {
                    Err(status) => Some(Err(err(status))),
                    Ok(pb::DownloadDirChunk { part: Some(Part::Data(b)) }) => Some(Ok(ArchivePart::Data(b))),
                    Ok(pb::DownloadDirChunk { part: Some(Part::Summary(s)) }) => {
                        Some(Ok(ArchivePart::Summary(s.into())))
                    }
                    Ok(pb::DownloadDirChunk { part: None }) => None,
                };
                async move { out }
            })
            .boxed();
        Ok(self.idle_bounded("DownloadDir", parts))
    }

    /// Extracts the zip read from `zip` into the guest directory `path` (created if
    /// missing). The agent refuses entries that would land outside `path`. With `sync`
    /// the agent flushes what it extracted to disk before answering.
    pub async fn upload_dir<R>(&self, path: &str, sync: bool, zip: R) -> Result<UploadSummary>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        use pb::upload_dir_request::Part;
        let header = pb::UploadDirHeader { path: path.to_string(), sync };
        let header = pb::UploadDirRequest { part: Some(Part::Header(header)) };
        let (body, failed) = upload_body(
            header,
            tokio_util::io::ReaderStream::with_capacity(zip, UPLOAD_CHUNK_SIZE),
            |b| pb::UploadDirRequest { part: Some(Part::Data(b)) },
            pb::UploadDirRequest { part: Some(Part::End(true)) },
        );
        let call = async { self.rpc.clone().upload_dir(body).await };
        let r = abandon_on_source_error(call, failed).await?.map_err(self.err("UploadDir"))?.into_inner();
        Ok(UploadSummary { files: r.files, dirs: r.dirs, file_bytes: r.file_bytes })
    }

    // ------------------------------------------------------------ system

    /// The agent's version and its machine's resources.
    pub async fn info(&self) -> Result<AgentInfo> {
        Ok(self.rpc.clone().info(pb::InfoRequest {}).await.map_err(self.err("Info"))?.into_inner().into())
    }

    /// Sets the guest clock; returns how far it moved, in milliseconds.
    pub async fn set_time(&self, unix_ms: i64) -> Result<i64> {
        let req = pb::SetTimeRequest { unix_ms };
        Ok(self.rpc.clone().set_time(req).await.map_err(self.err("SetTime"))?.into_inner().adjusted_by_ms)
    }

    /// Tells a guest restored from a snapshot that it is a new machine: its clock set to
    /// `unix_ms`, its hostname to `hostname`, `entropy` mixed into its random pool. An
    /// agent older than the call gives [`ClientError::Unsupported`].
    pub async fn restored(&self, unix_ms: i64, hostname: &str, entropy: Bytes) -> Result<Restored> {
        let req = pb::RestoredRequest { unix_ms, hostname: hostname.to_string(), entropy };
        Ok(self.rpc.clone().restored(req).await.map_err(self.err("Restored"))?.into_inner().into())
    }
}

/// A client-streaming request body: `first`, then the `chunks`. A read error is
/// reported on the returned receiver and the body then stalls instead of ending, so the
/// agent never sees a clean end it would commit; the caller drops the call instead.
fn upload_body<M, S>(
    first: M,
    chunks: S,
    wrap: fn(Bytes) -> M,
    end: M,
) -> (impl Stream<Item = M> + Send + 'static, oneshot::Receiver<io::Error>)
where
    M: Send + 'static,
    S: Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static,
{
    let (tx, rx) = oneshot::channel();
    let rest = stream::unfold((chunks, Some(tx)), move |(mut chunks, mut tx)| async move {
        match chunks.next().await {
            None => None,
            Some(Ok(b)) => Some((wrap(b), (chunks, tx))),
            Some(Err(e)) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(e);
                }
                std::future::pending().await
            }
        }
    });
    // `end` follows the data only when the source was read to its end: the agent commits
    // nothing without it.
    (stream::once(async { first }).chain(rest).chain(stream::once(async { end })), rx)
}

/// `data` as slices of at most [`UPLOAD_CHUNK_SIZE`] bytes, sharing its buffer.
fn bulk_slices(mut data: Bytes) -> impl Iterator<Item = Bytes> + Send + Unpin {
    std::iter::from_fn(move || (!data.is_empty()).then(|| data.split_to(data.len().min(UPLOAD_CHUNK_SIZE))))
}

/// Runs `call` unless the body reports a read error first, in which case the call is
/// dropped (resetting the stream) and the error returned.
async fn abandon_on_source_error<T>(
    call: impl Future<Output = T>,
    failed: oneshot::Receiver<io::Error>,
) -> Result<T> {
    tokio::select! {
        out = call => Ok(out),
        Ok(e) = failed => Err(ClientError::Source(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_slices_cover_the_data_in_order_without_empty_slices() {
        assert_eq!(bulk_slices(Bytes::new()).count(), 0);
        let data: Bytes =
            (0..2 * UPLOAD_CHUNK_SIZE + 1).map(|i| i.to_le_bytes()[0]).collect::<Vec<_>>().into();
        let slices: Vec<Bytes> = bulk_slices(data.clone()).collect();
        let lens: Vec<usize> = slices.iter().map(Bytes::len).collect();
        assert_eq!(lens, [UPLOAD_CHUNK_SIZE, UPLOAD_CHUNK_SIZE, 1]);
        assert_eq!(slices.concat(), data);
        assert_eq!(bulk_slices(Bytes::from_static(b"hi")).collect::<Vec<_>>(), [Bytes::from_static(b"hi")]);
    }
}
