//! [`AtollMcp`]: the MCP server. It holds no session state: every tool call names (or
//! defaults to) the agent it acts on, makes its one call and shapes the answer. Agent
//! connections are kept per address, so a call costs one request, not a new handshake;
//! a connection whose agent went away is re-established on the next call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atoll_proto::Address;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ContentBlock, Implementation, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool_handler};

use crate::client::Client;
use crate::mcp::error::ToolError;
use crate::mcp::output_schema::lean_output_schema;
use crate::mcp::shape::{schema_signature, tidy_schema};
use crate::sandbox::Target;

/// What the server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "Tools to work inside an atoll sandbox: a Linux microVM with its own \
filesystem and processes. Create one with sandbox_create (sandbox_list shows those that exist) and \
pass its id as sandbox_id; a server started with --agent or --sandbox has a default and needs \
none. Run commands with sandbox_exec (or sandbox_exec_background for long ones, then \
sandbox_job_status), and read and change files with the sandbox_files_* tools. Paths \
are absolute paths inside the sandbox. Output is capped; when a result says it was truncated, \
narrow the command (grep, head, tail) or redirect output to a file and read a slice of it.";

/// Why `atoll mcp` stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP handshake on stdin/stdout failed.
    #[error(
        "the MCP client did not complete the handshake on stdin/stdout; start `atoll mcp` from an MCP client"
    )]
    Handshake(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The server loop ended with an error.
    #[error("the MCP session on stdin/stdout ended with an error")]
    Session(#[source] tokio::task::JoinError),
}

/// The `atoll mcp` server.
#[derive(Clone)]
pub struct AtollMcp {
    pinned: Option<Target>,
    connect_timeout: Duration,
    router: ToolRouter<AtollMcp>,
    clients: Arc<Mutex<HashMap<Address, Client>>>,
    allowed_mounts: Arc<Vec<std::path::PathBuf>>,
}

impl AtollMcp {
    /// A server whose guest tools act on `pinned` when a call names no sandbox, waiting
    /// at most `connect_timeout` for an agent to answer.
    pub fn new(pinned: Option<Target>, connect_timeout: Duration) -> Self {
        let mut router = Self::exec_router()
            + Self::jobs_router()
            + Self::files_router()
            + Self::archive_router()
            + Self::system_router()
            + Self::sandboxes_router()
            + Self::net_router()
            + Self::net_policy_router()
            + Self::snapshots_router()
            + Self::templates_router()
            + Self::run_code_router()
            + Self::metrics_router();
        for route in router.map.values_mut() {
            tidy_schema(Arc::make_mut(&mut route.attr.input_schema));
            if let Some(output) = route.attr.output_schema.as_mut() {
                let output = Arc::make_mut(output);
                tidy_schema(output);
                lean_output_schema(output);
            }
        }
        AtollMcp { pinned, connect_timeout, router, clients: Arc::default(), allowed_mounts: Arc::default() }
    }

    /// Lets `sandbox_create` mount folders under `dirs` (canonical), on top of the
    /// client's roots (`atoll mcp --allow-mount`).
    pub fn allow_mounts(mut self, dirs: Vec<std::path::PathBuf>) -> Self {
        self.allowed_mounts = Arc::new(dirs);
        self
    }

    /// Folders under which `sandbox_create` may mount, besides the client's roots.
    pub(crate) fn allowed_mounts(&self) -> &[std::path::PathBuf] {
        &self.allowed_mounts
    }

    /// How long a tool waits for an agent to answer (`--connect-timeout`).
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// What guest tools act on when a call names no sandbox.
    pub fn pinned(&self) -> Option<&Target> {
        self.pinned.as_ref()
    }

    /// The agent address a guest tool acts on: the sandbox the call names (resumed if
    /// paused), else the pinned agent or sandbox.
    pub(crate) async fn address(&self, sandbox_id: Option<&str>) -> Result<Address, ToolError> {
        let target = self.target(sandbox_id).ok_or(ToolError::NoAgent)?;
        Ok(target.address().await?)
    }

    /// What a guest tool acts on: the sandbox the call names, else the pinned target.
    pub(crate) fn target(&self, sandbox_id: Option<&str>) -> Option<Target> {
        Target::named_or(sandbox_id, self.pinned.as_ref())
    }

    /// A client for the agent a guest tool acts on (see [`AtollMcp::address`]): the kept
    /// connection to that address, or a new one.
    pub(crate) async fn client(&self, sandbox_id: Option<&str>) -> Result<Client, ToolError> {
        let addr = self.address(sandbox_id).await?;
        let kept = self.kept().get(&addr).cloned();
        if let Some(client) = kept {
            // A kept connection proves the agent answered once; a VM stopped or wedged
            // since would leave this call waiting, so the agent answers again first,
            // within the connect timeout like a new connection.
            match client.check(self.connect_timeout).await {
                Ok(()) => return Ok(client),
                Err(e) => {
                    self.kept().remove(&addr);
                    if e.is_silent() {
                        return Err(e.into());
                    }
                }
            }
        }
        let defaults = crate::sandbox::command_defaults(&addr);
        let client = Client::connect(&addr, self.connect_timeout).await?.with_defaults(defaults);
        self.kept().insert(addr, client.clone());
        Ok(client)
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<Address, Client>> {
        // The map holds only clones of clients; a panic elsewhere cannot leave it torn.
        self.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How hints name the target on an `atoll` command line.
    pub(crate) fn target_flag(&self, sandbox_id: Option<&str>) -> String {
        self.target(sandbox_id).map_or_else(|| "--agent ADDR".to_owned(), |t| t.flag())
    }
}

/// What rmcp puts before a serde message when a tool's arguments do not parse.
const ARGUMENT_ERROR_PREFIX: &str = "failed to deserialize parameters: ";

impl AtollMcp {
    /// Rewrites rmcp's "failed to deserialize parameters" tool error into a message that
    /// names the tool and lists the arguments it takes, so a model can fix its call.
    fn explain_argument_error(&self, tool: &str, mut response: CallToolResponse) -> CallToolResponse {
        let CallToolResponse::Complete(result) = &mut response else { return response };
        if result.is_error != Some(true) {
            return response;
        }
        let Some(detail) = result
            .content
            .first()
            .and_then(|c| c.as_text())
            .and_then(|t| t.text.strip_prefix(ARGUMENT_ERROR_PREFIX))
        else {
            return response;
        };
        let signature = self.router.get(tool).map(|t| schema_signature(&t.input_schema)).unwrap_or_default();
        let text = format!("invalid arguments for {tool}: {detail}; {tool} takes {signature}");
        result.content = vec![ContentBlock::text(text)];
        response
    }
}

#[tool_handler(router = self.router)]
impl ServerHandler for AtollMcp {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.clone();
        let response = self.router.call(ToolCallContext::new(self, request, context)).await?;
        Ok(self.explain_argument_error(&tool, response))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("atoll", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_owned())
    }
}

/// Serves `server` on stdin/stdout until the client closes the connection.
pub async fn serve_stdio(server: AtollMcp) -> Result<(), ServeError> {
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| ServeError::Handshake(Box::new(error)))?;
    let reason = running.waiting().await.map_err(ServeError::Session)?;
    tracing::debug!(?reason, "MCP session ended");
    Ok(())
}
