//! The control socket `net.ctl`: one JSON line per request, one per reply (see
//! [`crate::sandbox::network::control`]).

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::forward::Forwarder;
use crate::sandbox::network::HelperStatus;
use crate::sandbox::network::control::{Reply, Request};

/// Longest request line accepted.
const MAX_LINE: usize = 64 * 1024;

/// What the control socket acts on.
pub(super) struct Helper {
    /// The published ports (and `net.json`).
    pub(super) forwarder: Arc<Forwarder>,
    /// The network, when the sandbox has one.
    pub(super) engine: Option<atoll_net::EngineHandle>,
}

/// Serves control connections until the future is dropped.
pub(super) async fn serve(listener: UnixListener, helper: Arc<Helper>) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let helper = helper.clone();
                tokio::spawn(async move {
                    if let Err(e) = session(conn, &helper).await {
                        tracing::debug!("control connection ended: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("control socket: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn session(conn: UnixStream, helper: &Helper) -> std::io::Result<()> {
    let (rd, mut wr) = conn.into_split();
    let mut lines = BufReader::new(rd);
    let mut line = String::new();
    loop {
        line.clear();
        if (&mut lines).take(MAX_LINE as u64).read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(req, helper).await,
            Err(e) => Reply::refused(format!("not a request this helper knows ({e})")),
        };
        let mut out = serde_json::to_vec(&reply).expect("replies serialize");
        out.push(b'\n');
        wr.write_all(&out).await?;
    }
}

async fn handle(req: Request, helper: &Helper) -> Reply {
    let forwarder = &helper.forwarder;
    match req {
        Request::Status => {
            let config = forwarder.snapshot();
            let status = HelperStatus {
                pid: std::process::id(),
                network: config.network,
                policy: config.policy,
                ports: config.ports,
                log: helper.engine.as_ref().map(atoll_net::EngineHandle::log_health),
            };
            Reply::ok(&status)
        }
        Request::SetPolicy { policy } => {
            let Some(engine) = &helper.engine else {
                return Reply::refused(
                    "this sandbox has no network (it was created with --net none), so it has no egress policy",
                );
            };
            // Recorded first, so `atoll net show` never shows a policy other than the one
            // in force for long; then every new connection follows it.
            if let Err(e) = forwarder.update(|c| c.policy = policy.clone()) {
                return Reply::refused(e);
            }
            engine.set_policy(policy.clone());
            Reply::ok(&policy)
        }
        Request::Ports => Reply::ok(&forwarder.ports()),
        Request::Flows => {
            let flows = helper.engine.as_ref().map(atoll_net::EngineHandle::open_flows).unwrap_or_default();
            Reply::ok(&flows)
        }
        Request::Publish { spec } => match forwarder.publish(spec).await {
            Ok(p) => Reply::ok(&p),
            Err(e) => Reply::refused(e),
        },
        Request::Unpublish { guest_port } => match forwarder.unpublish(guest_port).await {
            Ok(p) => Reply::ok(&p),
            Err(e) => Reply::refused(e),
        },
    }
}
