//! Directories as zip archives, both ways.
//!
//! - [`download`]: a directory streamed out as a zip, built on a blocking thread that
//!   feeds a bounded channel, so the archive is never whole in memory.
//! - [`upload`]: a zip streamed in, spooled to a temp file, every entry checked, then
//!   extracted with each file written atomically.
//!
//! [`ArchiveError`] is the one error type; path and disk problems are [`FsError`]s
//! inside it.

pub mod download;
mod method;
pub mod upload;

use std::path::PathBuf;

use atoll_proto::units::{human_bytes, plural};

use crate::files::FsError;

/// An archive operation that failed, with a message that says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A path or disk problem.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The archive grew past the caller's `max_bytes`.
    #[error(
        "the zip of {} passed the cap of {} it was given; the directory holds {} in {}",
        .path.display(), human_bytes(*.cap), human_bytes(*.total), plural(*.files, "file", "files")
    )]
    TooLarge {
        /// The directory.
        path: PathBuf,
        /// The caller's cap.
        cap: u64,
        /// Bytes of regular files under the directory.
        total: u64,
        /// Regular files under the directory.
        files: u64,
    },
    /// Building the archive failed for a reason other than the cap or the client.
    #[error("cannot build the zip of {}", .path.display())]
    Build {
        /// The directory.
        path: PathBuf,
        /// What the zip writer or the file read reported.
        #[source]
        source: zip::result::ZipError,
    },
    /// The uploaded bytes are not a zip archive the agent can read.
    #[error("the uploaded data is not a readable zip archive; send a zip file")]
    NotZip(#[source] zip::result::ZipError),
    /// An entry of the uploaded zip is refused; nothing was extracted.
    #[error("zip entry {name:?} {reason}; nothing was extracted")]
    BadEntry {
        /// The entry's name as stored in the archive.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// An entry's data could not be decompressed while extracting.
    #[error("zip entry {name:?} is corrupt; entries before it were extracted, send a sound archive")]
    Corrupt {
        /// The entry's name.
        name: String,
        /// What the decompressor reported.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_large_says_the_sizes() {
        let e = ArchiveError::TooLarge { path: "/w".into(), cap: 1024 * 1024, total: 3_355_443, files: 3 };
        let msg = e.to_string();
        assert!(msg.contains("1 MiB") && msg.contains("3.2 MiB") && msg.contains("3 files"), "{msg}");
    }
}
