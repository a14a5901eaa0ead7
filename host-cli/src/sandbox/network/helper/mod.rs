//! `atoll net-helper`: the per-sandbox host process behind its network and published
//! ports. `atoll create` starts it before QEMU, records its pid, and `atoll kill` stops
//! it; it outlives pauses.
//!
//! - The agent link ([`crate::vmm::agent_link`]): `net/agent.sock`, where every call of
//!   `atoll` and `atoll mcp` to this sandbox's agent goes, multiplexed over the VM's
//!   virtio-serial port (QEMU's `agent.port`). Every sandbox has it, also `--net none`.
//! - `forward`: published ports, each connection carried over the agent link.
//! - `server`: the control socket `net/net.ctl` the CLI and MCP tools talk to.
//! - [`log`]: `net/net-helper.log`, rate-limited and rotated.
//! - [`console`]: QEMU's two logs, the serial console `vm/console.log` (from QEMU's
//!   `vm/wire/tty.sock`) and `qemu.log` (its stderr, from `net/stderr.sock`), which
//!   the helper alone writes, each kept under a bound.
//! - The network, when the sandbox has one: the atoll-net engine ([`atoll_net::Engine`]) on
//!   `net.sock`, where QEMU's NIC connects: a userspace TCP/IP stack that decides every
//!   connection and DNS query by the policy and writes the audit log `net/net.log`.
//!
//! What it writes lies in `net/`, its own directory ([`config::NET_DIR`]), besides the
//! NIC's and the console's sockets in `vm/wire/` and the two logs it writes,
//! `vm/console.log` and `qemu.log`.
//!
//! atoll binds the sockets QEMU connects to (`net.sock`, `tty.sock`, `stderr.sock`)
//! before it starts the helper and QEMU, and hands them to the helper by descriptor
//! (`jail::wire`, [`handed`]): QEMU may start before the helper is ready, its
//! connections waiting to be accepted. The helper is ready once `net.ctl` exists;
//! `agent.sock` is bound before that, so calls can be made as soon as atoll sees the
//! helper ready.

pub mod console;
mod forward;
pub mod handed;
pub mod log;
mod server;

use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

use crate::sandbox::network::config::{self, ConfigError, NetConfig};
use crate::sandbox::network::spec::NetworkMode;
use crate::vmm::agent_link;

/// Why the helper could not start.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// `net.json` could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The directory given is not a sandbox's (named by its id).
    #[error("{} is not a sandbox directory (named by the sandbox's id)", dir.display())]
    Record {
        /// The sandbox directory.
        dir: PathBuf,
    },
    /// A socket could not be bound.
    #[error("could not listen on {}", path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Signals could not be watched.
    #[error("could not watch for SIGTERM")]
    Signal(#[source] std::io::Error),
    /// The agent link could not be served.
    #[error(transparent)]
    Link(#[from] crate::vmm::agent_link::AgentLinkError),
    /// The secrets swap could not be set up (its CA, the trust for real servers).
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretError),
    /// The seccomp filter could not be installed.
    #[error(transparent)]
    Seccomp(#[from] crate::jail::seccomp::SeccompError),
    /// The network engine could not start.
    #[error(transparent)]
    Engine(#[from] atoll_net::EngineError),
    /// A socket atoll bound for it is not one it can serve.
    #[error(transparent)]
    Handed(#[from] handed::HandedError),
    /// atoll bound no NIC socket for a sandbox with a network.
    #[error(
        "the sandbox has a network but the helper was given no NIC socket (--frames-fd); atoll create starts the helper with it"
    )]
    NoFrames,
}

/// Runs the helper for the sandbox in `args.dir` until SIGTERM or SIGINT; removes its
/// sockets on the way out.
pub async fn run(args: &crate::cli::HelperArgs) -> Result<(), HelperError> {
    // First: nothing the helper does needs what the filter denies.
    crate::jail::seccomp::install()?;
    if let Some(fd) = args.runner_fd {
        // SAFETY: atoll's jail hands the helper this descriptor for this use alone.
        unsafe { crate::secrets::runner::use_runner(fd) };
    }
    // SAFETY: atoll's jail hands the helper these descriptors for these uses alone.
    let handed = unsafe { handed::Handed::take(args) }?;
    let dir = args.dir.as_path();
    let mut config = NetConfig::load(dir)?;
    config.ports.clear();
    let stale_flows = std::mem::take(&mut config.stale_flows);
    // The sandbox's id is its directory's name; `sandbox.json` is atoll's, not the
    // helper's to read (it runs as another user when atoll is root).
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|id| crate::vmm::template::is_plain_name(id))
        .ok_or_else(|| HelperError::Record { dir: dir.to_path_buf() })?
        .to_owned();
    config.save(dir)?;
    let engine = match config.network {
        NetworkMode::Default => {
            let frames = atoll_net::Frames::Listener(handed.frames.ok_or(HelperError::NoFrames)?);
            let log = config::audit_log_path(dir);
            let mut engine = atoll_net::EngineConfig::new(frames, log, config.policy.clone());
            engine.stale_flows = stale_flows;
            engine.secrets = Some(crate::secrets::for_helper(dir, &id)?);
            Some(atoll_net::Engine::start(engine)?)
        }
        NetworkMode::None => None,
    };
    let link_socket = config::agent_socket_path(dir);
    let link = agent_link::start(&agent_link::port_path(dir), &link_socket, agent_link::LINK_WAIT)?;
    let forwarder =
        forward::Forwarder::new(dir.to_path_buf(), atoll_proto::Address::Unix(link_socket.clone()), config);
    // QEMU's two logs, on the sockets atoll bound (QEMU may have connected already).
    let logs_dir = dir.to_path_buf();
    let (tty, stderr) = (handed.tty, handed.stderr);
    let console = tokio::spawn(async move { console::serve(&logs_dir, tty, stderr).await });
    let ctl = bind(&config::ctl_path(dir))?;
    let helper = std::sync::Arc::new(server::Helper { forwarder, engine });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(HelperError::Signal)?;
    let ended = tokio::select! {
        () = server::serve(ctl, helper) => Ok(()),
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        e = link => Err(HelperError::Link(e.unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic())))),
    };
    console.abort();
    for path in [
        config::ctl_path(dir),
        config::frames_path(dir),
        link_socket,
        config::console_socket_path(dir),
        config::stderr_socket_path(dir),
    ] {
        let _ = std::fs::remove_file(path);
    }
    ended
}

/// The temporary name `path`'s socket is bound under (`<path>.new`), by the helper
/// (its control socket) or by atoll (`jail::wire`): the longest socket path bound for a
/// sandbox, which the sandbox directory's length must leave room for (`vmm::state`'s
/// check at allocation).
pub fn bind_tmp_path(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    tmp.into()
}

/// Binds a Unix socket at `path` (the control socket), replacing a stale one, 0600
/// ([`crate::jail::wire::listen_in_place`]): the path exists only once a connection to
/// it is accepted:
/// atoll takes the control socket's existence as the helper being ready, and a socket
/// file seen between `bind` and `listen` refused connections (a create under load failed
/// with "could not reach the network helper").
fn bind(path: &Path) -> Result<UnixListener, HelperError> {
    let listener = crate::jail::wire::listen_in_place(path, None).and_then(|l| {
        l.set_nonblocking(true)?;
        UnixListener::from_std(l)
    });
    listener.map_err(|source| HelperError::Bind { path: path.to_path_buf(), source })
}
