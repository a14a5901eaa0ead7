//! The arguments of the commands that act inside a guest: `exec`, `run`, `jobs` and
//! `job ...`, `cat`, `write`, `ls`, `stat`, `rm`, `mv`, `mkdir`, `cp`, `download`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{parse_duration, parse_env};
use crate::sandbox::mode::parse_mode;

/// Where, with what environment and as whom a command runs (shared by exec, run and shell).
#[derive(Debug, Clone, Args)]
pub struct ProcessArgs {
    /// Working directory in the guest (absolute).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Extra environment variable (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// User to run as: a name or a numeric uid.
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,
}

/// How a command runs (shared by exec and run).
#[derive(Debug, Clone, Args)]
pub struct CommandArgs {
    /// Where and as whom.
    #[command(flatten)]
    pub process: ProcessArgs,
    /// Run a shell command line with /bin/sh -c instead of an argv.
    #[arg(long = "sh", value_name = "LINE", conflicts_with = "argv")]
    pub shell: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required_unless_present = "shell")]
    pub argv: Vec<String>,
}

/// `atoll exec`.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// The command.
    #[command(flatten)]
    pub command: CommandArgs,
    /// Kill the command after this long (default 60s, at most 10m; with -t: no limit);
    /// exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Run the command on a pseudo-terminal in the guest, with this terminal in raw mode
    /// (full-screen programs, Ctrl-C and Ctrl-Z reach the command). stdin must be a
    /// terminal: without one, atoll refuses (exit 2) rather than guess.
    #[arg(short = 't', long, conflicts_with_all = ["capture", "output_limit"])]
    pub tty: bool,
    /// Forward stdin even when it is a terminal (with -t it always is).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Wait for the end and print the capped output (head and tail), as MCP tools see it
    /// (implied by --json).
    #[arg(long)]
    pub capture: bool,
    /// With --capture: bytes kept per stream (default 32 KiB).
    #[arg(long, value_name = "BYTES", requires = "capture")]
    pub output_limit: Option<u32>,
}

/// `atoll shell`.
#[derive(Debug, Clone, Args)]
pub struct ShellArgs {
    /// The sandbox, by name or id (default: --sandbox / ATOLL_SANDBOX, or --agent).
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
    /// Where and as whom.
    #[command(flatten)]
    pub process: ProcessArgs,
}

/// `atoll run`.
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

/// `atoll job ...`.
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
    /// The job id (from `atoll run -d` or `atoll jobs`).
    pub id: String,
}

/// `atoll job wait`.
#[derive(Debug, Clone, Args)]
pub struct JobWaitArgs {
    /// The job id.
    pub id: String,
    /// Give up after this long (default and maximum: 10m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

/// `atoll job kill`.
#[derive(Debug, Clone, Args)]
pub struct JobKillArgs {
    /// The job id.
    pub id: String,
    /// Signal name or number: TERM, INT, HUP, 15...
    #[arg(long, default_value = "KILL", value_parser = crate::signal::parse)]
    pub signal: i32,
}

/// `atoll job logs`.
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

/// `atoll cat`.
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

/// `atoll write`.
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

/// `atoll ls`.
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

/// `atoll rm`.
#[derive(Debug, Clone, Args)]
pub struct RmArgs {
    /// Absolute guest path.
    pub path: String,
    /// Remove a directory and everything in it.
    #[arg(short, long)]
    pub recursive: bool,
}

/// `atoll mv`.
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

/// `atoll mkdir`.
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

/// `atoll cp`.
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
    /// A directory copied from a guest may unpack to at most this many bytes (the guest
    /// chooses what it sends; default 4 GiB); so may a file whose size the guest does not
    /// announce (such as one under /proc). A file of known size stops at that size.
    #[arg(long, value_name = "BYTES", default_value_t = crate::archive::UnpackLimits::DEFAULT_BYTES)]
    pub max_unpacked_bytes: u64,
    /// A directory copied from a guest may hold at most this many files and folders.
    #[arg(long, value_name = "N", default_value_t = crate::archive::UnpackLimits::DEFAULT_ENTRIES)]
    pub max_entries: u64,
    /// Give up on a copy from a guest when its agent sends nothing for this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
}

/// `atoll download`.
#[derive(Debug, Clone, Args)]
pub struct DownloadArgs {
    /// Absolute guest directory.
    pub dir: String,
    /// Zip file to write (`-` for stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Fail once the archive grows past this many bytes (default 4 GiB; the guest
    /// chooses what it sends).
    #[arg(long, value_name = "BYTES", default_value_t = crate::archive::UnpackLimits::DEFAULT_BYTES)]
    pub max_bytes: u64,
    /// Give up when the guest's agent sends nothing for this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
}
