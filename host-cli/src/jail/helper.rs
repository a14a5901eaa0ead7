//! The network helper's view of the host, as `bwrap` builds it: new mount, PID, IPC,
//! UTS and cgroup namespaces (not the network's: it makes the guest's connections and
//! listens on published ports on the host's network), PID 1 of its own namespace (no
//! other process is visible to it, its watcher included, and anything it forks dies
//! with it), no capabilities, no new privileges, never root: bwrap (and so the helper)
//! runs as atoll's user, or, when atoll is root, as the `atoll` system user
//! ([`super::user::for_helper`]) with no supplementary group, in a user namespace of its
//! own, and sees a root holding only
//!
//! - the system's programs and libraries (`/usr`, read-only), `/etc/ld.so.cache`, the
//!   host's resolver and CA files (`/etc/resolv.conf`, `/etc/hosts`, `/etc/ssl`,
//!   `ATOLL_SECRETS_CA_FILE`), read-only; a minimal `/dev` and its own `/proc`, with
//!   the kernel's settings (`/proc/sys`, `/proc/sysrq-trigger`) read-only;
//! - the atoll program itself, read-only;
//! - its own sandbox directory, through which (when atoll is root) it may only pass
//!   (`root:atoll`, `0710`) to what is its own: `net/` (its sockets, `net.json`, its
//!   logs; its user's, `0700`), `vm/` (`root:atoll`, sticky `1770`, where it binds the
//!   NIC's socket and connects to QEMU's `agent.port`), and the two logs it bounds
//!   (`vm/console.log`, `qemu.log`, `root:atoll` `0660`); not `sandbox.json`, nor any
//!   other sandbox's;
//! - of the secrets store, only its sandbox's private directory (read-write: its CA is
//!   made there). Secrets' bindings and values come from the secrets runner outside the
//!   jail (`secrets::runner`), which also resumes a paused sandbox for it.
//!
//! The helper's pid is the one bwrap reports and the sandbox records, so `atoll kill`
//! signals the helper itself; it then removes its sockets. It installs its own seccomp
//! filter as it starts ([`super::seccomp`]). Its processes are in a cgroup of their own
//! ([`super::cgroup::Cgroup::prepare_helper`]).

use std::path::{Path, PathBuf};

/// Files of `/etc` the helper reads: the resolver's configuration, the host's CA roots.
const ETC: &[&str] = &["/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates"];

/// What the helper of the sandbox in `dir` needs of the state directory: (the state
/// directory, the secrets store, the sandbox's private directory), made now if missing.
/// `None` when there is no secrets store to show (the helper then says why it cannot
/// swap secrets, as it would unjailed).
pub fn secrets(dir: &Path) -> Option<Secrets> {
    let private = crate::secrets::binding::private_dir(dir).ok()?;
    let store = crate::secrets::store::dir().ok()?;
    let state = store.parent()?.to_path_buf();
    Some(Secrets { state, store, private })
}

/// Where the secrets the helper reads lie.
#[derive(Debug, Clone)]
pub struct Secrets {
    /// The state directory.
    pub state: PathBuf,
    /// The secrets store in it.
    pub store: PathBuf,
    /// The sandbox's private directory in the store.
    pub private: PathBuf,
}

/// What bwrap binds into the helper's view, opened by atoll before it starts (bwrap
/// runs as the helper's user, which may not reach these paths on the host: a root
/// atoll's state directory is under `/root`).
#[derive(Debug, Clone, Copy)]
pub struct Fds {
    /// The sandbox directory (`O_PATH`).
    pub dir: i32,
    /// The atoll program (`O_PATH`).
    pub exe: i32,
    /// The sandbox's private directory in the secrets store (`O_PATH`).
    pub private: Option<i32>,
    /// A copy of `ATOLL_SECRETS_CA_FILE` (a memfd at offset 0).
    pub ca: Option<i32>,
}

