//! The environment a jailed process gets: nothing of the host's but a short list
//! that carries no secret. Anything else the user exported (`ATOLL_MCP_TOKEN`,
//! `ATOLL_AGENT_TOKEN`, cloud keys, SSH agents) stays with atoll.

/// Variables the network helper keeps when set: logging, where programs are, and what
/// atoll itself reads to find its state and templates and to start a VM (a connection
/// to a published port of a paused sandbox resumes it from the helper).
/// None is a secret.
const HELPER_KEEPS: &[&str] = &[
    "PATH",
    "HOME",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "LANG",
    "TZ",
    "ATOLL_STATE_DIR",
    "ATOLL_DATA_DIR",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "ATOLL_ACCEL",
    "ATOLL_TEMPLATE_SNAPSHOT",
    // A CA file (a path, not a secret) the secrets swap trusts for real servers.
    "ATOLL_SECRETS_CA_FILE",
];

/// QEMU's environment: none at all but a fixed `PATH` (it runs nothing; its seccomp
/// filter forbids it) and the C locale.
pub fn qemu() -> Vec<(String, String)> {
    vec![("PATH".into(), "/usr/bin:/bin".into()), ("LANG".into(), "C".into())]
}

/// The network helper's environment: `HELPER_KEEPS` from atoll's own.
pub fn helper() -> Vec<(String, String)> {
    keep(std::env::vars(), HELPER_KEEPS)
}

fn keep(vars: impl Iterator<Item = (String, String)>, names: &[&str]) -> Vec<(String, String)> {
    vars.filter(|(k, _)| names.contains(&k.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_pass() {
        let host = [
            ("ATOLL_MCP_TOKEN", "s1"),
            ("ATOLL_AGENT_TOKEN", "s2"),
            ("AWS_SECRET_ACCESS_KEY", "s3"),
            ("RUST_LOG", "debug"),
            ("PATH", "/usr/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let kept = keep(host.into_iter(), HELPER_KEEPS);
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(HELPER_KEEPS.iter().all(|k| !k.contains("TOKEN") && !k.contains("KEY")));
        assert!(kept.iter().all(|(k, _)| k == "RUST_LOG" || k == "PATH"));
        assert!(qemu().iter().all(|(k, _)| !k.contains("TOKEN")));
    }
}
