//! `sandbox_info`: the agent and the machine it runs on.

use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::Serialize;

use crate::client::AgentInfo;
use crate::mcp::error::ToolError;
use crate::mcp::server::SbxMcp;
use crate::mcp::shape::rfc3339_ms;

/// Result of `sandbox_info`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InfoOutput {
    /// The address of the agent answering.
    pub agent: String,
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
    /// True when the agent is the sandbox's init (a microVM); false on a plain host.
    pub pid1: bool,
    /// The sandbox's wall clock (RFC 3339, UTC).
    pub time: String,
}

impl InfoOutput {
    fn new(agent: String, info: AgentInfo) -> Self {
        InfoOutput {
            agent,
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
    /// The agent's version and the sandbox's resources.
    #[tool(
        name = "sandbox_info",
        description = "Describe the sandbox: agent version, hostname, kernel, CPUs, memory and \
            disk (total and free), uptime and clock. Cheap; use it to check the sandbox answers.",
        annotations(
            title = "Describe the sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_info(&self) -> Result<Json<InfoOutput>, ToolError> {
        let client = self.client().await?;
        let info = client.info().await?;
        Ok(Json(InfoOutput::new(client.address().to_string(), info)))
    }
}
