//! Secrets that never enter a sandbox (docs/secrets.md): the host store (`atoll secret
//! set|ls|rm`), bindings to sandboxes (`atoll create --secret`, `atoll secret
//! attach|detach`, the MCP tools), and what a sandbox's network helper reads to swap a
//! placeholder for the value on requests to the secret's hosts (`atoll_net::secrets`).
//! Written once here; the CLI and the MCP tools both call these functions.
//!
//! - [`store`]: one file per secret, 0600 in a 0700 directory of the state directory.
//! - [`value`]: a value when needed (`--from-command` outputs cached in memory).
//! - [`reaper`]: the keeper a `--from-command` command runs under, which leaves
//!   nothing of it running.
//! - [`binding`]: a sandbox's bindings and CA, the command defaults they add.
//! - `guest`: the sandbox CA into the guest's trust store, before the first binding.
//! - `source`: the helper's view of the bindings, read again for each request.

pub mod binding;
mod guest;
pub mod reaper;
pub mod runner;
mod source;
pub mod store;
pub mod value;

use std::path::Path;

pub use binding::Binding;
pub use store::{SecretFile, Source};

/// Why a secret operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// A name outside the allowed form.
    #[error(
        "`{0}` is not a secret name: use 1 to 64 letters, digits, `_` or `-`, starting with a letter or digit"
    )]
    BadName(String),
    /// A host outside the allowed form.
    #[error(
        "`{0}` is not a host for a secret: give a host name (api.example.com) or a pattern (*.example.com); IP addresses and bare `*` are refused"
    )]
    BadHost(String),
    /// The value cannot be used.
    #[error("the secret's value is refused: {0}")]
    BadValue(String),
    /// No secret of that name.
    #[error("no secret named `{0}`; `atoll secret ls` lists them")]
    NotFound(String),
    /// A variable name outside the allowed form.
    #[error("`{0}` is not an environment variable name (letters, digits, `_`, not starting with a digit)")]
    BadEnv(String),
    /// The variable is bound already.
    #[error("{env} in sandbox {sandbox} is bound to the secret `{secret}` already; detach it first")]
    AlreadyBound {
        /// The sandbox.
        sandbox: String,
        /// The variable.
        env: String,
        /// The secret bound to it.
        secret: String,
    },
    /// Nothing to detach.
    #[error(
        "sandbox {sandbox} has no binding named `{what}` (a secret or a variable); `atoll info {sandbox}` lists its bindings"
    )]
    NotBound {
        /// The sandbox.
        sandbox: String,
        /// The secret or variable asked for.
        what: String,
    },
    /// The sandbox cannot take secrets.
    #[error("sandbox {sandbox}: {why}")]
    Sandbox {
        /// The sandbox.
        sandbox: String,
        /// Why.
        why: String,
    },
    /// A secret was set with no hosts.
    #[error("a secret needs at least one --host (at most {max}) its value may go to", max = store::HOSTS_MAX)]
    NoHosts,
    /// `--from-command` failed.
    #[error("{0}")]
    Command(String),
    /// The state directory.
    #[error(transparent)]
    Dirs(#[from] crate::vmm::dirs::DirsError),
    /// A file could not be read or written.
    #[error("secret store: {0}")]
    Io(String),
}

/// A secret as listed: never its value.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SecretInfo {
    /// Its name.
    pub name: String,
    /// The hosts its value may go to.
    pub hosts: Vec<String>,
    /// Where its value comes from (`stdin`, `env VAR`, a command).
    pub source: String,
    /// When it was last set, RFC 3339.
    pub updated: String,
}

impl SecretInfo {
    fn of(s: &SecretFile) -> SecretInfo {
        let at = std::time::UNIX_EPOCH
            + std::time::Duration::from_millis(u64::try_from(s.updated_unix_ms).unwrap_or(0));
        SecretInfo {
            name: s.name.clone(),
            hosts: s.hosts.clone(),
            source: s.source.describe(),
            updated: humantime::format_rfc3339_seconds(at).to_string(),
        }
    }
}

