//! Shared folders opened once. Each folder is opened when QEMU is started, with
//! `openat2(RESOLVE_NO_SYMLINKS)` (no component may be a link), checked on that handle,
//! and bwrap binds that open directory (`--bind-fd`), so nothing swapped in after the
//! open (a link to `/` in place of a component, say) reaches QEMU. What is bound
//! read-only inside a share (`.git`, editor files, submodules) is opened beneath the
//! share's handle the same way (`RESOLVE_BENEATH`), never by its path.
//!
//! When atoll runs as root, the handle is a private copy of the folder's mount
//! (`open_tree`) made `nosuid,nodev,noexec` (`mount_setattr`, recursively), which bwrap's
//! binds keep: nothing in a share can be run from QEMU's side, nor gain privileges.
//! A detached copy cannot be bound, so the child that becomes bwrap attaches the copies
//! on an empty directory of the sandbox's in a mount namespace of its own (slave to the host's, so nothing
//! propagates back) before bwrap starts ([`Attach`]).
//!
//! An ordinary user cannot copy a mount of the host's mount namespace. The child that
//! becomes bwrap then makes a user namespace of its own (its uid and gid mapped to
//! themselves) and a mount namespace owned by it, where it may: it opens each share's
//! path again there (no links), checks that it is the very directory of the handle
//! (device and inode), attaches a `nosuid,nodev,noexec` copy of it on a [`STAGE`]
//! directory as under root, and puts the copy under the handle's descriptor number;
//! each path bound inside a share (`.git`, ...) is opened again beneath the copy
//! (checked the same way) and takes its handle's number too. bwrap, started in that
//! namespace, binds from those descriptors, so everything it binds from a share carries
//! `noexec` in QEMU's namespace, as under root.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use crate::vmm::storage::Storage;

/// Why a shared folder could not be opened for QEMU.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// A component of the folder's path is a link now (it was not when it was shared).
    #[error(
        "the shared folder {} has a symbolic link in its path now (one was swapped in after it was shared); nothing was started: share the folder by its real path again",
        path.display()
    )]
    Link {
        /// The folder.
        path: PathBuf,
    },
    /// The folder is gone or not a directory.
    #[error("the shared folder {} could not be opened; nothing was started: check that it exists and is a directory", path.display())]
    Open {
        /// The folder.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// An ordinary user's share was not the directory opened earlier by the time the
    /// jail's own namespace opened it again (a link or another directory swapped in).
    #[error(
        "a shared folder was replaced (a link or another directory swapped in) while QEMU was starting; nothing was started: share the folder by its real path again"
    )]
    Swapped {
        /// What the jail's step saw.
        #[source]
        source: std::io::Error,
    },
    /// The private copy of its mount could not be made.
    #[error("could not make a nosuid,nodev,noexec copy of the mount of {}", path.display())]
    Mount {
        /// The folder.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The open shares of one QEMU start.
#[derive(Debug, Default)]
pub struct Opened {
    /// What bwrap binds from a descriptor: host path (which is also where QEMU sees
    /// it) to the open directory or file.
    pub fds: HashMap<PathBuf, OwnedFd>,
    /// Owner (uid, gid) of each share, read from its handle.
    pub owners: HashMap<PathBuf, (u32, u32)>,
    /// The detached mount copies, to attach before bwrap runs (root only).
    pub trees: Vec<OwnedFd>,
}

impl Opened {
    /// The descriptor numbers a child must inherit.
    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.fds.values().map(AsRawFd::as_raw_fd).collect()
    }

    /// The detached trees' descriptor numbers, for [`Attach`].
    pub fn raw_trees(&self) -> Vec<RawFd> {
        self.trees.iter().map(AsRawFd::as_raw_fd).collect()
    }
}

/// The directory in the sandbox directory (out of QEMU's sight) whose empty
/// subdirectories `0`, `1`, ... the child attaches the trees on, in its own mount
/// namespace: nothing bwrap reads lies under them.
pub const STAGE: &str = "shares";

