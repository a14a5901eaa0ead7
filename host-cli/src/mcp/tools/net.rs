//! The network tools, each one call into [`crate::sandbox::network`]: `sandbox_preview_url`
//! (published ports), `sandbox_update` (the egress rules) and `sandbox_network_log`.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::error::ToolError;
use crate::mcp::server::AtollMcp;
use crate::sandbox::network::policy::{PolicyUpdate, PolicyView};
use crate::sandbox::network::{self, Publication};

/// Arguments of `sandbox_preview_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewArgs {
    /// The sandbox, by id or name.
    pub sandbox_id: String,
    /// The TCP port a server listens on inside the sandbox (1 to 65535).
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
}

#[tool_router(router = net_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Publishes a guest port and returns its URL.
    #[tool(
        name = "sandbox_preview_url",
        description = "Get a URL on this machine (http://127.0.0.1:PORT) that reaches a TCP port \
            inside the sandbox, such as a dev server's; the port is published first if it is not \
            yet. HTTP, WebSocket and plain TCP all pass; a server listening only on the \
            sandbox's 127.0.0.1 is reached too. `browser_url` (http://NAME.localhost:PORT) is the \
            one to open in a browser: its cookies are its own. `listening` says whether a \
            server answers there now; if false, start it (sandbox_exec_background) and the same \
            URL works.",
        annotations(
            title = "Preview URL of a sandbox port",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_preview_url(
        &self,
        Parameters(args): Parameters<PreviewArgs>,
    ) -> Result<Json<Publication>, ToolError> {
        if args.port == 0 {
            return Err(ToolError::BadPort { got: 0 });
        }
        Ok(Json(network::ensure_published(&args.sandbox_id, args.port).await?))
    }
}

/// Arguments of `sandbox_update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateArgs {
    /// The sandbox, by id or name.
    pub sandbox_id: String,
    /// The new allow rules, replacing the current ones: domains ("pypi.org"), patterns
    /// ("*.example.com"), IPs or CIDRs, each optionally ":PORT". Omitted: kept; []: cleared.
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    /// The new deny rules (same forms), replacing the current ones. Omitted: kept.
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
    /// Rules to add to the allow list, keeping the others (each also leaves the deny list).
    #[serde(default)]
    pub add_allow_out: Option<Vec<String>>,
    /// Rules to add to the deny list, keeping the others (each also leaves the allow list).
    #[serde(default)]
    pub add_deny_out: Option<Vec<String>>,
    /// Rules to remove, as written in the policy, from whichever list holds them; one
    /// that neither holds is an error and nothing changes.
    #[serde(default)]
    pub remove: Option<Vec<String>>,
}

/// Arguments of `sandbox_network_log`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkLogArgs {
    /// The sandbox, by id or name.
    pub sandbox_id: String,
    /// Only "allow" or only "deny" entries. Default: both.
    #[serde(default)]
    pub verdict: Option<VerdictFilter>,
    /// The last this many entries (1 to 1000). Default: 100.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
}

/// Which verdict to keep.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum VerdictFilter {
    /// Allowed attempts.
    Allow,
    /// Denied attempts.
    Deny,
}

/// One connection attempt or DNS query.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct LogEntry {
    /// When it started (RFC 3339, UTC).
    pub time: String,
    /// "tcp", "dns" or "udp".
    pub kind: String,
    /// The name asked for (TLS SNI, HTTP Host, DNS query, or the name the IP came from).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Destination IP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Destination port.
    pub port: u16,
    /// "allow" or "deny".
    pub verdict: String,
    /// The rule that decided, as written; "default" or "private-range" for the built-ins.
    pub rule: String,
    /// Bytes from the sandbox out.
    pub bytes_out: u64,
    /// Bytes back in.
    pub bytes_in: u64,
    /// How long it lasted.
    pub duration_ms: u64,
    /// Why an allowed attempt still failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For an allowed TCP connection: `open` (decided, going out) or `close` (ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The connection's number, the same on its open and close entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conn: Option<u64>,
    /// An SNI or Host that was not a valid host name, escaped; judged as naming no host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_name: Option<String>,
    /// On a `rate-limited` entry: how many entries of its kind the limit dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
    /// On a `request` entry: the secrets whose placeholder was swapped (names only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// On a `request` entry: a placeholder left as it was, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Result of `sandbox_network_log`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct NetworkLog {
    /// Oldest first.
    pub entries: Vec<LogEntry>,
}

