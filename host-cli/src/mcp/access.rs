//! Which sandboxes an MCP client may act on: those created through MCP by the same
//! identity, plus those the operator handed over (`atoll mcp --share-sandbox NAME`,
//! `--share-cli-sandboxes`). A server pinned to a sandbox (`--sandbox` / `ATOLL_SANDBOX`)
//! acts on that one only. The identity is `mcp:stdio` for every stdio server of this user
//! (an editor restart finds its sandboxes again) and `mcp:http:HASH` for each HTTP token
//! (a hash of the token, never the token). The CLI is the operator: it sees everything.
//!
//! The check runs once per tool call, before the tool, on every argument that names a
//! sandbox (`sandbox_id`, `from_sandbox`), which it replaces with the exact id it
//! checked, and on every argument that names a snapshot (`snapshot`, `from_snapshot`):
//! snapshots record who made them, and a client uses only its own (plus the CLI's with
//! `--share-cli-sandboxes`). `sandbox_list`, `sandbox_snapshot_list` and
//! `sandbox_get_metrics` show only what the client may act on. A `template` another MCP
//! client saved is neither listed nor booted (it holds that client's disk), nor is an
//! image's template (`sandbox_create {image}` reaches it, fetching first) or a build's
//! temporary base ([`crate::template::mcp_access`]).

use rmcp::RoleServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;

use crate::mcp::error::ToolError;
use crate::mcp::http::auth::ClientId;
use crate::mcp::server::AtollMcp;
use crate::sandbox::snapshot::SnapshotInfo;
use crate::sandbox::{SandboxInfo, Target};
use crate::vmm::state::{Lookup, lookup};

/// The identity of every stdio server of this user.
pub const STDIO_IDENTITY: &str = "mcp:stdio";

/// The arguments that name a sandbox a tool acts on.
const SANDBOX_ARGUMENTS: [&str; 2] = ["sandbox_id", "from_sandbox"];

/// The arguments that name a snapshot a tool uses.
const SNAPSHOT_ARGUMENTS: [&str; 2] = ["snapshot", "from_snapshot"];

/// What the operator handed over to MCP clients besides their own sandboxes.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// The exact ids of the sandboxes `--share-sandbox` named when the server started
    /// (never a name: a sandbox made later under that name is not handed over).
    pub sandboxes: Vec<String>,
    /// Every sandbox the CLI created (`--share-cli-sandboxes`).
    pub cli_sandboxes: bool,
}

