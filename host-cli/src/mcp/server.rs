//! [`SbxMcp`]: the MCP server. It holds no session state: every tool call names (or
//! defaults to) the agent it acts on, connects, makes its one call and shapes the answer.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, tool_handler};
use sbx_proto::Address;

use crate::client::Client;
use crate::connect::DEFAULT_CONNECT_TIMEOUT;
use crate::mcp::error::ToolError;

/// What the server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "Tools to work inside an sbx sandbox: a Linux microVM with its own \
filesystem and processes. Run commands with sandbox_exec (or sandbox_exec_background for long \
ones, then sandbox_job_status), and read and change files with the sandbox_files_* tools. Paths \
are absolute paths inside the sandbox. Output is capped; when a result says it was truncated, \
narrow the command (grep, head, tail) or redirect output to a file and read a slice of it.";

/// Why `sbx mcp` stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP handshake on stdin/stdout failed.
    #[error(
        "the MCP client did not complete the handshake on stdin/stdout; start `sbx mcp` from an MCP client"
    )]
    Handshake(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The server loop ended with an error.
    #[error("the MCP session on stdin/stdout ended with an error")]
    Session(#[source] tokio::task::JoinError),
}

/// The `sbx mcp` server.
#[derive(Clone)]
pub struct SbxMcp {
    agent: Option<Address>,
    connect_timeout: Duration,
    router: ToolRouter<SbxMcp>,
}

impl SbxMcp {
    /// A server whose guest tools act on the agent at `agent` when a call names no
    /// sandbox.
    pub fn new(agent: Option<Address>) -> Self {
        let router = Self::exec_router()
            + Self::jobs_router()
            + Self::files_router()
            + Self::archive_router()
            + Self::system_router();
        SbxMcp { agent, connect_timeout: DEFAULT_CONNECT_TIMEOUT, router }
    }

    /// The names of every tool this server offers, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        self.router.list_all().into_iter().map(|tool| tool.name.into_owned()).collect()
    }

    /// Connects to the agent a guest tool acts on.
    pub(crate) async fn client(&self) -> Result<Client, ToolError> {
        let addr = self.agent.as_ref().ok_or(ToolError::NoAgent)?;
        Ok(Client::connect(addr, self.connect_timeout).await?)
    }

    /// The address shown in hints (`sbx --agent ADDR ...`).
    pub(crate) fn agent_flag(&self) -> String {
        match &self.agent {
            Some(addr) => format!("--agent {addr}"),
            None => "--agent ADDR".to_owned(),
        }
    }
}

#[tool_handler(router = self.router)]
impl ServerHandler for SbxMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sbx", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_owned())
    }
}

/// Serves `server` on stdin/stdout until the client closes the connection.
pub async fn serve_stdio(server: SbxMcp) -> Result<(), ServeError> {
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| ServeError::Handshake(Box::new(error)))?;
    let reason = running.waiting().await.map_err(ServeError::Session)?;
    tracing::debug!(?reason, "MCP session ended");
    Ok(())
}
