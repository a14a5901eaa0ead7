//! DownloadDir: a directory streamed out as a zip.
//!
//! The zip writer (`ZipWriter::new_stream`) runs on a blocking thread and writes into
//! `ChunkWriter`, which cuts its output into `BULK_CHUNK_SIZE` chunks and
//! hands them to a bounded channel; the gRPC stream drains the channel. So memory stays
//! bounded whatever the directory's size, and when the client goes away the next send
//! fails and the thread stops. Each file is deflated or stored as `method::MethodPicker`
//! decides from its name and a sample of its first bytes.
//!
//! Only directories and regular files go into the archive. Symlinks, FIFOs, sockets,
//! devices, files that cannot be opened and names that are not UTF-8 are skipped and
//! listed in the summary, the stream's last message.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use atoll_proto::limits::BULK_CHUNK_SIZE;
use tokio::sync::mpsc;
use walkdir::WalkDir;
use zip::write::{SimpleFileOptions, ZipWriter};
use zip::{CompressionMethod, DateTime};

use super::ArchiveError;
use super::method::{MethodPicker, SAMPLE_BYTES};
use crate::files::{FsError, blocking, check_path, special_kind};

/// Chunks buffered between the zip thread and the gRPC stream.
const QUEUE_CHUNKS: usize = 2;

/// Skipped entries listed by name in the summary; the rest are only counted.
const MAX_SKIPPED_LISTED: usize = 1000;

/// Entries of 4 GiB or more need zip64 headers, which a streamed writer must know of
/// before it writes the entry.
const ZIP64_THRESHOLD: u64 = 0xFFFF_FFFF;

type Sender = mpsc::Sender<Result<ZipPart, ArchiveError>>;

/// One piece of a download: zip bytes, or the summary that ends it.
#[derive(Debug, Clone)]
pub enum ZipPart {
    /// The next bytes of the zip.
    Data(bytes::Bytes),
    /// What went in; the last part.
    Summary(Summary),
}

/// What a download put in its zip, and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Bytes of file content.
    pub file_bytes: u64,
    /// Bytes of the zip.
    pub archive_bytes: u64,
    /// Entries left out, and why (the first ones by name, then a count).
    pub skipped: Vec<Skipped>,
}

/// An entry a download left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Its path, relative to the directory; empty for the "N more" line.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// The archive's chunks, then its summary; an `Err` ends the stream.
pub type DownloadStream = mpsc::Receiver<Result<ZipPart, ArchiveError>>;

/// Checks `path` is a directory and starts streaming it as a zip of at most
/// `max_bytes` (0: no cap).
pub async fn download(path: &str, max_bytes: u64) -> Result<DownloadStream, ArchiveError> {
    let root = check_path(path)?;
    let root = blocking(move || {
        let meta = std::fs::metadata(&root).map_err(|e| FsError::io("archive", &root, e))?;
        if !meta.is_dir() {
            return Err(FsError::NotADirectory {
                path: root,
                hint: "only a directory can be archived; read a single file instead",
            });
        }
        Ok(root)
    })
    .await?;
    let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = build(&root, max_bytes, &tx) {
            let _ = tx.blocking_send(Err(e));
        }
    });
    Ok(rx)
}

/// Why the chunk writer stopped taking bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Running,
    CapReached,
    ClientGone,
    /// The archive failed for another reason; the error is on its way.
    Failed,
}

/// A `Write` that sends what it is given as `BULK_CHUNK_SIZE` chunks over the channel,
/// enforcing the byte cap. Once stopped it swallows further writes, so the zip writer's
/// drop-time finalisation stays quiet.
struct ChunkWriter {
    tx: Sender,
    buf: Vec<u8>,
    written: u64,
    cap: u64,
    stop: Rc<Cell<Stop>>,
}