/// Makes `dir/`[`STAGE`]`/0..count` (empty real directories, not links) and returns
/// their paths.
pub fn stage(dir: &Path, count: usize) -> Result<Vec<std::ffi::CString>, ShareError> {
    use std::os::unix::ffi::OsStrExt;
    let top = dir.join(STAGE);
    let mut out = Vec::new();
    for path in std::iter::once(top.clone()).chain((0..count).map(|i| top.join(i.to_string()))) {
        let err = |source| ShareError::Open { path: path.clone(), source };
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(e)),
        }
        if !std::fs::symlink_metadata(&path).map_err(err)?.is_dir() {
            return Err(err(std::io::Error::other("not a directory")));
        }
        if path != top {
            out.push(
                std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(|e| err(std::io::Error::other(e)))?,
            );
        }
    }
    Ok(out)
}

/// Opens every share of `storage` and every path bound inside one (`inner`, host paths
/// as [`super::namespaces::binds`] lists them). `copy_mounts`: make `nosuid,nodev,noexec`
/// mount copies (needs root). An inner path that is gone or a link now is left out (a
/// link is not bound; host tools then see the link, not a file of the guest's).
pub fn open(storage: &Storage, inner: &[&Path], copy_mounts: bool) -> Result<Opened, ShareError> {
    let mut out = Opened::default();
    let mut roots: Vec<(PathBuf, OwnedFd)> = Vec::new();
    for m in &storage.mounts {
        if out.fds.contains_key(&m.host) {
            continue;
        }
        let dir = open_dir(&m.host)?;
        let meta = rustix::fs::fstat(&dir).map_err(|e| open_error(&m.host, e))?;
        out.owners.insert(m.host.clone(), (meta.st_uid, meta.st_gid));
        // One copy per folder, bound once in QEMU's view: read-only only when every share
        // of it is (a folder shared both ways stays writable where it is shared
        // read-write; QEMU's `readonly=on` holds its read-only share).
        let read_only = storage.mounts.iter().filter(|o| o.host == m.host).all(|o| o.read_only);
        let handle = if copy_mounts { mount_copy(&dir, &m.host, read_only)? } else { dir };
        let dup = || handle.try_clone().map_err(|source| ShareError::Open { path: m.host.clone(), source });
        if copy_mounts {
            out.trees.push(dup()?);
        }
        roots.push((m.host.clone(), dup()?));
        out.fds.insert(m.host.clone(), handle);
    }
    for path in inner {
        // The deepest share holding it.
        let Some((root, fd)) = roots
            .iter()
            .filter(|(r, _)| path.starts_with(r) && path != r)
            .max_by_key(|(r, _)| r.as_os_str().len())
        else {
            continue;
        };
        let rel = path.strip_prefix(root).unwrap_or(path);
        match rustix::fs::openat2(
            fd.as_fd(),
            rel,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(f) => {
                let kind = rustix::fs::fstat(&f).map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode));
                if matches!(kind, Ok(rustix::fs::FileType::Directory | rustix::fs::FileType::RegularFile)) {
                    out.fds.insert(path.to_path_buf(), f);
                }
            }
            Err(e) => tracing::debug!("{} is not bound read-only: {e}", path.display()),
        }
    }
    Ok(out)
}

/// `path`, a directory, opened with no link in its path.
fn open_dir(path: &Path) -> Result<OwnedFd, ShareError> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => ShareError::Link { path: path.to_path_buf() },
        // O_NOFOLLOW | O_DIRECTORY on a link says "not a directory".
        rustix::io::Errno::NOTDIR if path.symlink_metadata().is_ok_and(|m| m.is_symlink()) => {
            ShareError::Link { path: path.to_path_buf() }
        }
        e => open_error(path, e),
    })
}

fn open_error(path: &Path, e: rustix::io::Errno) -> ShareError {
    ShareError::Open { path: path.to_path_buf(), source: e.into() }
}

/// `struct mount_attr` of `mount_setattr(2)` (libc does not define it).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// A detached copy of the mount at `dir` (and the mounts below it), `nosuid,nodev,noexec`
/// (and read-only for `read_only`).
fn mount_copy(dir: &OwnedFd, path: &Path, read_only: bool) -> Result<OwnedFd, ShareError> {
    let err = |e: std::io::Error| ShareError::Mount { path: path.to_path_buf(), source: e };
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_EMPTY_PATH
        | OpenTreeFlags::AT_RECURSIVE;
    let tree = rustix::mount::open_tree(dir, c"", flags).map_err(|e| err(e.into()))?;
    let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    if read_only {
        set |= MOUNT_ATTR_RDONLY;
    }
    set_attr(&tree, set).map_err(err)?;
    Ok(tree)
}

