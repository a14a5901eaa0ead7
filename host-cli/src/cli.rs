//! The `sbx` command line, as clap types. Other groups add their subcommands as one
//! variant of [`Command`] each (and one match arm in `cmd::run`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::sandbox::mode::parse_mode;

/// Exit code when the agent could not be reached (`EX_UNAVAILABLE` of sysexits.h).
pub const EXIT_UNREACHABLE: u8 = 69;
/// Exit code of a usage error (bad flags, bad address, no agent given).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of any other failure (the agent refused, a local file failed...).
pub const EXIT_FAILURE: u8 = 1;

const AFTER_HELP: &str = "\
Examples:
  sbx --agent unix:///tmp/agent.sock info
  export SBX_AGENT=hvsock:///run/vm/v.sock:1024
  sbx exec -- uname -a
  sbx exec --cwd /work -e CI=1 --timeout 5m -- make test
  echo 'print(6*7)' | sbx exec -- python3 -
  sbx run -d -- ./server --port 8080 && sbx jobs
  sbx cp ./src :/work/src        sbx cp :/work/out.tar.gz .
  sbx cat /etc/os-release        sbx ls -R --depth 2 /work

Guest paths for `sbx cp` are written `:/path` (the current agent) or `NAME:/path` (a
sandbox). Every command takes --json and then prints one JSON document on stdout;
errors go to stderr as {\"error\": {...}}.

Exit codes:
  0        success (for exec: the remote command's own code is passed through)
  1        the agent refused the request, or a local file operation failed
  2        usage error: bad flags, bad address, no agent given
  69       no agent answered (EX_UNAVAILABLE): the VM is down or not booted yet
  124      exec: the command hit its --timeout and was killed
  128+N    exec: the command was killed by signal N";

/// sbx: run commands and move files in a microVM sandbox through its agent.
#[derive(Debug, Parser)]
#[command(name = "sbx", version, about, after_help = AFTER_HELP, max_term_width = 100)]
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
    #[arg(long, global = true, env = "SBX_AGENT", value_name = "ADDR")]
    pub agent: Option<String>,
    /// Sandbox to talk to, by name or id (instead of --agent).
    #[arg(short = 's', long, global = true, env = "SBX_SANDBOX", value_name = "NAME")]
    pub sandbox: Option<String>,
    /// How long to wait for the agent to answer, e.g. 5s, 500ms, 1m.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Print one JSON document on stdout (errors as JSON on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// More logs on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in the guest, streaming its output; exits with its exit code.
    #[command(
        after_help = "Examples:\n  sbx exec -- ls -la /\n  sbx exec --sh 'cd /work && make 2>&1 | tail'\n  \
                            tar c . | sbx exec --cwd /work -- tar x\n  sbx exec --capture --json -- cat /etc/hostname"
    )]
    Exec(ExecArgs),
    /// Start a background job; with -d print its id and return at once.
    #[command(after_help = "Examples:\n  sbx run -d -- python3 -m http.server 8000\n  sbx run -- sleep 3")]
    Run(RunArgs),
    /// List the background jobs.
    Jobs,
    /// Inspect or control one background job.
    #[command(subcommand)]
    Job(JobCommand),
    /// Print a guest file to stdout (binary-safe).
    #[command(
        after_help = "Examples:\n  sbx cat /etc/os-release\n  sbx cat --offset 100 --length 20 /var/log/big.log"
    )]
    Cat(CatArgs),
    /// Write stdin (or --from FILE) to a guest file, atomically.
    #[command(
        after_help = "Examples:\n  echo hello | sbx write /work/hello.txt\n  sbx write --from ./run.sh --mode 755 /work/run.sh"
    )]
    Write(WriteArgs),
    /// List a guest directory; with no PATH, list the sandboxes.
    #[command(
        after_help = "Examples:\n  sbx ls /work\n  sbx ls -R --depth 2 /etc\n  sbx ls --names /usr/bin\n  sbx ls"
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
        after_help = "Examples:\n  sbx cp ./data.bin :/work/data.bin\n  sbx cp :/work/results ./results\n  \
                            sbx cp ./project :/work            (copies into /work/project)\n  sbx cp dev:/etc/hosts hosts"
    )]
    Cp(CpArgs),
    /// Download a guest directory as a zip archive.
    #[command(
        after_help = "Examples:\n  sbx download /work -o work.zip\n  sbx download /work -o - | bsdtar -tf -"
    )]
    Download(DownloadArgs),
    /// Show the agent's version and its machine's resources; with a sandbox name, the
    /// sandbox too (as `sbx inspect`).
    #[command(
        after_help = "Examples:\n  sbx --agent unix:///tmp/agent.sock info\n  sbx info dev\n  sbx -s dev info --json"
    )]
    Info(InfoArgs),
    /// Serve the agent's abilities as MCP tools on stdin/stdout (for Claude Code, Cursor, ...).
    #[command(after_help = "Examples:\n  claude mcp add sbx -- sbx mcp --agent unix:///tmp/agent.sock\n  \
                            SBX_SANDBOX=dev sbx mcp\n\nSee docs/mcp.md for Cursor, VS Code, Windsurf and Codex.")]
    Mcp,
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  sbx completions bash > /etc/bash_completion.d/sbx\n  sbx completions zsh > ~/.zfunc/_sbx"
    )]
    Completions(CompletionsArgs),
    /// The sandbox lifecycle: create, inspect, pause, resume, kill.
    #[command(flatten)]
    Sandbox(crate::cmd::sandbox::SandboxCommand),
    /// Templates: bake the agent into your own root filesystem, list, remove.
    #[command(subcommand)]
    Template(crate::cmd::template::TemplateCommand),
}

