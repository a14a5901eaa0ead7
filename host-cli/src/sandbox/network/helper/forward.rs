//! Published ports: a host listener per published guest port; each connection it
//! accepts is carried to the guest over a ConnectPort call on the sandbox's agent link
//! (the typed client's [`Client::forward_port`], to this helper's own `agent.sock`), so
//! no NIC is involved.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atoll_proto::Address;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OnceCell;
use tokio::task::{JoinHandle, JoinSet};

use crate::client::{Client, ClientError};
use crate::sandbox::network::config::{ConfigError, NetConfig};
use crate::sandbox::network::spec::{PortSpec, PublishedPort};

/// How long to wait for the agent when a connection arrives.
const AGENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a port could not be published or unpublished.
#[derive(Debug, thiserror::Error)]
pub(super) enum ForwardError {
    /// The guest port is published already.
    #[error("guest port {guest_port} is already published at {url}; unpublish it first to move it")]
    AlreadyPublished {
        /// The guest port.
        guest_port: u16,
        /// Where.
        url: String,
    },
    /// The guest port is not published.
    #[error("guest port {0} is not published; `atoll port ls` lists the published ports")]
    NotPublished(u16),
    /// The host address is taken.
    #[error(
        "{addr} is already in use on the host; pick another host port (HOSTPORT:GUESTPORT) or leave it out for a free one"
    )]
    InUse {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// Another bind failure (no such local address, a privileged port...).
    #[error(
        "could not listen on {addr}; give an address of this host with --bind, and a port over 1023 unless atoll runs as root"
    )]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// `net.json` could not be written.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The published ports of one sandbox.
pub(super) struct Forwarder {
    /// The sandbox directory (its `net/net.json`).
    dir: PathBuf,
    agent: Address,
    client: OnceCell<Client>,
    config: Mutex<NetConfig>,
    listening: Mutex<BTreeMap<u16, JoinHandle<()>>>,
}

impl Forwarder {
    /// A forwarder for the sandbox in `dir` whose agent is at `agent`; `config` is its
    /// `net.json` (with no ports published yet).
    pub(super) fn new(dir: PathBuf, agent: Address, config: NetConfig) -> Arc<Forwarder> {
        Arc::new(Forwarder {
            dir,
            agent,
            client: OnceCell::new(),
            config: Mutex::new(config),
            listening: Mutex::default(),
        })
    }

    fn config(&self) -> std::sync::MutexGuard<'_, NetConfig> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, BTreeMap<u16, JoinHandle<()>>> {
        self.listening.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The published ports, by guest port.
    pub(super) fn ports(&self) -> Vec<PublishedPort> {
        self.config().ports.clone()
    }

    /// The network config as it stands.
    pub(super) fn snapshot(&self) -> NetConfig {
        self.config().clone()
    }

    /// Changes the network config with `change` and writes it to `net.json`; on a write
    /// failure nothing changes.
    pub(super) fn update(&self, change: impl FnOnce(&mut NetConfig)) -> Result<(), ConfigError> {
        let mut config = self.config();
        let mut updated = config.clone();
        change(&mut updated);
        updated.save(&self.dir)?;
        *config = updated;
        Ok(())
    }

    /// Starts listening for `spec` on the host and records it in `net.json`.
    pub(super) async fn publish(self: &Arc<Self>, spec: PortSpec) -> Result<PublishedPort, ForwardError> {
        if let Some(p) = self.config().ports.iter().find(|p| p.guest_port == spec.guest_port) {
            return Err(ForwardError::AlreadyPublished { guest_port: p.guest_port, url: p.url.clone() });
        }
        let addr = spec.listen_addr();
        let listener = TcpListener::bind(addr).await.map_err(|source| match source.kind() {
            std::io::ErrorKind::AddrInUse => ForwardError::InUse { addr },
            _ => ForwardError::Bind { addr, source },
        })?;
        let local = listener.local_addr().map_err(|source| ForwardError::Bind { addr, source })?;
        let published = PublishedPort::new(spec.guest_port, local);
        // Recorded on disk before it accepts: a port is never open without `atoll port ls`
        // showing it.
        self.update(|c| {
            c.ports.push(published.clone());
            c.ports.sort_by_key(|p| p.guest_port);
        })?;
        let me = self.clone();
        let task = tokio::spawn(async move { me.accept(spec.guest_port, listener).await });
        self.listening().insert(spec.guest_port, task);
        tracing::info!("guest port {} published at {}", spec.guest_port, published.url);
        Ok(published)
    }

