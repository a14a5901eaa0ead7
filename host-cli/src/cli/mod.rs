//! The `atoll` command line, as clap types: every flag and subcommand of `atoll` is declared
//! here and nowhere else, so the subcommands in [`crate::cmd`] take their arguments from
//! this module and this module imports nothing from them (nor from [`crate::app`]).
//!
//! - this file: [`Cli`], the global options, [`Command`] (the subcommand list), the exit
//!   codes, and the value parsers shared by several areas;
//! - `guest`: what acts inside a guest: exec, run and jobs, the file commands, cp,
//!   download;
//! - `sandbox`: the sandbox lifecycle (create, inspect, pause, resume, kill);
//! - `snapshot`: `atoll snapshot create|ls|rm|restore`;
//! - `template`: `atoll template build|save|ls|rm`;
//! - `network`: `atoll port ...`, `atoll net ...` and the hidden `atoll net-helper`;
//! - `mcp`: `atoll mcp` (stdio, or Streamable HTTP with `--http`).
//!
//! A new group adds one file here, one variant of [`Command`], and one match arm in
//! `cmd::run`.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod desktop;
mod guest;
mod mcp;
mod network;
mod quota;
mod sandbox;
mod secret;
mod snapshot;
mod template;

pub use desktop::{BrowserCommand, InputAction, InputArgs, ScreenshotArgs, ViewArgs};
pub use guest::{
    CatArgs, CommandArgs, CpArgs, DownloadArgs, ExecArgs, JobCommand, JobIdArg, JobKillArgs, JobLogsArgs,
    JobWaitArgs, LsArgs, MkdirArgs, MvArgs, PathArg, ProcessArgs, RmArgs, RunArgs, ShellArgs, WriteArgs,
};
use mcp::MCP_AFTER_HELP;
pub use mcp::McpArgs;
pub use network::{
    HelperArgs, LogArgs, NetCommand, NetSandboxArg, PortCommand, PortSandboxArg, PublishArgs, RulesArgs,
    SetArgs, UnpublishArgs, VerdictArg,
};
pub use quota::QuotaFlags;
pub use sandbox::{CreateArgs, KillArgs, PauseArgs, SandboxArg, SandboxCommand, StatsArgs};
pub use secret::{SecretAttachArgs, SecretCommand, SecretDetachArgs, SecretNameArg, SecretSetArgs};
pub use snapshot::{SnapshotCommand, SnapshotCreateArgs, SnapshotRestoreArgs, SnapshotRmArgs};
pub use template::{
    BuildArgs, ImageCommand, InitArg, SaveArgs, TemplateCommand, TemplateRmArgs, TemplateSnapshotArgs,
};

/// Exit code when the agent could not be reached (`EX_UNAVAILABLE` of sysexits.h).
pub const EXIT_UNREACHABLE: u8 = 69;
/// Exit code of a usage error (bad flags, bad address, no agent given).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of any other failure (the agent refused, a local file failed...).
pub const EXIT_FAILURE: u8 = 1;

const AFTER_HELP: &str = "\
Examples:
  atoll create --name dev          (the `minimal` template: busybox and the agent)
  atoll -s dev exec -- uname -a    export ATOLL_SANDBOX=dev
  atoll shell dev                  atoll exec -it -- top
  atoll exec --cwd /tmp -e CI=1 --timeout 5m -- sh -c 'echo $CI'
  echo 'print(6*7)' | atoll exec -- python3 -       (a `--template debian` sandbox)
  atoll run -d -- httpd -f -p 8080 && atoll jobs
  atoll cp ./src :/work/src        atoll cp :/etc/hostname .
  atoll cat /etc/hostname          atoll ls -R --depth 2 /work
  atoll --agent unix:///tmp/agent.sock info         (an agent you started yourself)

