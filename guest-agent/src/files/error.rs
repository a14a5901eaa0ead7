//! `FsError`: everything that can go wrong with a file operation, phrased for the caller.
//!
//! Raw `io::Error`s are classified once, in [`FsError::io`], so that a missing file is
//! always `NotFound`, a refused open always `PermissionDenied`, and so on; only errors
//! with no better name end up as [`FsError::Io`].

use std::io;
use std::path::{Path, PathBuf};

use atoll_proto::units::{human_bytes, size_and_limit};

/// A file operation that failed, with a message that says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The request left the path empty.
    #[error("the path is empty; paths must be absolute, e.g. /root/x")]
    EmptyPath,
    /// The path does not start with `/`.
    #[error("path {0:?} is relative; paths must be absolute, e.g. /root/x")]
    Relative(String),
    /// The path contains a NUL byte, which no file name can hold.
    #[error("path {0:?} contains a NUL byte; file names cannot contain NUL")]
    NulByte(String),
    /// Nothing exists at the path.
    #[error("{} does not exist", .0.display())]
    NotFound(PathBuf),
    /// A parent directory is missing and the caller asked not to create it.
    #[error("parent directory {} does not exist; {hint}", .path.display())]
    ParentMissing {
        /// The missing directory.
        path: PathBuf,
        /// What to do about it.
        hint: &'static str,
    },
    /// The kernel refused the operation.
    #[error("permission denied: cannot {op} {}", .path.display())]
    PermissionDenied {
        /// What the agent tried ("write", "list", ...).
        op: &'static str,
        /// The path it tried it on.
        path: PathBuf,
    },
    /// The file system is mounted read-only.
    #[error("cannot {op} {}: the file system is read-only", .path.display())]
    ReadOnly {
        /// What the agent tried.
        op: &'static str,
        /// The path it tried it on.
        path: PathBuf,
    },
    /// The directory exists but its file system does not let new files be made in it
    /// (`/proc`, `/sys`).
    #[error("cannot create files in {}: its file system does not allow it", .0.display())]
    CannotCreateIn(PathBuf),
    /// A directory where a file was expected.
    #[error("{} is a directory; {hint}", .path.display())]
    IsADirectory {
        /// The directory.
        path: PathBuf,
        /// Which call to use instead.
        hint: &'static str,
    },
    /// A file (or a path through a file) where a directory was expected.
    #[error("{} is not a directory; {hint}", .path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// Which call to use instead.
        hint: &'static str,
    },
    /// A FIFO, socket or device where a regular file was expected.
    #[error("{} is a {kind}, not a regular file; only regular files can be read", .path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// "FIFO", "socket", "character device", ...
        kind: &'static str,
    },
    /// Something already exists where the caller wanted to create something.
    #[error("{} already exists; {hint}", .path.display())]
    AlreadyExists {
        /// The existing path.
        path: PathBuf,
        /// How to replace or accept it.
        hint: &'static str,
    },
    /// A move's destination exists and the caller did not ask to replace it.
    #[error("{} already exists; nothing was moved", .0.display())]
    DestinationExists(PathBuf),
    /// A slice of known size is over the caller's `max_bytes`.
    #[error("{what} is {}, over the {} read limit; read a slice with offset/length", size_and_limit(*.size, *.limit).0, size_and_limit(*.size, *.limit).1)]
    TooLarge {
        /// "/x/y" or "the slice of /x/y from offset N".
        what: String,
        /// Bytes the read would return.
        size: u64,
        /// The caller's cap.
        limit: u64,
    },
    /// A file that reports no size (`/proc`, `/sys`) turned out longer than `max_bytes`.
    #[error("{} holds more than the {} read limit; read a slice with offset/length", .path.display(), human_bytes(*.limit))]
    TooLargeUnsized {
        /// The file.
        path: PathBuf,
        /// The caller's cap.
        limit: u64,
    },
    /// The read would start past the end of the file.
    #[error("offset {offset} is past the end of {} ({size} bytes); pass an offset of at most {size}", .path.display())]
    OffsetPastEnd {
        /// The file.
        path: PathBuf,
        /// The requested offset.
        offset: u64,
        /// The file's size.
        size: u64,
    },
    /// A directory was named for removal without `recursive`.
    #[error("{} is a directory; remove it recursively to delete it and everything in it", .0.display())]
    DirNeedsRecursive(PathBuf),
    /// The destination of a move is a directory that still holds entries.
    #[error("{} is a directory that is not empty; remove it first or move to another path", .0.display())]
    NotEmpty(PathBuf),
    /// Removing `/` is never what anyone wants.
    #[error("refusing to remove the root directory /; name a path under it")]
    RemoveRoot,
    /// A directory cannot be moved into itself.
    #[error("cannot move {} into itself ({}); pick a destination outside it", .from.display(), .to.display())]
    MoveIntoItself {
        /// The directory being moved.
        from: PathBuf,
        /// The destination inside it.
        to: PathBuf,
    },
    /// A FIFO, socket or device cannot be copied to another file system.
    #[error("{} is a {kind}, which cannot be moved across file systems; remove it or move within one file system", .path.display())]
    CannotCopySpecial {
        /// The special file.
        path: PathBuf,
        /// "FIFO", "socket", ...
        kind: &'static str,
    },
    /// The disk is full.
    #[error("no space left on the device while trying to {op} {}; free some space in the guest", .path.display())]
    NoSpace {
        /// What the agent tried.
        op: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// The path's name (or one of its components) is too long or otherwise invalid.
    #[error("{} is not a valid file name here (too long, or too many symlinks); shorten it", .0.display())]
    BadName(PathBuf),
    /// A write stream did not start with its header.
    #[error("the first message must be a header naming the file; send the header, then data")]
    MissingHeader,
    /// A write stream sent a second header.
    #[error("the stream sent a second header; send one header first, then only data")]
    SecondHeader,
    /// The client's stream failed before it ended cleanly; nothing was changed.
    #[error("the stream for {} broke before it ended ({reason}); nothing was changed", .path.display())]
    StreamBroken {
        /// The file being written.
        path: PathBuf,
        /// What the transport reported.
        reason: String,
    },
    /// An I/O error with no more specific name.
    #[error("cannot {op} {}", .path.display())]
    Io {
        /// What the agent tried.
        op: &'static str,
        /// The path it tried it on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A blocking worker of the agent died (a bug in the agent).
    #[error("the agent's worker thread for this request stopped unexpectedly; retry the call")]
    WorkerGone,
}

impl FsError {
    /// Classifies an `io::Error` from trying to `op` on `path`.
    pub fn io(op: &'static str, path: &Path, err: io::Error) -> FsError {
        let path = path.to_path_buf();
        match err.kind() {
            io::ErrorKind::NotFound => FsError::NotFound(path),
            io::ErrorKind::PermissionDenied => FsError::PermissionDenied { op, path },
            io::ErrorKind::ReadOnlyFilesystem => FsError::ReadOnly { op, path },
            io::ErrorKind::IsADirectory => {
                FsError::IsADirectory { path, hint: "name a file, not a directory" }
            }
            io::ErrorKind::NotADirectory => FsError::NotADirectory {
                path,
                hint: "a component of the path is a file, so nothing can be under it; check the path",
            },
            io::ErrorKind::AlreadyExists => {
                FsError::AlreadyExists { path, hint: "remove it first or pick another path" }
            }
            io::ErrorKind::DirectoryNotEmpty => FsError::NotEmpty(path),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => FsError::NoSpace { op, path },
            io::ErrorKind::InvalidFilename => FsError::BadName(path),
            _ if err.raw_os_error() == Some(libc::ELOOP) => FsError::BadName(path),
            _ => FsError::Io { op, path, source: err },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_classified() {
        let p = Path::new("/x");
        let e = |kind| FsError::io("read", p, io::Error::from(kind));
        assert!(matches!(e(io::ErrorKind::NotFound), FsError::NotFound(_)));
        assert!(matches!(e(io::ErrorKind::PermissionDenied), FsError::PermissionDenied { .. }));
        assert!(matches!(e(io::ErrorKind::IsADirectory), FsError::IsADirectory { .. }));
        assert!(matches!(e(io::ErrorKind::Interrupted), FsError::Io { .. }));
    }
}
