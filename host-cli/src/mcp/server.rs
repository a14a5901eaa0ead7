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
use crate::mcp::access::STDIO_IDENTITY;
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
    /// How long a read from a guest may go without a message (`--idle-timeout`).
    idle_timeout: Duration,
    router: ToolRouter<AtollMcp>,
    clients: Arc<Mutex<HashMap<Address, Client>>>,
    allowed_mounts: Arc<Vec<std::path::PathBuf>>,
    trust_roots: bool,
    private_egress: Arc<Vec<ipnet::IpNet>>,
    registry_credentials: bool,
    secrets: Arc<crate::mcp::tools::secrets::SecretGrant>,
    shared: Arc<crate::mcp::access::Shared>,
    /// Who this session's calls come from (set at the first call over HTTP).
    identity: Arc<std::sync::OnceLock<String>>,
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
            + Self::metrics_router()
            + Self::secrets_router()
            + Self::computer_router();
        for route in router.map.values_mut() {
            tidy_schema(Arc::make_mut(&mut route.attr.input_schema));
            if let Some(output) = route.attr.output_schema.as_mut() {
                let output = Arc::make_mut(output);
                tidy_schema(output);
                lean_output_schema(output);
            }
        }
        AtollMcp {
            pinned,
            connect_timeout,
            idle_timeout: crate::client::DEFAULT_IDLE_TIMEOUT,
            router,
            clients: Arc::default(),
            allowed_mounts: Arc::default(),
            trust_roots: true,
            private_egress: Arc::default(),
            registry_credentials: false,
            secrets: Arc::new(crate::mcp::tools::secrets::SecretGrant::Named(Vec::new())),
            shared: Arc::default(),
            identity: Arc::new(std::sync::OnceLock::from(STDIO_IDENTITY.to_owned())),
        }
    }

    /// Gives up on a tool's transfer out of a guest (a file read, a folder's zip) after
    /// `idle` without a message (`atoll mcp --idle-timeout`).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
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

    /// Lets `allow_out` rules inside these networks open private destinations
    /// (`atoll mcp --allow-private-egress CIDR`).
    pub fn allow_private_egress(mut self, nets: Vec<ipnet::IpNet>) -> Self {
        self.private_egress = Arc::new(nets);
        self
    }

    /// Refuses `allow_out` rules that open loopback, the host's own addresses (as they
    /// are now), link-local, metadata or private ranges the operator did not grant.
    pub(crate) fn check_private_egress(
        &self,
        allow_out: &[atoll_net::policy::Rule],
    ) -> Result<(), ToolError> {
        if allow_out.is_empty() {
            return Ok(());
        }
        let builtins = atoll_net::policy::Builtins::current().map_err(ToolError::HostAddrs)?;
        match builtins.first_opened(allow_out, &self.private_egress) {
            None => Ok(()),
            Some(found) => Err(ToolError::PrivateEgress {
                rule: found.rule.to_string(),
                opens: found.reserved.to_string(),
            }),
        }
    }

    /// Lets `sandbox_template_create` pull images with the operator's registry
    /// credentials (`atoll mcp --registry-credentials`); without it every pull is
    /// anonymous.
    pub fn allow_registry_credentials(mut self, allow: bool) -> Self {
        self.registry_credentials = allow;
        self
    }

    /// The credentials an image pull made for a client may use: the operator's own
    /// lookup when granted, else none.
    pub(crate) fn registry_auth(&self) -> crate::template::image::RegistryAuth {
        if self.registry_credentials {
            crate::template::image::RegistryAuth::Lookup
        } else {
            crate::template::image::RegistryAuth::Anonymous
        }
    }

    /// Which stored secrets MCP tools may bind (`atoll mcp --secret`, `--allow-all-secrets`).
    pub fn allow_secrets(mut self, grant: crate::mcp::tools::secrets::SecretGrant) -> Self {
        self.secrets = Arc::new(grant);
        self
    }

    /// Which stored secrets MCP tools may bind.
    pub(crate) fn secret_grant(&self) -> &crate::mcp::tools::secrets::SecretGrant {
        &self.secrets
    }

    /// Forgets every kept agent connection: their command defaults (a binding's
    /// placeholder) are read again on the next call.
    pub(crate) fn forget_clients(&self) {
        self.kept().clear();
    }

    /// Hands over sandboxes besides the client's own (`--share-sandbox`,
    /// `--share-cli-sandboxes`).
    pub fn share(mut self, shared: crate::mcp::access::Shared) -> Self {
        self.shared = Arc::new(shared);
        self
    }

    /// What the operator handed over.
    pub(crate) fn shared(&self) -> &crate::mcp::access::Shared {
        &self.shared
    }

    /// Who this session's calls come from: `mcp:stdio`, or `mcp:http:HASH`.
    pub(crate) fn identity(&self) -> String {
        self.identity.get().cloned().unwrap_or_else(|| "mcp:unknown".to_owned())
    }

    /// A copy for one HTTP session (or one stateless request): its identity is set by its
    /// first call.
    pub(crate) fn for_session(&self) -> Self {
        Self { identity: Arc::default(), ..self.clone() }
    }

    /// Sets the identity of an HTTP session from its request, refusing a session whose
    /// token changed.
    fn bind_identity(&self, context: &RequestContext<RoleServer>) -> Result<(), ToolError> {
        if !self.trust_roots {
            let Some(id) = crate::mcp::access::http_identity(context) else {
                return Err(ToolError::OtherClient);
            };
            if *self.identity.get_or_init(|| id.clone()) != id {
                return Err(ToolError::OtherClient);
            }
        }
        Ok(())
    }

    /// The server as served over HTTP: a client's roots name folders on the client's
    /// machine (or are simply what it claims), so only `--allow-mount` counts.
    pub(crate) fn over_http(mut self) -> Self {
        self.trust_roots = false;
        self
    }

    /// Whether the client's declared roots bound what it may mount (stdio: the client is
    /// the local editor that started the server).
    pub(crate) fn trusts_roots(&self) -> bool {
        self.trust_roots
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
        let client = Client::connect(&addr, self.connect_timeout)
            .await?
            .with_defaults(defaults)
            .with_idle_timeout(self.idle_timeout);
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
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.clone();
        if let Err(refused) = self.bind_identity(&context).and_then(|()| self.check_request(&mut request)) {
            use rmcp::model::IntoContents;
            return Ok(CallToolResponse::Complete(rmcp::model::CallToolResult::error(
                refused.into_contents(),
            )));
        }
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