Guest paths for `atoll cp` are written `:/path` (the current agent) or `NAME:/path` (a
sandbox). Every command takes --json and then prints one JSON document on stdout;
errors go to stderr as {\"error\": {...}}.

Exit codes:
  0        success (for exec: the remote command's own code is passed through)
  1        the agent refused the request, or a local file operation failed
  2        usage error: bad flags, bad address, no agent given
  69       no agent answered within --connect-timeout, or the connection broke
           (EX_UNAVAILABLE): the VM is down, still booting, stopped or wedged
  124      exec: the command hit its --timeout and was killed
  128+N    exec: the command was killed by signal N";

/// atoll: run commands and move files in a microVM sandbox through its agent.
#[derive(Debug, Parser)]
#[command(name = "atoll", version, about, after_help = quota::help(AFTER_HELP), max_term_width = 100)]
pub struct Cli {
    /// Options every subcommand takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Agent address: vsock://CID:PORT, hvsock:///PATH:PORT, unix:///PATH or tcp://HOST:PORT.
    #[arg(long, global = true, env = "ATOLL_AGENT", value_name = "ADDR")]
    pub agent: Option<String>,
    /// Sandbox to talk to, by name or id (instead of --agent).
    #[arg(short = 's', long, global = true, env = "ATOLL_SANDBOX", value_name = "NAME")]
    pub sandbox: Option<String>,
    /// How long reaching the agent may take, its first answer included, e.g. 5s, 500ms, 1m.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Print one JSON document on stdout (errors as JSON on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// More logs on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Host quotas for this command.
    #[command(flatten)]
    pub quotas: QuotaFlags,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in the guest, streaming its output; exits with its exit code.
    #[command(
        after_help = "Examples:\n  atoll exec -- ls -la /\n  atoll exec --sh 'cd /etc && ls | tail -3'\n  \
                            tar c . | atoll exec --cwd /tmp -- tar x\n  atoll exec --capture --json -- cat /etc/hostname\n  \
                            atoll exec -it -- top                   (a pseudo-terminal: see `atoll shell --help`)\n\n\
                            The command is killed after 60 s by default (exit code 124); --timeout gives it up to 10m, \
                            -t sessions have no limit, and `atoll run -d` starts a background job with none.\n\n\
                            -t without a terminal on stdin is refused (exit 2), as `docker exec -t` does."
    )]
    Exec(ExecArgs),
    /// Open an interactive shell in a sandbox (bash if it has one, else sh) on a
    /// pseudo-terminal; exits with the shell's exit code.
    #[command(after_help = "\
Examples:
  atoll shell dev
  atoll shell -u nobody --cwd /tmp dev
  atoll -s dev exec -t -- vi /etc/hosts

This terminal is in raw mode while the shell runs: Ctrl-C, Ctrl-Z and Ctrl-D go to the
guest; the terminal is put back when the shell exits, when atoll gets SIGHUP, SIGTERM or
SIGINT (then it exits 128+N), and on errors. The window size follows resizes and TERM
is passed on. stdin must be a terminal: without one atoll refuses with exit code 2; to
run commands from a script use `atoll exec --sh LINE` or pipe them to `atoll exec -- sh`.")]
    Shell(ShellArgs),
    /// Start a background job; with -d print its id and return at once.
    #[command(
        after_help = "Examples:\n  atoll run -d -- httpd -f -p 8000   (busybox; in debian: python3 -m http.server 8000)\n  \
                            atoll run -- sleep 3"
    )]
    Run(RunArgs),
    /// List the background jobs.
    Jobs,
    /// Inspect or control one background job.
    #[command(subcommand)]
    Job(JobCommand),
    /// Print a guest file to stdout (binary-safe).
    #[command(
        after_help = "Examples:\n  atoll cat /etc/hostname\n  atoll cat --offset 5 --length 20 /etc/passwd"
    )]
    Cat(CatArgs),
    /// Write stdin (or --from FILE) to a guest file, atomically.
    #[command(
        after_help = "Examples:\n  echo hello | atoll write /work/hello.txt\n  atoll write --from ./run.sh --mode 755 /work/run.sh"
    )]
    Write(WriteArgs),
    /// List a guest directory; with no PATH, list the sandboxes.
    #[command(
        after_help = "Examples:\n  atoll ls /tmp\n  atoll ls -R --depth 2 /etc\n  atoll ls --names /usr/bin\n  atoll ls"
    )]
    Ls(LsArgs),
    /// Show a guest file's metadata.
    Stat(PathArg),
    /// Remove a guest file (-r: a directory and everything in it).
    Rm(RmArgs),
    /// Move or rename a guest file.
    Mv(MvArgs),
    /// Create a guest directory.
    Mkdir(MkdirArgs),
    /// Copy files or directories between host and guest (guest paths: `:/path`).
    #[command(
        after_help = "Examples:\n  atoll cp ./data.bin :/work/data.bin\n  atoll cp :/etc ./guest-etc\n  \
                            atoll cp ./project :/work            (copies into /work/project)\n  atoll cp dev:/etc/hosts hosts"
    )]
    Cp(CpArgs),
    /// Download a guest directory as a zip archive.
    #[command(
        after_help = "Examples:\n  atoll download /etc -o etc.zip\n  atoll download /etc -o - | bsdtar -tf -"
    )]
    Download(DownloadArgs),
    /// Show the agent's version and its machine's resources; with a sandbox name, the
    /// sandbox too (as `atoll inspect`).
    #[command(
        after_help = "Examples:\n  atoll --agent unix:///tmp/agent.sock info\n  atoll info dev\n  atoll -s dev info --json"
    )]
    Info(InfoArgs),
    /// Serve the agent's abilities as MCP tools on stdin/stdout, or over HTTP with --http
    /// (for Claude Code, Cursor, VS Code, SDK agents, ...).
    #[command(after_help = quota::help(MCP_AFTER_HELP))]
    Mcp(McpArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  atoll completions bash > /etc/bash_completion.d/atoll\n  atoll completions zsh > ~/.zfunc/_atoll"
    )]
    Completions(CompletionsArgs),
    /// The sandbox lifecycle: create, inspect, pause, resume, kill.
    #[command(flatten)]
    Sandbox(SandboxCommand),
    /// Snapshots: save a running sandbox, list, remove, put a sandbox back to one;
    /// `atoll create --from SNAPSHOT` forks one.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Templates: bake the agent into your own root filesystem, snapshot one, save a
    /// sandbox's disk, list, remove.
    #[command(subcommand)]
    Template(TemplateCommand),
    /// The cache of image layers `atoll template build --image` fills: list, prune.
    #[command(subcommand)]
    Image(ImageCommand),
    /// A sandbox's network: its egress policy (show, set) and audit log.
    #[command(subcommand)]
    Net(NetCommand),
    /// Secrets that never enter a sandbox: stored on the host, a placeholder inside,
    /// the value put in at egress on HTTPS requests to the secret's hosts.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Published ports: make a guest TCP port reachable on the host.
    #[command(subcommand)]
    Port(PortCommand),
    /// Save a desktop sandbox's screen as a PNG.
    #[command(
        after_help = "Examples:\n  atoll screenshot desk -o shot.png\n  atoll screenshot desk --scale 640 -o - > small.png"
    )]
    Screenshot(ScreenshotArgs),
    /// Drive a desktop sandbox's mouse and keyboard; each returns once QEMU took the input.
    #[command(
        after_help = "Examples:\n  atoll input desk click 100 200\n  atoll input desk click 100 200 --button right\n  \
                            atoll input desk drag 10 10 300 300\n  atoll input desk scroll 640 400 --down 5\n  \
                            atoll input desk type 'hello world'\n  atoll input desk key ctrl+l\n  \
                            atoll input desk hold shift --for 500\n  atoll input desk cursor"
    )]
    Input(InputArgs),
    /// Watch and use a desktop sandbox's screen in your browser: prints a URL on
    /// 127.0.0.1 (noVNC, with a token of its own) and serves it until the sandbox ends or
    /// this command is stopped.
    #[command(after_help = "Examples:\n  atoll desktop desk\n  atoll desktop desk --view-only")]
    Desktop(ViewArgs),
    /// The desktop sandbox's browser (Chromium, on its screen, as its user).
    #[command(subcommand)]
    Browser(BrowserCommand),
}

/// `atoll info`.
#[derive(Debug, Clone, Args)]
pub struct InfoArgs {
    /// A sandbox name or id: show its state, template, resources and pids as well.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
}

/// `atoll completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e}; write a duration like 30s, 500ms, 5m"))
}

pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not K=V")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn values() {
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env("=x").is_err());
    }
}
