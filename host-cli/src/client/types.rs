//! Plain Rust types in and out of [`super::Client`], with their conversions from and to
//! the generated messages. They serialize to the JSON that `sbx --json` prints and the
//! MCP tools return; byte fields render as (lossy) UTF-8 text there.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use sbx_proto::agent::v1 as pb;
use schemars::JsonSchema;
use serde::{Serialize, Serializer};

/// Exit code `sbx exec` uses when the agent killed the command at its timeout (as
/// coreutils `timeout` does).
pub const TIMEOUT_EXIT_CODE: u8 = 124;

fn lossy<S: Serializer>(data: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(data))
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    /// A shell command line, run as `/bin/sh -c`.
    Shell(String),
    /// A program and its arguments, run directly.
    Argv(Vec<String>),
}

/// A command and how to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// What to run.
    pub program: Program,
    /// Working directory (absolute); `None`: `/`.
    pub cwd: Option<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// User name or uid to run as; `None`: the agent's user.
    pub user: Option<String>,
    /// `None`: the agent's default (60 s). Exec refuses more than 600 s.
    pub timeout: Option<Duration>,
    /// Bytes kept per stream by the unary [`super::Client::exec`]; `None`: 32 KiB.
    pub output_limit: Option<u32>,
    /// Bytes fed to stdin by the unary [`super::Client::exec`].
    pub stdin: Bytes,
}

impl ExecSpec {
    /// Runs `line` with `/bin/sh -c`.
    pub fn shell(line: impl Into<String>) -> Self {
        Self::new(Program::Shell(line.into()))
    }

    /// Runs `argv[0]` (looked up in PATH) with the rest as arguments.
    pub fn argv<I: IntoIterator<Item = S>, S: Into<String>>(argv: I) -> Self {
        Self::new(Program::Argv(argv.into_iter().map(Into::into).collect()))
    }

    fn new(program: Program) -> Self {
        ExecSpec {
            program,
            cwd: None,
            env: BTreeMap::new(),
            user: None,
            timeout: None,
            output_limit: None,
            stdin: Bytes::new(),
        }
    }

    pub(crate) fn command(&self) -> pb::Command {
        let (shell, argv) = match &self.program {
            Program::Shell(s) => (s.clone(), Vec::new()),
            Program::Argv(a) => (String::new(), a.clone()),
        };
        pb::Command {
            shell,
            argv,
            cwd: self.cwd.clone().unwrap_or_default(),
            env: self.env.clone().into_iter().collect(),
            user: self.user.clone().unwrap_or_default(),
        }
    }

    pub(crate) fn request(&self) -> pb::ExecRequest {
        pb::ExecRequest {
            command: Some(self.command()),
            stdin: self.stdin.clone(),
            timeout_ms: self.timeout.map(millis).unwrap_or(0),
            output_limit: self.output_limit.unwrap_or(0),
        }
    }

    pub(crate) fn timeout_ms(&self) -> u32 {
        self.timeout.map(millis).unwrap_or(0)
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExitStatus {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// The agent killed it because its timeout passed.
    pub timed_out: bool,
    /// How long it ran.
    pub duration_ms: u64,
}

impl ExitStatus {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// The exit code a shell would report: the code, 128+signal, or
    /// [`TIMEOUT_EXIT_CODE`] for a timeout.
    pub fn shell_code(&self) -> u8 {
        if self.timed_out {
            return TIMEOUT_EXIT_CODE;
        }
        match (self.code, self.signal) {
            (Some(code), _) => (code & 0xff) as u8,
            (None, Some(sig)) => (128 + (sig & 0x7f)) as u8,
            (None, None) => 1,
        }
    }
}

impl From<pb::ExitStatus> for ExitStatus {
    fn from(s: pb::ExitStatus) -> Self {
        use pb::exit_status::Kind;
        let (code, signal) = match s.kind {
            Some(Kind::Code(c)) => (Some(c), None),
            Some(Kind::Signal(sig)) => (None, Some(sig)),
            None => (None, None),
        };
        ExitStatus { code, signal, timed_out: s.timed_out, duration_ms: s.duration_ms }
    }
}

/// One output stream of a finished command, capped by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Captured {
    /// All of it, or its head and tail with a marker between.
    #[serde(serialize_with = "lossy")]
    pub data: Bytes,
    /// Bytes were left out of `data`.
    pub truncated: bool,
    /// Bytes the command wrote in all.
    pub total_bytes: u64,
}

impl From<Option<pb::CapturedOutput>> for Captured {
    fn from(c: Option<pb::CapturedOutput>) -> Self {
        let c = c.unwrap_or_default();
        Captured { data: c.data, truncated: c.truncated, total_bytes: c.total_bytes }
    }
}

/// The result of a unary exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecResult {
    /// How it ended.
    pub status: ExitStatus,
    /// Its stdout, capped.
    pub stdout: Captured,
    /// Its stderr, capped.
    pub stderr: Captured,
}

