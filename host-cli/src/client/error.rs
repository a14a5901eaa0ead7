//! [`ClientError`]: what can go wrong calling an agent, keeping the gRPC code and the
//! agent's own message (already a sentence that says what to do).

use atoll_proto::Address;
use atoll_proto::reason::{REASON_KEY, Reason};
use tonic::{Code, Status};

use crate::connect::ConnectError;

/// Why a call to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No agent could be reached at all.
    #[error(transparent)]
    Unreachable(#[from] ConnectError),
    /// The agent answered with an error; its message says what to do.
    #[error("{message}")]
    Agent {
        /// The gRPC code the agent chose (NotFound, InvalidArgument, ...).
        code: Code,
        /// The agent's message, face-neutral: each face adds its next step from `reason`.
        message: String,
        /// Why, as the agent's machine-readable token (`atoll-reason`), when it gave one.
        reason: Option<Reason>,
    },
    /// The agent is older than this `atoll` and lacks the call.
    #[error(
        "the agent at {addr} does not support {}; update atoll-agent to the version of this atoll",
        doing(rpc)
    )]
    Unsupported {
        /// The agent's address.
        addr: Address,
        /// The RPC that was refused.
        rpc: &'static str,
    },
    /// The connection broke in the middle of a call.
    #[error(
        "lost the connection to the agent at {addr} while {} ({message}); check that the VM is still running",
        doing(rpc)
    )]
    Disconnected {
        /// The agent's address.
        addr: Address,
        /// The RPC in flight.
        rpc: &'static str,
        /// What the transport said.
        message: String,
    },
    /// Reading the local data to send (stdin, a file) failed; the call was abandoned
    /// and the agent kept nothing.
    #[error("reading the local data to send failed; nothing was written in the guest")]
    Source(#[source] std::io::Error),
    /// The agent's answer broke the contract.
    #[error(
        "the agent's answer made no sense while {} ({what}); is atoll-agent the same version as atoll?",
        doing(rpc)
    )]
    Protocol {
        /// The RPC answered.
        rpc: &'static str,
        /// What was wrong with it.
        what: &'static str,
    },
    /// A read would exceed the caller's memory cap.
    #[error(
        "{path} gave more than {limit} bytes, over the cap for reading into memory; read a slice \
         with offset/length or copy it with `atoll cp`"
    )]
    TooLarge {
        /// The guest path read.
        path: String,
        /// The cap in bytes.
        limit: u64,
    },
    /// A transfer out of the guest went without a message for too long.
    #[error(
        "the agent sent nothing for {} while {}; the transfer was given up and nothing was kept (a stuck or busy guest; `atoll cp`, `atoll download` and `atoll mcp` wait longer with --idle-timeout)",
        crate::connect::seconds(*idle),
        doing(rpc)
    )]
    Idle {
        /// The RPC in flight.
        rpc: &'static str,
        /// How long it waited.
        idle: std::time::Duration,
    },
    /// The request was refused before it was sent.
    #[error("{0}")]
    Invalid(String),
    /// The host side of a forwarded port connection failed (its peer reset it).
    #[error("the host side of the forwarded connection failed")]
    PortConnection(#[source] std::io::Error),
}

impl ClientError {
    /// The gRPC code that best describes the error.
    pub fn code(&self) -> Code {
        match self {
            ClientError::Unreachable(_) | ClientError::Disconnected { .. } => Code::Unavailable,
            ClientError::Agent { code, .. } => *code,
            ClientError::Unsupported { .. } => Code::Unimplemented,
            ClientError::Source(_) | ClientError::PortConnection(_) => Code::Aborted,
            ClientError::Protocol { .. } => Code::Internal,
            ClientError::TooLarge { .. } => Code::ResourceExhausted,
            ClientError::Idle { .. } => Code::DeadlineExceeded,
            ClientError::Invalid(_) => Code::InvalidArgument,
        }
    }