    /// Closes the listener of `guest_port` and every connection it carries; when this
    /// returns, the host port refuses connections.
    pub(super) async fn unpublish(&self, guest_port: u16) -> Result<PublishedPort, ForwardError> {
        let gone = self
            .config()
            .ports
            .iter()
            .find(|p| p.guest_port == guest_port)
            .cloned()
            .ok_or(ForwardError::NotPublished(guest_port))?;
        let task = self.listening().remove(&guest_port);
        if let Some(task) = task {
            // `abort` only asks: the listener closes when the task is next polled and
            // dropped, which awaiting the handle waits for.
            task.abort();
            let _ = task.await;
        }
        self.update(|c| c.ports.retain(|p| p.guest_port != guest_port))?;
        Ok(gone)
    }

    /// Accepts connections until unpublished; dropping this future (abort) drops the
    /// listener and, with the set, every connection in flight.
    async fn accept(self: Arc<Self>, guest_port: u16, listener: TcpListener) {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((conn, peer)) => {
                        let me = self.clone();
                        conns.spawn(async move { me.carry(guest_port, conn, peer).await });
                    }
                    Err(e) => {
                        // Out of descriptors and the like: wait instead of spinning.
                        tracing::warn!("guest port {guest_port}: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = conns.join_next() => {}
            }
        }
    }

    async fn carry(&self, guest_port: u16, mut conn: TcpStream, peer: std::net::SocketAddr) {
        let _ = conn.set_nodelay(true);
        match self.forward(guest_port, &mut conn).await {
            Ok(t) => tracing::debug!(
                "{peer} -> guest port {guest_port}: {} bytes in, {} out",
                t.to_guest,
                t.to_host
            ),
            Err(e) => {
                tracing::warn!("{peer} -> guest port {guest_port}: {e}");
                // A reset, as a refused connection would give, rather than an empty reply.
                // (linger 0 makes the close a reset and never blocks.)
                let _ = rustix::net::sockopt::set_socket_linger(&conn, Some(Duration::ZERO));
            }
        }
    }

    async fn forward(
        &self,
        guest_port: u16,
        conn: &mut TcpStream,
    ) -> Result<crate::client::PortTraffic, ClientError> {
        self.resume_if_paused().await;
        let client = self.client.get_or_try_init(|| Client::connect(&self.agent, AGENT_TIMEOUT)).await?;
        client.forward_port(guest_port, conn).await
    }

    /// A connection to a paused sandbox resumes it, as a guest command would: through
    /// the secrets runner outside the jail when the helper is jailed (it cannot signal
    /// QEMU from its PID namespace).
    async fn resume_if_paused(&self) {
        if crate::secrets::runner::active() {
            match tokio::task::spawn_blocking(crate::secrets::runner::resume).await {
                Ok(Err(e)) => tracing::warn!("could not resume the paused sandbox for a published port: {e}"),
                Err(e) => tracing::warn!("could not resume the paused sandbox for a published port: {e}"),
                Ok(Ok(_)) => {}
            }
            return;
        }
        let record = std::fs::read(self.dir.join(crate::vmm::state::RECORD_FILE))
            .ok()
            .and_then(|t| serde_json::from_slice::<crate::vmm::state::Record>(&t).ok());
        if let Some(record) = record.filter(|r| r.paused)
            && let Err(e) = crate::sandbox::resume(&record.id).await
        {
            tracing::warn!("could not resume the paused sandbox for a published port: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarder(dir: &std::path::Path) -> Arc<Forwarder> {
        let agent = Address::Unix(dir.join("no-agent.sock"));
        crate::sandbox::network::config::prepare_net_dir(dir, None).unwrap();
        Forwarder::new(dir.to_path_buf(), agent, NetConfig::default())
    }

    // On one thread the listener task is not polled between `abort` and the reply, so a
    // reply sent before the task is dropped leaves the port accepting.
    #[tokio::test(flavor = "current_thread")]
    async fn an_unpublished_port_refuses_as_soon_as_unpublish_returns() {
        let dir = tempfile::tempdir().unwrap();
        let fw = forwarder(dir.path());
        let spec = PortSpec { guest_port: 8000, host_port: None, bind: std::net::Ipv4Addr::LOCALHOST.into() };
        let published = fw.publish(spec).await.unwrap();
        let addr = std::net::SocketAddr::new(published.bind, published.host_port);
        tokio::task::yield_now().await;
        assert!(std::net::TcpStream::connect(addr).is_ok(), "{addr} is not listening");

        fw.unpublish(8000).await.unwrap();
        assert!(std::net::TcpStream::connect(addr).is_err(), "{addr} still accepts after unpublish");
        assert!(fw.ports().is_empty());
        assert!(matches!(fw.unpublish(8000).await, Err(ForwardError::NotPublished(8000))));
    }
}
