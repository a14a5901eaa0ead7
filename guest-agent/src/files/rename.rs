//! Move: `rename(2)`, and copy + remove when the two paths are on different file
//! systems.
//!
//! Without `overwrite` the rename uses `RENAME_NOREPLACE`, so an existing destination
//! is never replaced, not even by a race. Across file systems the copy is built under a
//! temp name next to the destination and renamed into place, so a failed copy leaves
//! neither a half destination nor a damaged source; the source is removed last.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, RenameFlags, renameat_with};
use walkdir::WalkDir;

use super::write::sync_dir;
use super::{FsError, blocking, check_path, special_kind};

/// Moves `from` to `to`; an existing `to` is replaced only with `overwrite`.
pub async fn rename(from: &str, to: &str, overwrite: bool) -> Result<(), FsError> {
    let from = check_path(from)?;
    let to = check_path(to)?;
    blocking(move || rename_blocking(&from, &to, overwrite)).await
}

fn rename_blocking(from: &Path, to: &Path, overwrite: bool) -> Result<(), FsError> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| FsError::io("move", from, e))?;
    let parent = to.parent().ok_or_else(|| FsError::AlreadyExists {
        path: to.to_path_buf(),
        hint: "the root directory cannot be replaced; pick a path under it",
    })?;
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(FsError::NotADirectory {
                path: parent.to_path_buf(),
                hint: "the destination's parent must be a directory",
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(FsError::ParentMissing {
                path: parent.to_path_buf(),
                hint: "create it first, before moving there",
            });
        }
        Err(e) => return Err(FsError::io("move into", parent, e)),
    }
    if meta.is_dir() && inside(from, to) {
        return Err(FsError::MoveIntoItself { from: from.to_path_buf(), to: to.to_path_buf() });
    }
    let flags = if overwrite { RenameFlags::empty() } else { RenameFlags::NOREPLACE };
    let result = match renameat_with(CWD, from, CWD, to, flags) {
        // Some file systems do not support RENAME_NOREPLACE: check, then rename.
        Err(rustix::io::Errno::INVAL) if !overwrite => {
            if std::fs::symlink_metadata(to).is_ok() {
                Err(io::Error::from(io::ErrorKind::AlreadyExists))
            } else {
                std::fs::rename(from, to)
            }
        }
        other => other.map_err(io::Error::from),
    };
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => copy_then_remove(from, &meta, to, overwrite)?,
        Err(e) => return Err(rename_error(from, to, &meta, e)),
    }
    sync_dir(parent)
}

/// Is `to` `from` itself or somewhere under it (after resolving symlinks in the parents)?
fn inside(from: &Path, to: &Path) -> bool {
    let from = std::fs::canonicalize(from).unwrap_or_else(|_| from.to_path_buf());
    let to = match (to.parent().map(std::fs::canonicalize), to.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => to.to_path_buf(),
    };
    to.starts_with(from)
}

fn rename_error(from: &Path, to: &Path, meta: &Metadata, e: io::Error) -> FsError {
    let to = to.to_path_buf();
    match e.kind() {
        io::ErrorKind::AlreadyExists => FsError::DestinationExists(to),
        io::ErrorKind::IsADirectory => FsError::IsADirectory {
            path: to,
            hint: "a file cannot replace a directory; remove the directory first",
        },
        io::ErrorKind::NotADirectory if meta.is_dir() => FsError::NotADirectory {
            path: to,
            hint: "a directory cannot replace a file; remove the file first",
        },
        io::ErrorKind::DirectoryNotEmpty => FsError::NotEmpty(to),
        _ => FsError::io("move", from, e),
    }
}

/// The cross-file-system fallback: copy under a temp name beside `to`, rename it into
/// place, then remove `from`.
fn copy_then_remove(from: &Path, meta: &Metadata, to: &Path, overwrite: bool) -> Result<(), FsError> {
    let parent = to.parent().unwrap_or(Path::new("/"));
    let existing = std::fs::symlink_metadata(to).ok();
    if existing.is_some() && !overwrite {
        return Err(FsError::DestinationExists(to.to_path_buf()));
    }
    let staging = tempfile::Builder::new()
        .prefix(".atoll-move-")
        .tempdir_in(parent)
        .map_err(|e| FsError::io("create a directory in", parent, e))?;
    let staged = staging.path().join("entry");
    if meta.is_dir() {
        copy_tree(from, &staged)?;
    } else {
        copy_one(from, meta, &staged)?;
    }
    if let Some(existing) = existing {
        // rename(2) replaces files and empty directories; anything else is refused there.
        if existing.is_dir() && meta.is_dir() {
            std::fs::remove_dir(to).map_err(|e| rename_error(from, to, meta, e))?;
        }
    }
    std::fs::rename(&staged, to).map_err(|e| rename_error(from, to, meta, e))?;
    let removed = if meta.is_dir() { std::fs::remove_dir_all(from) } else { std::fs::remove_file(from) };
    removed.map_err(|e| FsError::io("remove the moved source", from, e))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), FsError> {
    for item in WalkDir::new(from).follow_links(false) {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(from).to_path_buf();
            FsError::io("copy", &path, e.into_io_error().unwrap_or_else(|| io::Error::other("walk failed")))
        })?;
        let rel = item.path().strip_prefix(from).unwrap_or(Path::new(""));
        let dest: PathBuf = if rel.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rel) };
        let meta = item.path().symlink_metadata().map_err(|e| FsError::io("copy", item.path(), e))?;
        copy_one(item.path(), &meta, &dest)?;
    }
    Ok(())
}

/// Copies one entry (not its contents, for a directory), keeping its mode.
fn copy_one(from: &Path, meta: &Metadata, to: &Path) -> Result<(), FsError> {
    let ft = meta.file_type();
    let result = if ft.is_dir() {
        std::fs::create_dir(to).and_then(|()| std::fs::set_permissions(to, meta.permissions()))
    } else if ft.is_file() {
        std::fs::copy(from, to).and_then(|_| {
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.permissions().mode()))
        })
    } else if ft.is_symlink() {
        std::fs::read_link(from).and_then(|target| std::os::unix::fs::symlink(target, to))
    } else {
        return Err(FsError::CannotCopySpecial { path: from.to_path_buf(), kind: special_kind(ft) });
    };
    result.map_err(|e| FsError::io("copy", from, e))
}
