//! The helper's control protocol on `net.ctl`: one JSON line per request, one JSON line
//! per reply (`{"ok": true, "value": ...}` or `{"ok": false, "error": "..."}`), and
//! [`call`], the client side.

use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::spec::PortSpec;

/// How long a control request may take: they are all local and quick; a helper that
/// does not answer within this is wedged.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A request to the helper.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The helper's pid, network mode and published ports.
    Status,
    /// The published ports.
    Ports,
    /// Publish a guest port.
    Publish {
        /// What to publish.
        #[serde(flatten)]
        spec: PortSpec,
    },
    /// Stop publishing a guest port.
    Unpublish {
        /// The guest port.
        guest_port: u16,
    },
    /// Replace the egress policy; connections from now on follow it.
    SetPolicy {
        /// The new policy.
        policy: atoll_net::policy::Policy,
    },
    /// The guest's TCP connections the network carries (guest end, remote end), for a
    /// snapshot of the stopped guest.
    Flows,
}

/// A reply from the helper.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// The result, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// Why not, when it was not: a sentence that says what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    /// A success carrying `value`.
    pub fn ok<T: Serialize>(value: &T) -> Reply {
        Reply { ok: true, value: Some(serde_json::to_value(value).expect("replies serialize")), error: None }
    }

    /// A refusal.
    pub fn refused(error: impl std::fmt::Display) -> Reply {
        Reply { ok: false, value: None, error: Some(error.to_string()) }
    }
}

/// Why a control call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket could not be reached.
    #[error("could not reach the network helper at {}", path.display())]
    Connect {
        /// The socket.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The exchange broke or timed out.
    #[error("the network helper did not answer a {op} request properly ({why})")]
    Exchange {
        /// The request.
        op: &'static str,
        /// What went wrong.
        why: String,
    },
    /// The helper refused; its message says what to do.
    #[error("{0}")]
    Refused(String),
}

impl Request {
    fn op(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Ports => "ports",
            Request::Publish { .. } => "publish",
            Request::Unpublish { .. } => "unpublish",
            Request::SetPolicy { .. } => "set_policy",
            Request::Flows => "flows",
        }
    }
}

/// The longest reply read from the helper (a status with a policy of thousands of rules,
/// or the flows of 1024 connections, are far smaller).
const MAX_REPLY: u64 = 4 << 20;

/// Sends `req` to the helper listening on `ctl` and returns its result as `T`.
pub async fn call<T: DeserializeOwned>(ctl: &Path, req: &Request) -> Result<T, ControlError> {
    let op = req.op();
    let exchange = |why: String| ControlError::Exchange { op, why };
    // The helper, which a guest may have taken over, owns the socket's directory: a
    // link in its place is refused, and its reply is read to a bound.
    let mut stream = crate::vmm::safe_fs::connect_unix(ctl)
        .await
        .map_err(|source| ControlError::Connect { path: ctl.to_path_buf(), source })?;
    let talk = async {
        let mut line = serde_json::to_vec(req).expect("requests serialize");
        line.push(b'\n');
        stream.write_all(&line).await.map_err(|e| exchange(e.to_string()))?;
        let mut reply = String::new();
        tokio::io::AsyncReadExt::take(BufReader::new(&mut stream), MAX_REPLY)
            .read_line(&mut reply)
            .await
            .map_err(|e| exchange(e.to_string()))?;
        serde_json::from_str::<Reply>(&reply).map_err(|e| exchange(format!("{e}: {reply:?}")))
    };
    let reply = tokio::time::timeout(CALL_TIMEOUT, talk)
        .await
        .map_err(|_| exchange(format!("no reply within {} s", CALL_TIMEOUT.as_secs())))??;
    match reply {
        Reply { ok: true, value, .. } => serde_json::from_value(value.unwrap_or(serde_json::Value::Null))
            .map_err(|e| exchange(e.to_string())),
        Reply { error, .. } => Err(ControlError::Refused(error.unwrap_or_else(|| "refused".into()))),
    }
}