impl From<atoll_net::log::Record> for LogEntry {
    fn from(r: atoll_net::log::Record) -> Self {
        let text = |v: serde_json::Result<serde_json::Value>| {
            v.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
        };
        LogEntry {
            time: r.time,
            kind: text(serde_json::to_value(r.kind)),
            name: r.name,
            ip: r.ip.map(|ip| ip.to_string()),
            port: r.port,
            verdict: text(serde_json::to_value(r.verdict)),
            rule: r.rule,
            bytes_out: r.bytes_out,
            bytes_in: r.bytes_in,
            duration_ms: r.duration_ms,
            error: r.error,
            event: r.event.map(|e| text(serde_json::to_value(e))),
            conn: r.conn,
            invalid_name: r.invalid_name,
            suppressed: r.suppressed,
            secret: r.secret,
            warning: r.warning,
        }
    }
}

/// Parses a rule list with atoll-net's one parser.
fn rules(list: Option<Vec<String>>) -> Result<Option<Vec<atoll_net::policy::Rule>>, ToolError> {
    list.map(|l| atoll_net::policy::Policy::from_lists(&l, &[] as &[String]).map(|p| p.allow_out))
        .transpose()
        .map_err(ToolError::BadRule)
}

#[tool_router(router = net_policy_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Changes a sandbox's egress rules.
    #[tool(
        name = "sandbox_update",
        description = "Change a running sandbox's network rules: add_allow_out, add_deny_out \
            and remove add or remove single rules and keep the others; allow_out and deny_out \
            REPLACE the whole list (omit one to keep it). New connections follow them at once; \
            open ones are left alone. Returns the policy now in force.",
        annotations(
            title = "Change a sandbox's network rules",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_update(
        &self,
        Parameters(args): Parameters<UpdateArgs>,
    ) -> Result<Json<PolicyView>, ToolError> {
        let update = PolicyUpdate {
            allow_out: rules(args.allow_out)?,
            deny_out: rules(args.deny_out)?,
            allow: rules(args.add_allow_out)?.unwrap_or_default(),
            deny: rules(args.add_deny_out)?.unwrap_or_default(),
            remove: rules(args.remove)?.unwrap_or_default(),
        };

        self.check_private_egress(update.allow_out.as_deref().unwrap_or_default())?;
        self.check_private_egress(&update.allow)?;
        Ok(Json(network::policy::set(&args.sandbox_id, update).await?))
    }

    /// Reads a sandbox's audit log.
    #[tool(
        name = "sandbox_network_log",
        description = "The sandbox's network audit log: every connection attempt and DNS query, \
            with the name asked for, IP and port, verdict (allow or deny), the rule that decided, \
            bytes each way and duration. Filter by verdict; limit keeps the last entries.",
        annotations(
            title = "Network log of a sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_network_log(
        &self,
        Parameters(args): Parameters<NetworkLogArgs>,
    ) -> Result<Json<NetworkLog>, ToolError> {
        let limit = args.limit.unwrap_or(DEFAULT_LOG_LIMIT);
        if !(1..=MAX_LOG_LIMIT).contains(&limit) {
            return Err(ToolError::LimitOutOfRange { got: limit, max: MAX_LOG_LIMIT });
        }
        let verdict = args.verdict.map(|v| match v {
            VerdictFilter::Allow => atoll_net::policy::Verdict::Allow,
            VerdictFilter::Deny => atoll_net::policy::Verdict::Deny,
        });
        let query = network::audit::LogQuery { verdict, limit: Some(limit) };
        let entries = network::audit::read(&args.sandbox_id, query)?;
        Ok(Json(NetworkLog { entries: entries.into_iter().map(LogEntry::from).collect() }))
    }
}

/// Entries `sandbox_network_log` returns by default.
const DEFAULT_LOG_LIMIT: usize = 100;
/// Most entries it returns.
const MAX_LOG_LIMIT: usize = 1000;
