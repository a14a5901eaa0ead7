//! [`AgentInfo`]: what an agent reports about itself and its machine; [`Restored`]: its
//! answer when told it was restored from a snapshot.

use atoll_proto::agent::v1 as pb;
use schemars::JsonSchema;
use serde::Serialize;

/// The agent and its machine: `atoll info --json` prints it, and the `sandbox_info` tool
/// returns it (with the clock also as RFC 3339 text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AgentInfo {
    /// atoll-agent's version.
    pub agent_version: String,
    /// Milliseconds since the agent started.
    pub uptime_ms: u64,
    /// The sandbox's hostname.
    pub hostname: String,
    /// Kernel name and release, such as "Linux 6.1.0".
    pub kernel: String,
    /// CPUs online.
    pub cpus: u32,
    /// Memory in all, in bytes.
    pub memory_total_bytes: u64,
    /// Memory available, in bytes.
    pub memory_available_bytes: u64,
    /// Size of the root filesystem, in bytes.
    pub disk_total_bytes: u64,
    /// Free space on the root filesystem, in bytes.
    pub disk_free_bytes: u64,
    /// True when the agent is the machine's init (inside a microVM).
    pub pid1: bool,
    /// The machine's wall clock, in Unix milliseconds.
    pub time_unix_ms: i64,
}

impl From<pb::InfoResponse> for AgentInfo {
    fn from(i: pb::InfoResponse) -> Self {
        AgentInfo {
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
        }
    }
}

/// What an agent answers when told it was restored from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// How far its clock moved (new minus old), in milliseconds.
    pub adjusted_by_ms: i64,
    /// atoll-agent's version.
    pub agent_version: String,
}

impl From<pb::RestoredResponse> for Restored {
    fn from(r: pb::RestoredResponse) -> Self {
        Restored { adjusted_by_ms: r.adjusted_by_ms, agent_version: r.agent_version }
    }
}
