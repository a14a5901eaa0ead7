//! Which agent a call goes to, for both faces: an agent address (`--agent ADDR` /
//! `ATOLL_AGENT`), or a sandbox by name or id (`--sandbox NAME` / `ATOLL_SANDBOX`, the `NAME:`
//! of a `atoll cp` guest path, or an MCP call's `sandbox_id`), resolved to its agent's
//! address by [`super::resolve()`] (which resumes a paused sandbox first).

use atoll_proto::{Address, AddressError};

use super::SandboxError;

/// What a call acts on: an agent reached directly, or a sandbox's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An agent address (`--agent ADDR`).
    Agent(Address),
    /// A sandbox by name or id (`--sandbox NAME`, an MCP `sandbox_id`).
    Sandbox(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Agent(addr) => write!(f, "the agent at {addr}"),
            Target::Sandbox(name) => write!(f, "sandbox `{name}`"),
        }
    }
}

impl Target {
    /// Reads `--agent` and `--sandbox` (either may come from the environment): `None`
    /// when neither is given; giving both is refused rather than guessed.
    pub fn from_flags(agent: Option<&str>, sandbox: Option<&str>) -> Result<Option<Target>, TargetError> {
        match (agent, sandbox) {
            (Some(a), Some(s)) => Err(TargetError::Conflict { agent: a.to_string(), sandbox: s.to_string() }),
            (Some(a), None) => Ok(Some(Target::Agent(a.parse().map_err(TargetError::BadAddress)?))),
            (None, Some(name)) => Ok(Some(Target::Sandbox(name.to_string()))),
            (None, None) => Ok(None),
        }
    }

    /// The sandbox a call names (an empty name names none), else `default`.
    pub fn named_or(sandbox: Option<&str>, default: Option<&Target>) -> Option<Target> {
        match sandbox.filter(|name| !name.is_empty()) {
            Some(name) => Some(Target::Sandbox(name.to_string())),
            None => default.cloned(),
        }
    }

    /// The agent's address; a paused sandbox is resumed first, and a dead one is refused
    /// with what to do.
    pub async fn address(&self) -> Result<Address, SandboxError> {
        match self {
            Target::Agent(addr) => Ok(addr.clone()),
            Target::Sandbox(name) => super::resolve(name).await,
        }
    }

    /// How this target is named on an `atoll` command line (for hints).
    pub fn flag(&self) -> String {
        match self {
            Target::Agent(addr) => format!("--agent {addr}"),
            Target::Sandbox(name) => format!("--sandbox {name}"),
        }
    }
}

/// Why no agent address could be settled on.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Neither an address nor a sandbox was given.
    #[error(
        "no agent to talk to: pass --agent ADDR (e.g. --agent unix:///run/atoll/agent.sock) or \
         --sandbox NAME, or set ATOLL_AGENT / ATOLL_SANDBOX"
    )]
    Missing,
    /// `--agent` is not an address.
    #[error("bad --agent address")]
    BadAddress(#[source] AddressError),
    /// No sandbox has this name.
    #[error(
        "no sandbox named `{name}`; `atoll ls` lists the sandboxes, or pass --agent ADDR to reach an agent directly"
    )]
    NoSandbox {
        /// The name asked for.
        name: String,
    },
    /// The sandbox's QEMU is stopped (not by `atoll pause`): nothing in it can answer.
    #[error(transparent)]
    Stopped(SandboxError),
    /// Finding the sandbox failed for a reason the VM code explains.
    #[error("could not look up sandbox `{name}`")]
    Lookup {
        /// The name asked for.
        name: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `--agent` and a different sandbox were both given.
    #[error("both --agent {agent} and sandbox `{sandbox}` were given; pass only one")]
    Conflict {
        /// The address given.
        agent: String,
        /// The sandbox given.
        sandbox: String,
    },
}

/// Settles on the agent address from `--agent` and `--sandbox` (see
/// [`Target::from_flags`]); giving neither is refused.
pub async fn resolve_target(agent: Option<&str>, sandbox: Option<&str>) -> Result<Address, TargetError> {
    match Target::from_flags(agent, sandbox)? {
        Some(Target::Agent(addr)) => Ok(addr),
        Some(Target::Sandbox(name)) => sandbox_address(&name).await,
        None => Err(TargetError::Missing),
    }
}

/// When both an agent and a sandbox are set, a command-line flag beats the environment:
/// `ATOLL_AGENT=... atoll -s dev` talks to `dev`. Returns the pair to resolve.
pub fn flags_over_env<'a>(
    agent: Option<&'a str>,
    sandbox: Option<&'a str>,
    env_agent: Option<&str>,
    env_sandbox: Option<&str>,
) -> (Option<&'a str>, Option<&'a str>) {
    match (agent, sandbox) {
        (Some(a), Some(s)) if env_agent == Some(a) && env_sandbox != Some(s) => (None, Some(s)),
        (Some(a), Some(s)) if env_sandbox == Some(s) && env_agent != Some(a) => (Some(a), None),
        pair => pair,
    }
}

/// The agent address of the sandbox called `name`: [`Target::address`], with a name
/// that matches no sandbox told apart from a lookup that failed.
pub async fn sandbox_address(name: &str) -> Result<Address, TargetError> {
    Target::Sandbox(name.to_string()).address().await.map_err(|e| match e {
        _ if e.not_found().is_some() => TargetError::NoSandbox { name: name.to_string() },
        SandboxError::Stopped { .. } => TargetError::Stopped(e),
        e => TargetError::Lookup { name: name.to_string(), source: Box::new(e) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_beats_the_environment() {
        let (a, s) = (Some("unix:///a"), Some("dev"));
        assert_eq!(flags_over_env(a, s, a, None), (None, s));
        assert_eq!(flags_over_env(a, s, None, s), (a, None));
        assert_eq!(flags_over_env(a, s, None, None), (a, s));
        assert_eq!(flags_over_env(a, None, a, None), (a, None));
    }

    #[tokio::test]
    async fn targets() {
        assert!(matches!(resolve_target(None, None).await, Err(TargetError::Missing)));
        assert_eq!(
            resolve_target(Some("unix:///a.sock"), None).await.unwrap(),
            Address::Unix("/a.sock".into())
        );
        assert!(matches!(resolve_target(Some("nope"), None).await, Err(TargetError::BadAddress(_))));
        assert!(matches!(resolve_target(None, Some("x")).await, Err(TargetError::NoSandbox { .. })));
        assert!(matches!(
            resolve_target(Some("unix:///a"), Some("x")).await,
            Err(TargetError::Conflict { .. })
        ));
    }
}
