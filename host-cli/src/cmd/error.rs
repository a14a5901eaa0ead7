//! [`UsageError`], the error every subcommand may return when its command line parsed
//! but makes no sense; `app` gives it exit code 2. [`next_step`]: what to do about an
//! agent's refusal, in `atoll` commands.

use atoll_proto::reason::Reason;

/// A command line that parsed but makes no sense (e.g. `atoll cp a b` with two host paths).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// What a user does next about an agent's refusal, in `atoll` commands: the agent's own
/// message names none (an MCP client and stock gRPC clients read it too).
pub fn next_step(reason: Reason) -> &'static str {
    match reason {
        Reason::NotFound => "`atoll ls DIR` shows what a guest directory holds",
        Reason::IsADirectory => "`atoll ls PATH` lists a directory; `atoll download PATH` zips it",
        Reason::NotADirectory => "`atoll stat PATH` shows what a path is; `atoll cat PATH` prints a file",
        Reason::ParentMissing => "`atoll mkdir -p DIR` creates a directory with its parents",
        Reason::CwdMissing => "`atoll mkdir -p DIR` creates it; or pass another --cwd",
        Reason::UnknownJob => "`atoll jobs` lists the jobs started in this sandbox",
        Reason::ProgramNotFound => "`atoll exec --sh 'command -v NAME'` says whether a program is installed",
        Reason::DestinationExists => "`atoll mv -f` replaces it",
        Reason::ZipOverCap => "raise `atoll download --max-bytes`, or download a subdirectory",
    }
}
