//! ReadFile: a file, or a slice of it, streamed in `BULK_CHUNK_SIZE` chunks.
//!
//! Only regular files are read. The type is checked before opening (opening a device
//! can have side effects) and again on the open descriptor, which is opened with
//! `O_NONBLOCK` so that a FIFO swapped in between cannot hang the agent.
//!
//! Files in `/proc` and `/sys` report a size of 0 yet have content; for them the agent
//! reads until end of file and applies `max_bytes` as it goes, failing the stream once
//! the content passes the cap.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use atoll_proto::limits::{BULK_CHUNK_SIZE, CHUNK_SIZE};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::{FsError, check_path, special_kind};
use crate::placement::quick;

/// Chunks buffered between the reader thread and the gRPC stream: enough for the disk
/// read of the next chunk to overlap the send of this one.
const QUEUE_CHUNKS: usize = 2;

/// Slices up to this size (of a file whose size is known) are read whole right where the
/// file was opened, with no reader thread: most reads of a tool call are small, and each
/// thread hop costs more than the read itself.
const WHOLE_READ_MAX: u64 = CHUNK_SIZE as u64;

/// The chunks of a read, in order; an `Err` ends the stream.
pub type ReadStream = mpsc::Receiver<Result<Chunk, FsError>>;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct ReadFile {
    /// The file.
    pub path: String,
    /// Where to start.
    pub offset: u64,
    /// Most bytes; 0: to the end.
    pub length: u64,
    /// Refuse a slice larger than this; 0: no cap.
    pub max_bytes: u64,
}

/// A piece of a read, in order.
#[derive(Debug, Clone, Default)]
pub struct Chunk {
    /// The bytes.
    pub data: Bytes,
    /// The file's size, on the first chunk only (0 on the rest, and for files whose
    /// size is unknown up front).
    pub file_size: u64,
}

/// How a read goes on once the file is open.
enum Start {
    /// The whole slice, already read.
    Whole(Chunk),
    /// A slice to stream from a reader thread.
    Stream(Plan),
}

/// What to read, after the slice has been worked out against the file's size.
struct Plan {
    path: PathBuf,
    file: File,
    /// `st_size`; 0 for `/proc`-style files whose length is unknown up front.
    file_size: u64,
    /// Most bytes to return (`u64::MAX`: to the end).
    remaining: u64,
    /// Cap to enforce while reading, for files whose size was unknown (0: none).
    running_cap: u64,
}

/// Opens the file, checks the slice against `max_bytes`, and starts streaming it.
///
/// Errors found before the first byte (missing file, directory, over the cap) are
/// returned here rather than in the stream.
pub async fn read(req: ReadFile) -> Result<ReadStream, FsError> {
    let path = check_path(&req.path)?;
    // Opening and a read of up to 64 KiB are small enough to run in place.
    let start = quick(move || start(path, req.offset, req.length, req.max_bytes)).await?;
    match start {
        Start::Whole(chunk) => {
            let (tx, rx) = mpsc::channel(1);
            tx.try_send(Ok(chunk)).expect("a new channel has room for one chunk");
            Ok(rx)
        }
        Start::Stream(plan) => {
            let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
            tokio::task::spawn_blocking(move || pump(plan, &tx));
            Ok(rx)
        }
    }
}

fn start(path: PathBuf, offset: u64, length: u64, max_bytes: u64) -> Result<Start, FsError> {
    let plan = plan(path, offset, length, max_bytes)?;
    if plan.file_size == 0 || plan.remaining > WHOLE_READ_MAX {
        return Ok(Start::Stream(plan));
    }
    let mut data = Vec::with_capacity(usize::try_from(plan.remaining).unwrap_or(0));
    // `take` stops at the planned slice even if the file grew since its size was read.
    (&plan.file)
        .take(plan.remaining)
        .read_to_end(&mut data)
        .map_err(|e| FsError::io("read", &plan.path, e))?;
    Ok(Start::Whole(Chunk { data: data.into(), file_size: plan.file_size }))
}

fn plan(path: PathBuf, offset: u64, length: u64, max_bytes: u64) -> Result<Plan, FsError> {
    let meta = std::fs::metadata(&path).map_err(|e| FsError::io("read", &path, e))?;
    check_type(&path, meta.file_type())?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(|e| FsError::io("read", &path, e))?;
    let meta = file.metadata().map_err(|e| FsError::io("read", &path, e))?;
    check_type(&path, meta.file_type())?;

    let file_size = meta.len();
    let wanted = if length == 0 { u64::MAX } else { length };
    let (remaining, running_cap) = if file_size > 0 {
        if offset > file_size {
            return Err(FsError::OffsetPastEnd { path, offset, size: file_size });
        }
        let slice = wanted.min(file_size - offset);
        if max_bytes > 0 && slice > max_bytes {
            return Err(FsError::TooLarge {
                what: describe(&path, offset, length),
                size: slice,
                limit: max_bytes,
            });
        }
        (slice, 0)
    } else {
        (wanted, if wanted > max_bytes { max_bytes } else { 0 })
    };
    if offset > 0 {
        file.seek(SeekFrom::Start(offset)).map_err(|e| FsError::io("seek in", &path, e))?;
    }
    Ok(Plan { path, file, file_size, remaining, running_cap })
}

fn check_type(path: &Path, ft: std::fs::FileType) -> Result<(), FsError> {
    if ft.is_dir() {
        return Err(FsError::IsADirectory { path: path.to_path_buf(), hint: "list it to see what it holds" });
    }
    if !ft.is_file() {
        return Err(FsError::NotRegular { path: path.to_path_buf(), kind: special_kind(ft) });
    }
    Ok(())
}

fn describe(path: &Path, offset: u64, length: u64) -> String {
    if offset == 0 && length == 0 {
        path.display().to_string()
    } else {
        format!("the slice of {} from offset {offset}", path.display())
    }
}

/// Reads the planned slice and sends it chunk by chunk. Stops quietly when the
/// receiver is gone (the client went away).
fn pump(mut plan: Plan, tx: &mpsc::Sender<Result<Chunk, FsError>>) {
    let mut sent: u64 = 0;
    let mut first = true;
    while plan.remaining > 0 {
        let want = usize::try_from(plan.remaining).unwrap_or(usize::MAX).min(BULK_CHUNK_SIZE);
        // Read straight into the message's buffer: no second copy, and no zeroing first.
        let mut data = Vec::with_capacity(want);
        let n = match (&plan.file).take(want as u64).read_to_end(&mut data) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let _ = tx.blocking_send(Err(FsError::io("read", &plan.path, e)));
                return;
            }
        };
        sent += n as u64;
        if plan.running_cap > 0 && sent > plan.running_cap {
            let err = FsError::TooLargeUnsized { path: plan.path.clone(), limit: plan.running_cap };
            let _ = tx.blocking_send(Err(err));
            return;
        }
        plan.remaining -= n as u64;
        if n < want / 2 {
            // A short read (a `/proc` file, a pipe-like source): do not queue the slack.
            data.shrink_to_fit();
        }
        let chunk = Chunk { data: data.into(), file_size: if first { plan.file_size } else { 0 } };
        first = false;
        if tx.blocking_send(Ok(chunk)).is_err() {
            return;
        }
    }
    if first {
        // An empty slice still tells the caller the file's size.
        let _ = tx.blocking_send(Ok(Chunk { data: Bytes::new(), file_size: plan.file_size }));
    }
}
