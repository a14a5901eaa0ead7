//! WriteFile: streamed in, made visible atomically.
//!
//! The data goes to a temp file (`.atoll-write-*`) in the target's directory, which is
//! given its mode and renamed over the target. If the stream fails or the client goes
//! away first, the temp file is dropped (and so removed) and the target is untouched.
//! `append` copies the old content into the temp file first, so it is atomic too.
//!
//! With `sync` the temp file is fsynced before the rename and the directory after it,
//! so the write also survives a crash of the machine. It is not the default: a
//! sandbox's disk is thrown away with the sandbox (and its overlay ignores flushes), so
//! the two fsyncs would cost every tool call a disk flush, a millisecond or more,
//! for nothing; without them the kernel writes the file back in its own time, as it
//! does for `cp` or an editor's save.
//!
//! A symlink as the target is followed: the file it points to is replaced, the link
//! stays. A dangling symlink is replaced by the file.

use std::fs::{File, Permissions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use atoll_proto::limits::CHUNK_SIZE;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tempfile::NamedTempFile;
use tokio::sync::mpsc;

use super::{FsError, blocking, check_path};
use crate::placement::{in_memory, quick_if};

/// Prefix of the temp files a write in progress leaves next to its target.
pub const TEMP_PREFIX: &str = ".atoll-write-";

/// Chunks queued for the writer thread; with the HTTP/2 stream window this bounds what
/// one write holds in memory.
const WRITE_QUEUE_CHUNKS: usize = 4;

/// Bytes per write(2). Larger writes make the page cache ask for larger folios, which
/// the kernel often has to compact memory for: 1 MiB writes measured 2-3x the system
/// time of 64 KiB writes (median of 8, 256 MiB each) on the machines we bench on.
const WRITE_BYTES: usize = 64 * 1024;

/// Writes whose stream ends within this many bytes are gathered whole before the disk is
/// touched, then written and committed in one go: in place, or in one blocking-pool
/// trip when they append, fsync on a disk, or a remote filesystem is mounted.
const WHOLE_WRITE_MAX: usize = CHUNK_SIZE;

/// Mode of a new file when the caller leaves it at 0.
const DEFAULT_FILE_MODE: u32 = 0o644;

/// A write ready to receive data.
struct Pending {
    target: PathBuf,
    parent: PathBuf,
    temp: NamedTempFile,
    mode: u32,
    /// Bytes copied from the old file (append).
    kept: u64,
}

/// Where and how to write; the data follows as a stream.
#[derive(Debug, Clone, Default)]
pub struct WriteHeader {
    /// The file.
    pub path: String,
    /// Mode of a new file; 0: 0644, or the old file's mode when it is replaced.
    pub mode: u32,
    /// Append to the old content instead of replacing it.
    pub append: bool,
    /// Fail instead of creating missing parent directories.
    pub no_create_parents: bool,
    /// fsync the file and its directory before answering.
    pub sync: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    /// Bytes this call wrote.
    pub bytes_written: u64,
    /// The file's size afterwards.
    pub file_size: u64,
}

/// Writes the stream's data to `header.path` atomically.
///
/// `data` yields the data chunks in order; an `Err` aborts the write and leaves the
/// target as it was.
pub async fn write<S>(header: WriteHeader, data: S) -> Result<Written, FsError>
where
    S: Stream<Item = Result<Bytes, FsError>>,
{
    let path = check_path(&header.path)?;
    let mut data = std::pin::pin!(data);
    let (head, ended) = gather_head(&mut data).await?;
    if ended {
        // The whole write is in hand: open, write and commit in one go; in place when
        // it is small and bounded, else in one blocking-pool trip. An fsync on a disk
        // may take long, and an append copies the old file first, whatever its size:
        // the agent's one worker must not stall on either.
        let written = head.len() as u64;
        let probe = path.clone();
        let (append, sync) = (header.append, header.sync);
        let on_tmpfs = move || resolve(probe).is_ok_and(|(target, _)| target.parent().is_some_and(in_memory));
        let small = move || !append && (!sync || on_tmpfs());
        let file_size = quick_if(small, move || {
            let mut pending = prepare(path, &header)?;
            write_pieces(pending.temp.as_file_mut(), &head)
                .map_err(|e| FsError::io("write", &pending.target, e))?;
            let file_size = pending.kept + written;
            commit(pending, sync)?;
            Ok(file_size)
        })
        .await?;
        return Ok(Written { bytes_written: written, file_size });
    }
    let sync = header.sync;
    let pending = blocking(move || prepare(path, &header)).await?;
    let handle = pending.temp.as_file().try_clone().map_err(|e| FsError::io("write", &pending.target, e))?;
    let rest = futures::stream::once(async { Ok(head) }).chain(data);
    let (_, written) = write_stream(handle, rest, "write", &pending.target).await?;
    let file_size = pending.kept + written;
    blocking(move || commit(pending, sync)).await?;
    Ok(Written { bytes_written: written, file_size })
}

/// Receives chunks until the stream ends or more than [`WHOLE_WRITE_MAX`] bytes came;
/// returns them and whether the stream ended. Most writes of a tool call are small and
/// arrive with their end in one go, so they need no writer thread.
async fn gather_head<S>(data: &mut std::pin::Pin<&mut S>) -> Result<(Bytes, bool), FsError>
where
    S: Stream<Item = Result<Bytes, FsError>>,
{
    let mut chunks = Vec::new();
    let mut len = 0;
    while len <= WHOLE_WRITE_MAX {
        match data.next().await {
            None => return Ok((join(chunks), true)),
            Some(chunk) => {
                let chunk = chunk?;
                len += chunk.len();
                chunks.push(chunk);
            }
        }
    }
    Ok((join(chunks), false))
}

/// One buffer of `chunks`; a single chunk is kept as it came, without a copy.
fn join(mut chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => chunks.concat().into(),
    }
}

