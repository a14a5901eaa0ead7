//! Where a copy out of a guest waits before it takes its name, beside its destination,
//! so that a copy killed outright (SIGKILL, a power cut) leaves nothing there for the
//! user to clean up.
//!
//! A file is written into an unnamed file (`O_TMPFILE`) in the destination's folder and
//! given its name at the end (`linkat` of its `/proc/self/fd/N`); killed before that, the
//! kernel frees it. A folder cannot be unnamed: it is built in
//! `.atoll-cp-<pid>-<start>-<random>` (the copying process's pid and its start time,
//! `/proc/<pid>/stat` field 22) and holds an exclusive `flock` for the copy's life. Each
//! copy into a folder (of a folder, a file or a download) first removes the staging
//! folders beside it whose copy is gone: a name of
//! exactly that form, a folder (not a link), owned by this user, whose process is not
//! running (pid and start time: a reused pid is another process) and whose lock is free
//! (a copy in another pid namespace, whose pid means nothing here, still holds it), in
//! a folder this user owns where no one else can rename entries. Nothing else is ever
//! removed.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::vmm::process::ProcRef;

/// What every staging name starts with.
const PREFIX: &str = ".atoll-cp-";

/// Random characters at the end of a staging name.
const RANDOM_CHARS: usize = 8;

