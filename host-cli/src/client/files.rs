//! The records of guest files: [`FileEntry`] and listings, and the options of reads,
//! writes and listings.

use atoll_proto::agent::v1 as pb;
use serde::Serialize;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A socket, device or FIFO.
    Other,
    /// The agent did not say.
    Unknown,
}

impl FileKind {
    /// The lower-case name both faces print: "file", "dir", "symlink", "other",
    /// "unknown" (as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
            FileKind::Unknown => "unknown",
        }
    }
}

/// A file's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileEntry {
    /// For stat: the path asked about; for a listing: relative to the listed directory.
    pub path: String,
    /// File, dir, symlink...
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Last modification.
    pub mtime_unix_ms: i64,
    /// Where a symlink points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

impl From<pb::FileEntry> for FileEntry {
    fn from(e: pb::FileEntry) -> Self {
        let kind = match pb::FileType::try_from(e.r#type) {
            Ok(pb::FileType::File) => FileKind::File,
            Ok(pb::FileType::Dir) => FileKind::Dir,
            Ok(pb::FileType::Symlink) => FileKind::Symlink,
            Ok(pb::FileType::Other) => FileKind::Other,
            _ => FileKind::Unknown,
        };
        FileEntry {
            path: e.path,
            kind,
            size: e.size,
            mode: e.mode,
            mtime_unix_ms: e.mtime_unix_ms,
            symlink_target: Some(e.symlink_target).filter(|t| !t.is_empty()),
        }
    }
}

/// A directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// The entries, paths relative to the listed directory.
    pub entries: Vec<FileEntry>,
    /// `max_entries` cut it short.
    pub truncated: bool,
}

/// How to list a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOpts {
    /// Descend into subdirectories.
    pub recursive: bool,
    /// With `recursive`: levels to descend (1 = the directory's own entries); `None`: all.
    pub max_depth: Option<u32>,
    /// Cap on entries; `None`: the agent's default of 10 000.
    pub max_entries: Option<u32>,
    /// Only paths and types, with no stat per entry in the agent: the entries' size,
    /// mode and mtime are then 0 and their symlink target `None`.
    pub names_only: bool,
}

/// Which part of a file to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOpts {
    /// First byte to read.
    pub offset: u64,
    /// Bytes to read; `None`: to the end.
    pub length: Option<u64>,
    /// Refuse (RESOURCE_EXHAUSTED) when the slice is longer; `None`: no cap.
    pub max_bytes: Option<u64>,
}

/// How to write a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOpts {
    /// Permission bits; `None`: keep the old file's, or 0644.
    pub mode: Option<u32>,
    /// Append to the existing content.
    pub append: bool,
    /// Refuse instead of creating missing parent directories.
    pub no_create_parents: bool,
    /// fsync the file and its directory before the call returns.
    pub sync: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WriteResult {
    /// Bytes this call wrote.
    pub bytes_written: u64,
    /// The file's size afterwards.
    pub file_size: u64,
}
