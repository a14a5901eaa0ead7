//! The READY announcement: once listening, the agent tells whoever started it (the
//! host's vsock listener, or a test's Unix socket) that it serves.

use atoll_proto::Address;

/// Why the announcement failed.
#[derive(Debug, thiserror::Error)]
#[error("could not announce readiness to {addr}")]
pub struct AnnounceError {
    /// Where it was sent.
    addr: Address,
    /// What failed.
    #[source]
    source: std::io::Error,
}

impl AnnounceError {
    /// True when the announcement went to vsock and the VM has none: no vsock device
    /// (`ENODEV`, as in a VM that atoll starts, which reaches the agent over the agent
    /// link instead) or no vsock in the guest's kernel (`EAFNOSUPPORT`).
    pub fn no_vsock(&self) -> bool {
        matches!(self.addr, Address::Vsock { .. })
            && matches!(self.source.raw_os_error(), Some(libc::ENODEV | libc::EAFNOSUPPORT))
    }
}

/// Connects to `addr` and writes `READY <version>\n`.
pub async fn announce_ready(addr: &Address) -> Result<(), AnnounceError> {
    use tokio::io::AsyncWriteExt;
    let line = format!("READY {}\n", env!("CARGO_PKG_VERSION"));
    let err = |source| AnnounceError { addr: addr.clone(), source };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(addr: Address, errno: i32) -> AnnounceError {
        AnnounceError { addr, source: std::io::Error::from_raw_os_error(errno) }
    }

    #[test]
    fn only_a_missing_vsock_is_no_vsock() {
        let host = Address::Vsock { cid: 2, port: 1025 };
        assert!(failed(host.clone(), libc::ENODEV).no_vsock());
        assert!(failed(host.clone(), libc::EAFNOSUPPORT).no_vsock());
        // A device with nobody listening on the host is worth a warning.
        assert!(!failed(host, libc::ECONNRESET).no_vsock());
        assert!(!failed(Address::Unix("/nonexistent/ready.sock".into()), libc::ENODEV).no_vsock());
    }
}
