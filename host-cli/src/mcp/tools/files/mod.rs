//! File tools: `sandbox_files_read`, `_write`, `_list`, `_remove`, `_move`, `_mkdir`.
//!
//! - this file: the tools themselves, each parsing its arguments, making its call and
//!   shaping the answer;
//! - `args`: their arguments (the input schemas);
//! - `output`: their results (the output schemas), and a listing entry as a model reads it.

mod args;
mod output;

pub use args::{Encoding, ListArgs, MkdirArgs, MoveArgs, ReadArgs, RemoveArgs, WriteArgs};
use output::Names;
pub use output::{EntryView, ListOutput, PathOutput, ReadOutput, WriteOutput};

use bytes::Bytes;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{Json, tool, tool_router};
use tonic::Code;

use crate::client::{ClientError, ListOpts, ReadOpts, WriteOpts};
use crate::mcp::error::{MAX_INLINE_READ, MAX_INLINE_WRITE, ToolError};
use crate::mcp::listing::{self, Line};
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::{from_base64, to_base64};
use crate::sandbox::files;
use crate::sandbox::mode::parse_mode;

/// Entries one `sandbox_files_list` returns at most.
pub const MAX_LIST_ENTRIES: u32 = 1000;

/// A read refused for its size becomes the message that says how to read a slice.
fn read_error(error: ClientError) -> ToolError {
    match error {
        ClientError::Agent { code: Code::ResourceExhausted, message, .. } => {
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
impl AtollMcp {
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
