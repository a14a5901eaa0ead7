//! `sandbox_get_metrics`: CPU, memory, disk, network and uptime of one sandbox or all,
//! one call into [`crate::sandbox::metrics`].

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::error::ToolError;
use crate::mcp::server::AtollMcp;
use crate::sandbox::Target;
use crate::sandbox::metrics::{Metrics, metrics, metrics_of};

/// Arguments of `sandbox_get_metrics`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsArgs {
    /// The sandbox, by id or name. Default: the sandbox this server was started with,
    /// else every sandbox this client may act on (those sandbox_list shows).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// Result of `sandbox_get_metrics`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MetricsOutput {
    /// One entry per sandbox.
    pub sandboxes: Vec<Metrics>,
}

#[tool_router(router = metrics_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Reports what sandboxes use.
    #[tool(
        name = "sandbox_get_metrics",
        description = "CPU, memory, disk and network use and uptime of a sandbox, or of every \
            sandbox sandbox_list shows when sandbox_id is omitted (and the server has no default sandbox). cpu_percent \
            is the guest's own busy share of its vCPUs over one second and host_cpu_percent its VM \
            process's on the host (100 = one CPU); memory and disk are the guest's own figures; net \
            bytes are its network card's. Takes about a second; a \
            paused sandbox is not resumed for it.",
        annotations(
            title = "Sandbox metrics",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_get_metrics(
        &self,
        Parameters(args): Parameters<MetricsArgs>,
    ) -> Result<Json<MetricsOutput>, ToolError> {
        let sandboxes = match self.target(args.sandbox_id.as_deref()) {
            Some(Target::Sandbox(name)) => metrics(&[name]).await?,
            // "Every sandbox" is every sandbox this client may act on, never the host's.
            _ => metrics_of(|info| self.may_see(info)).await?,
        };
        Ok(Json(MetricsOutput { sandboxes }))
    }
}