/// One event of a streamed exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// The command started with this pid.
    Started {
        /// Its process id in the guest.
        pid: u32,
    },
    /// Bytes it wrote to stdout.
    Stdout(Bytes),
    /// Bytes it wrote to stderr.
    Stderr(Bytes),
    /// It ended; the last event.
    Exited(ExitStatus),
}

/// Whether a background job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Still running.
    Running,
    /// Ended; see [`Job::status`].
    Exited,
    /// The agent did not say.
    Unknown,
}

/// One stream of a background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobOutput {
    /// Guest path of the log file with the whole stream.
    pub log_path: String,
    /// Bytes written so far.
    pub total_bytes: u64,
    /// The last few KiB.
    #[serde(serialize_with = "lossy")]
    pub tail: Bytes,
}

impl From<Option<pb::JobOutput>> for JobOutput {
    fn from(o: Option<pb::JobOutput>) -> Self {
        let o = o.unwrap_or_default();
        JobOutput { log_path: o.log_path, total_bytes: o.total_bytes, tail: o.tail }
    }
}

/// A background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// The agent's id for it.
    pub id: String,
    /// Running or exited.
    pub state: JobState,
    /// Its process id.
    pub pid: u32,
    /// The command, on one line.
    pub command: String,
    /// When it started.
    pub started_at_unix_ms: i64,
    /// How it ended, once it has.
    pub status: Option<ExitStatus>,
    /// Its stdout.
    pub stdout: JobOutput,
    /// Its stderr.
    pub stderr: JobOutput,
}

impl From<pb::Job> for Job {
    fn from(j: pb::Job) -> Self {
        let state = match pb::JobState::try_from(j.state) {
            Ok(pb::JobState::Running) => JobState::Running,
            Ok(pb::JobState::Exited) => JobState::Exited,
            _ => JobState::Unknown,
        };
        Job {
            id: j.id,
            state,
            pid: j.pid,
            command: j.command,
            started_at_unix_ms: j.started_at_unix_ms,
            status: j.status.map(Into::into),
            stdout: j.stdout.into(),
            stderr: j.stderr.into(),
        }
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A socket, device or FIFO.
    Other,
    /// The agent did not say.
    Unknown,
}

impl FileKind {
    /// The lower-case name both faces print: "file", "dir", "symlink", "other",
    /// "unknown" (as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
            FileKind::Unknown => "unknown",
        }
    }
}

/// A file's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileEntry {
    /// For stat: the path asked about; for a listing: relative to the listed directory.
    pub path: String,
    /// File, dir, symlink...
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Last modification.
    pub mtime_unix_ms: i64,
    /// Where a symlink points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

