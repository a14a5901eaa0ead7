//! `sandbox_info`: a sandbox (when the call acts on one) and what its agent reports.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::client::AgentInfo;
use crate::mcp::error::ToolError;
use crate::mcp::sandbox_arg::SandboxArg;
use crate::mcp::server::AtollMcp;
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

/// What the agent reports about itself and its machine: the one record
/// ([`AgentInfo`]), with its clock also as text a model reads.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct AgentView {
    /// The agent's report.
    #[serde(flatten)]
    pub info: AgentInfo,
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
    /// What the agent reports; absent when the sandbox is not running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentView>,
    /// Why agent is absent, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_error: Option<String>,
    /// The sandbox's network and published ports (for sandboxes made with sandbox_create).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::sandbox::network::NetView>,
}

impl From<AgentInfo> for AgentView {
    fn from(info: AgentInfo) -> Self {
        AgentView { time: rfc3339_ms(info.time_unix_ms), info }
    }
}

#[tool_router(router = system_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Describes a sandbox and its agent.
    #[tool(
        name = "sandbox_info",
        description = "Describe a sandbox: its state, template, CPUs and memory (for sandboxes \
            made with sandbox_create), and what its agent reports: version, hostname, kernel, \
            memory and disk (total and free), uptime and clock; and its network: whether it has \
            one, the network helper's health, and its published ports. Cheap and read-only; a paused \
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
                    network: None,
                }));
            }
        };
        let inspection = crate::sandbox::inspect(&sandbox, self.connect_timeout()).await?;
        Ok(Json(InfoOutput {
            address: inspection.sandbox.address.clone(),
            sandbox: Some(inspection.sandbox.into()),
            agent: inspection.agent.map(Into::into),
            agent_error: inspection.agent_error,
            network: Some(inspection.network),
        }))
    }
}
