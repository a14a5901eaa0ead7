//! [`Beneath`]: a directory handle that every entry of an unpacked archive is created
//! through, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
//!
//! The names reaching it have been checked already (`unpack` refuses `..`, absolute
//! paths and symlink entries); this is the second wall: whatever a name says, the
//! kernel resolves it only below the handle and through no link, so an entry cannot
//! land above the staging folder even if that check had a bug. Files are created with
//! `O_CREAT | O_EXCL` (never opened over something already there), folders one
//! component at a time with `mkdirat` on a handle opened the same way.
//!
//! Where `openat2` is missing (Linux before 5.6, or a seccomp filter that refuses it)
//! unpacking fails closed with [`ArchiveError::NoOpenat2`]; there is no fallback walk.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::ArchiveError;

const RESOLVE: ResolveFlags =
    ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);

/// A directory that entries are created beneath, never above or through a link.
pub(crate) struct Beneath<'a> {
    root: BorrowedFd<'a>,
}

impl<'a> Beneath<'a> {
    /// Entries go below `root` (a directory handle; `O_PATH` is enough).
    pub(crate) fn new(root: BorrowedFd<'a>) -> Self {
        Beneath { root }
    }

    /// Creates the folder `rel` and any missing folders above it (mode 0777 less the
    /// umask, as `mkdir` does). An existing folder is fine; a file in the way is not.
    pub(crate) fn create_dir_all(&self, rel: &Path, entry: &str) -> Result<OwnedFd, ArchiveError> {
        let mut cur = self.open_dir(Path::new("."), entry)?;
        // Every component goes to the kernel as it is, `..` and `/` too: refusing them is
        // RESOLVE_BENEATH's job here, not a check of ours.
        for part in rel.components().map(|c| c.as_os_str()) {
            match rustix::fs::mkdirat(&cur, part, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(self.fail(entry, e)),
            }
            cur = self.open_dir_in(cur.as_fd(), part, entry)?;
        }
        Ok(cur)
    }

    /// Creates the file `rel` (its folder must exist), refusing one already there, with
    /// mode 0600 until the caller sets the entry's own.
    pub(crate) fn create_file(&self, rel: &Path, entry: &str) -> Result<File, ArchiveError> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat2(self.root, rel, flags, Mode::from_raw_mode(0o600), RESOLVE)
            .map(File::from)
            .map_err(|e| self.fail(entry, e))
    }

    fn open_dir(&self, rel: &Path, entry: &str) -> Result<OwnedFd, ArchiveError> {
        self.open_dir_in(self.root, rel.as_os_str(), entry)
    }

    fn open_dir_in(&self, dir: BorrowedFd<'_>, name: &OsStr, entry: &str) -> Result<OwnedFd, ArchiveError> {
        // No O_NOFOLLOW: with it a link would open as itself and read "not a directory";
        // RESOLVE_NO_SYMLINKS refuses it (ELOOP) at the last component too.
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::openat2(dir, name, flags, Mode::empty(), RESOLVE).map_err(|e| self.fail(entry, e))
    }

    fn fail(&self, entry: &str, e: Errno) -> ArchiveError {
        let entry = entry.to_owned();
        match e {
            // RESOLVE_BENEATH refused a name that climbs out (`..`, absolute).
            Errno::XDEV => ArchiveError::Escapes(entry),
            // RESOLVE_NO_SYMLINKS, or O_NOFOLLOW on the last component.
            Errno::LOOP => ArchiveError::ThroughLink(entry),
            Errno::EXIST => ArchiveError::Duplicate(entry),
            Errno::NOTDIR => ArchiveError::FileAndDir(entry),
            Errno::NOSYS => ArchiveError::NoOpenat2,
            e => ArchiveError::Io { what: "create", path: entry.into(), source: e.into() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging() -> (tempfile::TempDir, tempfile::TempDir, OwnedFd) {
        let outer = tempfile::tempdir().unwrap();
        let inner = tempfile::tempdir_in(outer.path()).unwrap();
        let fd = rustix::fs::open(inner.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        (outer, inner, fd)
    }

    /// Names the archive check would refuse, handed straight to the handle: the kernel
    /// refuses them too, and nothing appears above the staging folder.
    #[test]
    fn names_that_climb_out_are_refused_by_the_kernel() {
        let (outer, inner, fd) = staging();
        let b = Beneath::new(fd.as_fd());
        for name in ["../x", "a/../../x", "/tmp/abs-from-a-zip"] {
            if name.starts_with("a/") {
                b.create_dir_all(Path::new("a"), "a/").unwrap();
            }
            let err = b.create_file(Path::new(name), name).unwrap_err();
            assert!(matches!(&err, ArchiveError::Escapes(n) if n == name), "{name}: {err}");
            let err = b.create_dir_all(Path::new(name), name).unwrap_err();
            assert!(matches!(&err, ArchiveError::Escapes(_)), "{name}: {err}");
        }
        assert!(!outer.path().join("x").exists());
        assert!(!Path::new("/tmp/abs-from-a-zip").exists());
        assert!(inner.path().join("a").is_dir(), "a legitimate folder was made");
    }

    /// A link planted in the staging folder (pointing outside, or inside) is never
    /// followed, as a folder on the way or as the file itself.
    #[test]
    fn links_in_the_staging_folder_are_never_followed() {
        let (outer, inner, fd) = staging();
        let away = outer.path().join("away");
        std::fs::create_dir(&away).unwrap();
        std::os::unix::fs::symlink(&away, inner.path().join("l")).unwrap();
        std::os::unix::fs::symlink(away.join("f"), inner.path().join("f")).unwrap();
        std::os::unix::fs::symlink(".", inner.path().join("self")).unwrap();
        let b = Beneath::new(fd.as_fd());
        for name in ["l/x", "self/x"] {
            let err = b.create_file(Path::new(name), name).unwrap_err();
            assert!(matches!(err, ArchiveError::ThroughLink(_)), "{name}: {err}");
            let err = b.create_dir_all(Path::new(name), name).unwrap_err();
            assert!(matches!(err, ArchiveError::ThroughLink(_)), "{name}: {err}");
        }
        let err = b.create_file(Path::new("f"), "f").unwrap_err();
        assert!(matches!(err, ArchiveError::Duplicate(_) | ArchiveError::ThroughLink(_)), "{err}");
        assert_eq!(std::fs::read_dir(&away).unwrap().count(), 0, "nothing written through a link");
    }

    #[test]
    fn files_are_never_opened_over_what_is_there() {
        let (_outer, inner, fd) = staging();
        let b = Beneath::new(fd.as_fd());
        b.create_dir_all(Path::new("d/e"), "d/e/").unwrap();
        drop(b.create_file(Path::new("d/e/f"), "d/e/f").unwrap());
        let err = b.create_file(Path::new("d/e/f"), "d/e/f").unwrap_err();
        assert!(matches!(err, ArchiveError::Duplicate(_)), "{err}");
        let err = b.create_dir_all(Path::new("d/e/f/g"), "d/e/f/g/").unwrap_err();
        assert!(matches!(err, ArchiveError::FileAndDir(_)), "{err}");
        let err = b.create_file(Path::new("d/e/f/g"), "d/e/f/g").unwrap_err();
        assert!(matches!(err, ArchiveError::FileAndDir(_)), "{err}");
        assert!(inner.path().join("d/e/f").is_file());
    }
}
