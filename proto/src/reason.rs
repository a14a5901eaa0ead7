//! [`Reason`]: why the agent refused a call, as a stable token it attaches to the gRPC
//! status in the `atoll-reason` metadata entry ([`REASON_KEY`]).
//!
//! The agent's messages are face-neutral (they name no RPC, no MCP tool, no `atoll`
//! command), since a stock gRPC client, the `atoll` CLI and the MCP server all show them.
//! Each face adds its own next step from the reason: a token the agent chose where it
//! knew what went wrong, so a face does not guess from the gRPC code or the words.

/// The metadata key of the reason on an error status.
pub const REASON_KEY: &str = "atoll-reason";

/// Why the agent refused a call, for the faces to say what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Nothing exists at the path.
    NotFound,
    /// The path names a directory where a file was needed (reading it).
    IsADirectory,
    /// The path, or a component of it, names a file where a directory was needed
    /// (listing or archiving it, creating something under it).
    NotADirectory,
    /// The parent directory of the path does not exist and was not to be created.
    ParentMissing,
    /// The command's working directory does not exist.
    CwdMissing,
    /// No job has the id.
    UnknownJob,
    /// The program to run does not exist.
    ProgramNotFound,
    /// A move's destination exists and the caller did not ask to replace it.
    DestinationExists,
    /// A directory's zip grew past the caller's cap.
    ZipOverCap,
}

impl Reason {
    const ALL: [Reason; 9] = [
        Reason::NotFound,
        Reason::IsADirectory,
        Reason::NotADirectory,
        Reason::ParentMissing,
        Reason::CwdMissing,
        Reason::UnknownJob,
        Reason::ProgramNotFound,
        Reason::DestinationExists,
        Reason::ZipOverCap,
    ];

    /// The token on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotFound => "not_found",
            Reason::IsADirectory => "is_a_directory",
            Reason::NotADirectory => "not_a_directory",
            Reason::ParentMissing => "parent_missing",
            Reason::CwdMissing => "cwd_missing",
            Reason::UnknownJob => "unknown_job",
            Reason::ProgramNotFound => "program_not_found",
            Reason::DestinationExists => "destination_exists",
            Reason::ZipOverCap => "zip_over_cap",
        }
    }

    /// The reason a token names; `None` for a token this build does not know (a newer
    /// agent), so a face just adds no next step.
    pub fn parse(token: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(Reason::parse("from_the_future"), None);
    }
}