/// How a command runs (shared by exec and run).
#[derive(Debug, Clone, Args)]
pub struct CommandArgs {
    /// Working directory in the guest (absolute).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Extra environment variable (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// User to run as: a name or a numeric uid.
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,
    /// Run a shell command line with /bin/sh -c instead of an argv.
    #[arg(long = "sh", value_name = "LINE", conflicts_with = "argv")]
    pub shell: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required_unless_present = "shell")]
    pub argv: Vec<String>,
}

/// `sbx exec`.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// The command.
    #[command(flatten)]
    pub command: CommandArgs,
    /// Kill the command after this long (default 60s, at most 10m); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Wait for the end and print the capped output (head and tail), as MCP tools see it
    /// (implied by --json).
    #[arg(long)]
    pub capture: bool,
    /// With --capture: bytes kept per stream (default 32 KiB).
    #[arg(long, value_name = "BYTES", requires = "capture")]
    pub output_limit: Option<u32>,
}

/// `sbx run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Return as soon as the job started, printing its id.
    #[arg(short, long)]
    pub detach: bool,
    /// Kill the job after this long (default: never).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The command.
    #[command(flatten)]
    pub command: CommandArgs,
}

/// `sbx job ...`.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Show a job's state and the tail of its output.
    Status(JobIdArg),
    /// Wait for a job to exit; exits with its exit code.
    Wait(JobWaitArgs),
    /// Send a signal to a job's process group (default: KILL).
    Kill(JobKillArgs),
    /// Print a job's whole output so far.
    Logs(JobLogsArgs),
}

/// A job id.
#[derive(Debug, Clone, Args)]
pub struct JobIdArg {
    /// The job id (from `sbx run -d` or `sbx jobs`).
    pub id: String,
}

