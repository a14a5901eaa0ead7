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
/// Most asynchronous events kept for [`Qmp::wait_event`] (the oldest go first): what
/// answers on the socket may not be QEMU (a process of QEMU's uid can put its own
/// socket there), and its events must not grow atoll's memory.
const MAX_EVENTS: usize = 64;
/// The longest event name kept (QEMU's are short: `MIGRATION`, `STOP`).
const MAX_EVENT_NAME: usize = 64;

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
        self.reply(command).await
    }

    /// Reads until the reply to `command`, within [`QMP_TIMEOUT`] in all: events read
    /// past are kept (bounded), and a peer that sends only events is given up on.
    async fn reply(&mut self, command: &str) -> Result<Value, QmpError> {
        let deadline = tokio::time::Instant::now() + QMP_TIMEOUT;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.read_message(command))
                .await
                .map_err(|_| QmpError::Timeout { command: command.into() })??;
            if let Some(ret) = msg.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = msg.get("error") {
                let message = err.get("desc").and_then(Value::as_str).unwrap_or("no description").to_string();
                return Err(QmpError::Refused { command: command.into(), message });
            }
            // Anything else is an asynchronous event (STOP, RESUME, ...): kept for
            // `wait_event`.
            self.note_event(&msg);
        }
    }

    /// Keeps the name of the event `msg` for [`Qmp::wait_event`]: at most
    /// [`MAX_EVENTS`] names of at most [`MAX_EVENT_NAME`] bytes.
    fn note_event(&mut self, msg: &Value) {
        let Some(name) = msg.get("event").and_then(Value::as_str) else { return };
        if name.len() > MAX_EVENT_NAME {
            return;
        }
        if self.events.len() >= MAX_EVENTS {
            self.events.remove(0);
        }
        self.events.push(name.to_string());
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
                Ok(Ok(msg)) => self.note_event(&msg),
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
        self.reply(command).await.map(drop)
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

    /// What answers on the control socket may be a process of QEMU's uid (the network
    /// helper, when both run as `atoll`) that sends events and never a reply: atoll gives
    /// up within its timeout, keeping a bounded list of events, instead of waiting (and
    /// growing) for ever.
    #[tokio::test]
    async fn a_peer_sending_only_events_is_given_up_on() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut lines = BufReader::new(r).lines();
            w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n").await.unwrap();
            lines.next_line().await.unwrap();
            w.write_all(b"{\"return\": {}}\n").await.unwrap();
            lines.next_line().await.unwrap();
            let mut n = 0u64;
            loop {
                let event = format!("{{\"event\": \"E{n}\", \"timestamp\": {{}}}}\n");
                if w.write_all(event.as_bytes()).await.is_err() {
                    return n;
                }
                n += 1;
                if n.is_multiple_of(64) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        let mut qmp = Qmp::connect(&path).await.unwrap();
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(QMP_TIMEOUT * 2, qmp.execute("query-status")).await;
        let answer = answer.expect("atoll waited past twice its timeout on a peer sending only events");
        assert!(matches!(answer, Err(QmpError::Timeout { .. })), "{answer:?}");
        assert!(started.elapsed() < QMP_TIMEOUT + Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(qmp.events.len() <= MAX_EVENTS, "{} events kept", qmp.events.len());
        drop(qmp);
        let sent = server.await.unwrap();
        assert!(sent > MAX_EVENTS as u64, "the peer sent only {sent} events");
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
