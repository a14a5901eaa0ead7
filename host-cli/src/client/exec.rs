//! The records of running a command: [`ExecSpec`] in, [`ExecResult`] or a stream of
//! [`ExecEvent`]s out, with their conversions from and to the generated messages. Byte
//! fields serialize as (lossy) UTF-8 text.

use std::collections::BTreeMap;
use std::time::Duration;

use atoll_proto::agent::v1 as pb;
use bytes::Bytes;
use serde::{Serialize, Serializer};

/// Exit code `atoll exec` uses when the agent killed the command at its timeout (as
/// coreutils `timeout` does).
pub const TIMEOUT_EXIT_CODE: u8 = 124;

pub(super) fn lossy<S: Serializer>(data: &Bytes, s: S) -> Result<S::Ok, S::Error> {
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

    /// This spec with `defaults` filled in where it says nothing: its own env entries,
    /// cwd and user win.
    pub fn with_defaults(&self, defaults: &crate::vmm::template::CommandDefaults) -> ExecSpec {
        let mut spec = self.clone();
        let mut env = defaults.env.clone();
        env.extend(spec.env);
        spec.env = env;
        spec.cwd = spec.cwd.or_else(|| defaults.cwd.clone());
        spec.user = spec.user.or_else(|| defaults.user.clone());
        spec
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
            tty: None,
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
    /// The guest's out-of-memory killer ended it (it then died of signal 9).
    pub oom_killed: bool,
    /// With `oom_killed`: the guest's memory in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
}

impl ExitStatus {
    /// When the guest's out-of-memory killer ended the command: what happened and how
    /// much memory the guest has, for a person or a model to act on. `give_more` says
    /// how to give a sandbox more memory in the caller's vocabulary.
    pub fn oom_note(&self, give_more: &str) -> Option<String> {
        self.oom_killed.then(|| {
            let memory = self
                .memory_total_bytes
                .map(|m| format!(" (the sandbox has {} of memory)", atoll_proto::units::human_bytes(m)))
                .unwrap_or_default();
            format!(
                "the command was killed by the guest's out-of-memory killer{memory}: it needed more \
                 memory than was free; {give_more}, or make the command use less"
            )
        })
    }

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
            // The low byte of the code, as a shell reports `exit 263` (7).
            (Some(code), _) => code.to_le_bytes()[0],
            (None, Some(sig)) => 128 | (sig.to_le_bytes()[0] & 0x7f),
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
        ExitStatus {
            code,
            signal,
            timed_out: s.timed_out,
            duration_ms: s.duration_ms,
            oom_killed: s.oom_killed,
            memory_total_bytes: (s.oom_killed && s.memory_total_bytes > 0).then_some(s.memory_total_bytes),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_a_call_leaves_unset() {
        let defaults = crate::vmm::template::CommandDefaults {
            env: [("PATH", "/img/bin"), ("A", "image")].map(|(k, v)| (k.to_owned(), v.to_owned())).into(),
            cwd: Some("/app".into()),
            user: Some("app".into()),
        };
        let plain = ExecSpec::shell("x").with_defaults(&defaults);
        assert_eq!((plain.cwd.as_deref(), plain.user.as_deref()), (Some("/app"), Some("app")));
        assert_eq!(plain.env, defaults.env);
        let mut own = ExecSpec::shell("x");
        own.cwd = Some("/".into());
        own.user = Some("root".into());
        own.env.insert("A".into(), "mine".into());
        let own = own.with_defaults(&defaults);
        assert_eq!((own.cwd.as_deref(), own.user.as_deref()), (Some("/"), Some("root")));
        assert_eq!(own.env["A"], "mine");
        assert_eq!(own.env["PATH"], "/img/bin");
    }

    #[test]
    fn shell_codes() {
        let st = |code, signal, timed_out| ExitStatus {
            code,
            signal,
            timed_out,
            duration_ms: 0,
            oom_killed: false,
            memory_total_bytes: None,
        };
        assert_eq!(st(Some(3), None, false).shell_code(), 3);
        assert_eq!(st(Some(256 + 7), None, false).shell_code(), 7);
        assert_eq!(st(None, Some(9), false).shell_code(), 137);
        assert_eq!(st(None, Some(9), true).shell_code(), TIMEOUT_EXIT_CODE);
        assert!(st(Some(0), None, false).success());
        assert!(!st(Some(0), None, true).success());
    }
}
