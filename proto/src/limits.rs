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
/// Size of the chunks of interactive streams (exec output and stdin): a read of a pipe
/// returns what is there, so this caps a message without making output wait.
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Size of the chunks the agent sends out (file reads, zips). Each chunk is one message,
/// one channel hand-off and one HTTP/2 DATA frame, so larger chunks cut that per-chunk
/// cost; it stays well under `MAX_MESSAGE_BYTES`.
pub const BULK_CHUNK_SIZE: usize = 1024 * 1024;
/// Size of the chunks a client sends in (file writes, zip uploads): smaller than
/// [`BULK_CHUNK_SIZE`], because the agent copies each message it receives into tonic's
/// decode buffer, and 1 MiB messages made that copy's working set large enough that,
/// in a software-emulated VM, an upload cost the agent 2-4x the CPU whenever another
/// process had just run (60-98% of a raw vsock stream, against 95-107% with 256 KiB;
/// BENCHMARKS.md). Sending out (reads, zips) keeps 1 MiB: 256 KiB there measured slower.
pub const UPLOAD_CHUNK_SIZE: usize = 256 * 1024;
/// HTTP/2 flow-control window of one stream, both sides: how much one stream may have in
/// flight before the sender waits for the receiver to consume it. It also bounds what a
/// receiver buffers for a stream whose consumer is slow.
pub const H2_STREAM_WINDOW: u32 = 4 * 1024 * 1024;
/// HTTP/2 flow-control window of a connection, shared by all its streams.
pub const H2_CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// Largest HTTP/2 frame a side accepts: fewer, larger frames mean fewer reads and
/// writes per chunk (the protocol default is 16 KiB).
pub const H2_MAX_FRAME_SIZE: u32 = 1024 * 1024;
/// Largest gRPC message either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of each stream's tail reported for a background job.
pub const JOB_TAIL_BYTES: usize = 4 * 1024;
/// Default vsock port the agent listens on.
pub const DEFAULT_AGENT_PORT: u32 = 1024;
/// Default vsock port on the host (CID 2) that a booted agent announces itself to.
pub const DEFAULT_READY_PORT: u32 = 1025;
