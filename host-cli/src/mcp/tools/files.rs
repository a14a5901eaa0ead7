//! File tools: `sandbox_files_read`, `_write`, `_list`, `_remove`, `_move`, `_mkdir`.

use bytes::Bytes;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::client::{ClientError, FileEntry, FileKind, ListOpts, ReadOpts, WriteOpts};
use crate::mcp::error::{MAX_INLINE_READ, MAX_INLINE_WRITE, ToolError};
use crate::mcp::listing::{self, Line, Stat};
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::SbxMcp;
use crate::mcp::shape::{format_mode, from_base64, rfc3339_ms, to_base64};
use crate::sandbox::files;
use crate::sandbox::mode::parse_mode;

/// Entries one `sandbox_files_list` returns at most.
pub const MAX_LIST_ENTRIES: u32 = 1000;

/// How file content travels in a tool call: "utf8" (the text as is) or "base64" (standard
/// base64 of the raw bytes).
// Inlined, and with no per-variant docs, so its schema is a plain string enum rather than
// a `$ref` to a `oneOf`, which clients that validate results (the Python SDK) check slowly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Encoding {
    Utf8,
    Base64,
}

/// Arguments of `sandbox_files_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file inside the sandbox.
    pub path: String,
    /// First byte to read. Default: 0.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Bytes to read, at most 1048576. Default (or 0): to the end of the file, which is
    /// refused for files over 1 MiB.
    #[serde(default)]
    #[schemars(range(max = 1_048_576))]
    pub length: Option<u64>,
}

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

/// Arguments of `sandbox_files_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file inside the sandbox; missing parent directories are
    /// created.
    pub path: String,
    /// The content: text, or base64 when encoding is "base64". At most 8 MiB.
    pub content: String,
    /// How content is encoded. Default: "utf8".
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// Octal permission mode such as "644" or "755". Default: keep an existing file's
    /// mode, or 644 for a new file.
    #[serde(default)]
    pub mode: Option<String>,
    /// Add content to the end of the file instead of replacing it. Default: false.
    #[serde(default)]
    pub append: Option<bool>,
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

/// Arguments of `sandbox_files_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the directory inside the sandbox.
    pub path: String,
    /// List subdirectories' contents too. Default: false, or true when max_depth is given.
    #[serde(default)]
    pub recursive: Option<bool>,
    /// With recursive: how many levels to descend (1 = only the directory's own
    /// entries). Default: no limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_depth: Option<u32>,
    /// Only the paths, grouped by type (files, dirs, symlinks, other) instead of entries
    /// with size, mode and mtime: no stat per entry, so a large directory lists faster.
    /// Default: false.
    #[serde(default)]
    pub names_only: Option<bool>,
}

/// One entry of a listing as a model reads it: [`FileEntry`] with its mode as octal text
/// and its mtime as RFC 3339 (`sbx ls --json` prints the record itself).
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
struct Names {
    files: Vec<String>,
    dirs: Vec<String>,
    symlinks: Vec<String>,
    other: Vec<String>,
}

impl Names {
    fn group(entries: Vec<FileEntry>) -> Names {
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

/// Arguments of `sandbox_files_remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file or directory inside the sandbox.
    pub path: String,
    /// Required to remove a directory and everything in it. Default: false.
    #[serde(default)]
    pub recursive: Option<bool>,
}

/// Arguments of `sandbox_files_move`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path to move.
    pub from: String,
    /// Absolute path to move it to.
    pub to: String,
    /// Replace `to` if it exists. Default: false (an existing `to` is refused).
    #[serde(default)]
    pub overwrite: Option<bool>,
}

/// Arguments of `sandbox_files_mkdir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the directory; missing parents are created, and an existing
    /// directory is fine.
    pub path: String,
    /// Octal permission mode such as "755". Default: 755.
    #[serde(default)]
    pub mode: Option<String>,
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
    fn line(&self) -> Line<'_> {
        let stat = Some(Stat { size: self.size, mode: &self.mode, mtime: &self.mtime });
        Line { path: &self.path, kind: self.kind, stat, symlink_target: self.symlink_target.as_deref() }
    }
}

/// A read refused for its size becomes the message that says how to read a slice.
fn read_error(error: ClientError) -> ToolError {
    match error {
        ClientError::Agent { code: Code::ResourceExhausted, message } => {
            // The agent's first clause names the file and its size; the rest is advice for
            // its own callers, which ours replaces.
            let agent = message.split(';').next().unwrap_or(&message).trim().to_owned();
            ToolError::ReadTooLarge { agent }
        }
        other => other.into(),
    }
}

