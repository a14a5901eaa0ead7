//! `secret_list`, `sandbox_attach_secret`, `sandbox_detach_secret` (Superserve's shapes),
//! each one call into [`crate::secrets`]. No tool sets a value or returns one; which
//! secrets may be bound is the operator's choice ([`SecretGrant`]).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::error::ToolError;
use crate::mcp::server::AtollMcp;
use crate::secrets::{self, Binding, SecretInfo};

/// Which stored secrets an MCP server may bind.
#[derive(Debug, Clone)]
pub enum SecretGrant {
    /// Every one (`--allow-all-secrets`).
    All,
    /// Those named (`--secret NAME`); none by default.
    Named(Vec<String>),
}

impl SecretGrant {
    /// Whether `name` may be bound.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            SecretGrant::All => true,
            SecretGrant::Named(names) => names.iter().any(|n| n == name),
        }
    }
}

/// Arguments of `secret_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSecretsArgs {}

/// Result of `secret_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SecretList {
    /// The secrets this server may bind: names, hosts, where the values come from.
    pub secrets: Vec<SecretInfo>,
}

/// Arguments of `sandbox_attach_secret`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachArgs {
    /// The sandbox, by id or name.
    pub sandbox_id: String,
    /// The secret's name (secret_list shows them).
    pub secret: String,
    /// The environment variable commands in the sandbox see. Default: the secret's name
    /// in upper case.
    #[serde(default)]
    pub env: Option<String>,
}

/// Arguments of `sandbox_detach_secret`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DetachArgs {
    /// The sandbox, by id or name.
    pub sandbox_id: String,
    /// The secret's name, or the variable it is bound to.
    pub secret: String,
}

/// Result of `sandbox_detach_secret`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Detached {
    /// The bindings removed.
    pub detached: Vec<Binding>,
}

impl AtollMcp {
    /// Binds `secret` as `env` to the sandbox, if this server may bind it.
    pub(crate) async fn attach_secret(
        &self,
        sandbox: &str,
        secret: &str,
        env: Option<&str>,
    ) -> Result<Binding, ToolError> {
        if !self.secret_grant().allows(secret) {
            return Err(ToolError::SecretNotAllowed(secret.to_owned()));
        }
        let bound = secrets::attach(sandbox, secret, env).await?;
        self.forget_clients();
        Ok(bound)
    }
}

#[tool_router(router = secrets_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Lists the secrets this server may bind.
    #[tool(
        name = "secret_list",
        description = "List the stored secrets this server may bind to sandboxes: name, the hosts \
            its value may go to, where the value comes from. Values are never shown: a sandbox \
            bound to a secret holds a placeholder, which atoll replaces with the value only in \
            HTTPS request headers to the secret's hosts.",
        annotations(
            title = "List secrets",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn secret_list(
        &self,
        Parameters(_args): Parameters<ListSecretsArgs>,
    ) -> Result<Json<SecretList>, ToolError> {
        let all = secrets::list()?;
        Ok(Json(SecretList {
            secrets: all.into_iter().filter(|s| self.secret_grant().allows(&s.name)).collect(),
        }))
    }

    /// Binds a secret to a sandbox.
    #[tool(
        name = "sandbox_attach_secret",
        description = "Bind a stored secret to a sandbox: commands started in it from now on see \
            the variable env (default: the secret's name in upper case) set to a placeholder. Use \
            the variable where the credential goes (e.g. `Authorization: Bearer $GITHUB_TOKEN`); \
            atoll puts the real value in place of the placeholder only in HTTPS request headers \
            to the secret's hosts. The value never enters the sandbox.",
        annotations(
            title = "Bind a secret to a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_attach_secret(
        &self,
        Parameters(args): Parameters<AttachArgs>,
    ) -> Result<Json<Binding>, ToolError> {
        Ok(Json(self.attach_secret(&args.sandbox_id, &args.secret, args.env.as_deref()).await?))
    }

    /// Unbinds a secret from a sandbox.
    #[tool(
        name = "sandbox_detach_secret",
        description = "Unbind a secret (by name, or by the variable it is bound to) from a sandbox: \
            from the next request on its placeholder is sent unchanged.",
        annotations(
            title = "Unbind a secret",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_detach_secret(
        &self,
        Parameters(args): Parameters<DetachArgs>,
    ) -> Result<Json<Detached>, ToolError> {
        let detached = secrets::detach(&args.sandbox_id, &args.secret)?;
        self.forget_clients();
        Ok(Json(Detached { detached }))
    }
}