impl ChunkWriter {
    fn send_buffer(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(BULK_CHUNK_SIZE));
        let chunk = ZipPart::Data(data.into());
        if self.tx.blocking_send(Ok(chunk)).is_err() {
            self.stop.set(Stop::ClientGone);
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        Ok(())
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.stop.get() != Stop::Running {
            return Ok(data.len());
        }
        if self.cap > 0 && self.written + data.len() as u64 > self.cap {
            self.stop.set(Stop::CapReached);
            return Err(io::Error::other("max_bytes reached"));
        }
        self.buf.extend_from_slice(data);
        self.written += data.len() as u64;
        if self.buf.len() >= BULK_CHUNK_SIZE {
            self.send_buffer()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Tallies for the summary.
#[derive(Default)]
struct Tally {
    files: u64,
    dirs: u64,
    file_bytes: u64,
    skipped: Vec<Skipped>,
    skipped_unlisted: u64,
}

impl Tally {
    fn skip(&mut self, path: &Path, reason: String) {
        if self.skipped.len() < MAX_SKIPPED_LISTED {
            self.skipped.push(Skipped { path: path.to_string_lossy().into_owned(), reason });
        } else {
            self.skipped_unlisted += 1;
        }
    }
}

/// Writes the whole archive and its summary into the channel. Returns `Ok` also when
/// the client went away (nobody is left to tell).
fn build(root: &Path, cap: u64, tx: &Sender) -> Result<(), ArchiveError> {
    let stop = Rc::new(Cell::new(Stop::Running));
    let writer = ChunkWriter {
        tx: tx.clone(),
        buf: Vec::with_capacity(BULK_CHUNK_SIZE),
        written: 0,
        cap,
        stop: stop.clone(),
    };
    let mut zip = ZipWriter::new_stream(writer);
    let mut tally = Tally::default();
    let mut adder = FileAdder { picker: MethodPicker::default(), buf: vec![0; BULK_CHUNK_SIZE] };
    // Called once, on the first error; the writer then swallows what the zip writer
    // still emits while it is dropped, so the error is the stream's last message.
    let fail = |source: zip::result::ZipError| {
        let error = match stop.get() {
            Stop::Running | Stop::Failed => Some(ArchiveError::Build { path: root.to_path_buf(), source }),
            Stop::CapReached => Some(too_large(root, cap)),
            Stop::ClientGone => None,
        };
        stop.set(Stop::Failed);
        error
    };

    for item in WalkDir::new(root).min_depth(1).follow_links(false).sort_by_file_name() {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                let rel = e.path().and_then(|p| p.strip_prefix(root).ok()).unwrap_or(Path::new(""));
                let reason = e.io_error().map_or_else(|| e.to_string(), ToString::to_string);
                tally.skip(rel, format!("unreadable: {reason}"));
                continue;
            }
        };
        let rel = item.path().strip_prefix(root).unwrap_or(item.path());
        let Some(name) = rel.to_str() else {
            tally.skip(rel, "name is not UTF-8".to_owned());
            continue;
        };
        let ft = item.file_type();
        let added = if ft.is_dir() {
            let mode = item.metadata().map(|m| m.mode() & 0o7777).unwrap_or(0o755);
            tally.dirs += 1;
            zip.add_directory(name, SimpleFileOptions::default().unix_permissions(mode))
        } else if ft.is_symlink() {
            let target = std::fs::read_link(item.path()).map(|t| t.display().to_string()).unwrap_or_default();
            tally.skip(rel, format!("symlink to {target}"));
            continue;
        } else if !ft.is_file() {
            tally.skip(rel, format!("{} (not a regular file)", special_kind(ft)));
            continue;
        } else {
            match adder.add(&mut zip, item.path(), name) {
                Ok(Some(bytes)) => {
                    tally.files += 1;
                    tally.file_bytes += bytes;
                    Ok(())
                }
                Ok(None) => {
                    tally.skip(rel, "unreadable: it changed into something other than a file".to_owned());
                    Ok(())
                }
                Err(AddError::Open(e)) => {
                    tally.skip(rel, format!("unreadable: {e}"));
                    Ok(())
                }
                Err(AddError::Zip(e)) => Err(e),
            }
        };
        if let Err(e) = added {
            return fail(e).map_or(Ok(()), Err);
        }
    }
    let writer = match zip.finish() {
        Ok(w) => w,
        Err(e) => return fail(e).map_or(Ok(()), Err),
    };
    let mut writer = writer.into_inner();
    if writer.send_buffer().is_err() {
        return Ok(());
    }
    if tally.skipped_unlisted > 0 {
        let reason = format!("{} more skipped entries are not listed", tally.skipped_unlisted);
        tally.skipped.push(Skipped { path: String::new(), reason });
    }
    let summary = Summary {
        files: tally.files,
        dirs: tally.dirs,
        file_bytes: tally.file_bytes,
        archive_bytes: writer.written,
        skipped: tally.skipped,
    };
    let _ = tx.blocking_send(Ok(ZipPart::Summary(summary)));
    Ok(())
}

enum AddError {
    /// The file could not be opened: skip it.
    Open(io::Error),
    /// Writing the archive failed: stop.
    Zip(zip::result::ZipError),
}

/// Adds files to the archive with one read buffer and one [`MethodPicker`].
struct FileAdder {
    picker: MethodPicker,
    buf: Vec<u8>,
}

impl FileAdder {
    /// Adds one regular file; `Ok(None)` if it turned out not to be one when opened.
    fn add<W: Write>(
        &mut self,
        zip: &mut ZipWriter<zip::write::StreamWriter<W>>,
        path: &Path,
        name: &str,
    ) -> Result<Option<u64>, AddError> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(AddError::Open)?;
        let meta = file.metadata().map_err(AddError::Open)?;
        if !meta.is_file() {
            return Ok(None);
        }
        // The head is read first: the method must be known before the entry starts.
        let head = fill(&mut file, &mut self.buf[..SAMPLE_BYTES]).map_err(|e| AddError::Zip(e.into()))?;
        let method = self.picker.pick(name, &self.buf[..head]);
        // Deflate at the fastest level: a download is bound by the compressor, not by
        // the link. (A level given for a stored entry is refused.)
        let level = (method == CompressionMethod::Deflated).then_some(1);
        let mut options = SimpleFileOptions::default()
            .compression_method(method)
            .compression_level(level)
            .unix_permissions(meta.mode() & 0o7777)
            .large_file(meta.len() >= ZIP64_THRESHOLD);
        if let Some(mtime) = zip_time(meta.mtime()) {
            options = options.last_modified_time(mtime);
        }
        zip.start_file(name, options).map_err(AddError::Zip)?;
        zip.write_all(&self.buf[..head]).map_err(|e| AddError::Zip(e.into()))?;
        let rest = if head < SAMPLE_BYTES {
            0
        } else {
            copy(&mut file, zip, &mut self.buf).map_err(AddError::Zip)?
        };
        Ok(Some(head as u64 + rest))
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn fill(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match io::Read::read(file, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Copies the rest of a file into the archive, telling read errors from write errors.
fn copy(file: &mut File, out: &mut impl Write, buf: &mut [u8]) -> Result<u64, zip::result::ZipError> {
    let mut total = 0;
    loop {
        let n = match io::Read::read(file, buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
}

fn too_large(root: &Path, cap: u64) -> ArchiveError {
    let (mut total, mut files) = (0, 0);
    for item in WalkDir::new(root).follow_links(false).into_iter().flatten() {
        if item.file_type().is_file() {
            files += 1;
            total += item.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    ArchiveError::TooLarge { path: PathBuf::from(root), cap, total, files }
}

/// A Unix time as a zip (MS-DOS, UTC) timestamp; `None` outside 1980..2107.
fn zip_time(unix_secs: i64) -> Option<DateTime> {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let year = u16::try_from(year).ok()?;
    // `secs` is in 0..86_400, so each part fits a u8.
    let part = |v: i64| u8::try_from(v).ok();
    let (hour, minute, second) = (part(secs / 3600)?, part(secs % 3600 / 60)?, part(secs % 60)?);
    DateTime::from_date_and_time(year, month, day, hour, minute, second).ok()
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // The algorithm keeps the day in 1..=31 and the month in 1..=12.
    let day = u8::try_from(doy - (153 * mp + 2) / 5 + 1).expect("a day of the month is 1 to 31");
    let month = u8::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).expect("a month is 1 to 12");
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        let t = zip_time(1_700_000_000).unwrap(); // 2023-11-14 22:13:20 UTC
        assert_eq!(
            (t.year(), t.month(), t.day(), t.hour(), t.minute(), t.second()),
            (2023, 11, 14, 22, 13, 20)
        );
        assert!(zip_time(0).is_none());
    }
}
