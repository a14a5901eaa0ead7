//! Files in the guest: streamed reads, atomic writes, listings and the small operations.
//! Callers hand in and get back this module's own types ([`Entry`], [`read::ReadFile`],
//! [`write::WriteHeader`], [`list::ListDir`]...); the service layer converts the wire
//! messages.
//!
//! - [`read`]: a file or a slice of it, streamed in chunks from a blocking reader.
//! - [`mod@write`]: temp file + rename, so an interrupted write changes nothing; fsynced
//!   too when the caller asks.
//! - [`list`]: directory listings, optionally recursive, capped and sorted.
//! - [`ops`]: stat, remove, mkdir. [`rename`]: move, with a copy fallback across file
//!   systems.
//! - [`error`]: [`FsError`], the one error type of this module.
//!
//! Every path a caller hands in goes through [`check_path`] first: it must be absolute
//! and free of NUL bytes.

pub mod error;
pub mod list;
pub mod ops;
pub mod read;
pub mod rename;
pub mod write;

use std::fs::FileType;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use rustix::fs::Stat;

pub use error::FsError;

/// Checks a caller's path: absolute, no NUL bytes.
pub fn check_path(path: &str) -> Result<PathBuf, FsError> {
    if path.is_empty() {
        return Err(FsError::EmptyPath);
    }
    if path.contains('\0') {
        return Err(FsError::NulByte(path.to_owned()));
    }
    if !path.starts_with('/') {
        return Err(FsError::Relative(path.to_owned()));
    }
    Ok(PathBuf::from(path))
}

/// Runs blocking file work on tokio's blocking pool.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, FsError>
where
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|_| FsError::WorkerGone)?
}

/// What a directory entry is (not following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (FIFO, socket, device).
    #[default]
    Other,
}

/// One file as Stat and ListDir describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// Its path as text (lossy when the name is not UTF-8).
    pub path: String,
    /// Its exact path bytes when they are not UTF-8; else empty.
    pub raw_path: Vec<u8>,
    /// What it is.
    pub kind: FileKind,
    /// Size in bytes (0 in a names-only listing).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Last modification, in milliseconds since the epoch.
    pub mtime_unix_ms: i64,
    /// A symlink's target; else empty.
    pub symlink_target: String,
}

/// The kind of a file type (not following symlinks).
pub(crate) fn file_type(ft: rustix::fs::FileType) -> FileKind {
    use rustix::fs::FileType as T;
    match ft {
        T::Symlink => FileKind::Symlink,
        T::Directory => FileKind::Dir,
        T::RegularFile => FileKind::File,
        _ => FileKind::Other,
    }
}

/// A person's name for a file type that is neither file, directory nor symlink.
pub(crate) fn special_kind(ft: FileType) -> &'static str {
    if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

/// An [`Entry`] for a file already `lstat`ed as `st`, named `name` on the wire;
/// `target` reads a symlink's target, and is called only for symlinks.
pub(crate) fn entry(name: PathBuf, st: &Stat, target: impl FnOnce() -> Option<PathBuf>) -> Entry {
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let symlink_target = match ft {
        rustix::fs::FileType::Symlink => {
            target().map(|t| t.to_string_lossy().into_owned()).unwrap_or_default()
        }
        _ => String::new(),
    };
    // Whole milliseconds, rounded toward zero on either side of the epoch.
    let mtime_ns = i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
    let mtime_unix_ms = i64::try_from(mtime_ns / 1_000_000).unwrap_or(0);
    let (path, raw_path) = wire_path(name);
    Entry {
        path,
        kind: file_type(ft),
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        mtime_unix_ms,
        symlink_target,
        raw_path,
    }
}

/// A path as an [`Entry`] carries it: as text, plus its exact bytes when they are not
/// UTF-8. Takes the path by value so the usual, UTF-8 case reuses its buffer.
pub(crate) fn wire_path(name: PathBuf) -> (String, Vec<u8>) {
    match name.into_os_string().into_string() {
        Ok(text) => (text, Vec::new()),
        Err(raw) => (raw.to_string_lossy().into_owned(), raw.into_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_clean() {
        assert!(matches!(check_path(""), Err(FsError::EmptyPath)));
        assert!(matches!(check_path("root/x"), Err(FsError::Relative(_))));
        assert!(matches!(check_path("/a\0b"), Err(FsError::NulByte(_))));
        assert_eq!(check_path("/root/x").unwrap(), PathBuf::from("/root/x"));
    }
}