/// Stores (or replaces) the secret `name` for `hosts`. A `--from-command` secret's
/// command is run once now, to check it works; its output is not kept.
pub fn set(name: &str, hosts: &[String], source: Source) -> Result<SecretInfo, SecretError> {
    store::check_name(name)?;
    if hosts.is_empty() || hosts.len() > store::HOSTS_MAX {
        return Err(SecretError::NoHosts);
    }
    let hosts = hosts.iter().map(|h| store::check_host(h)).collect::<Result<Vec<_>, _>>()?;
    match &source {
        Source::Value { value, .. } => store::check_value(value)?,
        Source::Command { command, .. } => {
            value::run(command).map_err(SecretError::Command)?;
        }
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secret = SecretFile {
        name: name.to_owned(),
        hosts,
        source,
        updated_unix_ms: i64::try_from(now.as_millis()).unwrap_or(i64::MAX),
    };
    store::save(&secret)?;
    Ok(SecretInfo::of(&secret))
}

/// Every stored secret (no values).
pub fn list() -> Result<Vec<SecretInfo>, SecretError> {
    Ok(store::all()?.iter().map(SecretInfo::of).collect())
}

/// Removes the secret `name`: sandboxes bound to it keep the placeholder, which from
/// the next request on is sent unchanged.
pub fn remove(name: &str) -> Result<(), SecretError> {
    store::remove(name)
}

fn sandbox_record(sandbox: &str) -> Result<crate::vmm::state::Record, SecretError> {
    let state = crate::vmm::dirs::state_dir()?;
    crate::vmm::state::find(&state, sandbox)
        .map_err(|e| SecretError::Sandbox { sandbox: sandbox.to_owned(), why: e.to_string() })
}

/// The variable a secret is bound to when none is given: its name in upper case, `-`
/// as `_`.
pub fn default_env(secret: &str) -> String {
    secret.to_ascii_uppercase().replace('-', "_")
}

fn check_env(env: &str) -> Result<(), SecretError> {
    let ok = !env.is_empty()
        && env.len() <= 128
        && !env.as_bytes()[0].is_ascii_digit()
        && env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok { Ok(()) } else { Err(SecretError::BadEnv(env.escape_debug().to_string())) }
}

/// Checks that `secret` can be bound as `env` (a stored secret, a valid variable), for
/// a caller that binds it later (`atoll create --secret`, before anything is made).
pub fn check_binding(secret: &str, env: &str) -> Result<(), SecretError> {
    check_env(env)?;
    store::load(secret).map(|_| ())
}

/// Binds the secret `secret` to the sandbox as the variable `env` (default
/// [`default_env`]): the guest trusts the sandbox CA before the binding is written, so
/// the first request with the placeholder is swapped.
pub async fn attach(sandbox: &str, secret: &str, env: Option<&str>) -> Result<Binding, SecretError> {
    let record = sandbox_record(sandbox)?;
    let env = env.map_or_else(|| default_env(secret), str::to_owned);
    check_binding(secret, &env)?;
    let dir = record.paths.dir.clone();
    let mut bindings = binding::load(&dir);
    if let Some(b) = bindings.iter().find(|b| b.env == env) {
        return Err(SecretError::AlreadyBound {
            sandbox: record.name.clone(),
            env,
            secret: b.secret.clone(),
        });
    }
    let cert = binding::ca_cert(&dir).ok_or_else(|| SecretError::Sandbox {
        sandbox: record.name.clone(),
        why: "it has no secrets CA: a sandbox with --net none (secrets are swapped by the network helper), or one started by an older atoll".into(),
    })?;
    guest::install_ca(&record, &cert).await?;
    let new = Binding { env, secret: secret.to_owned(), placeholder: binding::placeholder(secret)? };
    bindings.push(new.clone());
    binding::save(&dir, &bindings)?;
    Ok(new)
}

/// Removes the sandbox's bindings of `what` (a secret name or a variable): from the next
/// request on, its placeholder is sent unchanged. Returns what was removed.
pub fn detach(sandbox: &str, what: &str) -> Result<Vec<Binding>, SecretError> {
    let record = sandbox_record(sandbox)?;
    let dir = record.paths.dir.clone();
    let (gone, kept): (Vec<Binding>, Vec<Binding>) =
        binding::load(&dir).into_iter().partition(|b| b.secret == what || b.env == what);
    if gone.is_empty() {
        return Err(SecretError::NotBound { sandbox: record.name.clone(), what: what.to_owned() });
    }
    binding::save(&dir, &kept)?;
    Ok(gone)
}

/// The sandbox's bindings (variables, secret names, placeholders; no values).
pub fn bindings(sandbox: &str) -> Result<Vec<Binding>, SecretError> {
    Ok(binding::load(&sandbox_record(sandbox)?.paths.dir))
}

/// What the sandbox's network helper swaps with: its CA (made now if missing), its
/// bindings read from `dir`, and the host's roots plus the CA file named by
/// `ATOLL_SECRETS_CA_FILE` for the real servers.
pub fn for_helper(dir: &Path, label: &str) -> Result<atoll_net::secrets::Secrets, SecretError> {
    let (cert, key) = binding::ensure_ca(dir, label)?;
    let ca = atoll_net::secrets::ca::LeafIssuer::from_pem(&cert, &key)
        .map_err(|e| SecretError::Io(e.to_string()))?;
    let extra =
        std::env::var_os("ATOLL_SECRETS_CA_FILE").filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let extra: Vec<&Path> = extra.iter().map(|p| p.as_path()).collect();
    let upstream =
        atoll_net::secrets::upstream::Upstream::new(&extra).map_err(|e| SecretError::Io(e.to_string()))?;
    Ok(atoll_net::secrets::Secrets {
        source: std::sync::Arc::new(source::SandboxSecrets::new(dir.to_path_buf())),
        ca: std::sync::Arc::new(ca),
        upstream: std::sync::Arc::new(upstream),
    })
}
