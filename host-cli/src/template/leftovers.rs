//! What an interrupted build leaves behind, and how it is kept from outliving atoll.
//!
//! A build, a template save or a cached install stages its template in a directory
//! named for the process doing it (`.NAME.build-PID`, `.NAME.save-PID`,
//! `.NAME.cached-PID` beside the templates; `layout-PID-*` in the image cache's
//! `tmp/`), removed when the work ends. Ctrl-C or SIGTERM ends atoll before that
//! clean-up runs, so the next build in the same place removes every staging directory
//! whose process is gone ([`sweep`]); one whose pid is alive is left alone, even if the
//! pid was reused (a few stale bytes are better than another build's files deleted).
//!
//! The tools a build runs (skopeo, mkfs.ext4, tar, cp) get SIGKILL when atoll ends
//! ([`super::tools`]), so none keeps writing into a directory nobody will commit.

use std::path::Path;

/// The suffixes a staging directory's name ends with, before `-PID`.
const STAGING_KINDS: [&str; 3] = [".build", ".save", ".cached"];

/// The process a staging entry name belongs to: `.NAME.KIND-PID` (a template's
/// staging) or `layout-PID-RANDOM` (an image fetch's), else `None` (not ours).
fn owner(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix("layout-") {
        return rest.split('-').next()?.parse().ok();
    }
    if !name.starts_with('.') {
        return None;
    }
    let (head, pid) = name.rsplit_once('-')?;
    STAGING_KINDS.iter().any(|k| head.ends_with(k)).then(|| pid.parse().ok())?
}

/// Removes the staging directories in `dir` whose process is gone; how many.
/// Errors are ignored: a leftover that cannot be removed now is tried next time.
pub fn sweep(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else { continue };
        // Not a directory (a link planted there, a file): not ours to follow or delete.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) || super::building::alive(pid) {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            tracing::info!(path = %entry.path().display(), "removed what an interrupted build left");
            removed += 1;
        }
    }
    removed
}

/// Removes this process's own staging directories, for an interrupted `create --image`
/// whose build thread is still running: its tools are killed and reaped first, so none
/// writes there again. What atoll's own build thread writes between this and atoll's
/// exit (a layer being unpacked) is removed by the next [`sweep`].
pub fn remove_own() {
    if !super::tools::stop_all(std::time::Duration::from_secs(10)) {
        tracing::warn!("a build tool was not reaped within 10 s of SIGKILL");
    }
    let Ok(data) = crate::vmm::dirs::data_dir() else { return };
    let me = std::process::id();
    for dir in [data.join("templates"), data.join("images/tmp")] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let ours = entry.file_name().to_str().and_then(owner) == Some(me);
            if ours && entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_names_give_their_process() {
        assert_eq!(owner(".web.build-1234"), Some(1234));
        assert_eq!(owner(".my-app.save-7"), Some(7));
        assert_eq!(owner(".x.cached-99"), Some(99));
        assert_eq!(owner("layout-4321-abc"), Some(4321));
        assert_eq!(owner("web"), None);
        assert_eq!(owner(".web.old"), None);
        assert_eq!(owner(".builds"), None);
        assert_eq!(owner(".web.build-x"), None);
        assert_eq!(owner(".web-12"), None);
    }

    #[test]
    fn only_a_dead_process_s_directories_are_removed() {
        let d = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22, so this pid never runs.
        let dead = d.path().join(".t.build-99999999");
        let live = d.path().join(format!(".t.build-{}", std::process::id()));
        let layout = d.path().join("layout-99999999-q");
        let template = d.path().join("t");
        for p in [&dead, &live, &layout, &template] {
            std::fs::create_dir_all(p.join("root")).unwrap();
        }
        // A link named like a leftover is not followed.
        let target = d.path().join("t/root");
        std::os::unix::fs::symlink(&target, d.path().join(".u.save-99999999")).unwrap();
        assert_eq!(sweep(d.path()), 2);
        assert!(!dead.exists() && !layout.exists());
        assert!(live.exists() && template.exists() && target.exists());
    }
}
