//! [`ToolError`]: why a tool call failed, as the short sentence a model reads in a
//! result with `isError: true`. Bad arguments are tool errors too, so the model can
//! correct itself; JSON-RPC errors are left to rmcp for malformed or unroutable requests.

use std::error::Error as _;

use atoll_proto::reason::Reason;
use rmcp::model::{ContentBlock, IntoContents};

use crate::client::ClientError;
use crate::sandbox::SandboxError;
use crate::sandbox::mode::ModeError;

/// Bytes of inline content `sandbox_files_write` accepts (after base64 decoding).
pub const MAX_INLINE_WRITE: u64 = 8 * 1024 * 1024;
/// Bytes `sandbox_files_read` returns at most in one call.
pub const MAX_INLINE_READ: u64 = 1024 * 1024;
/// Bytes of zip `sandbox_files_download_dir` returns at most.
pub const MAX_INLINE_ZIP: u64 = 10 * 1024 * 1024;

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A secret operation refused (see [`crate::secrets`]).
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
    /// A secret this server may not bind.
    #[error(
        "this MCP server may not bind the secret `{0}`; the operator allows secrets with `atoll mcp --secret NAME` (secret_list shows those allowed)"
    )]
    SecretNotAllowed(String),
    /// A host folder or disk size refused (see [`crate::sandbox::mounts`]).
    #[error(transparent)]
    Mount(#[from] crate::sandbox::mounts::MountError),
    /// A timeout outside the range accepted.
    #[error("{field} must be between 1 and {max} {unit}, not {got}{hint}", unit = unit(field), hint = range_hint(field))]
    TimeoutOutOfRange {
        /// The argument's name.
        field: &'static str,
        /// What the caller asked for.
        got: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// An empty command line.
    #[error("command is empty; pass a shell command line such as \"ls -la /\"")]
    EmptyCommand,
    /// Inline content over the write cap.
    #[error(
        "content is {size}, over the {limit} inline write limit; write it in parts with \
         append: true, or copy the file with `atoll cp`",
        size = size_and_limit(*bytes, MAX_INLINE_WRITE).0,
        limit = size_and_limit(*bytes, MAX_INLINE_WRITE).1
    )]
    ContentTooLarge {
        /// Decoded size of the content.
        bytes: u64,
    },
    /// Inline stdin over the cap.
    #[error(
        "stdin is {size}, over the {limit} inline limit; write the data to a file with \
         sandbox_files_write (in parts with append: true) and redirect it: `command < file`",
        size = size_and_limit(*bytes, MAX_INLINE_WRITE).0,
        limit = size_and_limit(*bytes, MAX_INLINE_WRITE).1
    )]
    StdinTooLarge {
        /// Size of the stdin text.
        bytes: u64,
    },
    /// Code for `sandbox_run_code` over the cap.
    #[error(
        "code is {size}, over the {limit} limit; write it to a file with sandbox_files_write \
         (in parts with append: true) and run that file with sandbox_exec",
        size = size_and_limit(*bytes, MAX_INLINE_WRITE).0,
        limit = size_and_limit(*bytes, MAX_INLINE_WRITE).1
    )]
    CodeTooLarge {
        /// Size of the code.
        bytes: u64,
    },
    /// Content that says it is base64 but is not.
    #[error("content is not valid base64 ({source}); send standard base64, or encoding: \"utf8\" for text")]
    BadBase64 {
        /// What the decoder said.
        source: base64::DecodeError,
    },
    /// A permission mode that is not octal.
    #[error("mode {got:?} is not an octal permission mode; pass a string such as \"644\" or \"0755\"")]
    BadMode {
        /// What the caller passed.
        got: String,
    },
    /// A signal that is neither a known name nor a number.
    #[error(
        "signal {got:?} is not a signal; pass a name such as \"TERM\", \"INT\", \"KILL\" or a number such as 15"
    )]
    BadSignal {
        /// What the caller passed.
        got: String,
    },
    /// A read slice longer than the inline read cap.
    #[error(
        "length {got} is over the {limit} read limit; read at most {max} bytes per call and \
         move offset forward",
        limit = human_bytes(MAX_INLINE_READ),
        max = MAX_INLINE_READ
    )]
    SliceTooLong {
        /// What the caller asked for.
        got: u64,
    },
    /// A whole-file read over the inline read cap.
    #[error(
        "{agent}; pass offset and length (at most {max} bytes per call) to read it in slices, \
         search it with sandbox_exec (grep, head, tail), or copy it out with `atoll cp`",
        max = MAX_INLINE_READ
    )]
    ReadTooLarge {
        /// The agent's own message, which names the file and says its size.
        agent: String,
    },
    /// A directory whose zip is over the inline cap.
    #[error(
        "the zip of {path} is over the {limit} inline limit{size}; download it with `{command}`, \
         or download a subdirectory",
        limit = human_bytes(MAX_INLINE_ZIP),
        size = size.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
    )]
    ArchiveTooLarge {
        /// The guest directory.
        path: String,
        /// How much the directory holds, when the agent said.
        size: Option<String>,
        /// The `atoll download` command that fetches it to a file (4 GiB by default).
        command: String,
    },
    /// A job id the agent does not know.
    #[error("{agent}; sandbox_job_list shows the jobs started in this sandbox")]
    NoSuchJob {
        /// The agent's own message.
        agent: String,
    },
    /// An egress rule that does not parse; the message names it and the forms.
    #[error("{0}")]
    BadRule(atoll_net::policy::RuleError),
    /// An `allow_out` rule that opens a private destination the operator did not grant.
    #[error(
        "allow_out {rule} would open {opens}, which only the operator may open: with the \
         CLI (`atoll net set SANDBOX --allow-out {rule}` or `atoll create --allow-out {rule}`), or, for a range, by \
         starting `atoll mcp --allow-private-egress CIDR`; the sandbox's rules are unchanged"
    )]
    PrivateEgress {
        /// The rule as written.
        rule: String,
        /// What it would open ("the loopback range 127.0.0.0/8", "port 25 ...").
        opens: String,
    },
    /// A sandbox this MCP client did not create and was not handed.
    #[error(
        "sandbox `{name}` was created by {creator}, not by this MCP client; MCP tools act only on the \
         sandboxes a client created itself (sandbox_list shows them). The operator may hand it over by \
         starting `atoll mcp --share-sandbox {name}` (or --share-cli-sandboxes for the CLI's)"
    )]
    NotYours {
        /// Its name.
        name: String,
        /// Who created it, in words.
        creator: &'static str,
    },
    /// An id prefix that begins several of this client's sandboxes' ids.
    #[error(
        "`{given}` begins the ids of several of your sandboxes ({}); pass the whole id or the name \
         (sandbox_list shows them)", matches.join(", ")
    )]
    AmbiguousSandbox {
        /// The prefix given.
        given: String,
        /// This client's sandboxes it begins, as `name (id)`.
        matches: Vec<String>,
    },
    /// A template another MCP client saved.
    #[error(
        "template `{name}` is not open to this MCP client: another MCP client saved it, or it is a \
         registry image's template (boot the image with sandbox_create {{image}}, which fetches it), or a \
         build's temporary; MCP clients boot only the operator's templates and their own \
         (sandbox_template_list shows them)"
    )]
    TemplateNotYours {
        /// Its name.
        name: String,
    },
    /// A snapshot this MCP client did not make.
    #[error(
        "snapshot `{name}` was made by {creator}, not by this MCP client; MCP tools use only the \
         snapshots a client made itself (sandbox_snapshot_list shows them). The operator may hand \
         over the CLI's by starting `atoll mcp --share-cli-sandboxes`, or use it with `atoll`"
    )]
    SnapshotNotYours {
        /// Its name.
        name: String,
        /// Who made it, in words.
        creator: &'static str,
    },
    /// A server pinned to one sandbox named a snapshot not taken of that sandbox.
    #[error(
        "this server acts only on sandbox `{pinned}` (the operator started it with --sandbox or \
         ATOLL_SANDBOX) and uses only the snapshots taken of that very sandbox \
         (sandbox_snapshot_list shows them); snapshot `{name}` was not"
    )]
    PinnedSnapshot {
        /// The snapshot named.
        name: String,
        /// The sandbox the server is pinned to.
        pinned: String,
    },
    /// A server pinned to one sandbox asked about another.
    #[error(
        "this server acts only on sandbox `{pinned}` (the operator started it with --sandbox or \
         ATOLL_SANDBOX), not on `{asked}`; leave out sandbox_id, or ask the operator for a server \
         started for that sandbox"
    )]
    Pinned {
        /// The sandbox asked for.
        asked: String,
        /// The one it is pinned to.
        pinned: String,
    },
    /// A server pinned to one sandbox asked to create another.
    #[error(
        "this server acts only on sandbox `{pinned}` (the operator started it with --sandbox or \
         ATOLL_SANDBOX) and creates no other; work in that one (leave out sandbox_id), or ask \
         the operator for a server that is not pinned"
    )]
    PinnedCreate {
        /// The one it is pinned to.
        pinned: String,
    },
    /// The request's HTTP client changed within a session.
    #[error("this session was opened with another bearer token; open a session of your own")]
    OtherClient,
    /// The host's addresses could not be read to check a rule against them.
    #[error("could not list this host's addresses to check allow_out against them; try again")]
    HostAddrs(#[source] std::io::Error),
    /// A log limit out of range.
    #[error("limit must be between 1 and {max}, not {got}")]
    LimitOutOfRange {
        /// What the caller passed.
        got: usize,
        /// The largest accepted.
        max: usize,
    },
    /// A TCP port out of range.
    #[error("port {got} is not a TCP port; pass 1 to 65535")]
    BadPort {
        /// What the caller passed.
        got: u32,
    },
    /// No agent to act on.
    #[error(
        "no sandbox to act on: pass sandbox_id (sandbox_list shows them, sandbox_create makes \
         one), or start this server as `atoll mcp --agent ADDR` (or with ATOLL_AGENT set)"
    )]
    NoAgent,
    /// The agent did not answer within the call's own timeout plus a grace period.
    #[error(
        "the agent did not answer within {secs} s, although the call's timeout had passed; the \
         sandbox may be overloaded or its agent stuck: check it with sandbox_info, and look for \
         leftover processes with sandbox_exec \"ps -ef\""
    )]
    AgentSilent {
        /// How long we waited.
        secs: u64,
    },
    /// The tool call was cancelled by the client.
    #[error("cancelled by the client")]
    Cancelled,
    /// A result could not be encoded as JSON; a bug in atoll, since results are plain data.
    #[error("atoll could not encode the result as JSON; please report this")]
    Encode(#[source] serde_json::Error),
    /// No sandbox has this id or name.
    #[error("no sandbox is called `{name}`; sandbox_list shows the sandboxes, sandbox_create makes one")]
    NoSuchSandbox {
        /// The id or name asked for.
        name: String,
    },
    /// The sandbox could not be found or started; the message says what to do.
    #[error(transparent)]
    Sandbox(SandboxError),
    /// The agent refused or could not be reached; its message says what to do.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The interpreter for `sandbox_run_code` is missing; the message names templates.
    #[error(transparent)]
    RunCode(crate::sandbox::run_code::RunCodeError),
    /// A template could not be saved; the message says what to do.
    #[error(transparent)]
    SaveTemplate(crate::sandbox::save_template::SaveTemplateError),
    /// The template store failed or refused; the message says what to do.
    #[error(transparent)]
    Template(#[from] crate::template::TemplateStoreError),
    /// The sandbox's network helper failed or refused; its message says what to do.
    #[error(transparent)]
    Network(crate::sandbox::network::NetError),
    /// A desktop refused or failed (computer use); its message says what to do.
    #[error(transparent)]
    Desktop(crate::desktop::DesktopError),
    /// A template build from an image or a Dockerfile failed; nothing was left.
    #[error(transparent)]
    Build(Box<crate::template::dockerfile::DockerfileError>),
    /// The arguments of a template build make no sense; the message says which.
    #[error("{0}")]
    BadBuild(String),
}

impl ToolError {
    /// The whole message, with each underlying cause once.
    pub fn render(&self) -> String {
        let mut text = self.to_string();
        let mut source = self.source();
        while let Some(cause) = source {
            // A cause some message already quotes (the base64 decoder's) is not repeated.
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        if let Some(step) = self.client().and_then(ClientError::reason).map(next_step) {
            text.push_str("; ");
            text.push_str(step);
        }
        text
    }

    fn client(&self) -> Option<&ClientError> {
        match self {
            ToolError::Client(client) => Some(client),
            _ => None,
        }
    }
}

/// What a model does next about an agent's refusal, in MCP tools and arguments: the
/// agent's own message names none (a stock gRPC client reads it too).
fn next_step(reason: Reason) -> &'static str {
    match reason {
        Reason::NotFound => "sandbox_files_list on a parent directory shows what is there",
        Reason::IsADirectory => "sandbox_files_list shows what a directory holds",
        Reason::NotADirectory => {
            "sandbox_files_read reads a file; sandbox_files_list on a parent directory shows what each \
             entry is"
        }
        Reason::ParentMissing => "sandbox_files_mkdir creates a directory with its parents",
        Reason::CwdMissing => "sandbox_files_mkdir creates it; or pass another cwd",
        Reason::UnknownJob => "sandbox_job_list shows the jobs started in this sandbox",
        Reason::ProgramNotFound => {
            "sandbox_exec with command \"command -v NAME\" says whether a program is installed"
        }
        Reason::DestinationExists => "pass overwrite: true to replace it",
        Reason::ZipOverCap => "download a subdirectory, or pack it smaller with sandbox_exec",
    }
}

impl From<ModeError> for ToolError {
    fn from(error: ModeError) -> Self {
        ToolError::BadMode { got: error.got }
    }
}

impl From<crate::template::dockerfile::DockerfileError> for ToolError {
    fn from(error: crate::template::dockerfile::DockerfileError) -> Self {
        ToolError::Build(Box::new(error))
    }
}

impl From<SandboxError> for ToolError {
    fn from(error: SandboxError) -> Self {
        match error.not_found() {
            Some(name) => ToolError::NoSuchSandbox { name: name.to_owned() },
            None => ToolError::Sandbox(error),
        }
    }
}

impl From<crate::sandbox::network::NetError> for ToolError {
    fn from(error: crate::sandbox::network::NetError) -> Self {
        match error {
            crate::sandbox::network::NetError::Sandbox(vm) => vm.into(),
            other => ToolError::Network(other),
        }
    }
}

impl From<crate::sandbox::run_code::RunCodeError> for ToolError {
    fn from(error: crate::sandbox::run_code::RunCodeError) -> Self {
        match error {
            crate::sandbox::run_code::RunCodeError::Client(client) => ToolError::Client(client),
            other => ToolError::RunCode(other),
        }
    }
}

impl From<crate::sandbox::save_template::SaveTemplateError> for ToolError {
    fn from(error: crate::sandbox::save_template::SaveTemplateError) -> Self {
        match error {
            crate::sandbox::save_template::SaveTemplateError::Sandbox(e) => e.into(),
            other => ToolError::SaveTemplate(other),
        }
    }
}

impl From<crate::desktop::DesktopError> for ToolError {
    fn from(error: crate::desktop::DesktopError) -> Self {
        match error {
            crate::desktop::DesktopError::Sandbox(e) => e.into(),
            other => ToolError::Desktop(other),
        }
    }
}

impl IntoContents for ToolError {
    fn into_contents(self) -> Vec<ContentBlock> {
        tracing::debug!(error = %self.render(), "tool call failed");
        vec![ContentBlock::text(self.render())]
    }
}

fn unit(field: &str) -> &'static str {
    if field.ends_with("_ms") { "ms" } else { "s" }
}

fn range_hint(field: &str) -> &'static str {
    match field {
        "timeout_ms" => {
            "; for longer work start a job with sandbox_exec_background and poll it with \
             sandbox_job_status"
        }
        "wait_ms" => "; to wait longer, call sandbox_job_status again",
        _ => "",
    }
}

/// `1.5 MiB`-style sizes for messages, written once for both sides in atoll-proto.
pub use atoll_proto::units::human_bytes;
use atoll_proto::units::size_and_limit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_to_do_next() {
        let text = ToolError::ContentTooLarge { bytes: 9 * 1024 * 1024 }.render();
        assert!(text.starts_with("content is 9 MiB, over the 8 MiB inline write limit"), "{text}");
        let text = ToolError::TimeoutOutOfRange { field: "timeout_ms", got: 700_000, max: 600_000 }.render();
        assert!(text.contains("between 1 and 600000 ms, not 700000"), "{text}");
    }
}
