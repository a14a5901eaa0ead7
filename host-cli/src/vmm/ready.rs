//! The host end of the agent's readiness announcement.
//!
//! Once listening, the guest agent connects to host CID 2 port 1025 and writes
//! `READY <version>\n`; vhost-device-vsock delivers that connection to the Unix socket
//! `<uds-path>_1025`. `sbx create` no longer waits for it (a boot is ready when its
//! agent answers over the agent link, see `sandbox::machine::wait_for_agent`); the
//! bare-boot floor of `sbx-bench` still does, with a guest that only announces.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::UnixListener;

/// Longest announcement line accepted.
const MAX_LINE: u64 = 256;

/// Why the announcement could not be received.
#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    /// The socket could not be bound.
    #[error("could not listen on {} for the agent's announcement", path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Accepting failed.
    #[error("could not accept the agent's announcement on {}", path.display())]
    Accept {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener for the `READY` line.
pub struct ReadyListener {
    listener: UnixListener,
    path: PathBuf,
}

impl ReadyListener {
    /// Binds `path` (removing a stale socket file first).
    pub fn bind(path: &Path) -> Result<ReadyListener, ReadyError> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)
            .map_err(|source| ReadyError::Bind { path: path.to_path_buf(), source })?;
        Ok(ReadyListener { listener, path: path.to_path_buf() })
    }

    /// Waits for a connection that says `READY <version>` and returns the version.
    /// Connections that say anything else are dropped and waited past.
    pub async fn wait(&self) -> Result<String, ReadyError> {
        loop {
            let (stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|source| ReadyError::Accept { path: self.path.clone(), source })?;
            let mut line = String::new();
            let mut reader = BufReader::new(stream).take(MAX_LINE);
            if reader.read_line(&mut line).await.is_err() {
                continue;
            }
            match line.trim_end().strip_prefix("READY") {
                Some(rest) if rest.is_empty() || rest.starts_with(' ') => return Ok(rest.trim().to_string()),
                _ => {
                    tracing::warn!("ignoring an unexpected announcement on {}: {line:?}", self.path.display())
                }
            }
        }
    }
}

impl Drop for ReadyListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn skips_garbage_and_returns_the_version() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("vm.vsock_1025");
        let ready = ReadyListener::bind(&path).unwrap();
        let p = path.clone();
        let guest = tokio::spawn(async move {
            let mut s = tokio::net::UnixStream::connect(&p).await.unwrap();
            s.write_all(b"HELLO\n").await.unwrap();
            drop(s);
            let mut s = tokio::net::UnixStream::connect(&p).await.unwrap();
            s.write_all(b"READY 0.1.0\n").await.unwrap();
        });
        assert_eq!(ready.wait().await.unwrap(), "0.1.0");
        guest.await.unwrap();
        drop(ready);
        assert!(!path.exists(), "the socket file is removed with the listener");
    }
}
