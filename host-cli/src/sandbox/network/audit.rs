//! Reading a sandbox's audit log: every connection (a line when it opens, one when it
//! closes) and DNS query with its verdict, kept until `atoll kill`. Its files, one per
//! kind with its own budget (`net.log`, `net-denied.log`, `net-dns.log`, each with a
//! rotated `.1` before it; see [`AuditLog::paths`]), are merged here by time. The helper
//! writes them (atoll-net's [`atoll_net::log`]); this side only reads, so the log of a
//! sandbox whose helper died is still there.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use atoll_net::log::{AuditLog, Record};
use atoll_net::policy::Verdict;

use super::config::audit_log_path;
use super::{NetError, lookup};

/// Which records to return.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogQuery {
    /// Only this verdict.
    pub verdict: Option<Verdict>,
    /// Only the last this many (after filtering).
    pub limit: Option<usize>,
}

impl LogQuery {
    /// True when `r` passes the filter.
    pub fn wants(&self, r: &Record) -> bool {
        self.verdict.is_none_or(|v| v == r.verdict)
    }
}

/// The sandbox's log records, oldest first, filtered.
pub fn read(name_or_id: &str, query: LogQuery) -> Result<Vec<Record>, NetError> {
    let record = lookup(name_or_id)?;
    let mut out: Vec<Record> = Vec::new();
    for path in AuditLog::paths(&audit_log_path(&record.paths.dir)) {
        for file in [AuditLog::rotated_path(&path), path] {
            let Ok(f) = open(&file) else { continue };
            out.extend(
                BufReader::new(f.take(MAX_FILE_BYTES))
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|l| parse(&l))
                    .filter(|r| query.wants(r)),
            );
        }
    }
    // RFC 3339 UTC times with milliseconds sort as text; the sort is stable, so lines of
    // one file keep their order.
    out.sort_by(|a, b| a.time.cmp(&b.time));
    if let Some(limit) = query.limit {
        let skip = out.len().saturating_sub(limit);
        out.drain(..skip);
    }
    Ok(out)
}

/// The most read of one file of the log: twice what the helper lets it grow to before
/// it rotates (a helper taken over by a guest may write more, which is not read).
const MAX_FILE_BYTES: u64 = 2 * atoll_net::log::ROTATE_BYTES;

/// Opens a file of the log as hostile (the helper, which a guest may have taken over,
/// writes it): no link followed, no FIFO waited on, one name, a trusted owner.
fn open(path: &Path) -> std::io::Result<std::fs::File> {
    super::config::open_hostile(path)
}

fn parse(line: &str) -> Option<Record> {
    serde_json::from_str(line).ok()
}

/// Follows a sandbox's log from its current end: each call of [`Follower::next_batch`]
/// returns the records written since (in each of its files), across a rotation too.
pub struct Follower {
    files: Vec<FileFollower>,
}

struct FileFollower {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Follower {
    /// A follower starting at the end of the sandbox's log as it is now.
    pub fn new(name_or_id: &str) -> Result<Follower, NetError> {
        let record = lookup(name_or_id)?;
        let files = AuditLog::paths(&audit_log_path(&record.paths.dir))
            .into_iter()
            .map(|path| {
                let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                FileFollower { path, offset, partial: String::new() }
            })
            .collect();
        Ok(Follower { files })
    }

    /// Whether the sandbox's directory is still there (`atoll kill` removes it).
    pub fn sandbox_exists(&self) -> bool {
        self.files.first().and_then(|f| f.path.parent()).is_some_and(Path::is_dir)
    }

    /// The records written since the last call, by time.
    pub fn next_batch(&mut self) -> Vec<Record> {
        let mut out: Vec<Record> = self.files.iter_mut().flat_map(FileFollower::next_batch).collect();
        out.sort_by(|a, b| a.time.cmp(&b.time));
        out
    }
}

impl FileFollower {
    fn next_batch(&mut self) -> Vec<Record> {
        let len = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        let mut out = Vec::new();
        if len < self.offset {
            // Rotated: the rest of the old file is <file>.1, then the new one from 0.
            out.extend(self.read_from(&AuditLog::rotated_path(&self.path), self.offset));
            self.offset = 0;
            self.partial.clear();
        }
        let path = self.path.clone();
        out.extend(self.read_from(&path, self.offset));
        out
    }

    fn read_from(&mut self, path: &Path, offset: u64) -> Vec<Record> {
        let Ok(mut f) = open(path) else { return Vec::new() };
        if f.seek(SeekFrom::Start(offset)).is_err() {
            return Vec::new();
        }
        let mut text = std::mem::take(&mut self.partial);
        let read = std::io::Read::read_to_string(&mut f.take(MAX_FILE_BYTES), &mut text).unwrap_or(0);
        self.offset = offset + read as u64;
        // A line still being written stays for the next call.
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        self.partial = text[complete..].to_string();
        text[..complete].lines().filter_map(parse).collect()
    }
}

/// The health of the sandbox's audit log, from its running helper (`None` when the
/// helper is not running or the sandbox has no network).
pub async fn health(name_or_id: &str) -> Result<Option<atoll_net::log::LogHealth>, NetError> {
    let record = lookup(name_or_id)?;
    Ok(super::log_health(&record).await)
}
