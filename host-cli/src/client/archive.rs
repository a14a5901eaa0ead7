//! The records of directory transfers: what a download held ([`ArchiveSummary`]) and
//! what an upload extracted ([`UploadSummary`]).

use atoll_proto::agent::v1 as pb;
use bytes::Bytes;
use serde::Serialize;

/// An entry a directory download left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedEntry {
    /// Relative path.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

/// What a directory download held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveSummary {
    /// Files archived.
    pub files: u64,
    /// Directories archived.
    pub dirs: u64,
    /// Uncompressed bytes of the files.
    pub file_bytes: u64,
    /// Bytes of the zip.
    pub archive_bytes: u64,
    /// Entries left out (symlinks, devices, unreadable files).
    pub skipped: Vec<SkippedEntry>,
}

impl From<pb::ArchiveSummary> for ArchiveSummary {
    fn from(s: pb::ArchiveSummary) -> Self {
        ArchiveSummary {
            files: s.files,
            dirs: s.dirs,
            file_bytes: s.file_bytes,
            archive_bytes: s.archive_bytes,
            skipped: s.skipped.into_iter().map(|e| SkippedEntry { path: e.path, reason: e.reason }).collect(),
        }
    }
}

/// A piece of a directory download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchivePart {
    /// Zip bytes.
    Data(Bytes),
    /// The last part.
    Summary(ArchiveSummary),
}

/// What an upload extracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UploadSummary {
    /// Files extracted.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Bytes of the files.
    pub file_bytes: u64,
}
