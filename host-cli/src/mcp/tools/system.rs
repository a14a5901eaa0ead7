//! `sandbox_info`: a sandbox (when the call acts on one) and what its agent reports.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::client::AgentInfo;
use crate::mcp::error::ToolError;
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::SbxMcp;
use crate::mcp::shape::rfc3339_ms;
use crate::mcp::tools::sandboxes::SandboxView;
use crate::sandbox::Target;

/// Arguments of `sandbox_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InfoArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
}

/// What the agent reports about itself and its machine.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct AgentView {
    /// sbx-agent's version.
    pub agent_version: String,
    /// The sandbox's hostname.
    pub hostname: String,
    /// Kernel name and release, such as "Linux 6.1.0".
    pub kernel: String,
    /// CPUs online.
    pub cpus: u32,
    /// Memory in all, in bytes.
    pub memory_total_bytes: u64,
    /// Memory available, in bytes.
    pub memory_available_bytes: u64,
    /// Size of the root filesystem, in bytes.
    pub disk_total_bytes: u64,
    /// Free space on the root filesystem, in bytes.
    pub disk_free_bytes: u64,
    /// Milliseconds since the agent started.
    pub uptime_ms: u64,
    /// True when the agent is the machine's init (inside a microVM).
    pub pid1: bool,
    /// The machine's wall clock (RFC 3339, UTC).
    pub time: String,
}

/// Result of `sandbox_info`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InfoOutput {
    /// The agent's address.
    pub address: String,
    /// The sandbox, when the call acted on one (not on a bare agent address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxView>,
    /// What the agent reports; null when the sandbox is not running.
    pub agent: Option<AgentView>,
    /// Why agent is null, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_error: Option<String>,
}

impl From<AgentInfo> for AgentView {
    fn from(info: AgentInfo) -> Self {
        AgentView {
            agent_version: info.agent_version,
            hostname: info.hostname,
            kernel: info.kernel,
            cpus: info.cpus,
            memory_total_bytes: info.memory_total_bytes,
            memory_available_bytes: info.memory_available_bytes,
            disk_total_bytes: info.disk_total_bytes,
            disk_free_bytes: info.disk_free_bytes,
            uptime_ms: info.uptime_ms,
            pid1: info.pid1,
            time: rfc3339_ms(info.time_unix_ms),
        }
    }
}

#[tool_router(router = system_router, vis = "pub(crate)")]
impl SbxMcp {
    /// Describes a sandbox and its agent.
    #[tool(
        name = "sandbox_info",
        description = "Describe a sandbox: its state, template, CPUs and memory (for sandboxes \
            made with sandbox_create), and what its agent reports: version, hostname, kernel, \
            memory and disk (total and free), uptime and clock. Cheap and read-only; a paused \
            sandbox is not resumed for it.",
        annotations(
            title = "Describe a sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_info(
        &self,
        Parameters(args): Parameters<InfoArgs>,
    ) -> Result<Json<InfoOutput>, ToolError> {
        let sandbox = match self.target(args.sandbox.id()) {
            Some(Target::Sandbox(name)) => name,
            _ => {
                let client = self.client(None).await?;
                let info = client.info().await?;
                return Ok(Json(InfoOutput {
                    address: client.address().to_string(),
                    sandbox: None,
                    agent: Some(info.into()),
                    agent_error: None,
                }));
            }
        };
        let inspection = crate::sandbox::inspect(&sandbox).await?;
        Ok(Json(InfoOutput {
            address: inspection.sandbox.address.clone(),
            sandbox: Some(inspection.sandbox.into()),
            agent: inspection.agent.map(Into::into),
            agent_error: inspection.agent_error,
        }))
    }
}