impl From<pb::FileEntry> for FileEntry {
    fn from(e: pb::FileEntry) -> Self {
        let kind = match pb::FileType::try_from(e.r#type) {
            Ok(pb::FileType::File) => FileKind::File,
            Ok(pb::FileType::Dir) => FileKind::Dir,
            Ok(pb::FileType::Symlink) => FileKind::Symlink,
            Ok(pb::FileType::Other) => FileKind::Other,
            _ => FileKind::Unknown,
        };
        FileEntry {
            path: e.path,
            kind,
            size: e.size,
            mode: e.mode,
            mtime_unix_ms: e.mtime_unix_ms,
            symlink_target: Some(e.symlink_target).filter(|t| !t.is_empty()),
        }
    }
}

/// A directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// The entries, paths relative to the listed directory.
    pub entries: Vec<FileEntry>,
    /// `max_entries` cut it short.
    pub truncated: bool,
}

/// How to list a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOpts {
    /// Descend into subdirectories.
    pub recursive: bool,
    /// With `recursive`: levels to descend (1 = the directory's own entries); `None`: all.
    pub max_depth: Option<u32>,
    /// Cap on entries; `None`: the agent's default of 10 000.
    pub max_entries: Option<u32>,
    /// Only paths and types, with no stat per entry in the agent: the entries' size,
    /// mode and mtime are then 0 and their symlink target `None`.
    pub names_only: bool,
}

/// Which part of a file to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOpts {
    /// First byte to read.
    pub offset: u64,
    /// Bytes to read; `None`: to the end.
    pub length: Option<u64>,
    /// Refuse (RESOURCE_EXHAUSTED) when the slice is longer; `None`: no cap.
    pub max_bytes: Option<u64>,
}

/// How to write a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOpts {
    /// Permission bits; `None`: keep the old file's, or 0644.
    pub mode: Option<u32>,
    /// Append to the existing content.
    pub append: bool,
    /// Refuse instead of creating missing parent directories.
    pub no_create_parents: bool,
    /// fsync the file and its directory before the call returns.
    pub sync: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WriteResult {
    /// Bytes this call wrote.
    pub bytes_written: u64,
    /// The file's size afterwards.
    pub file_size: u64,
}

/// An entry a directory download left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedEntry {
    /// Relative path.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

/// What a directory download held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveSummary {
    /// Files archived.
    pub files: u64,
    /// Directories archived.
    pub dirs: u64,
    /// Uncompressed bytes of the files.
    pub file_bytes: u64,
    /// Bytes of the zip.
    pub archive_bytes: u64,
    /// Entries left out (symlinks, devices, unreadable files).
    pub skipped: Vec<SkippedEntry>,
}

impl From<pb::ArchiveSummary> for ArchiveSummary {
    fn from(s: pb::ArchiveSummary) -> Self {
        ArchiveSummary {
            files: s.files,
            dirs: s.dirs,
            file_bytes: s.file_bytes,
            archive_bytes: s.archive_bytes,
            skipped: s.skipped.into_iter().map(|e| SkippedEntry { path: e.path, reason: e.reason }).collect(),
        }
    }
}

/// A piece of a directory download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchivePart {
    /// Zip bytes.
    Data(Bytes),
    /// The last part.
    Summary(ArchiveSummary),
}

/// What an upload extracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UploadSummary {
    /// Files extracted.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Bytes of the files.
    pub file_bytes: u64,
}

/// The agent and its machine: `sbx info --json` prints it, and the `sandbox_info` tool
/// returns it (with the clock also as RFC 3339 text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AgentInfo {
    /// sbx-agent's version.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_codes() {
        let st = |code, signal, timed_out| ExitStatus { code, signal, timed_out, duration_ms: 0 };
        assert_eq!(st(Some(3), None, false).shell_code(), 3);
        assert_eq!(st(Some(256 + 7), None, false).shell_code(), 7);
        assert_eq!(st(None, Some(9), false).shell_code(), 137);
        assert_eq!(st(None, Some(9), true).shell_code(), TIMEOUT_EXIT_CODE);
        assert!(st(Some(0), None, false).success());
        assert!(!st(Some(0), None, true).success());
    }
}
