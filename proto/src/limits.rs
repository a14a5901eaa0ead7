//! Defaults and caps that the agent enforces and the host explains.

/// Default command timeout when a request leaves it at 0.
pub const DEFAULT_TIMEOUT_MS: u32 = 60_000;
/// Longest timeout a single Exec may ask for.
pub const MAX_TIMEOUT_MS: u32 = 600_000;
/// Default bytes kept per output stream of a unary Exec.
pub const DEFAULT_OUTPUT_LIMIT: u32 = 32 * 1024;
/// Largest `output_limit` a unary Exec may ask for (both streams' kept bytes must fit
/// one message); more output calls for ExecStream or a background job.
pub const MAX_OUTPUT_LIMIT: u32 = 4 * 1024 * 1024;
/// Default cap on entries returned by one ListDir.
pub const DEFAULT_MAX_ENTRIES: u32 = 10_000;
/// Size of the data chunks the agent streams (file reads, zips, exec output).
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Largest gRPC message either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of each stream's tail reported for a background job.
pub const JOB_TAIL_BYTES: usize = 4 * 1024;
/// Default vsock port the agent listens on.
pub const DEFAULT_AGENT_PORT: u32 = 1024;
/// Default vsock port on the host (CID 2) that a booted agent announces itself to.
pub const DEFAULT_READY_PORT: u32 = 1025;
