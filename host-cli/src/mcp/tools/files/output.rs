//! The results of the file tools, and their output schemas.

use schemars::JsonSchema;
use serde::Serialize;

use super::Encoding;
use crate::client::{FileEntry, FileKind};
use crate::mcp::listing::{Line, Stat};
use crate::mcp::shape::{format_mode, rfc3339_ms};

/// Result of `sandbox_files_read`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadOutput {
    /// The file read.
    pub path: String,
    /// "utf8" when content is the text itself, "base64" when the bytes are not UTF-8.
    pub encoding: Encoding,
    /// The bytes read, as text or base64 (see encoding).
    pub content: String,
    /// Offset of the first byte returned.
    pub offset: u64,
    /// Bytes returned.
    pub bytes: u64,
    /// Size of the whole file.
    pub size: u64,
    /// True when the read reached the end of the file.
    pub eof: bool,
    /// What to know about this result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Result of `sandbox_files_write`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteOutput {
    /// The file written.
    pub path: String,
    /// Bytes this call wrote.
    pub bytes_written: u64,
    /// Size of the file afterwards.
    pub size: u64,
}

/// One entry of a listing as a model reads it: [`FileEntry`] with its mode as octal text
/// and its mtime as RFC 3339 (`atoll ls --json` prints the record itself).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EntryView {
    /// Path relative to the listed directory.
    pub path: String,
    /// "file", "dir", "symlink" or "other".
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Octal permission bits, such as "0644".
    pub mode: String,
    /// Last modification (RFC 3339, UTC).
    pub mtime: String,
    /// Where a symlink points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

/// Result of `sandbox_files_list`: `entries` with each one's stat, or with names_only the
/// paths grouped by type.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// The directory listed.
    pub path: String,
    /// Its entries, sorted by path (absent with names_only). Each is an object with path
    /// (string, relative to the listed directory), type ("file", "dir", "symlink" or
    /// "other"), size (integer, bytes), mode (string, octal permission bits such as
    /// "0644"), mtime (string, RFC 3339 UTC) and, for symlinks, symlink_target (string).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "array_schema")]
    pub entries: Option<Vec<EntryView>>,
    /// With names_only: the regular files' paths (strings, relative to the listed
    /// directory), sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "array_schema")]
    pub files: Option<Vec<String>>,
    /// With names_only: the directories' paths (strings), sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "array_schema")]
    pub dirs: Option<Vec<String>>,
    /// With names_only: the symlinks' paths (strings), sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "array_schema")]
    pub symlinks: Option<Vec<String>>,
    /// With names_only: the paths (strings) of everything else (sockets, devices, FIFOs),
    /// sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "array_schema")]
    pub other: Option<Vec<String>>,
    /// True when the listing stopped at 1000 entries.
    pub truncated: bool,
    /// What to know about this result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The schema of `ListOutput`'s arrays: an array, its items named and typed in the
/// field's description rather than as `items`. Clients that validate results against the
/// output schema (the official Python SDK does, on every call) otherwise check every
/// item: 0.5-3 ms per 100 entries with `"type": "object"` and `required`, more with
/// per-field `properties`, on a call that otherwise costs that client about 1 ms.
fn array_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "array" })
}

/// The paths of a names-only listing, grouped by type, each group in listing order.
#[derive(Default)]
pub(super) struct Names {
    pub(super) files: Vec<String>,
    pub(super) dirs: Vec<String>,
    pub(super) symlinks: Vec<String>,
    pub(super) other: Vec<String>,
}

impl Names {
    pub(super) fn group(entries: Vec<FileEntry>) -> Names {
        let mut names = Names::default();
        for entry in entries {
            let group = match entry.kind {
                FileKind::File => &mut names.files,
                FileKind::Dir => &mut names.dirs,
                FileKind::Symlink => &mut names.symlinks,
                FileKind::Other | FileKind::Unknown => &mut names.other,
            };
            group.push(entry.path);
        }
        names
    }
}

/// Result of the tools that change one path.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathOutput {
    /// The path acted on (for a move: where it is now).
    pub path: String,
}

impl From<FileEntry> for EntryView {
    fn from(entry: FileEntry) -> Self {
        EntryView {
            path: entry.path,
            kind: entry.kind.as_str(),
            size: entry.size,
            mode: format_mode(entry.mode),
            mtime: rfc3339_ms(entry.mtime_unix_ms),
            symlink_target: entry.symlink_target,
        }
    }
}

impl EntryView {
    /// The entry as a line of the text content.
    pub(super) fn line(&self) -> Line<'_> {
        let stat = Some(Stat { size: self.size, mode: &self.mode, mtime: &self.mtime });
        Line { path: &self.path, kind: self.kind, stat, symlink_target: self.symlink_target.as_deref() }
    }
}
