//! Where atoll keeps templates (data dir) and running sandboxes (state dir).
//!
//! Data: `$ATOLL_DATA_DIR`, else `$XDG_DATA_HOME/atoll`, else `$HOME/.local/share/atoll`.
//! State: `$ATOLL_STATE_DIR`, else `$XDG_STATE_HOME/atoll`, else `$HOME/.local/state/atoll`.

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

/// The state directory (not created).
pub fn state_dir() -> Result<PathBuf, DirsError> {
    resolve("ATOLL_STATE_DIR", "XDG_STATE_HOME", ".local/state")
        .ok_or(DirsError::NoHome { what: "sandboxes", var: "ATOLL_STATE_DIR" })
}

/// The state directory, created with mode 0700 if missing.
pub fn ensure_state_dir() -> Result<PathBuf, DirsError> {
    let dir = state_dir()?;
    ensure_private_dir(&dir).map_err(|source| DirsError::Create { path: dir.clone(), source })?;
    Ok(dir)
}

fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.is_dir() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        // `recursive` applies the mode to every component it makes, but the umask may
        // have narrowed or the directory may predate us: set it exactly.
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