/// bwrap's arguments for the helper `exe` of the sandbox in `dir`, up to (not
/// including) the program, showing it `secrets` ([`secrets`]) through `fds`; bwrap
/// writes the helper's pid as JSON to `info_fd`. bwrap itself runs as the helper's
/// user (atoll's, or `atoll` when atoll is root) and makes a user namespace.
pub fn bwrap_args(exe: &Path, dir: &Path, secrets: Option<&Secrets>, fds: Fds, info_fd: i32) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    let mut a: Vec<String> = [
        "--unshare-user",
        "--unshare-pid",
        "--as-pid-1",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "atoll-net",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .map(String::from)
    .to_vec();
    for top in ["/lib", "/lib64", "/bin", "/sbin"] {
        match std::fs::read_link(top) {
            Ok(target) => a.extend(["--symlink".into(), s(&target), top.into()]),
            Err(_) if Path::new(top).is_dir() => a.extend(["--ro-bind".into(), top.into(), top.into()]),
            Err(_) => {}
        }
    }
    a.extend(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"].map(String::from));
    for etc in ETC {
        a.extend(["--ro-bind-try".into(), (*etc).into(), (*etc).into()]);
    }
    if let (Some(ca), Some(fd)) = (std::env::var_os("ATOLL_SECRETS_CA_FILE").filter(|v| !v.is_empty()), fds.ca) {
        a.extend(["--perms".into(), "0444".into(), "--ro-bind-data".into(), fd.to_string(), s(Path::new(&ca))]);
    }
    a.extend(["--dev", "/dev", "--proc", "/proc", "--chdir", "/"].map(String::from));
    // The kernel's settings, written by uid: read-only.
    a.extend(
        [
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
        ]
        .map(String::from),
    );
    if let (Some(Secrets { state, store, private }), Some(fd)) = (secrets, fds.private) {
        // The state directory as atoll checks it: private (0700), the helper's own.
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(state)]);
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(store)]);
        a.extend(["--bind-fd".into(), fd.to_string(), s(private)]);
    }
    a.extend(["--bind-fd".into(), fds.dir.to_string(), s(dir)]);
    a.extend(["--ro-bind-fd".into(), fds.exe.to_string(), s(exe)]);
    a.extend(["--info-fd".into(), info_fd.to_string()]);
    a.extend(["--cap-drop".into(), "ALL".into()]);
    a
}

/// The largest `ATOLL_SECRETS_CA_FILE` copied into the helper's view.
const MAX_CA_BYTES: u64 = 16 << 20;

/// Opens `path` for bwrap to bind (`O_PATH`; a link in its place is refused).
pub fn open_path(path: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Gives the directory `path` (a link is refused) to `uid`:`gid`, mode 0700.
pub fn give_dir(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let (u, g) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
    rustix::fs::chownat(&fd, "", Some(u), Some(g), AtFlags::EMPTY_PATH)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    Ok(())
}

/// Opens the helper's log `path` (in its own directory, which a helper taken over by a
/// guest can write) to append, as hostile: created 0600 if missing, no link followed,
/// no FIFO waited on, a regular file with one name; then given to `owner` (the
/// helper's user, atoll being root), who rotates it.
pub fn open_log(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::MetadataExt;
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::from_raw_mode(0o600))?);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file with one name (the network helper may have planted it); remove it",
        ));
    }
    if let Some((uid, gid)) = owner {
        let (u, g) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
        rustix::fs::fchown(&file, Some(u), Some(g))?;
    }
    Ok(file)
}

/// A copy of `ATOLL_SECRETS_CA_FILE` (the roots the secrets swap trusts besides the
/// system's) for bwrap to put in the helper's view: the helper's user may not read the
/// file where it is. `None` when unset or unreadable (the helper then says so, as
/// unjailed); at most [`MAX_CA_BYTES`].
pub fn ca_copy() -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::io::{Read, Seek, Write};
    let Some(path) = std::env::var_os("ATOLL_SECRETS_CA_FILE").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    let read = crate::vmm::safe_fs::open_read(Path::new(&path))
        .and_then(|f| f.take(MAX_CA_BYTES).read_to_end(&mut bytes));
    if read.is_err() {
        return Ok(None);
    }
    let fd = rustix::fs::memfd_create("atoll-ca", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)?;
    file.rewind()?;
    Ok(Some(file.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_sees_its_sandbox_and_not_the_host() {
        let secrets = Secrets {
            state: "/s".into(),
            store: "/s/.secrets".into(),
            private: "/s/.secrets/sandboxes/abc".into(),
        };
        let fds = Fds { dir: 5, exe: 6, private: Some(7), ca: None };
        let a = bwrap_args(Path::new("/opt/atoll"), Path::new("/s/sandboxes/abc"), Some(&secrets), fds, 9);
        let has = |w: &[&str]| a.windows(w.len()).any(|x| x.iter().zip(w).all(|(p, q)| p == q));
        assert!(has(&["--bind-fd", "5", "/s/sandboxes/abc"]));
        assert!(has(&["--ro-bind-fd", "6", "/opt/atoll"]));
        assert!(has(&["--unshare-user"]) && has(&["--cap-drop", "ALL"]));
        assert!(has(&["--info-fd", "9"]));
        assert!(!a.iter().any(|x| x == "/s/.secrets/bindings"), "the store is not shown");
        assert!(has(&["--perms", "0700", "--dir", "/s/.secrets"]));
        assert!(has(&["--bind-fd", "7", "/s/.secrets/sandboxes/abc"]));
        assert!(has(&["--perms", "0700", "--dir", "/s"]));
        assert!(has(&["--unshare-ipc"]) && has(&["--unshare-uts"]) && !has(&["--unshare-net"]));
        assert!(has(&["--unshare-pid", "--as-pid-1"]) && has(&["--ro-bind", "/proc/sys", "/proc/sys"]));
        assert!(!a.iter().any(|x| x.contains("kill")), "no capability is kept");
        assert!(!a.iter().any(|x| x == "/home" || x == "/root" || x == "/s/sandboxes"));
        assert!(!a.iter().any(|x| x == "--die-with-parent"), "a sandbox outlives its command");
    }
}
