//! A minimal QMP client: the greeting, `qmp_capabilities`, then one command at a time,
//! as newline-separated JSON over QEMU's Unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// How long one QMP exchange may take before QEMU is considered unresponsive.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest reply line we accept.
const MAX_LINE: usize = 1 << 20;

/// Why a QMP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket could not be reached.
    #[error("could not reach QEMU's control socket {}; the VM may have exited", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing failed midway.
    #[error("QEMU's control socket failed while running `{command}`")]
    Io {
        /// The command.
        command: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// QEMU did not answer in time.
    #[error("QEMU did not answer `{command}` within {} s; it may be hung: remove the sandbox with `atoll kill --force`", QMP_TIMEOUT.as_secs())]
    Timeout {
        /// The command.
        command: String,
    },
    /// QEMU closed the socket or sent something that is not QMP.
    #[error("QEMU sent an unexpected reply to `{command}`: {reply}")]
    Protocol {
        /// The command.
        command: String,
        /// What arrived.
        reply: String,
    },
    /// QEMU refused the command.
    #[error("QEMU refused `{command}`: {message}")]
    Refused {
        /// The command.
        command: String,
        /// QEMU's `desc`.
        message: String,
    },
}

/// An open QMP session with capabilities negotiated.
pub struct Qmp {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    /// Names of the asynchronous events read past while waiting for replies.
    events: Vec<String>,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities-negotiation mode.
    pub async fn connect(path: &Path) -> Result<Qmp, QmpError> {
        let stream = tokio::time::timeout(QMP_TIMEOUT, super::safe_fs::connect_unix(path))
            .await
            .map_err(|_| QmpError::Timeout { command: "connect".into() })?
            .map_err(|source| QmpError::Connect { path: path.to_path_buf(), source })?;
        let (r, w) = stream.into_split();
        let mut qmp = Qmp { reader: BufReader::new(r), writer: w, events: Vec::new() };
        let greeting = qmp.read_message("greeting").await?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol { command: "greeting".into(), reply: greeting.to_string() });
        }
        qmp.execute("qmp_capabilities").await?;
        Ok(qmp)
    }

    /// Runs `command` (no arguments) and returns its `return` value.
    pub async fn execute(&mut self, command: &str) -> Result<Value, QmpError> {
        self.execute_with(command, Value::Null).await
    }

    /// Runs `command` with `arguments` (none when `Null`) and returns its `return` value.
    pub async fn execute_with(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        let request = if arguments.is_null() {
            json!({ "execute": command })
        } else {
            json!({ "execute": command, "arguments": arguments })
        };
        let line = format!("{request}\n");
        let io = |source| QmpError::Io { command: command.into(), source };
        self.writer.write_all(line.as_bytes()).await.map_err(io)?;
        loop {
            let msg = self.read_message(command).await?;
            if let Some(ret) = msg.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = msg.get("error") {
                let message = err.get("desc").and_then(Value::as_str).unwrap_or("no description").to_string();
                return Err(QmpError::Refused { command: command.into(), message });
            }
            // Anything else is an asynchronous event (STOP, RESUME, ...): kept for
            // `wait_event`.
            if let Some(name) = msg.get("event").and_then(Value::as_str) {
                self.events.push(name.to_string());
            }
        }
    }

    /// Waits up to `limit` for the event `name`, counting those already read past;
    /// false when it did not come.
    pub async fn wait_event(&mut self, name: &str, limit: Duration) -> Result<bool, QmpError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(i) = self.events.iter().position(|e| e == name) {
                self.events.remove(i);
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            match tokio::time::timeout(left, self.read_message(name)).await {
                Err(_) | Ok(Err(QmpError::Timeout { .. })) => return Ok(false),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(msg)) => {
                    if let Some(event) = msg.get("event").and_then(Value::as_str) {
                        self.events.push(event.to_string());
                    }
                }
            }
        }
    }

    /// Hands `fd` to QEMU under `name` (`getfd`, the descriptor riding on the command
    /// as `SCM_RIGHTS`), for a later `fd:NAME` (a migration URI, say): QEMU then never
    /// has to open or spawn anything itself.
    pub async fn send_fd(&mut self, name: &str, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), QmpError> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let command = "getfd";
        let line = format!("{}\n", json!({ "execute": command, "arguments": { "fdname": name } }));
        let io = |source| QmpError::Io { command: command.into(), source };
        let stream: &UnixStream = self.writer.as_ref();
        // A descriptor rides on the first byte sent; the rest of the line follows.
        let fds = [fd];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        let first = loop {
            stream.writable().await.map_err(io)?;
            let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                rustix::net::sendmsg(
                    stream,
                    &[std::io::IoSlice::new(line.as_bytes())],
                    &mut control,
                    SendFlags::NOSIGNAL,
                )
                .map_err(std::io::Error::from)
            });
            match sent {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(io(e)),
            }
        };
        self.writer.write_all(&line.as_bytes()[first..]).await.map_err(io)?;
        loop {
            let msg = self.read_message(command).await?;
            if msg.get("return").is_some() {
                return Ok(());
            }
            if let Some(err) = msg.get("error") {
                let message = err.get("desc").and_then(Value::as_str).unwrap_or("no description").to_string();
                return Err(QmpError::Refused { command: command.into(), message });
            }
            if let Some(name) = msg.get("event").and_then(Value::as_str) {
                self.events.push(name.to_string());
            }
        }
    }

    /// Whether the guest CPUs run: `query-status`'s `running`.
    pub async fn is_running(&mut self) -> Result<bool, QmpError> {
        let status = self.execute("query-status").await?;
        status
            .get("running")
            .and_then(Value::as_bool)
            .ok_or_else(|| QmpError::Protocol { command: "query-status".into(), reply: status.to_string() })
    }

    async fn read_message(&mut self, command: &str) -> Result<Value, QmpError> {
        let mut line = Vec::new();
        let read = async {
            let mut limited = (&mut self.reader).take(MAX_LINE as u64);
            limited.read_until(b'\n', &mut line).await
        };
        let n = tokio::time::timeout(QMP_TIMEOUT, read)
            .await
            .map_err(|_| QmpError::Timeout { command: command.into() })?
            .map_err(|source| QmpError::Io { command: command.into(), source })?;
        let protocol = |reply: String| QmpError::Protocol { command: command.into(), reply };
        if n == 0 {
            return Err(protocol("end of stream".into()));
        }
        serde_json::from_slice(&line).map_err(|_| protocol(String::from_utf8_lossy(&line).trim().to_string()))
    }
}