/// `sbx job wait`.
#[derive(Debug, Clone, Args)]
pub struct JobWaitArgs {
    /// The job id.
    pub id: String,
    /// Give up after this long (default and maximum: 10m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

/// `sbx job kill`.
#[derive(Debug, Clone, Args)]
pub struct JobKillArgs {
    /// The job id.
    pub id: String,
    /// Signal name or number: TERM, INT, HUP, 15...
    #[arg(long, default_value = "KILL", value_parser = crate::signal::parse)]
    pub signal: i32,
}

/// `sbx job logs`.
#[derive(Debug, Clone, Args)]
pub struct JobLogsArgs {
    /// The job id.
    pub id: String,
    /// Print stderr instead of stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Keep printing new output until the job exits; then exit with its exit code.
    #[arg(short, long)]
    pub follow: bool,
}

/// A guest path.
#[derive(Debug, Clone, Args)]
pub struct PathArg {
    /// Absolute guest path.
    pub path: String,
}

/// `sbx cat`.
#[derive(Debug, Clone, Args)]
pub struct CatArgs {
    /// Absolute guest path.
    pub path: String,
    /// First byte to print.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Bytes to print (default: to the end).
    #[arg(long)]
    pub length: Option<u64>,
}

/// `sbx write`.
#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    /// Absolute guest path.
    pub path: String,
    /// Read the content from this host file instead of stdin.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    /// Append to the file instead of replacing it.
    #[arg(short, long)]
    pub append: bool,
    /// Permission bits in octal, e.g. 755.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// Fail instead of creating missing parent directories.
    #[arg(long)]
    pub no_parents: bool,
    /// Flush the file to the guest's disk (fsync) before returning, so it survives a
    /// crash of the VM. Without it the write is still atomic: readers see the old or
    /// the new content, and a failed write changes nothing.
    #[arg(long)]
    pub sync: bool,
}

/// `sbx ls`.
#[derive(Debug, Clone, Args)]
pub struct LsArgs {
    /// Absolute guest directory. Without it, the sandboxes are listed.
    pub path: Option<String>,
    /// Descend into subdirectories.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// With -R: how many levels (1 = only the directory's own entries).
    #[arg(long, value_name = "N", requires = "recursive")]
    pub depth: Option<u32>,
    /// At most this many entries (default 10000).
    #[arg(long, value_name = "N")]
    pub max_entries: Option<u32>,
    /// Only names, with `/` after directories and `@` after symlinks: no stat per entry,
    /// so big directories list faster.
    #[arg(long)]
    pub names: bool,
}

/// `sbx rm`.
#[derive(Debug, Clone, Args)]
pub struct RmArgs {
    /// Absolute guest path.
    pub path: String,
    /// Remove a directory and everything in it.
    #[arg(short, long)]
    pub recursive: bool,
}

/// `sbx mv`.
#[derive(Debug, Clone, Args)]
pub struct MvArgs {
    /// Absolute guest path to move.
    pub from: String,
    /// Absolute guest path to move it to.
    pub to: String,
    /// Replace TO if it exists.
    #[arg(short, long)]
    pub force: bool,
}

/// `sbx mkdir`.
#[derive(Debug, Clone, Args)]
pub struct MkdirArgs {
    /// Absolute guest path.
    pub path: String,
    /// Create missing parents; succeed if it exists.
    #[arg(short, long)]
    pub parents: bool,
    /// Permission bits in octal (default 755).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
}

/// `sbx cp`.
#[derive(Debug, Clone, Args)]
pub struct CpArgs {
    /// Source: a host path, `:/guest/path` or `NAME:/guest/path`.
    pub src: String,
    /// Destination: a host path, `:/guest/path` or `NAME:/guest/path`.
    pub dst: String,
    /// Flush the copy to the destination's disk (fsync, or syncfs for a directory)
    /// before returning. Without it each file still lands whole (temp file + rename),
    /// and, as with `cp`, the kernel writes it to disk in its own time.
    #[arg(long)]
    pub sync: bool,
}

/// `sbx info`.
#[derive(Debug, Clone, Args)]
pub struct InfoArgs {
    /// A sandbox name or id: show its state, template, resources and pids as well.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
}

/// `sbx download`.
#[derive(Debug, Clone, Args)]
pub struct DownloadArgs {
    /// Absolute guest directory.
    pub dir: String,
    /// Zip file to write (`-` for stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Fail once the archive grows past this many bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
}

/// `sbx completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e}; write a duration like 30s, 500ms, 5m"))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
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
