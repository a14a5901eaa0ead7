//! Snapshots: `sandbox_snapshot_create`, `sandbox_snapshot_list`,
//! `sandbox_snapshot_restore` and `sandbox_snapshot_delete`, each one call into
//! [`crate::sandbox::snapshot`]. Forks are `sandbox_create` with `from_snapshot`.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sandboxes::SandboxView;
use crate::mcp::error::ToolError;
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::rfc3339_ms;
use crate::sandbox::snapshot::{self, SnapshotInfo, SnapshotOptions};

/// How long a restored sandbox gets to answer.
const RESTORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Arguments of `sandbox_snapshot_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotCreateArgs {
    /// The sandbox to save, by id or name.
    pub sandbox_id: String,
    /// The snapshot's name (letters, digits, `-`, `_`, `.`). Default: `<sandbox>-<unix time>`.
    #[serde(default)]
    pub name: Option<String>,
}

/// Arguments of `sandbox_snapshot_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotListArgs {}

/// Arguments of `sandbox_snapshot_restore`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRestoreArgs {
    /// The sandbox to put back, by id or name.
    pub sandbox_id: String,
    /// The snapshot's name (sandbox_snapshot_list shows them).
    pub snapshot: String,
}

/// Arguments of `sandbox_snapshot_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotDeleteArgs {
    /// The snapshot's name.
    pub snapshot: String,
}

/// A snapshot as a model sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct SnapshotView {
    /// Its name; pass it as from_snapshot to sandbox_create to fork it.
    pub name: String,
    /// The sandbox it was taken from.
    pub source_sandbox: String,
    /// Template (base image).
    pub template: String,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// When it was taken (RFC 3339).
    pub created_at: String,
}

impl From<SnapshotInfo> for SnapshotView {
    fn from(s: SnapshotInfo) -> Self {
        SnapshotView {
            name: s.name,
            source_sandbox: s.source_sandbox,
            template: s.template,
            memory_mib: s.memory_mib,
            size_bytes: s.size_bytes,
            created_at: rfc3339_ms(s.created_unix_ms),
        }
    }
}

/// Result of `sandbox_snapshot_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SnapshotList {
    /// The snapshots, by name.
    pub snapshots: Vec<SnapshotView>,
}

/// Result of `sandbox_snapshot_delete`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SnapshotDeleted {
    /// The snapshot removed.
    pub deleted: String,
}

#[tool_router(router = snapshots_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Saves a sandbox as a snapshot.
    #[tool(
        name = "sandbox_snapshot_create",
        description = "Save a sandbox's memory, running processes and disk as a named snapshot; \
            the sandbox keeps running. Start copies of it with sandbox_create from_snapshot, or \
            roll it back with sandbox_snapshot_restore. Connections open in it are reset.",
        annotations(
            title = "Snapshot a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_snapshot_create(
        &self,
        Parameters(args): Parameters<SnapshotCreateArgs>,
    ) -> Result<Json<SnapshotView>, ToolError> {
        let opts = SnapshotOptions {
            name: args.name.filter(|n| !n.is_empty()),
            stop: false,
            created_by: Some(self.identity()),
        };
        Ok(Json(snapshot::create(&args.sandbox_id, &opts).await?.into()))
    }

    /// Lists the snapshots.
    #[tool(
        name = "sandbox_snapshot_list",
        description = "List the snapshots this client made (or was handed) by name, with the \
            sandbox each was taken from, its template, memory, size on disk and time.",
        annotations(
            title = "List snapshots",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_snapshot_list(
        &self,
        Parameters(_args): Parameters<SnapshotListArgs>,
    ) -> Result<Json<SnapshotList>, ToolError> {
        let mine = snapshot::list()?.into_iter().filter(|s| self.may_see_snapshot(s));
        Ok(Json(SnapshotList { snapshots: mine.map(SnapshotView::from).collect() }))
    }

    /// Puts a sandbox back to a snapshot.
    #[tool(
        name = "sandbox_snapshot_restore",
        description = "Put a sandbox back to a snapshot: its memory, processes and disk become \
            the snapshot's, and everything since is lost. Its id and name stay.",
        annotations(
            title = "Restore a sandbox from a snapshot",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_snapshot_restore(
        &self,
        Parameters(args): Parameters<SnapshotRestoreArgs>,
    ) -> Result<Json<SandboxView>, ToolError> {
        // The restored sandbox runs under the snapshot's egress rules: they must be ones
        // this server may grant now (a snapshot outlives the grant it was taken under).
        self.check_private_egress(&snapshot::egress_allowed(&args.snapshot)?)?;
        Ok(Json(snapshot::restore(&args.sandbox_id, &args.snapshot, RESTORE_TIMEOUT).await?.into()))
    }

    /// Deletes a snapshot.
    #[tool(
        name = "sandbox_snapshot_delete",
        description = "Permanently delete a snapshot. Sandboxes started from it are not affected.",
        annotations(
            title = "Delete a snapshot",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_snapshot_delete(
        &self,
        Parameters(args): Parameters<SnapshotDeleteArgs>,
    ) -> Result<Json<SnapshotDeleted>, ToolError> {
        snapshot::remove(std::slice::from_ref(&args.snapshot)).await?;
        Ok(Json(SnapshotDeleted { deleted: args.snapshot }))
    }
}
