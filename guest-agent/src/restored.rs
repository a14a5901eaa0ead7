//! Restored: a guest restored from a snapshot is told it is a new machine, in one call
//! and without a process: the host's clock, its own hostname, and host randomness mixed
//! into the kernel's pool (on top of the reseed Linux does itself when the VM
//! generation id changes).
//!
//! Everything is checked before anything changes; then the clock, the hostname and the
//! pool are done in that order, and an error names the step that failed.

use std::io::Write;

use crate::system::{self, SystemError};

/// Most bytes of host randomness taken in one call.
pub const MAX_ENTROPY: usize = 4096;
/// Where host randomness goes: a write mixes it into the pool without crediting it,
/// which is all a guest whose generator is long initialised needs.
const RANDOM_DEVICE: &str = "/dev/urandom";
/// Longest hostname the kernel takes (`__NEW_UTS_LEN`).
const MAX_HOSTNAME: usize = 64;

/// Why a guest could not be made its own machine.
#[derive(Debug, thiserror::Error)]
pub enum RestoredError {
    /// The hostname is empty, too long, or holds a character hostnames do not.
    #[error(
        "`{}` cannot be a hostname; send 1 to {MAX_HOSTNAME} ASCII letters, digits, `-`, `_` and `.`",
        .0.escape_debug()
    )]
    BadHostname(String),
    /// More randomness than one call takes.
    #[error("{0} bytes of entropy is over the limit of {MAX_ENTROPY}; send at most {MAX_ENTROPY}")]
    TooMuchEntropy(usize),
    /// The clock could not be set (nothing else was changed).
    #[error(transparent)]
    Clock(SystemError),
    /// The agent lacks the right to set the hostname (the clock was set).
    #[error("setting the hostname needs root (CAP_SYS_ADMIN); run the agent as root")]
    HostnameNotPermitted,
    /// The kernel refused the hostname for another reason (the clock was set).
    #[error("the kernel refused to set the hostname to `{name}`")]
    Hostname {
        /// The name asked for.
        name: String,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// The randomness could not be written (the clock and hostname were set).
    #[error("could not write the host's randomness to {RANDOM_DEVICE}; is devtmpfs mounted on /dev?")]
    Entropy(#[source] std::io::Error),
}

/// Makes this machine its own: the wall clock set to `unix_ms`, the hostname to
/// `hostname`, and `entropy` mixed into the kernel's random pool. Returns how far the
/// clock moved (new minus old), in milliseconds.
pub fn restored(unix_ms: i64, hostname: &str, entropy: &[u8]) -> Result<i64, RestoredError> {
    if !valid_hostname(hostname) {
        return Err(RestoredError::BadHostname(hostname.to_owned()));
    }
    if entropy.len() > MAX_ENTROPY {
        return Err(RestoredError::TooMuchEntropy(entropy.len()));
    }
    // set_time checks the time before it changes anything.
    let adjusted = system::set_time(unix_ms).map_err(RestoredError::Clock)?;
    rustix::system::sethostname(hostname.as_bytes()).map_err(|e| match e {
        rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => RestoredError::HostnameNotPermitted,
        other => RestoredError::Hostname { name: hostname.to_owned(), source: other.into() },
    })?;
    if !entropy.is_empty() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(RANDOM_DEVICE)
            .and_then(|mut pool| pool.write_all(entropy))
            .map_err(RestoredError::Entropy)?;
    }
    Ok(adjusted)
}

/// A hostname the kernel takes and shells print sanely, wide enough for every sandbox
/// name `atoll` accepts (those may hold `_` and start with any of their characters).
fn valid_hostname(name: &str) -> bool {
    (1..=MAX_HOSTNAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only refusals here: a call that passes its checks would change this machine's
    // clock and hostname. tests/tests/agent_restored.rs runs the agent in a UTS
    // namespace of its own for the rest.

    #[test]
    fn hostnames_are_checked() {
        for good in ["f1", "my_box", "box-1.example", &"a".repeat(64)] {
            assert!(valid_hostname(good), "{good}");
        }
        for bad in ["", "a/b", "a b", "a;reboot", "tab\there", "ünï", &"a".repeat(65)] {
            assert!(!valid_hostname(bad), "{bad}");
        }
    }

    #[test]
    fn bad_input_is_refused_before_anything_changes() {
        assert!(matches!(restored(0, "a/b", b""), Err(RestoredError::BadHostname(_))));
        let flood = vec![0u8; MAX_ENTROPY + 1];
        assert!(
            matches!(restored(0, "ok", &flood), Err(RestoredError::TooMuchEntropy(n)) if n == MAX_ENTROPY + 1)
        );
        assert!(matches!(restored(-1, "ok", b""), Err(RestoredError::Clock(SystemError::BadTime(-1)))));
    }

    #[test]
    fn the_hostname_message_says_what_is_allowed() {
        let msg = RestoredError::BadHostname("a\nb".into()).to_string();
        assert_eq!(msg, "`a\\nb` cannot be a hostname; send 1 to 64 ASCII letters, digits, `-`, `_` and `.`");
    }
}
