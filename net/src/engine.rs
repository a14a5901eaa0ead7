//! The engine: one sandbox's network, started on the caller's tokio runtime.
//! [`Engine::start`] listens on the NIC socket (QEMU connects to it), serves each
//! connection with the stack, decides and carries connections and DNS, writes the audit
//! log; [`EngineHandle::set_policy`] swaps the policy for every connection that starts
//! afterwards. Each NIC connection is a VM; a later one is a restored VM, in which the
//! connections the guest had open when saved are reset (`stack::stale`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::dns::{DnsServer, DnsSetupError};
use crate::log::{AuditLog, LogError};
use crate::policy::{Builtins, Policy};
use crate::shared::Shared;
use crate::stack::{self, FlowKey, StackControl, StackEvents};

/// How often the counts of rate-limited log lines are written out.
const SUPPRESSED_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the guest's frames come from.
#[derive(Debug)]
pub enum Frames {
    /// A listener already bound (before QEMU starts), e.g. `DIR/net.sock`.
    Listener(UnixListener),
    /// A path to bind; it must not exist.
    Path(PathBuf),
}

/// How the engine is set up.
#[derive(Debug)]
pub struct EngineConfig {
    /// The NIC socket QEMU's `-netdev stream,server=off` connects to.
    pub frames: Frames,
    /// The audit log, `DIR/net.log` (rotated to `net.log.1`).
    pub log_path: PathBuf,
    /// The policy at start.
    pub policy: Policy,
    /// The resolver configuration DNS forwards with; `/etc/resolv.conf` by default.
    pub resolv_conf: PathBuf,
    /// The host's own addresses, always denied unless an IP rule names them; `None`
    /// reads them from the host's interfaces, at start and again as they change (at
    /// most a second old when a connection is decided).
    pub host_addrs: Option<Vec<IpAddr>>,
    /// Connections the guest had open when it was saved (a restored guest): they are
    /// reset in the guest once its NIC connects (see [`EngineHandle::open_flows`]).
    pub stale_flows: Vec<FlowKey>,
    /// Secrets swapped at egress for their hosts (docs/secrets.md); `None`: none.
    pub secrets: Option<crate::secrets::Secrets>,
}

impl EngineConfig {
    /// A configuration with the host's resolv.conf and interface addresses.
    pub fn new(frames: Frames, log_path: PathBuf, policy: Policy) -> EngineConfig {
        EngineConfig {
            frames,
            log_path,
            policy,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            host_addrs: None,
            stale_flows: Vec::new(),
            secrets: None,
        }
    }
}

/// The engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The NIC socket could not be bound.
    #[error("cannot listen on the NIC socket {}; remove a stale socket file or choose another path", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The audit log could not be opened.
    #[error(transparent)]
    Log(#[from] LogError),
    /// DNS could not be set up.
    #[error(transparent)]
    Dns(#[from] DnsSetupError),
    /// The host's addresses could not be listed.
    #[error("cannot list the host's network addresses (getifaddrs); pass them in EngineConfig::host_addrs")]
    HostAddrs(#[source] std::io::Error),
}

/// The network engine of one sandbox.
#[derive(Debug)]
pub struct Engine;

impl Engine {
    /// Starts the engine's tasks on the current tokio runtime (call it from inside one).
    pub fn start(config: EngineConfig) -> Result<EngineHandle, EngineError> {
        let refresh = config.host_addrs.is_none();
        let host_addrs = match config.host_addrs {
            Some(addrs) => addrs,
            None => crate::hostaddr::host_addrs().map_err(EngineError::HostAddrs)?,
        };
        let resolver = crate::dns::resolver(&config.resolv_conf)?;
        let (listener, socket_path) = match config.frames {
            Frames::Listener(l) => (l, None),
            Frames::Path(path) => match UnixListener::bind(&path) {
                Ok(l) => (l, Some(path)),
                Err(source) => return Err(EngineError::Bind { path, source }),
            },
        };
        let log = match AuditLog::open(&config.log_path) {
            Ok(log) => log,
            Err(e) => {
                // Nothing is left behind by a failed start.
                if let Some(path) = &socket_path {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e.into());
            }
        };
        let shared = Arc::new(Shared::new(
            config.policy,
            Builtins::with_host_addrs(host_addrs),
            refresh,
            log,
            config.secrets,
        ));
        shared.add_stale_flows(config.stale_flows);
        let dns = Arc::new(DnsServer::new(resolver, shared.clone()));
        let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel();
        let control = StackControl { cmd: cmd_tx, wake: Arc::new(Notify::new()) };
        let (flow_tx, flow_rx) = mpsc::channel(stack::MAX_FLOWS);
        let (dns_tx, dns_rx) = stack::dns_channel();
        let tasks = vec![
            tokio::spawn({
                // What the rate limits dropped is counted in the log even when the flood
                // stopped and no later line would carry the count.
                let shared = shared.clone();
                async move {
                    loop {
                        tokio::time::sleep(SUPPRESSED_FLUSH).await;
                        shared.log.flush_suppressed();
                    }
                }
            }),
            tokio::spawn(crate::egress::dispatch(flow_rx, control.clone(), shared.clone(), dns.clone())),
            tokio::spawn(crate::egress::serve_dns_udp(dns_rx, control.clone(), dns)),
            tokio::spawn({
                let shared = shared.clone();
                async move {
                    let mut next_id = 0;
                    loop {
                        let stream = match listener.accept().await {
                            Ok((stream, _)) => stream,
                            Err(e) => {
                                tracing::warn!("NIC socket accept failed: {e}");
                                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                                continue;
                            }
                        };
                        let events = StackEvents { flows: flow_tx.clone(), dns: dns_tx.clone() };
                        let run = stack::run(
                            stream,
                            events,
                            &mut cmd_rx,
                            control.clone(),
                            shared.clone(),
                            &mut next_id,
                        );
                        if let Err(e) = run.await {
                            tracing::warn!("guest NIC connection ended: {e:#}");
                        }
                    }
                }
            }),
        ];
        Ok(EngineHandle { shared, tasks, socket_path })
    }
}

/// A running engine; dropping it (or [`EngineHandle::shutdown`]) stops it.
#[derive(Debug)]
pub struct EngineHandle {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    /// The NIC socket file the engine bound (removed on shutdown).
    socket_path: Option<PathBuf>,
}

impl EngineHandle {
    /// Replaces the policy: every connection and DNS query from now on follows it;
    /// connections already open are left as they are.
    pub fn set_policy(&self, policy: Policy) {
        self.shared.set_policy(policy);
    }

    /// The guest's TCP connections (guest end, remote end) the stack carries now, or
    /// carried when the NIC connection ended: what a snapshot of the stopped guest
    /// records, so that the guest restored from it gets them reset
    /// ([`EngineConfig::stale_flows`]). A new NIC connection to this same engine resets
    /// them by itself.
    pub fn open_flows(&self) -> Vec<FlowKey> {
        self.shared.open_flows()
    }

    /// Whether the audit log is being written: while it is not, egress is refused.
    pub fn log_health(&self) -> crate::log::LogHealth {
        self.shared.log.health()
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        Policy::clone(&self.shared.policy())
    }

    /// Stops the engine: the NIC socket is closed (its file removed when the engine
    /// bound it) and every guest connection ends.
    pub fn shutdown(&self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
