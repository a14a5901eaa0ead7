//! `sandbox_files_download_dir`: a directory as an inline base64 zip, capped.

use futures::StreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::client::{ArchivePart, ArchiveSummary, ClientError};
use crate::mcp::error::{MAX_INLINE_ZIP, ToolError};
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::to_base64;

/// Arguments of `sandbox_files_download_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadDirArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the directory inside the sandbox.
    pub path: String,
}

/// An entry left out of the zip.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct SkippedView {
    /// Path relative to the directory.
    pub path: String,
    /// Why it was left out (symlink, device, unreadable...).
    pub reason: String,
}

/// Result of `sandbox_files_download_dir`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DownloadDirOutput {
    /// The directory zipped.
    pub path: String,
    /// The zip archive, standard base64.
    pub zip_base64: String,
    /// Bytes of the zip archive.
    pub archive_bytes: u64,
    /// Files in the archive.
    pub files: u64,
    /// Directories in the archive.
    pub dirs: u64,
    /// Uncompressed bytes of the files.
    pub file_bytes: u64,
    /// Entries left out: symlinks, sockets, devices, FIFOs, unreadable files.
    pub skipped: Vec<SkippedView>,
}

impl AtollMcp {
    fn archive_too_large(&self, sandbox_id: Option<&str>, path: &str, agent: &str) -> ToolError {
        let name = path.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("root");
        ToolError::ArchiveTooLarge {
            path: path.to_owned(),
            size: directory_size(agent),
            command: format!("atoll {} download {path} -o {name}.zip", self.target_flag(sandbox_id)),
        }
    }
}

/// The "the directory holds 11 MiB in 3 files" clause of the agent's refusal, if any.
fn directory_size(agent: &str) -> Option<String> {
    let start = agent.find("the directory holds ")?;
    let clause = agent[start..].split(';').next()?.trim();
    Some(clause.to_owned())
}

#[tool_router(router = archive_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Zips a directory.
    #[tool(
        name = "sandbox_files_download_dir",
        description = "Download a directory from the sandbox as a zip archive, returned inline as \
            base64 (zip_base64) with file and byte counts. Symlinks, devices and unreadable files \
            are skipped and listed in skipped. Capped at 10 MiB of zip; a larger directory is \
            refused with the `atoll download` command that fetches it to a file (up to 4 GiB, or its \
            --max-bytes).",
        annotations(
            title = "Download a directory as zip",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_files_download_dir(
        &self,
        Parameters(args): Parameters<DownloadDirArgs>,
    ) -> Result<Json<DownloadDirOutput>, ToolError> {
        let client = self.client(args.sandbox.id()).await?;
        let too_large = |error: ClientError| match error {
            ClientError::Agent { code: Code::ResourceExhausted, message, .. } => {
                self.archive_too_large(args.sandbox.id(), &args.path, &message)
            }
            other => other.into(),
        };
        let mut parts = client.download_dir(&args.path, Some(MAX_INLINE_ZIP)).await.map_err(too_large)?;
        let mut zip = Vec::new();
        let mut summary: Option<ArchiveSummary> = None;
        while let Some(part) = parts.next().await {
            match part.map_err(too_large)? {
                ArchivePart::Data(bytes) => {
                    if (zip.len() + bytes.len()) as u64 > MAX_INLINE_ZIP {
                        return Err(self.archive_too_large(args.sandbox.id(), &args.path, ""));
                    }
                    zip.extend_from_slice(&bytes);
                }
                ArchivePart::Summary(last) => {
                    summary = Some(last);
                    break;
                }
            }
        }
        let summary = summary.ok_or(ClientError::Protocol {
            rpc: "DownloadDir",
            what: "the stream ended without its summary",
        })?;
        Ok(Json(DownloadDirOutput {
            path: args.path,
            zip_base64: to_base64(&zip),
            archive_bytes: zip.len() as u64,
            files: summary.files,
            dirs: summary.dirs,
            file_bytes: summary.file_bytes,
            skipped: summary
                .skipped
                .into_iter()
                .map(|s| SkippedView { path: s.path, reason: s.reason })
                .collect(),
        }))
    }
}