/// Who created a sandbox or snapshot, in words, for refusals.
fn creator(created_by: Option<&str>) -> &'static str {
    match created_by {
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
            || shared.sandboxes.contains(&info.id)
            || (shared.cli_sandboxes && info.created_by.is_none())
    }

    /// The exact id of the sandbox `name_or_id` names, if this client may act on it. An
    /// exact id or name is looked up among every sandbox (one this client may not act on
    /// is refused saying who created it); an id prefix only among this client's own, and
    /// must begin exactly one of their ids (a refusal lists only those). A name no sandbox
    /// has is refused here too, so nothing created meanwhile can take its place.
    pub(crate) fn resolve_sandbox(&self, name_or_id: &str) -> Result<String, ToolError> {
        let pinned = |asked: &str| match self.pinned() {
            Some(Target::Sandbox(pin)) => {
                Some(ToolError::Pinned { asked: asked.to_owned(), pinned: pin.clone() })
            }
            _ => None,
        };
        let all = crate::sandbox::list()?;
        fn id_name(s: &SandboxInfo) -> (&str, &str) {
            (&s.id, &s.name)
        }
        let exact = all.iter().find(|s| s.id == name_or_id || s.name == name_or_id);
        let found = match exact {
            Some(info) => info,
            None => {
                let mine: Vec<SandboxInfo> = all.iter().filter(|s| self.may_see(s)).cloned().collect();
                match lookup(&mine, name_or_id, id_name) {
                    Lookup::One(info) => return Ok(info.id.clone()),
                    Lookup::None => {
                        return Err(pinned(name_or_id)
                            .unwrap_or_else(|| ToolError::NoSuchSandbox { name: name_or_id.to_owned() }));
                    }
                    Lookup::Several(matches) => {
                        return Err(ToolError::AmbiguousSandbox {
                            given: name_or_id.to_owned(),
                            matches: matches.iter().map(|s| format!("{} ({})", s.name, s.id)).collect(),
                        });
                    }
                }
            }
        };
        if self.may_see(found) {
            return Ok(found.id.clone());
        }
        Err(pinned(name_or_id).unwrap_or_else(|| ToolError::NotYours {
            name: found.name.clone(),
            creator: creator(found.created_by.as_deref()),
        }))
    }

    /// Whether this client may use snapshot `snap`: one it made itself, or (with
    /// `--share-cli-sandboxes`) one the CLI made. A pinned server uses only the snapshots
    /// its identity made of the pinned sandbox itself, by id: not those of an earlier
    /// sandbox that had its name.
    pub(crate) fn may_see_snapshot(&self, snap: &SnapshotInfo) -> bool {
        let made_here = snap.created_by.as_deref() == Some(self.identity().as_str());
        if let Some(Target::Sandbox(pin)) = self.pinned() {
            let pinned_id = crate::sandbox::get(pin).ok().map(|info| info.id);
            return made_here && pinned_id.is_some_and(|id| snap.source_id == id);
        }
        made_here || (self.shared().cli_sandboxes && snap.created_by.is_none())
    }

    /// Whether this client may list and boot a template that `saved_by` saved: the
    /// operator's (built-ins, images, `atoll template save`: none) and its own; one
    /// another MCP client saved holds that client's disk.
    pub(crate) fn may_use_template(&self, saved_by: Option<&str>) -> bool {
        saved_by.is_none_or(|by| by == self.identity())
    }

    /// Refuses template `name` when another MCP client saved it; one that does not exist
    /// is left to the tool, which lists the templates there are.
    fn check_template(&self, name: &str) -> Result<(), ToolError> {
        let all = crate::template::list()?;
        match all.iter().find(|t| t.name == name) {
            Some(t)
                if !crate::template::mcp_access::may_use(name, t.saved_by.as_deref(), &self.identity()) =>
            {
                Err(ToolError::TemplateNotYours { name: name.to_owned() })
            }
            _ => Ok(()),
        }
    }

    /// Refuses snapshot `name` unless this client may use it; one that does not exist is
    /// refused too, as the tool would.
    fn check_snapshot(&self, name: &str) -> Result<(), ToolError> {
        let all = crate::sandbox::snapshot::list()?;
        let Some(snap) = all.iter().find(|s| s.name == name) else {
            return Err(ToolError::Sandbox(
                crate::vmm::snapfile::SnapFileError::NotFound(name.to_owned()).into(),
            ));
        };
        if self.may_see_snapshot(snap) {
            return Ok(());
        }
        if let Some(Target::Sandbox(pin)) = self.pinned() {
            return Err(ToolError::PinnedSnapshot { name: name.to_owned(), pinned: pin.clone() });
        }
        Err(ToolError::SnapshotNotYours {
            name: name.to_owned(),
            creator: creator(snap.created_by.as_deref()),
        })
    }

    /// Checks every sandbox and snapshot `request` names, and puts each sandbox's exact id
    /// in place of the name or prefix the client gave: the tool acts on exactly the
    /// sandbox that was checked, with no second lookup of the client's words.
    pub(crate) fn check_request(&self, request: &mut CallToolRequestParams) -> Result<(), ToolError> {
        let Some(arguments) = request.arguments.as_mut() else { return Ok(()) };
        for key in SANDBOX_ARGUMENTS {
            if let Some(name) = arguments.get(key).and_then(|v| v.as_str()).filter(|n| !n.is_empty()) {
                let id = self.resolve_sandbox(name)?;
                arguments.insert(key.to_owned(), id.into());
            }
        }
        if let Some(name) = arguments.get("template").and_then(|v| v.as_str()).filter(|n| !n.is_empty()) {
            self.check_template(name)?;
        }
        for key in SNAPSHOT_ARGUMENTS {
            if let Some(name) = arguments.get(key).and_then(|v| v.as_str()).filter(|n| !n.is_empty()) {
                self.check_snapshot(name)?;
            }
        }
        Ok(())
    }
}