/// `dir` (a handle) as a path that reaches it whatever its name now is.
fn via(dir: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// `.atoll-cp-<pid>-<start>-`: this process's staging names, before their random part.
fn own_prefix() -> io::Result<String> {
    let me = ProcRef::of(std::process::id())
        .ok_or_else(|| io::Error::other("cannot read this process's start time in /proc/self/stat"))?;
    Ok(format!("{PREFIX}{}-{}-", me.pid, me.start_ticks))
}

/// The copying process a staging name names, when `name` has exactly the form atoll
/// gives them.
fn owner(name: &OsStr) -> Option<ProcRef> {
    let rest = name.to_str()?.strip_prefix(PREFIX)?;
    let mut parts = rest.split('-');
    let (pid, start, random) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    let ok = parts.next().is_none()
        && digits(pid)
        && digits(start)
        && random.len() == RANDOM_CHARS
        && random.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then(|| Some(ProcRef { pid: pid.parse().ok()?, start_ticks: start.parse().ok()? })).flatten()
}

/// A file being written in a folder, named only once it is whole.
pub(super) enum StagedFile {
    /// An `O_TMPFILE` file: no name until [`StagedFile::persist`].
    Unnamed(File),
    /// Where the file system has no `O_TMPFILE` (EOPNOTSUPP; EISDIR from a kernel before
    /// 3.11): a file of a random name, as before, which a copy killed outright leaves.
    Named(tempfile::NamedTempFile),
}

impl StagedFile {
    /// Starts a file in the folder `dir` (a handle; `O_PATH` is enough), mode 0600.
    pub(super) fn new_in(dir: BorrowedFd<'_>) -> io::Result<StagedFile> {
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, ".", flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => Ok(StagedFile::Unnamed(File::from(fd))),
            Err(Errno::OPNOTSUPP | Errno::ISDIR) => {
                tempfile::NamedTempFile::new_in(via(dir)).map(StagedFile::Named)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The file, to write through.
    pub(super) fn file(&self) -> io::Result<File> {
        match self {
            StagedFile::Unnamed(f) => f.try_clone(),
            StagedFile::Named(f) => f.reopen(),
        }
    }

    fn as_file(&self) -> &File {
        match self {
            StagedFile::Unnamed(f) => f,
            StagedFile::Named(f) => f.as_file(),
        }
    }

    /// Sets the file's mode.
    pub(super) fn set_mode(&self, mode: u32) -> io::Result<()> {
        rustix::fs::fchmod(self.as_file(), Mode::from_raw_mode(mode)).map_err(io::Error::from)
    }

    /// Gives the file the name `name` in `dir`, replacing what is there as `rename` would
    /// (a file or a link, never a folder).
    pub(super) fn persist(self, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
        let target = via(dir).join(name);
        let file = match self {
            StagedFile::Named(tmp) => return tmp.persist(&target).map(drop).map_err(|e| e.error),
            StagedFile::Unnamed(file) => file,
        };
        let link = |to: &std::path::Path| {
            let from = format!("/proc/self/fd/{}", file.as_raw_fd());
            rustix::fs::linkat(rustix::fs::CWD, from, rustix::fs::CWD, to, AtFlags::SYMLINK_FOLLOW)
                .map_err(io::Error::from)
        };
        match link(&target) {
            Ok(()) => Ok(()),
            // Something is there: linked under a fresh name beside it, then renamed over
            // it (between the two calls, a few microseconds, that name is the only trace
            // a copy killed then would leave).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let named = tempfile::Builder::new()
                    .prefix(&own_prefix()?)
                    .rand_bytes(RANDOM_CHARS)
                    .make_in(via(dir), |p| link(p))?;
                named.persist(&target).map(drop).map_err(|e| e.error)
            }
            Err(e) => Err(e),
        }
    }
}

/// A staging folder this copy owns, locked while it lives, removed when dropped unless
/// [`StagingDir::rename_to`] gave it its name.
pub(super) struct StagingDir {
    /// The destination's folder.
    parent: OwnedFd,
    name: OsString,
    /// The folder, opened for its lock (and for `syncfs`).
    lock: OwnedFd,
    done: bool,
}

impl StagingDir {
    /// Creates a staging folder in `parent` (a handle) and takes its lock.
    pub(super) fn create(parent: &OwnedFd) -> io::Result<StagingDir> {
        let parent = parent.try_clone()?;
        let made = tempfile::Builder::new()
            .prefix(&own_prefix()?)
            .rand_bytes(RANDOM_CHARS)
            .tempdir_in(via(parent.as_fd()))?;
        let name = made.path().file_name().expect("a temp dir has a name").to_os_string();
        // From here on the removal is ours (`remove_tree`, which follows no link).
        let path = made.keep();
        let lock = match open_dir(parent.as_fd(), Path::new(&name)) {
            Ok(lock) => lock,
            Err(e) => {
                let _ = crate::vmm::safe_fs::remove_tree(&path);
                return Err(e);
            }
        };
        let dir = StagingDir { parent, name, lock, done: false };
        // Until the lock is taken (microseconds), this live process's pid and start time
        // in the name are what keep another copy from removing it; on a file system
        // without locks (NFS mounted `nolock`) they are all that does.
        if let Err(e) = rustix::fs::flock(&dir.lock, FlockOperation::NonBlockingLockExclusive) {
            tracing::debug!("cannot lock the staging folder: {e}");
        }
        Ok(dir)
    }

    /// Its name, in the destination's folder.
    pub(super) fn name(&self) -> &OsStr {
        &self.name
    }

    /// Renames the folder to `name` (its lock goes with it until this is dropped).
    pub(super) fn rename_to(mut self, name: &OsStr) -> io::Result<OwnedFd> {
        rustix::fs::renameat(&self.parent, &self.name, &self.parent, name)?;
        self.done = true;
        self.lock.try_clone()
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        if !self.done {
            let path = via(self.parent.as_fd()).join(&self.name);
            if let Err(e) = crate::vmm::safe_fs::remove_tree(&path) {
                tracing::warn!("could not remove the staging folder {}: {e}", path.display());
            }
        }
    }
}

/// Opens the folder `name` in `parent` for reading, following no link at its last
/// component.
fn open_dir(parent: BorrowedFd<'_>, name: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(parent, name, flags, Mode::empty())?)
}

/// Removes the staging folders in `parent` (a handle) that no live copy owns; gives
/// back how many. A folder that cannot be read or removed is left, with a warning:
/// this never stops the copy that tidies.
///
/// Only in a folder where no one else can rename entries: one this user owns, writable
/// by no one else or sticky. Elsewhere another user could rename a folder of ours there
/// (one they cannot empty) to a staging name, and have this remove what is inside.
pub(super) fn remove_stale(parent: BorrowedFd<'_>) -> usize {
    let me = rustix::process::geteuid().as_raw();
    let Ok(folder) = rustix::fs::fstat(parent) else { return 0 };
    let others_rename = folder.st_mode & 0o022 != 0 && folder.st_mode & 0o1000 == 0;
    if folder.st_uid != me || others_rename {
        tracing::debug!("not tidying staging folders in a folder others can rename entries in");
        return 0;
    }
    let listing = match open_dir(parent, Path::new("."))
        .and_then(|d| rustix::fs::Dir::read_from(&d).map_err(io::Error::from))
    {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("cannot list the destination's folder for stale staging folders: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for entry in listing.flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        let Some(owner) = owner(name) else { continue };
        if owner.is_alive() {
            continue;
        }
        // A link fails O_NOFOLLOW, a file O_DIRECTORY: only a real folder is opened.
        let Ok(dir) = open_dir(parent, Path::new(name)) else { continue };
        let Ok(meta) = rustix::fs::fstat(&dir) else { continue };
        if meta.st_uid != me {
            continue;
        }
        // Held: a live copy (in another pid namespace) owns it. Ours now while we remove.
        if rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let path = via(parent).join(name);
        // The name still names the folder checked above.
        let same = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && m.dev() == meta.st_dev && m.ino() == meta.st_ino);
        if !same {
            continue;
        }
        match crate::vmm::safe_fs::remove_tree(&path) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(
                "could not remove the stale staging folder {}: {e}",
                name.to_string_lossy().escape_debug()
            ),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only names of exactly the form atoll gives are taken for a staging folder.
    #[test]
    fn only_the_exact_name_form_names_an_owner() {
        let owner_of = |n: &str| owner(OsStr::new(n));
        assert_eq!(owner_of(".atoll-cp-12-345-aB3dE6fG"), Some(ProcRef { pid: 12, start_ticks: 345 }));
        for near in [
            ".atoll-cp-Ab12Cd",
            ".atoll-cp-12-345-aB3dE6f",
            ".atoll-cp-12-345-aB3dE6fGh",
            ".atoll-cp-12-345-aB3dE6f-",
            ".atoll-cp-12-aB3dE6fG",
            ".atoll-cp--345-aB3dE6fG",
            ".atoll-cp-x2-345-aB3dE6fG",
            ".atoll-cp-12-345-aB3d.6fG",
            ".atoll-cp-99999999999999999999999-1-aB3dE6fG",
            "atoll-cp-12-345-aB3dE6fG",
            "x.atoll-cp-12-345-aB3dE6fG",
        ] {
            assert_eq!(owner_of(near), None, "{near}");
        }
    }
}