    /// A stable snake_case name for scripts (`not_found`, `unreachable`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Unreachable(_) => "unreachable",
            ClientError::Disconnected { .. } => "disconnected",
            ClientError::Unsupported { .. } => "unsupported",
            ClientError::Source(_) | ClientError::PortConnection(_) => "local_io",
            ClientError::Protocol { .. } => "protocol",
            ClientError::TooLarge { .. } => "resource_exhausted",
            ClientError::Idle { .. } => "deadline_exceeded",
            ClientError::Invalid(_) => "invalid_argument",
            ClientError::Agent { code, .. } => code_name(*code),
        }
    }

    /// The agent's machine-readable reason, when it gave one.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            ClientError::Agent { reason, .. } => *reason,
            _ => None,
        }
    }

    /// True when no agent answered (or the connection dropped): retrying may help.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Unreachable(_) | ClientError::Disconnected { .. })
    }

    /// True when the agent's end took the connection but did not answer in time:
    /// connecting again would only wait again.
    pub fn is_silent(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable(
                ConnectError::Timeout { .. }
                    | ConnectError::HandshakeTimeout { .. }
                    | ConnectError::Silent { .. }
                    | ConnectError::Unanswered { .. }
                    | ConnectError::Stalled { .. }
            )
        )
    }

    /// True when the VM's vsock backend took the connection but stopped serving it:
    /// retrying through the same backend cannot help.
    pub fn is_stalled(&self) -> bool {
        matches!(self, ClientError::Unreachable(ConnectError::Stalled { .. }))
    }

    /// Turns a status from `rpc` on the agent at `addr` into a client error.
    ///
    /// Decided by where the status came from, not by its words: tonic makes a status
    /// out of a transport failure (it then carries that error as its source), or out of
    /// an answer cut short on a connection that broke (`link_broken`); either is a lost
    /// connection. Only a status the agent sent whole is the agent's answer.
    pub(crate) fn from_status(status: Status, addr: &Address, rpc: &'static str, link_broken: bool) -> Self {
        if let Some(unproven) = super::proof::Unproven::in_status(&status) {
            return ClientError::Unreachable(unproven.at(addr));
        }
        let lost =
            || ClientError::Disconnected { addr: addr.clone(), rpc, message: status.message().to_string() };
        if std::error::Error::source(&status).is_some() || link_broken {
            return lost();
        }
        match status.code() {
            Code::Unimplemented => ClientError::Unsupported { addr: addr.clone(), rpc },
            Code::Unavailable | Code::Cancelled => lost(),
            code => {
                let reason =
                    status.metadata().get(REASON_KEY).and_then(|v| v.to_str().ok()).and_then(Reason::parse);
                ClientError::Agent { code, message: status.message().to_string(), reason }
            }
        }
    }
}

/// What the user was doing when the call `rpc` was made, in their words: messages name
/// what they did, never a gRPC method.
fn doing(rpc: &str) -> &'static str {
    match rpc {
        "Exec" | "ExecStream" => "running the command",
        "StartJob" => "starting the background job",
        "GetJob" | "ListJobs" => "looking up the background jobs",
        "WaitJob" => "waiting for the background job",
        "SignalJob" => "signalling the background job",
        "ReadFile" => "reading the file",
        "WriteFile" => "writing the file",
        "ListDir" => "listing the directory",
        "Stat" => "looking up the path",
        "Remove" => "removing the path",
        "Move" => "moving the path",
        "MakeDir" => "creating the directory",
        "DownloadDir" => "copying the directory out of the guest",
        "UploadDir" => "copying the directory into the guest",
        "Info" => "asking the agent about the guest",
        "SetTime" => "setting the guest's clock",
        "Restored" => "telling the guest it was restored",
        "ConnectPort" => "forwarding a connection to a guest port",
        _ => "talking to the agent",
    }
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_the_user_did_never_a_grpc_method() {
        let proto = include_str!("../../../proto/agent/v1/agent.proto");
        let rpcs: Vec<&'static str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .collect();
        assert!(rpcs.len() >= 18, "{rpcs:?}");
        let addr: Address = "unix:///s/agent.sock".parse().unwrap();
        for rpc in rpcs {
            assert_ne!(doing(rpc), "talking to the agent", "{rpc} has no words of its own");
            for e in [
                ClientError::Disconnected { addr: addr.clone(), rpc, message: "broken pipe".into() },
                ClientError::Unsupported { addr: addr.clone(), rpc },
                ClientError::Protocol { rpc, what: "no exit status" },
            ] {
                let text = e.to_string();
                assert!(!text.contains(rpc), "{text}");
            }
        }
        let e = ClientError::Disconnected { addr, rpc: "ExecStream", message: "reset".into() };
        assert!(e.to_string().contains("while running the command"), "{e}");
    }
}
