//! PID 1 duties.
//!
//! As PID 1 the agent mounts the pseudo filesystems (`mounts`), brings up `lo`
//! (`loopback`), sets the hostname (from [`crate::cmdline`]), sets a default `PATH`
//! and powers off on SIGTERM. Orphans are reaped by the one reaper in [`crate::exec`].
//! As a service it does none of this.

mod loopback;
mod mounts;

use std::path::PathBuf;

use crate::cmdline::KernelCmdline;
use crate::exec::spec::DEFAULT_PATH;
use crate::report::error_chain;
use loopback::loopback_up;
use mounts::{MOUNTS, current_mount_points, dev_links, mount_pseudo};

/// Hostname used when the kernel command line sets none (or an invalid one).
pub const DEFAULT_HOSTNAME: &str = "atoll";

/// Why an init duty failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A pseudo filesystem could not be mounted.
    #[error("could not mount {fstype} on {target}; commands that need it will fail")]
    Mount {
        /// The filesystem type.
        fstype: &'static str,
        /// Where it was to be mounted.
        target: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The loopback interface could not be brought up.
    #[error("could not bring up the loopback interface `lo`; servers on 127.0.0.1 will not be reachable")]
    Loopback(#[source] std::io::Error),
    /// The hostname could not be set.
    #[error("could not set the hostname to `{name}`")]
    Hostname {
        /// The name asked for.
        name: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The SIGTERM handler could not be installed.
    #[error("could not watch for SIGTERM; the VM will not power off cleanly when asked")]
    Signal(#[source] std::io::Error),
}

/// True when this process is PID 1.
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// Performs the PID 1 set-up: pseudo filesystems, `/dev` links, `lo`, the hostname and
/// a default `PATH`.
///
/// Every duty is attempted even when an earlier one fails; the failures after the
/// first are logged and the first is returned. Call it at the very start of `main`,
/// before any task is spawned (it may set environment variables).
pub fn become_init() -> Result<(), InitError> {
    let mut first = None;
    let mut note = |r: Result<(), InitError>| {
        if let Err(e) = r {
            if first.is_none() {
                first = Some(e);
            } else {
                tracing::warn!("init: {}", error_chain(&e));
            }
        }
    };
    // Read once before /proc is mounted (nothing: mount it) and once after, instead of
    // once per mount: under software emulation each read costs milliseconds of boot.
    let mut mounted = current_mount_points();
    for m in MOUNTS {
        note(mount_pseudo(m, &mounted));
        if m.target == "/proc" {
            mounted = current_mount_points();
        }
    }
    dev_links();
    note(loopback_up().map_err(InitError::Loopback));
    let cmdline = KernelCmdline::read();
    let name = cmdline.hostname().unwrap_or(DEFAULT_HOSTNAME).to_owned();
    note(
        rustix::system::sethostname(name.as_bytes())
            .map_err(|e| InitError::Hostname { name, source: e.into() }),
    );
    default_env();
    first.map_or(Ok(()), Err)
}

/// Powers the VM off (after `sync`) when SIGTERM arrives. Spawn it on the runtime as
/// PID 1; the kernel delivers no signal to PID 1 that has no handler.
pub fn power_off_on_sigterm() -> Result<impl Future<Output = ()>, InitError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(InitError::Signal)?;
    Ok(async move {
        term.recv().await;
        tracing::info!("SIGTERM: syncing and powering off");
        rustix::fs::sync();
        if let Err(e) = rustix::system::reboot(rustix::system::RebootCommand::PowerOff) {
            tracing::error!("power off failed: {e}");
        }
    })
}

/// `PATH` and `HOME` for commands, when the kernel started the agent without them.
fn default_env() {
    for (key, value) in [("PATH", DEFAULT_PATH), ("HOME", "/root")] {
        if std::env::var_os(key).is_none_or(|v| v.is_empty() || (key == "HOME" && v == "/")) {
            // SAFETY: called from `become_init` at the start of `main`, before any task or
            // thread that reads the environment exists.
            unsafe { std::env::set_var(key, value) };
        }
    }
}