/// Writes the chunks of `data` to `file` and gives it back with the bytes written.
///
/// The chunks go over a short queue to one blocking thread that writes them as they
/// come, so the file is written while the next chunks arrive and no chunk is copied
/// again on its way to the disk (`tokio::fs::File` copies each and hops to the
/// blocking pool per write). An `Err` from `data` ends the write and is returned; a
/// failed write is reported as "cannot `what` `path`".
pub(crate) async fn write_stream<S>(
    file: File,
    data: S,
    what: &'static str,
    path: &Path,
) -> Result<(File, u64), FsError>
where
    S: Stream<Item = Result<Bytes, FsError>>,
{
    let mut data = std::pin::pin!(data);
    let (tx, rx) = mpsc::channel::<Bytes>(WRITE_QUEUE_CHUNKS);
    let writer = tokio::task::spawn_blocking(move || write_all(file, rx));
    let mut written: u64 = 0;
    while let Some(chunk) = data.next().await {
        let chunk = chunk?;
        let len = chunk.len() as u64;
        if tx.send(chunk).await.is_err() {
            // The writer stopped on an error; it is reported below.
            break;
        }
        written += len;
    }
    drop(tx);
    let file = writer.await.map_err(|_| FsError::WorkerGone)?.map_err(|e| FsError::io(what, path, e))?;
    Ok((file, written))
}

/// Writes every chunk from `rx` to `file` until the sender is gone or a write fails.
fn write_all(mut file: File, mut rx: mpsc::Receiver<Bytes>) -> std::io::Result<File> {
    while let Some(chunk) = rx.blocking_recv() {
        write_pieces(&mut file, &chunk)?;
    }
    Ok(file)
}

/// Writes `data` in [`WRITE_BYTES`] pieces.
fn write_pieces(file: &mut File, data: &[u8]) -> std::io::Result<()> {
    data.chunks(WRITE_BYTES).try_for_each(|piece| file.write_all(piece))
}

/// Resolves the target, makes its parents, and opens the temp file.
///
/// The common case costs one `lstat` and the temp file's `open`: the parent directory
/// is looked at only when the temp file cannot be created in it.
fn prepare(path: PathBuf, header: &WriteHeader) -> Result<Pending, FsError> {
    let (target, existing) = resolve(path)?;
    if existing.as_ref().is_some_and(std::fs::Metadata::is_dir) {
        return Err(FsError::IsADirectory {
            path: target,
            hint: "name a file path, e.g. a new name inside it",
        });
    }
    let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mode = match (header.mode, &existing) {
        (0, Some(meta)) => meta.mode() & 0o7777,
        (0, None) => DEFAULT_FILE_MODE,
        (m, _) => m & 0o7777,
    };
    let mut temp = match new_temp(&parent) {
        Ok(temp) => temp,
        // Most likely the parent is missing: make it (or say why not), then try again.
        Err(_) => {
            ensure_parent(&parent, header.no_create_parents)?;
            new_temp(&parent).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound && parent.is_dir() {
                    FsError::CannotCreateIn(parent.clone())
                } else {
                    FsError::io("create a file in", &parent, e)
                }
            })?
        }
    };
    let mut kept = 0;
    if header.append && existing.is_some() {
        let mut old = File::open(&target).map_err(|e| FsError::io("read", &target, e))?;
        kept =
            std::io::copy(&mut old, temp.as_file_mut()).map_err(|e| FsError::io("append to", &target, e))?;
    }
    Ok(Pending { target, parent, temp, mode, kept })
}

fn new_temp(dir: &Path) -> std::io::Result<NamedTempFile> {
    tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir)
}

/// The file a write to `path` replaces, and its metadata if it exists: a symlink is
/// written through, to the file it names.
fn resolve(path: PathBuf) -> Result<(PathBuf, Option<std::fs::Metadata>), FsError> {
    let found = |meta: std::io::Result<std::fs::Metadata>, path: PathBuf| match meta {
        Ok(meta) => Ok((path, Some(meta))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((path, None)),
        Err(e) => Err(FsError::io("write", &path, e)),
    };
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::canonicalize(&path).unwrap_or(path);
            found(std::fs::metadata(&target), target)
        }
        other => found(other, path),
    }
}

fn ensure_parent(parent: &Path, no_create_parents: bool) -> Result<(), FsError> {
    match std::fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(FsError::NotADirectory {
            path: parent.to_path_buf(),
            hint: "the parent of the file is a file; pick another path",
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if no_create_parents {
                return Err(FsError::ParentMissing {
                    path: parent.to_path_buf(),
                    hint: "create it first, or let the write create missing parents",
                });
            }
            std::fs::create_dir_all(parent).map_err(|e| FsError::io("create directory", parent, e))
        }
        Err(e) => Err(FsError::io("write into", parent, e)),
    }
}

/// chmod, rename over the target; with `sync`, fsync the file before the rename and
/// the directory after it.
fn commit(pending: Pending, sync: bool) -> Result<(), FsError> {
    let Pending { target, parent, temp, mode, .. } = pending;
    let file = temp.as_file();
    file.set_permissions(Permissions::from_mode(mode))
        .map_err(|e| FsError::io("set the mode of", &target, e))?;
    if sync {
        file.sync_all().map_err(|e| FsError::io("sync", &target, e))?;
    }
    temp.persist(&target).map_err(|e| FsError::io("replace", &target, e.error))?;
    if sync { sync_dir(&parent) } else { Ok(()) }
}

/// Makes a rename in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), FsError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| FsError::io("sync directory", dir, e))
}
