//! Info, SetTime and Restored: the wire messages to and from [`crate::system`]'s and
//! [`crate::restored`]'s own types; and the one mapping of [`SystemError`] and of
//! [`RestoredError`] to a gRPC status.

use atoll_proto::agent::v1 as pb;
use tonic::Status;

use super::AgentService;
use crate::report::error_chain;
use crate::restored::{self, RestoredError};
use crate::system::{self, SystemError};

/// Info runs on the runtime thread: it is a handful of syscalls on kernel file systems
/// (`uname`, `/proc/meminfo`, `statvfs("/")`, the CPU mask), and a trip to the blocking pool
/// and back would cost more than the work.
pub(super) async fn info(svc: &AgentService, _req: pb::InfoRequest) -> Result<pb::InfoResponse, Status> {
    let i = system::info(svc.started());
    Ok(pb::InfoResponse {
        agent_version: i.agent_version,
        uptime_ms: i.uptime_ms,
        hostname: i.hostname,
        kernel: i.kernel,
        cpus: i.cpus,
        memory_total_bytes: i.memory_total_bytes,
        memory_available_bytes: i.memory_available_bytes,
        disk_total_bytes: i.disk_total_bytes,
        disk_free_bytes: i.disk_free_bytes,
        pid1: i.pid1,
        time_unix_ms: i.time_unix_ms,
    })
}

pub(super) async fn set_time(req: pb::SetTimeRequest) -> Result<pb::SetTimeResponse, Status> {
    Ok(pb::SetTimeResponse { adjusted_by_ms: system::set_time(req.unix_ms)? })
}

/// Restored runs on the runtime thread too: a clock_settime, a sethostname and one small
/// write to /dev/urandom.
pub(super) async fn restored(req: pb::RestoredRequest) -> Result<pb::RestoredResponse, Status> {
    let adjusted_by_ms = restored::restored(req.unix_ms, &req.hostname, &req.entropy)?;
    Ok(pb::RestoredResponse { adjusted_by_ms, agent_version: env!("CARGO_PKG_VERSION").to_owned() })
}

impl From<RestoredError> for Status {
    fn from(e: RestoredError) -> Status {
        match e {
            RestoredError::Clock(e) => e.into(),
            RestoredError::BadHostname(_) | RestoredError::TooMuchEntropy(_) => {
                Status::invalid_argument(error_chain(&e))
            }
            RestoredError::HostnameNotPermitted => Status::permission_denied(error_chain(&e)),
            RestoredError::Hostname { .. } | RestoredError::Entropy(_) => {
                Status::failed_precondition(error_chain(&e))
            }
        }
    }
}

impl From<SystemError> for Status {
    fn from(e: SystemError) -> Status {
        let msg = error_chain(&e);
        match e {
            SystemError::BadTime(_) | SystemError::Refused { .. } => Status::invalid_argument(msg),
            SystemError::NotPermitted => Status::permission_denied(msg),
        }
    }
}
