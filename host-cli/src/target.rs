//! Which agent a command talks to: `--agent ADDR` / `SBX_AGENT`, or a sandbox name
//! (`--sandbox NAME` / `SBX_SANDBOX`, or the `NAME:` of a `sbx cp` guest path), resolved
//! to its agent address by the VM code.
//!
//! Also the `sbx cp` location grammar: `:/path` and `NAME:/path` are guest paths,
//! anything else a host path (write `./a:/b` for a host path that looks like one).

use std::path::PathBuf;

use sbx_proto::{Address, AddressError};

/// Why no agent address could be settled on.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Neither an address nor a sandbox was given.
    #[error(
        "no agent to talk to: pass --agent ADDR (e.g. --agent unix:///run/sbx/agent.sock) or \
         --sandbox NAME, or set SBX_AGENT / SBX_SANDBOX"
    )]
    Missing,
    /// `--agent` is not an address.
    #[error("bad --agent address")]
    BadAddress(#[source] AddressError),
    /// No sandbox has this name.
    #[error(
        "no sandbox named `{name}`; `sbx ls` lists the sandboxes, or pass --agent ADDR to reach an agent directly"
    )]
    NoSandbox {
        /// The name asked for.
        name: String,
    },
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

/// Settles on the agent address from `--agent` and `--sandbox` (either may come from
/// the environment); giving both is refused rather than guessed.
pub fn resolve_target(agent: Option<&str>, sandbox: Option<&str>) -> Result<Address, TargetError> {
    match (agent, sandbox) {
        (Some(a), Some(s)) => Err(TargetError::Conflict { agent: a.to_string(), sandbox: s.to_string() }),
        (Some(a), None) => a.parse().map_err(TargetError::BadAddress),
        (None, Some(name)) => sandbox_address(name),
        (None, None) => Err(TargetError::Missing),
    }
}

/// When both an agent and a sandbox are set, a command-line flag beats the environment:
/// `SBX_AGENT=... sbx -s dev` talks to `dev`. Returns the pair to resolve.
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

/// The agent address of the sandbox called `name`.
///
/// Sandboxes, their names and their hybrid-vsock sockets live in `crate::sandbox`; a paused
/// sandbox is resumed first, and a dead one is refused with what to do.
pub fn sandbox_address(name: &str) -> Result<Address, TargetError> {
    crate::sandbox::resolve_blocking(name).map_err(|e| match e {
        crate::sandbox::SandboxError::State(crate::vmm::state::StateError::NotFound(_)) => {
            TargetError::NoSandbox { name: name.to_string() }
        }
        e => TargetError::Lookup { name: name.to_string(), source: Box::new(e) },
    })
}

/// One side of `sbx cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A path on this machine.
    Host(PathBuf),
    /// A path in a guest: the current target's (`sandbox: None`) or a named sandbox's.
    Guest {
        /// `NAME` of `NAME:/path`.
        sandbox: Option<String>,
        /// The absolute guest path.
        path: String,
    },
}

impl Location {
    /// Reads `:/path`, `NAME:/path` or a host path.
    pub fn parse(s: &str) -> Location {
        if let Some((name, path)) = s.split_once(':')
            && path.starts_with('/')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !name.starts_with('.')
        {
            let sandbox = (!name.is_empty()).then(|| name.to_string());
            return Location::Guest { sandbox, path: path.to_string() };
        }
        Location::Host(PathBuf::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(
            Location::parse(":/etc/hosts"),
            Location::Guest { sandbox: None, path: "/etc/hosts".into() }
        );
        assert_eq!(
            Location::parse("dev-1:/work"),
            Location::Guest { sandbox: Some("dev-1".into()), path: "/work".into() }
        );
        assert_eq!(Location::parse("./a:/b"), Location::Host("./a:/b".into()));
        assert_eq!(Location::parse("/tmp/x"), Location::Host("/tmp/x".into()));
        assert_eq!(Location::parse("rel:x"), Location::Host("rel:x".into()));
        assert_eq!(Location::parse("a b:/x"), Location::Host("a b:/x".into()));
    }

    #[test]
    fn a_flag_beats_the_environment() {
        let (a, s) = (Some("unix:///a"), Some("dev"));
        assert_eq!(flags_over_env(a, s, a, None), (None, s));
        assert_eq!(flags_over_env(a, s, None, s), (a, None));
        assert_eq!(flags_over_env(a, s, None, None), (a, s));
        assert_eq!(flags_over_env(a, None, a, None), (a, None));
    }

    #[test]
    fn targets() {
        assert!(matches!(resolve_target(None, None), Err(TargetError::Missing)));
        assert_eq!(resolve_target(Some("unix:///a.sock"), None).unwrap(), Address::Unix("/a.sock".into()));
        assert!(matches!(resolve_target(Some("nope"), None), Err(TargetError::BadAddress(_))));
        assert!(matches!(resolve_target(None, Some("x")), Err(TargetError::NoSandbox { .. })));
        assert!(matches!(resolve_target(Some("unix:///a"), Some("x")), Err(TargetError::Conflict { .. })));
    }
}
