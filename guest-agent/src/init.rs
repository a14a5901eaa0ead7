//! PID 1 duties and the READY announcement.
//!
//! As PID 1 the agent mounts the pseudo filesystems, brings up `lo`, sets the hostname
//! and powers off on SIGTERM. Orphans are reaped by the one reaper in [`crate::exec`].
//! As a service it does none of this.

use sbx_proto::Address;

/// Why an init duty failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The announcement could not be delivered.
    #[error("could not announce readiness to {addr}")]
    Announce {
        /// Where it was sent.
        addr: Address,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// True when this process is PID 1.
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// Performs the PID 1 set-up (TODO: mounts, lo, hostname, SIGTERM power-off).
pub fn become_init() -> Result<(), InitError> {
    Ok(())
}

/// The `sbx.*` settings from the kernel command line.
#[derive(Debug, Default)]
pub struct KernelCmdline {
    listen: Option<Address>,
    announce: Option<Address>,
}

impl KernelCmdline {
    /// Reads `/proc/cmdline`; missing or unparsable settings are ignored with a warning.
    pub fn read() -> Self {
        let text = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        Self::parse(&text)
    }

    /// Parses a kernel command line.
    pub fn parse(text: &str) -> Self {
        let mut out = KernelCmdline::default();
        for word in text.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else { continue };
            let slot = match key {
                "sbx.listen" => &mut out.listen,
                "sbx.announce" => &mut out.announce,
                _ => continue,
            };
            match value.parse() {
                Ok(addr) => *slot = Some(addr),
                Err(e) => tracing::warn!("ignoring {key}: {e}"),
            }
        }
        out
    }

    /// `sbx.listen=`, if given.
    pub fn listen(&self) -> Option<Address> {
        self.listen.clone()
    }

    /// `sbx.announce=`, if given.
    pub fn announce(&self) -> Option<Address> {
        self.announce.clone()
    }
}

/// Connects to `addr` and writes `READY <version>\n`.
pub async fn announce_ready(addr: &Address) -> Result<(), InitError> {
    use tokio::io::AsyncWriteExt;
    let line = format!("READY {}\n", env!("CARGO_PKG_VERSION"));
    let err = |source| InitError::Announce { addr: addr.clone(), source };
    match addr {
        Address::Vsock { cid, port } => {
            let mut s = tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port))
                .await
                .map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            AsyncWriteExt::shutdown(&mut s).await.map_err(err)
        }
        Address::Unix(path) => {
            let mut s = tokio::net::UnixStream::connect(path).await.map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            s.shutdown().await.map_err(err)
        }
        Address::Tcp(hostport) => {
            let mut s = tokio::net::TcpStream::connect(hostport.as_str()).await.map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            s.shutdown().await.map_err(err)
        }
        Address::HybridVsock { .. } => Err(err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "announce over vsock://2:PORT from inside the VM, not hvsock://",
        ))),
    }
}
