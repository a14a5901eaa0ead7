//! Where atoll keeps templates (data dir) and running sandboxes (state dir).
//!
//! Data: `$ATOLL_DATA_DIR`, else `$XDG_DATA_HOME/atoll`, else `$HOME/.local/share/atoll`.
//! State: `$ATOLL_STATE_DIR`, else `$XDG_STATE_HOME/atoll`, else `$HOME/.local/state/atoll`.
//!
//! The state directory holds every sandbox's QMP socket, agent port and records, from
//! which paths are derived: one that another user owns or can write could steer atoll
//! (swap a record, a socket, a disk), so it is refused unless it is ours and mode 0700
//! (it is created so).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory could not be found or made.
#[derive(Debug, thiserror::Error)]
pub enum DirsError {
    /// Neither the atoll variable, nor the XDG one, nor `$HOME` is set.
    #[error("cannot tell where atoll keeps its {what}: set ${var} (or $HOME)")]
    NoHome {
        /// "templates" or "sandboxes".
        what: &'static str,
        /// The atoll-specific variable to set.
        var: &'static str,
    },
    /// The state directory exists but another user owns it or others may enter it.
    #[error(
        "the atoll state directory {} {why}; it must be yours and mode 0700 (`chmod 700` it if it is yours, or set $ATOLL_STATE_DIR to a directory of your own)",
        path.display()
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong, in words.
        why: String,
    },
    /// The state directory's path holds a comma, which QEMU's option syntax would split.
    #[error(
        "the atoll state directory {} has a comma in its path, which QEMU options cannot carry safely; set $ATOLL_STATE_DIR to a path without commas",
        .0.display()
    )]
    Comma(PathBuf),
    /// The state directory could not be created.
    #[error("could not create the atoll state directory {}; check its permissions or set $ATOLL_STATE_DIR", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The directory holding `templates/<name>/`.
pub fn data_dir() -> Result<PathBuf, DirsError> {
    resolve("ATOLL_DATA_DIR", "XDG_DATA_HOME", ".local/share")
        .ok_or(DirsError::NoHome { what: "templates", var: "ATOLL_DATA_DIR" })
}

/// The directory of templates: `<data>/templates`.
pub fn templates_dir() -> Result<PathBuf, DirsError> {
    Ok(data_dir()?.join("templates"))
}

/// The state directory (not created), checked to be private if it exists.
pub fn state_dir() -> Result<PathBuf, DirsError> {
    let dir = resolve("ATOLL_STATE_DIR", "XDG_STATE_HOME", ".local/state")
        .ok_or(DirsError::NoHome { what: "sandboxes", var: "ATOLL_STATE_DIR" })?;
    // Sockets, logs and disks under it go into QEMU options (`path=...,server=on`).
    if dir.as_os_str().as_encoded_bytes().contains(&b',') {
        return Err(DirsError::Comma(dir));
    }
    match std::fs::metadata(&dir) {
        Ok(meta) => check_private(&dir, &meta)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(DirsError::Create { path: dir, source }),
    }
    Ok(dir)
}

/// Refuses a directory that is not ours or that others may enter (mode beyond 0700).
fn check_private(dir: &Path, meta: &std::fs::Metadata) -> Result<(), DirsError> {
    use std::os::unix::fs::MetadataExt;
    let bad = |why: String| Err(DirsError::NotPrivate { path: dir.into(), why });
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() {
        return bad("is not a directory".into());
    }
    if meta.uid() != me {
        return bad(format!("belongs to uid {}, not to you (uid {me})", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return bad(format!("has mode {:04o}, which lets others in", meta.mode() & 0o7777));
    }
    Ok(())
}

/// The state directory, created with mode 0700 if missing.
pub fn ensure_state_dir() -> Result<PathBuf, DirsError> {
    let dir = state_dir()?;
    ensure_private_dir(&dir).map_err(|source| DirsError::Create { path: dir.clone(), source })?;
    // Made by us just now, or by someone else in between: check it either way.
    let meta = std::fs::metadata(&dir).map_err(|source| DirsError::Create { path: dir.clone(), source })?;
    check_private(&dir, &meta)?;
    Ok(dir)
}

fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        // The umask may have narrowed the mode: set it exactly.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The directory from the first variable set, made absolute: socket paths and agent
/// addresses built from it must not depend on the working directory.
fn resolve(own: &str, xdg: &str, home_rel: &str) -> Option<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = non_empty(own)
        .or_else(|| non_empty(xdg).map(|d| d.join("atoll")))
        .or_else(|| non_empty("HOME").map(|h| h.join(home_rel).join("atoll")))?;
    Some(std::path::absolute(&dir).unwrap_or(dir))
}