/// What the child about to exec bwrap does to its mount namespace, made before the fork
/// ([`Attach::prepare`]) so that [`Attach::apply`] allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct Attach {
    /// Root: the detached copies and the directories ([`stage`]) they are attached on.
    trees: Vec<RawFd>,
    stages: Vec<std::ffi::CString>,
    /// An ordinary user: the user namespace's maps and each share's (handle, path).
    user: Option<UserNs>,
}

#[derive(Debug, Clone)]
struct UserNs {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Each share: its handle, its path, the directory its copy is attached on.
    shares: Vec<(RawFd, std::ffi::CString, std::ffi::CString)>,
    /// Each path bound inside a share: its handle, the share's index, its path there.
    inner: Vec<(RawFd, usize, std::ffi::CString)>,
}

impl Attach {
    /// The plan for `opened` (the shares of `storage`): the root's detached copies,
    /// staged under `dir`, or, for an ordinary user with shares, the user namespace
    /// and the shares' paths. Nothing to do when there is no share.
    pub fn prepare(opened: &Opened, storage: &Storage, dir: &Path) -> Result<Attach, ShareError> {
        use std::os::unix::ffi::OsStrExt;
        if !opened.trees.is_empty() {
            let trees = opened.raw_trees();
            let stages = stage(dir, trees.len())?;
            return Ok(Attach { trees, stages, user: None });
        }
        let c_string = |path: &Path| {
            std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|e| ShareError::Open { path: path.to_path_buf(), source: std::io::Error::other(e) })
        };
        let mut roots: Vec<&Path> = Vec::new();
        for m in &storage.mounts {
            if opened.fds.contains_key(&m.host) && !roots.contains(&m.host.as_path()) {
                roots.push(&m.host);
            }
        }
        if roots.is_empty() || rustix::process::geteuid().is_root() {
            return Ok(Attach::default());
        }
        let stages = stage(dir, roots.len())?;
        let mut shares = Vec::new();
        for (root, stage) in roots.iter().zip(stages) {
            shares.push((opened.fds[*root].as_raw_fd(), c_string(root)?, stage));
        }
        let mut inner = Vec::new();
        for (path, fd) in &opened.fds {
            if roots.contains(&path.as_path()) {
                continue;
            }
            // The deepest share holding it, as [`open`] opened it beneath.
            let Some((i, root)) = roots
                .iter()
                .enumerate()
                .filter(|(_, r)| path.starts_with(r))
                .max_by_key(|(_, r)| r.as_os_str().len())
            else {
                continue;
            };
            inner.push((fd.as_raw_fd(), i, c_string(path.strip_prefix(root).unwrap_or(path))?));
        }
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        Ok(Attach {
            user: Some(UserNs {
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                shares,
                inner,
            }),
            ..Attach::default()
        })
    }

    /// `spawn`'s error `e` as the share error it stands for: a share that changed
    /// under an ordinary user's namespace step ([`ShareError::Swapped`]); `None` for
    /// anything else.
    pub fn share_error(&self, e: &std::io::Error) -> Option<ShareError> {
        let code = e
            .raw_os_error()
            .filter(|c| [libc::ESTALE, libc::ELOOP, libc::ENOENT, libc::ENOTDIR].contains(c))?;
        self.user.is_some().then(|| ShareError::Swapped { source: std::io::Error::from_raw_os_error(code) })
    }

    /// In the child about to exec bwrap. Only system calls on memory prepared before
    /// the fork: safe between fork and exec.
    pub fn apply(&self) -> std::io::Result<()> {
        if let Some(user) = &self.user {
            return noexec_in_user_ns(user);
        }
        attach(&self.trees, &self.stages)
    }
}

