//! Stat, Remove and MakeDir: the small file operations.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Entry, FsError, blocking, check_path, entry};
use crate::placement::quick;

/// Mode of a new directory when the caller leaves it at 0.
const DEFAULT_DIR_MODE: u32 = 0o755;

/// `lstat`s a path: a symlink is described, not followed.
pub async fn stat(path: &str) -> Result<Entry, FsError> {
    let path = check_path(path)?;
    quick(move || {
        let st = rustix::fs::lstat(&path).map_err(|e| FsError::io("stat", &path, e.into()))?;
        let target = || std::fs::read_link(&path).ok();
        Ok(entry(path.clone(), &st, target))
    })
    .await
}

/// Removes a file or symlink, or with `recursive` a directory and everything in it.
pub async fn remove(path: &str, recursive: bool) -> Result<(), FsError> {
    let path = check_path(path)?;
    blocking(move || remove_blocking(path, recursive)).await
}

fn remove_blocking(path: PathBuf, recursive: bool) -> Result<(), FsError> {
    // "/" and paths ending in ".." have no file name: resolve them to see what they name.
    let path = if path.file_name().is_none() {
        std::fs::canonicalize(&path).map_err(|e| FsError::io("remove", &path, e))?
    } else {
        path
    };
    if path.parent().is_none() {
        return Err(FsError::RemoveRoot);
    }
    let meta = std::fs::symlink_metadata(&path).map_err(|e| FsError::io("remove", &path, e))?;
    let result = if meta.is_dir() {
        if !recursive {
            return Err(FsError::DirNeedsRecursive(path));
        }
        std::fs::remove_dir_all(&path)
    } else {
        std::fs::remove_file(&path)
    };
    result.map_err(|e| FsError::io("remove", &path, e))
}

/// Creates a directory with `mode` (0: 0755); with `parents`, its missing parents too,
/// and an existing directory is then fine.
pub async fn make_dir(path: &str, parents: bool, mode: u32) -> Result<(), FsError> {
    let path = check_path(path)?;
    let mode = if mode == 0 { DEFAULT_DIR_MODE } else { mode & 0o7777 };
    blocking(move || make_dir_blocking(&path, parents, mode)).await
}

fn make_dir_blocking(path: &Path, parents: bool, mode: u32) -> Result<(), FsError> {
    if parents && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    DirBuilder::new().recursive(parents).mode(mode).create(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists if parents => FsError::AlreadyExists {
            path: path.to_path_buf(),
            hint: "it is not a directory; pick another path",
        },
        std::io::ErrorKind::AlreadyExists => FsError::AlreadyExists {
            path: path.to_path_buf(),
            hint: "creating it with its parents accepts an existing directory",
        },
        std::io::ErrorKind::NotFound if !parents => FsError::ParentMissing {
            path: path.parent().unwrap_or(Path::new("/")).to_path_buf(),
            hint: "create it first, or ask for missing parents to be created too",
        },
        _ => FsError::io("create directory", path, e),
    })?;
    // The umask may have dropped bits the caller asked for.
    std::fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(|e| FsError::io("set the mode of", path, e))
}