/// Opens a session on `path` and runs one command.
pub async fn run(path: &Path, command: &str) -> Result<Value, QmpError> {
    Qmp::connect(path).await?.execute(command).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A fake QEMU that answers the handshake and then `reply` to the next command.
    async fn fake_qemu(listener: UnixListener, reply: &'static str) -> Vec<String> {
        let (s, _) = listener.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut lines = BufReader::new(r).lines();
        w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n").await.unwrap();
        let mut seen = Vec::new();
        seen.push(lines.next_line().await.unwrap().unwrap());
        w.write_all(b"{\"return\": {}}\n").await.unwrap();
        seen.push(lines.next_line().await.unwrap().unwrap());
        w.write_all(b"{\"event\": \"STOP\", \"timestamp\": {}}\n").await.unwrap();
        w.write_all(reply.as_bytes()).await.unwrap();
        seen
    }

    #[tokio::test]
    async fn negotiates_skips_events_and_reads_the_return() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("qmp.sock");
        let server = tokio::spawn(fake_qemu(
            UnixListener::bind(&path).unwrap(),
            "{\"return\": {\"running\": false}}\n",
        ));
        let mut qmp = Qmp::connect(&path).await.unwrap();
        assert!(!qmp.is_running().await.unwrap());
        let seen = server.await.unwrap();
        assert!(seen[0].contains("qmp_capabilities") && seen[1].contains("query-status"), "{seen:?}");
    }

    #[tokio::test]
    async fn reports_a_refusal_with_qemus_words() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("qmp.sock");
        let reply = "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no way\"}}\n";
        let server = tokio::spawn(fake_qemu(UnixListener::bind(&path).unwrap(), reply));
        let err = run(&path, "stop").await.unwrap_err().to_string();
        assert!(err.contains("no way") && err.contains("stop"), "{err}");
        server.await.unwrap();
    }
}
