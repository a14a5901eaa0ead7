//! The one HTTP/2 connection to the agent, made when a request wants it: connect to
//! QEMU's chardev socket, handshake, HTTP/2 client; again with backoff while that
//! fails, and again at the next request once it ends.
//!
//! Not before a request: a restored VM has its port replugged as it starts to run
//! (`vmm::migrate::replug_agent_port`), and a connection made before that would talk to
//! the saved port's session, which the guest no longer has. The sandbox's first call
//! comes after the replug.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use atoll_proto::link::{LinkError, Nonce, host_handshake};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{Notify, watch};

use super::h2::{H2_CONNECTION_WINDOW, H2_MAX_FRAME_SIZE, H2_STREAM_WINDOW};

/// Sends requests over the upstream connection; requests carry a client's body as is.
pub type Sender = SendRequest<Incoming>;

/// First wait before connecting again; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// While calls are open, a PING this often; no answer within [`PING_TIMEOUT`] ends the
/// connection (and its calls) so that a fresh one is made. A replugged port is such a
/// case: QEMU keeps the chardev connection, but the guest's session behind it is gone.
const PING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a PING may go unanswered.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one attempt at the upstream connection failed (logged; the loop tries again).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// QEMU's socket is not there or refuses (not started yet, or gone).
    #[error("could not connect to the VM's agent port {}; is its QEMU running?", path.display())]
    Connect {
        /// The chardev socket.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// No random nonce could be drawn.
    #[error("could not read /dev/urandom for the link's nonce")]
    Random(#[source] std::io::Error),
    /// The handshake did not finish.
    #[error("the agent link's handshake failed")]
    Handshake(#[source] LinkError),
    /// The HTTP/2 connection could not start.
    #[error("the HTTP/2 connection over the agent link failed")]
    Http2(#[source] hyper::Error),
}

/// The current upstream connection, if the link is up.
#[derive(Debug, Clone)]
pub struct Upstream {
    current: watch::Receiver<Option<Sender>>,
    /// Told when a request finds the link down.
    wanted: Arc<Notify>,
}

impl Upstream {
    /// Connects to the agent behind the chardev socket `port` when a request wants it,
    /// in a task; attempts that keep failing stop after `persist` until the next request.
    pub fn start(port: PathBuf, persist: Duration) -> Self {
        let (tx, current) = watch::channel(None);
        let wanted = Arc::new(Notify::new());
        tokio::spawn(keep_connected(port, tx, wanted.clone(), persist));
        Self { current, wanted }
    }

    /// A sender on a live connection, waiting up to `bound` for one (and asking for it).
    pub async fn sender(&self, bound: Duration) -> Option<Sender> {
        let mut current = self.current.clone();
        let live = async {
            loop {
                if let Some(s) = current.borrow_and_update().as_ref().filter(|s| !s.is_closed()) {
                    return Some(s.clone());
                }
                self.wanted.notify_one();
                current.changed().await.ok()?;
            }
        };
        tokio::time::timeout(bound, live).await.ok().flatten()
    }
}

async fn keep_connected(
    port: PathBuf,
    tx: watch::Sender<Option<Sender>>,
    wanted: Arc<Notify>,
    persist: Duration,
) {
    loop {
        wanted.notified().await;
        let since = tokio::time::Instant::now();
        let mut backoff = MIN_BACKOFF;
        loop {
            match connect(&port).await {
                Ok((sender, connection)) => {
                    tracing::info!(port = %port.display(), "agent link up");
                    tx.send_replace(Some(sender));
                    if let Err(e) = connection.await {
                        tracing::debug!(port = %port.display(), "agent link connection ended: {e}");
                    }
                    tx.send_replace(None);
                    tracing::info!(port = %port.display(), "agent link down; connecting again at the next request");
                    break;
                }
                Err(e) => {
                    tracing::debug!("{}", chain(&e));
                    if since.elapsed() >= persist {
                        break;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// One attempt: socket, handshake, HTTP/2 client. The connection future drives the
/// link until it ends.
async fn connect(
    port: &Path,
) -> Result<(Sender, impl std::future::Future<Output = hyper::Result<()>> + Send + 'static), UpstreamError> {
    let stream = crate::vmm::safe_fs::connect_unix(port)
        .await
        .map_err(|source| UpstreamError::Connect { path: port.to_path_buf(), source })?;
    let nonce = Nonce::random().map_err(UpstreamError::Random)?;
    let link = host_handshake(stream, nonce).await.map_err(UpstreamError::Handshake)?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_frame_size(H2_MAX_FRAME_SIZE)
        .timer(TokioTimer::new())
        .keep_alive_interval(PING_INTERVAL)
        .keep_alive_timeout(PING_TIMEOUT)
        .keep_alive_while_idle(false)
        .handshake(TokioIo::new(link))
        .await
        .map_err(UpstreamError::Http2)?;
    Ok((sender, connection))
}

/// `e` and its sources, one sentence after another.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
