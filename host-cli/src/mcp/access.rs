//! Which sandboxes an MCP client may act on: those created through MCP by the same
//! identity, plus those the operator handed over (`atoll mcp --share-sandbox NAME`,
//! `--share-cli-sandboxes`). A server pinned to a sandbox (`--sandbox` / `ATOLL_SANDBOX`)
//! acts on that one only. The identity is `mcp:stdio` for every stdio server of this user
//! (an editor restart finds its sandboxes again) and `mcp:http:HASH` for each HTTP token
//! (a hash of the token, never the token). The CLI is the operator: it sees everything.
//!
//! The check runs once per tool call, before the tool, on every argument that names a
//! sandbox (`sandbox_id`, `from_sandbox`); `sandbox_list` shows only these sandboxes.

use rmcp::RoleServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;

use crate::mcp::error::ToolError;
use crate::mcp::http::auth::ClientId;
use crate::mcp::server::AtollMcp;
use crate::sandbox::{SandboxInfo, Target};

/// The identity of every stdio server of this user.
pub const STDIO_IDENTITY: &str = "mcp:stdio";

/// The arguments that name a sandbox a tool acts on.
const SANDBOX_ARGUMENTS: [&str; 2] = ["sandbox_id", "from_sandbox"];

/// What the operator handed over to MCP clients besides their own sandboxes.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// Sandboxes by name or id (`--share-sandbox`).
    pub sandboxes: Vec<String>,
    /// Every sandbox the CLI created (`--share-cli-sandboxes`).
    pub cli_sandboxes: bool,
}

/// Who created a sandbox, in words, for refusals.
fn creator(info: &SandboxInfo) -> &'static str {
    match info.created_by.as_deref() {
        None => "the CLI",
        Some(STDIO_IDENTITY) => "an MCP server over stdio",
        Some(_) => "another MCP client over HTTP",
    }
}

/// The identity of the HTTP client behind `context` (its token's id), if served over HTTP.
pub(crate) fn http_identity(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    parts.extensions.get::<ClientId>().map(|id| format!("mcp:{id}"))
}

impl AtollMcp {
    /// Whether this client may act on `info`.
    pub(crate) fn may_see(&self, info: &SandboxInfo) -> bool {
        if let Some(Target::Sandbox(pin)) = self.pinned() {
            return info.name == *pin || info.id == *pin;
        }
        let shared = self.shared();
        info.created_by.as_deref() == Some(self.identity().as_str())
            || shared.sandboxes.iter().any(|s| *s == info.name || *s == info.id)
            || (shared.cli_sandboxes && info.created_by.is_none())
    }

    /// Refuses `name_or_id` unless this client may act on it; a name no sandbox has is let
    /// through, for the tool's own "no such sandbox" answer.
    pub(crate) fn check_access(&self, name_or_id: &str) -> Result<(), ToolError> {
        let info = match crate::sandbox::get(name_or_id) {
            Ok(info) => info,
            Err(e) if e.not_found().is_some() => {
                if let Some(Target::Sandbox(pin)) = self.pinned() {
                    return Err(ToolError::Pinned { asked: name_or_id.to_owned(), pinned: pin.clone() });
                }
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if self.may_see(&info) {
            return Ok(());
        }
        if let Some(Target::Sandbox(pin)) = self.pinned() {
            return Err(ToolError::Pinned { asked: name_or_id.to_owned(), pinned: pin.clone() });
        }
        Err(ToolError::NotYours { name: info.name.clone(), creator: creator(&info) })
    }

    /// Checks every sandbox `request` names.
    pub(crate) fn check_request(&self, request: &CallToolRequestParams) -> Result<(), ToolError> {
        let Some(arguments) = request.arguments.as_ref() else { return Ok(()) };
        for key in SANDBOX_ARGUMENTS {
            if let Some(name) = arguments.get(key).and_then(|v| v.as_str()).filter(|n| !n.is_empty()) {
                self.check_access(name)?;
            }
        }
        Ok(())
    }
}
