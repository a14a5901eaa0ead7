//! What can go wrong running a command, in words that tell the caller what to do next.

use std::io;
use std::path::PathBuf;

/// Why a command could not be run (the command's own failure is an exit status, not this).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The request carried no `command`, or a command with neither `shell` nor `argv`.
    #[error("the command is empty; set either `shell` (run by /bin/sh -c) or `argv` (run directly)")]
    NoCommand,
    /// Both `shell` and `argv` were set.
    #[error("the command sets both `shell` and `argv`; set exactly one of them")]
    ShellAndArgv,
    /// `argv[0]` is an empty string.
    #[error("argv[0] is empty; put the program to run first, e.g. [\"ls\", \"-l\"]")]
    EmptyProgram,
    /// A string that must reach the kernel contains a NUL byte.
    #[error("{what} contains a NUL byte, which a command line cannot carry; remove it")]
    NulByte {
        /// Which part of the request.
        what: String,
    },
    /// An environment variable name that `execve` cannot pass on.
    #[error("environment variable name `{0}` is invalid; a name must be non-empty and contain no `=`")]
    BadEnvName(String),
    /// The working directory is not an absolute path.
    #[error("working directory `{0}` is relative; give an absolute path such as `/{0}`")]
    RelativeCwd(String),
    /// The working directory does not exist.
    #[error("working directory `{}` does not exist; create it first or pick another", .0.display())]
    CwdMissing(PathBuf),
    /// The working directory exists but is not a directory.
    #[error("working directory `{}` is not a directory; give the path of a directory", .0.display())]
    CwdNotDir(PathBuf),
    /// The working directory could not be examined.
    #[error("cannot use working directory `{}`", path.display())]
    CwdUnusable {
        /// The directory asked for.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// `timeout_ms` is over the cap.
    #[error("timeout of {asked} ms is over the maximum of {max} ms; run longer commands as a background job")]
    TimeoutTooLong {
        /// What the request asked for.
        asked: u32,
        /// The cap.
        max: u32,
    },
    /// `output_limit` is over the cap.
    #[error(
        "output limit of {asked} bytes per stream is over the maximum of {max}; stream the output or run a background job for more"
    )]
    OutputLimitTooLarge {
        /// What the request asked for.
        asked: u32,
        /// The cap.
        max: u32,
    },
    /// The user is neither a name in /etc/passwd nor a number.
    #[error("user `{0}` is not in /etc/passwd; give a user name from /etc/passwd or a numeric uid")]
    UnknownUser(String),
    /// The user database could not be read.
    #[error("cannot read {} to look up user `{user}`", path.display())]
    UserDb {
        /// The user asked for.
        user: String,
        /// The file that could not be read.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The program (or /bin/sh for a shell command) does not exist.
    #[error("program `{program}` was not found; check its name and PATH, or run it through a shell")]
    ProgramNotFound {
        /// `argv[0]`.
        program: String,
    },
    /// The guest has no /bin/sh.
    #[error("this guest has no /bin/sh to run a shell command; run the program directly instead")]
    NoShell,
    /// Executing the program or switching to the user was refused.
    #[error("permission denied starting `{program}`{}; check the file's execute bit, or run the agent as root to switch users", as_user(.user))]
    StartDenied {
        /// `argv[0]`.
        program: String,
        /// The user asked for, if any.
        user: Option<String>,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The kernel refused the command line (E2BIG): one argument over 128 KiB, or all
    /// arguments and environment together over its limit.
    #[error(
        "the command line and environment are {bytes} bytes, more than the kernel accepts (at most 128 KiB per argument); pass large data through stdin or write it to a file first"
    )]
    CommandTooLong {
        /// Bytes of argv and env together.
        bytes: usize,
    },
    /// The guest is out of processes or memory.
    #[error(
        "the guest cannot start another process right now; wait for commands to finish or kill some jobs"
    )]
    NoResources {
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// Any other failure to start the program.
    #[error("could not start `{program}`")]
    Spawn {
        /// `argv[0]`.
        program: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The agent's reaper is gone, so the command's end cannot be observed.
    #[error("the agent lost track of process {pid}; its process reaper stopped, restart the agent")]
    ReaperGone {
        /// The process id.
        pid: u32,
    },
    /// The first ExecStream message did not carry `start`.
    #[error("the first ExecStream message must carry `start` (an ExecRequest); send it before any stdin")]
    StreamNotStarted,
    /// ExecStream carried a second `start`.
    #[error("ExecStream got a second `start`; one stream runs one command, open another stream for the next")]
    StreamRestarted,
    /// A unary Exec asked for a terminal.
    #[error(
        "a terminal (`tty`) needs the streaming call, which carries keystrokes and resizes; drop `tty` to run a command to completion"
    )]
    TtyNeedsStream,
    /// The guest could not give the command a pseudo-terminal.
    #[error("could not open a pseudo-terminal in the guest; is /dev/pts mounted (devpts)?")]
    NoPty {
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

fn as_user(user: &Option<String>) -> String {
    user.as_ref().map(|u| format!(" as user `{u}`")).unwrap_or_default()
}

impl ExecError {
    /// Classifies a failed `spawn`.
    pub(crate) fn from_spawn(program: &str, shell: bool, user: Option<&str>, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::NotFound if shell => ExecError::NoShell,
            io::ErrorKind::NotFound => ExecError::ProgramNotFound { program: program.to_owned() },
            io::ErrorKind::PermissionDenied => {
                ExecError::StartDenied { program: program.to_owned(), user: user.map(str::to_owned), source }
            }
            io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory => ExecError::NoResources { source },
            io::ErrorKind::ArgumentListTooLong => ExecError::CommandTooLong { bytes: 0 },
            _ => ExecError::Spawn { program: program.to_owned(), source },
        }
    }
}
