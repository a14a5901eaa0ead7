//! What a caller asks of [`exec`](super::exec) and [`exec_stream`](super::stream::exec_stream),
//! and what it gets back, in the agent's own terms (the service layer converts the
//! wire messages to and from these).

use std::collections::HashMap;

use bytes::Bytes;

use super::Outcome;

/// A command as asked for, before [`Spec::from_command`](super::Spec::from_command)
/// checks it.
#[derive(Debug, Clone, Default)]
pub struct Command {
    /// A shell command line, run as `/bin/sh -c`; or empty.
    pub shell: String,
    /// A program and its arguments; or empty.
    pub argv: Vec<String>,
    /// Working directory (absolute); empty: `/`.
    pub cwd: String,
    /// Extra environment.
    pub env: HashMap<String, String>,
    /// A user name or numeric uid; empty: the agent's user.
    pub user: String,
}

/// One command to run.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// What to run; `None` is refused.
    pub command: Option<Command>,
    /// Bytes fed to stdin first.
    pub stdin: Bytes,
    /// Milliseconds; 0: the default.
    pub timeout_ms: u32,
    /// Bytes kept per stream (unary exec only); 0: the default.
    pub output_limit: u32,
    /// Run on a pseudo-terminal (streamed exec only).
    pub tty: Option<Tty>,
}

/// A pseudo-terminal for a streamed command.
#[derive(Debug, Clone, Default)]
pub struct Tty {
    /// TERM for the command; empty: [`DEFAULT_TERM`].
    pub term: String,
    /// Its initial size.
    pub size: WindowSize,
}

/// TERM when the client names none.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Default for WindowSize {
    /// 24 by 80, the size of a terminal nobody measured.
    fn default() -> Self {
        WindowSize { rows: 24, cols: 80 }
    }
}

/// One output stream of a finished command, capped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// All of it, or the head and the tail with a marker between them.
    pub data: Vec<u8>,
    /// True when bytes were left out of `data`.
    pub truncated: bool,
    /// Bytes the command wrote to the stream in all.
    pub total_bytes: u64,
}

/// A command run to completion.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub outcome: Outcome,
    /// Its stdout, capped.
    pub stdout: Captured,
    /// Its stderr, capped.
    pub stderr: Captured,
}

/// One message from an ExecStream client.
#[derive(Debug)]
pub enum StreamInput {
    /// The first message: the command.
    Start(Request),
    /// Bytes for stdin.
    Stdin(Bytes),
    /// No more stdin.
    StdinEof,
    /// The terminal's new size (ignored without a terminal).
    Resize(WindowSize),
    /// A message that says nothing (kept so the stream's order is unchanged).
    Nothing,
}

/// One event of a streamed command.
#[derive(Debug)]
pub enum Event {
    /// The command started with this pid.
    Started {
        /// Its process id.
        pid: u32,
    },
    /// Bytes it wrote to stdout.
    Stdout(Bytes),
    /// Bytes it wrote to stderr.
    Stderr(Bytes),
    /// How it ended; the last event.
    Exited(Outcome),
}