/// An ordinary user's child: its own user namespace (uid and gid mapped to themselves)
/// and mount namespace (a slave of the host's), with a `nosuid,nodev,noexec` copy of
/// each share attached on its stage directory, once the share's path is seen to be the
/// handle's directory; the copy (and each path bound inside it, opened again beneath
/// it) then takes the handle's descriptor number, so bwrap binds from the copy.
fn noexec_in_user_ns(user: &UserNs) -> std::io::Result<()> {
    use rustix::thread::UnshareFlags;
    // SAFETY: new user and mount namespaces for this single-threaded child only.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)? };
    for (file, text) in [
        (c"/proc/self/setgroups", &b"deny"[..]),
        (c"/proc/self/uid_map", &user.uid_map[..]),
        (c"/proc/self/gid_map", &user.gid_map[..]),
    ] {
        let f = rustix::fs::open(file, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        rustix::io::write(&f, text)?;
    }
    rustix::mount::mount_change(
        c"/",
        rustix::mount::MountPropagationFlags::DOWNSTREAM | rustix::mount::MountPropagationFlags::REC,
    )?;
    let same = |a: &rustix::fs::Stat, b: &rustix::fs::Stat| (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino);
    // Another directory (or file) swapped in since the share was opened.
    let stale = || std::io::Error::from_raw_os_error(libc::ESTALE);
    let mut trees: [Option<OwnedFd>; 64] = [const { None }; 64];
    for (i, (fd, path, stage)) in user.shares.iter().enumerate() {
        // SAFETY: the descriptor stays open in the child until exec.
        let held = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
        let here = rustix::fs::openat2(
            rustix::fs::CWD,
            path.as_c_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        if !same(&rustix::fs::fstat(held)?, &rustix::fs::fstat(&here)?) {
            return Err(stale());
        }
        let flags = OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH
            | OpenTreeFlags::AT_RECURSIVE;
        let tree = rustix::mount::open_tree(&here, c"", flags)?;
        set_attr(&tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)?;
        rustix::mount::move_mount(
            &tree,
            c"",
            rustix::fs::CWD,
            stage.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )?;
        let slot = trees.get_mut(i).ok_or_else(|| std::io::Error::from_raw_os_error(libc::E2BIG))?;
        *slot = Some(tree);
    }
    for (fd, i, rel) in &user.inner {
        let Some(tree) = trees.get(*i).and_then(Option::as_ref) else { return Err(stale()) };
        // SAFETY: the descriptor stays open in the child until exec.
        let held = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
        let f = rustix::fs::openat2(
            tree,
            rel.as_c_str(),
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        if !same(&rustix::fs::fstat(held)?, &rustix::fs::fstat(&f)?) {
            return Err(stale());
        }
        // SAFETY: `fd` is a descriptor this child holds open (bwrap is told its number).
        let mut target = unsafe { OwnedFd::from_raw_fd(*fd) };
        rustix::io::dup2(&f, &mut target)?;
        std::mem::forget(target);
    }
    for ((fd, _, _), tree) in user.shares.iter().zip(&trees) {
        let Some(tree) = tree else { return Err(stale()) };
        // SAFETY: as above.
        let mut target = unsafe { OwnedFd::from_raw_fd(*fd) };
        rustix::io::dup2(tree, &mut target)?;
        std::mem::forget(target);
    }
    Ok(())
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE)` adding `set` (clearing nothing).
fn set_attr(tree: &OwnedFd, set: u64) -> std::io::Result<()> {
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed; the path is an
    // empty C string; the descriptor is open.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// In the child about to exec bwrap: a mount namespace of its own, a slave of the
/// host's, with each tree of `trees` attached on its directory of `stages` ([`stage`]).
/// Only system calls on memory prepared before the fork: safe between fork and exec.
fn attach(trees: &[RawFd], stages: &[std::ffi::CString]) -> std::io::Result<()> {
    if trees.is_empty() {
        return Ok(());
    }
    // SAFETY: a new mount namespace only; this single-threaded child shares no
    // file-system state with anything else.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)? };
    rustix::mount::mount_change(
        c"/",
        rustix::mount::MountPropagationFlags::DOWNSTREAM | rustix::mount::MountPropagationFlags::REC,
    )?;
    for (&t, stage) in trees.iter().zip(stages) {
        // SAFETY: the descriptor stays open in the child until exec.
        let t = unsafe { std::os::fd::BorrowedFd::borrow_raw(t) };
        rustix::mount::move_mount(
            t,
            c"",
            rustix::fs::CWD,
            stage.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )?;
    }
    Ok(())
}

/// The owner (uid, gid) of `path` as opened.
pub fn owner(opened: &Opened, path: &Path) -> Option<(u32, u32)> {
    opened.owners.get(path).copied()
}

/// The owner (uid, gid) of `path` as it is now, for checks before anything is opened.
pub fn path_owner(path: &Path) -> Option<(u32, u32)> {
    std::fs::metadata(path).ok().map(|m| (m.uid(), m.gid()))
}