/// Renders bytes read as text when they are UTF-8, base64 otherwise. `slice` says the
/// bytes are part of a file, whose edges may cut a character in two.
fn encode_read(data: &[u8], slice: bool) -> (Encoding, String, Option<String>) {
    let error = match std::str::from_utf8(data) {
        Ok(text) => return (Encoding::Utf8, text.to_owned(), None),
        Err(error) => error,
    };
    // A character cut at the end, or a continuation byte first: text split by the slice.
    let cut = error.error_len().is_none() || data.first().is_some_and(|b| b & 0xc0 == 0x80);
    let note = if slice && cut {
        "the slice's edges split a UTF-8 character, so content is base64; move offset or length \
         by a few bytes to get text"
    } else {
        "the bytes are not UTF-8 text, so content is base64"
    };
    (Encoding::Base64, to_base64(data), Some(note.to_owned()))
}

#[tool_router(router = files_router, vis = "pub(crate)")]
impl SbxMcp {
    /// Reads a file or a slice of it.
    #[tool(
        name = "sandbox_files_read",
        description = "Read a file inside the sandbox. Returns content as UTF-8 text, or as \
            base64 when the bytes are not UTF-8 (encoding says which), with the file's size and \
            eof. Whole files over 1 MiB are refused with their size: pass offset and length (at \
            most 1048576) to read a slice.",
        annotations(
            title = "Read a file",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_read(
        &self,
        Parameters(args): Parameters<ReadArgs>,
    ) -> Result<Json<ReadOutput>, ToolError> {
        let length = args.length.filter(|&n| n > 0);
        if let Some(got) = length.filter(|&n| n > MAX_INLINE_READ) {
            return Err(ToolError::SliceTooLong { got });
        }
        let offset = args.offset.unwrap_or(0);
        let opts = ReadOpts { offset, length, max_bytes: Some(MAX_INLINE_READ) };
        let client = self.client(args.sandbox.id()).await?;
        let read =
            files::read_to_vec(&client, &args.path, opts, MAX_INLINE_READ).await.map_err(|e| match e {
                ClientError::TooLarge { path, limit } => ToolError::ReadTooLarge {
                    agent: format!("{path} has more than {limit} bytes from offset {offset}"),
                },
                e => read_error(e),
            })?;
        let (data, file_size) = (read.data, read.file_size);
        let slice = offset > 0 || length.is_some_and(|n| n < file_size);
        let (encoding, content, note) = encode_read(&data, slice);
        let bytes = data.len() as u64;
        Ok(Json(ReadOutput {
            path: args.path,
            encoding,
            content,
            offset,
            bytes,
            size: file_size,
            eof: offset.saturating_add(bytes) >= file_size,
            notes: note.into_iter().collect(),
        }))
    }

    /// Writes a file atomically.
    #[tool(
        name = "sandbox_files_write",
        description = "Create or replace a file inside the sandbox (or append to it with append: \
            true). The write is atomic: the file changes only when all content arrived. Missing \
            parent directories are created. content is UTF-8 text, or base64 with encoding: \
            \"base64\" for binary; at most 8 MiB per call.",
        annotations(
            title = "Write a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_write(
        &self,
        Parameters(args): Parameters<WriteArgs>,
    ) -> Result<Json<WriteOutput>, ToolError> {
        let encoding = args.encoding.unwrap_or(Encoding::Utf8);
        // Refuse oversized content before decoding it: base64 is 4 characters per 3 bytes.
        let estimate = match encoding {
            Encoding::Utf8 => args.content.len() as u64,
            Encoding::Base64 => args.content.len() as u64 / 4 * 3,
        };
        if estimate > MAX_INLINE_WRITE + 3 {
            return Err(ToolError::ContentTooLarge { bytes: estimate });
        }
        let data = match encoding {
            Encoding::Utf8 => args.content.into_bytes(),
            Encoding::Base64 => from_base64(&args.content)?,
        };
        if data.len() as u64 > MAX_INLINE_WRITE {
            return Err(ToolError::ContentTooLarge { bytes: data.len() as u64 });
        }
        let mode = args.mode.as_deref().map(parse_mode).transpose()?;
        let opts =
            WriteOpts { mode, append: args.append.unwrap_or(false), no_create_parents: false, sync: false };
        let written =
            self.client(args.sandbox.id()).await?.write_bytes(&args.path, opts, Bytes::from(data)).await?;
        Ok(Json(WriteOutput {
            path: args.path,
            bytes_written: written.bytes_written,
            size: written.file_size,
        }))
    }

    /// Lists a directory.
    #[tool(
        name = "sandbox_files_list",
        description = "List a directory inside the sandbox: each entry's path (relative to the \
            directory), type (file, dir, symlink, other), size, mode and mtime; with names_only: \
            true, only the paths, grouped as files, dirs, symlinks and other (faster on big \
            directories). Pass recursive: true to \
            descend, and max_depth to limit how far. At most 1000 entries are returned; \
            truncated says when there were more.",
        output_schema = rmcp::handler::server::common::schema_for_output::<ListOutput>(),
        annotations(
            title = "List a directory",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_list(
        &self,
        Parameters(args): Parameters<ListArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let names_only = args.names_only.unwrap_or(false);
        let opts = ListOpts {
            recursive: args.recursive.unwrap_or(args.max_depth.is_some()),
            max_depth: args.max_depth.filter(|&depth| depth > 0),
            max_entries: Some(MAX_LIST_ENTRIES),
            names_only,
        };
        let listing = self.client(args.sandbox.id()).await?.list(&args.path, opts).await?;
        let notes = if listing.truncated {
            vec![format!(
                "the listing stopped at {MAX_LIST_ENTRIES} entries; list a subdirectory, pass a \
                 smaller max_depth, or search with sandbox_exec (find, ls)"
            )]
        } else {
            Vec::new()
        };
        // The text is the listing as lines, not the JSON again (see mcp::listing).
        let (output, text) = if names_only {
            let lines = listing.entries.iter().map(|e| Line {
                path: &e.path,
                kind: e.kind.as_str(),
                stat: None,
                symlink_target: None,
            });
            let text = listing::render(&args.path, true, lines, &notes);
            // Plain strings rather than an object per entry: clients build and check
            // each JSON value, and the Python SDK spends about 5 us per object.
            let names = Names::group(listing.entries);
            let output = ListOutput {
                path: args.path,
                entries: None,
                files: Some(names.files),
                dirs: Some(names.dirs),
                symlinks: Some(names.symlinks),
                other: Some(names.other),
                truncated: listing.truncated,
                notes,
            };
            (output, text)
        } else {
            let entries: Vec<EntryView> = listing.entries.into_iter().map(EntryView::from).collect();
            let text = listing::render(&args.path, false, entries.iter().map(EntryView::line), &notes);
            let output = ListOutput {
                path: args.path,
                entries: Some(entries),
                files: None,
                dirs: None,
                symlinks: None,
                other: None,
                truncated: listing.truncated,
                notes,
            };
            (output, text)
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(serde_json::to_value(&output).map_err(ToolError::Encode)?);
        Ok(result)
    }

    /// Removes a file or a directory tree.
    #[tool(
        name = "sandbox_files_remove",
        description = "Delete a file inside the sandbox, or a directory and everything in it \
            with recursive: true. Symlinks are removed, not followed.",
        annotations(
            title = "Delete a file or directory",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_remove(
        &self,
        Parameters(args): Parameters<RemoveArgs>,
    ) -> Result<Json<PathOutput>, ToolError> {
        self.client(args.sandbox.id()).await?.remove(&args.path, args.recursive.unwrap_or(false)).await?;
        Ok(Json(PathOutput { path: args.path }))
    }

    /// Moves or renames a path.
    #[tool(
        name = "sandbox_files_move",
        description = "Move or rename a file or directory inside the sandbox. An existing \
            destination is refused unless overwrite: true.",
        annotations(
            title = "Move or rename",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_move(
        &self,
        Parameters(args): Parameters<MoveArgs>,
    ) -> Result<Json<PathOutput>, ToolError> {
        self.client(args.sandbox.id())
            .await?
            .mv(&args.from, &args.to, args.overwrite.unwrap_or(false))
            .await?;
        Ok(Json(PathOutput { path: args.to }))
    }

    /// Creates a directory and its parents.
    #[tool(
        name = "sandbox_files_mkdir",
        description = "Create a directory inside the sandbox, with any missing parents (like \
            mkdir -p); an existing directory is not an error.",
        annotations(
            title = "Create a directory",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_mkdir(
        &self,
        Parameters(args): Parameters<MkdirArgs>,
    ) -> Result<Json<PathOutput>, ToolError> {
        let mode = args.mode.as_deref().map(parse_mode).transpose()?;
        self.client(args.sandbox.id()).await?.mkdir(&args.path, true, mode).await?;
        Ok(Json(PathOutput { path: args.path }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_text_and_split_characters_are_explained() {
        assert_eq!(encode_read("héllo".as_bytes(), false).0, Encoding::Utf8);
        let bytes = "héllo".as_bytes();
        let (encoding, content, note) = encode_read(&bytes[..2], true);
        assert_eq!(encoding, Encoding::Base64);
        assert_eq!(content, to_base64(&bytes[..2]));
        assert!(note.unwrap().contains("split a UTF-8 character"));
        let (_, _, note) = encode_read(b"\x00\xff\xfebinary", false);
        assert_eq!(note.unwrap(), "the bytes are not UTF-8 text, so content is base64");
    }
}
