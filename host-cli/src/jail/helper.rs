//! The network helper's view of the host, as `bwrap` builds it: new mount, PID, IPC,
//! UTS and cgroup namespaces (not the network's: it makes the guest's connections and
//! listens on published ports on the host's network), PID 1 of its own namespace (no
//! other process is visible to it, its watcher included, and anything it forks dies
//! with it), no capabilities, no new privileges, never root: bwrap (and so the helper)
//! runs as atoll's user, or, when atoll is root, as the `atoll-net` system user
//! ([`super::user::for_helper`]) with no supplementary group, in a user namespace of its
//! own, and sees a root holding only
//!
//! - the system's programs and libraries (`/usr`, read-only), `/etc/ld.so.cache`, the
//!   host's resolver and CA files (`/etc/resolv.conf`, `/etc/hosts`, `/etc/ssl`,
//!   `ATOLL_SECRETS_CA_FILE`), read-only; a minimal `/dev` and its own `/proc`, with
//!   the kernel's settings (`/proc/sys`, `/proc/sysrq-trigger`) read-only;
//! - the atoll program itself, read-only;
//! - of its own sandbox directory, only what it uses, on directories of the view's
//!   own: `net/` (its sockets, `net.json`, its logs; its user's, `0700`), `vm/wire/`
//!   (`root:atoll`, sticky `1770` when atoll is root, where the NIC's socket and the
//!   console's `tty.sock` are, which atoll binds for it (`super::wire`), and where it
//!   connects to QEMU's `agent.port`), and the two
//!   logs it writes (`vm/console.log`, `qemu.log`, its user's, `0600`); not `sandbox.json`, atoll's
//!   policy record, nor the rest of `vm/` (QEMU's control socket, disk and RAM), nor
//!   any other sandbox's;
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

/// bwrap's arguments for the helper `exe` of the sandbox in `dir`, up to (not
/// including) the program, showing it `secrets` ([`secrets`]) and, with `ca`, a copy of
/// `ATOLL_SECRETS_CA_FILE` ([`ca_copy`]); bwrap writes the helper's pid as JSON to
/// `info_fd`. With `run_as` (uid, gid: atoll is root), the helper is started as that
/// user without supplementary groups or capabilities (`drop_to`).
pub fn bwrap_args(
    exe: &Path,
    dir: &Path,
    secrets: Option<&Secrets>,
    ca: Option<i32>,
    info_fd: i32,
    run_as: Option<(u32, u32)>,
) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    let mut a: Vec<String> = [
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
    if run_as.is_none() {
        a.push("--unshare-user".into());
    }
    for top in ["/lib", "/lib64", "/bin", "/sbin"] {
        match std::fs::read_link(top) {
            Ok(target) => a.extend(["--symlink".into(), s(&target), top.into()]),
            Err(_) if Path::new(top).is_dir() => a.extend(["--ro-bind".into(), top.into(), top.into()]),
            Err(_) => {}
        }
    }
    // bwrap makes the parents of what it binds 0700 (root's): the helper's user must
    // pass through them, so they are made first, 0755 (tmpfs directories of its view).
    let open_dir = |a: &mut Vec<String>, path: Option<&Path>| {
        if let Some(p) = path.filter(|p| *p != Path::new("/") && !p.as_os_str().is_empty()) {
            a.extend(["--perms".into(), "0755".into(), "--dir".into(), s(p)]);
        }
    };
    open_dir(&mut a, Some(Path::new("/etc")));
    a.extend(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"].map(String::from));
    for etc in ETC {
        a.extend(["--ro-bind-try".into(), (*etc).into(), (*etc).into()]);
    }
    if let (Some(path), Some(fd)) = (std::env::var_os("ATOLL_SECRETS_CA_FILE").filter(|v| !v.is_empty()), ca)
    {
        // A copy: the helper's user may not read the file where it is.
        open_dir(&mut a, Path::new(&path).parent());
        a.extend([
            "--perms".into(),
            "0444".into(),
            "--ro-bind-data".into(),
            fd.to_string(),
            s(Path::new(&path)),
        ]);
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
    if let Some(Secrets { state, store, private }) = secrets {
        // The state directory as atoll checks it: private (0700), the helper's own. Its
        // parents first, 0755 (`--perms` would apply to them too): the helper's user
        // passes through them.
        open_dir(&mut a, state.parent());
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(state)]);
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(store)]);
        open_dir(&mut a, private.parent());
        a.extend(["--bind".into(), s(private), s(private)]);
    }
    open_dir(&mut a, dir.parent());
    // Of the sandbox directory, only what the helper uses, each bound where it is: its
    // own `net/`, `vm/wire/` (the NIC's and the console's sockets, QEMU's agent port)
    // and the two logs it writes (made before it starts), on directories of the view's own. Nothing else of
    // the sandbox is in sight: not `sandbox.json`, atoll's policy record or tokens, nor
    // QEMU's control socket, disk or RAM in `vm/`. So even with the user's own uid
    // (atoll not root), which QEMU may have too, it can neither rewrite atoll's files
    // nor drive QEMU.
    let paths = crate::vmm::state::Paths::in_dir(dir, false);
    open_dir(&mut a, Some(dir));
    open_dir(&mut a, Some(&paths.vm));
    for rw in [
        &crate::sandbox::network::config::net_dir(dir),
        &crate::vmm::state::wire_dir(dir),
        &paths.console_log,
        &paths.qemu_log,
    ] {
        a.extend(["--bind".into(), s(rw), s(rw)]);
    }
    open_dir(&mut a, exe.parent());
    a.extend(["--ro-bind".into(), s(exe), s(exe)]);
    a.extend(["--info-fd".into(), info_fd.to_string()]);
    match run_as {
        Some(ids) => a.extend(drop_to(ids, secrets)),
        None => a.extend(["--cap-drop".into(), "ALL".into()]),
    }
    a
}

/// What runs first in the jail when atoll is root, as root in the helper's own mount
/// namespace: `sh` gives the state and store directories of the helper's view (bwrap's
/// tmpfs, not the host's) to the helper's user, who checks them as its own, then
/// `setpriv` (util-linux) becomes that user (uid and gid), drops every supplementary
/// group and capability and sets no-new-privileges, and runs the helper.
fn drop_to((uid, gid): (u32, u32), secrets: Option<&Secrets>) -> Vec<String> {
    let mut a: Vec<String> = [
        "/bin/sh",
        "-c",
        r#"o=$1; shift; while [ "$1" != -- ]; do chown -h "$o" "$1" || exit 1; shift; done; shift; exec "$@""#,
        "sh",
    ]
    .map(String::from)
    .to_vec();
    a.push(format!("{uid}:{gid}"));
    if let Some(s) = secrets {
        a.extend([s.state.display().to_string(), s.store.display().to_string()]);
    }
    a.push("--".into());
    a.extend(["setpriv".into(), format!("--reuid={uid}"), format!("--regid={gid}")]);
    a.extend(
        [
            "--clear-groups",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--no-new-privs",
            "--",
        ]
        .map(String::from),
    );
    a
}

/// The largest `ATOLL_SECRETS_CA_FILE` copied into the helper's view.
const MAX_CA_BYTES: u64 = 16 << 20;

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
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
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
/// unjailed); at most 16 MiB.
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
        let a =
            bwrap_args(Path::new("/opt/atoll"), Path::new("/s/sandboxes/abc"), Some(&secrets), None, 9, None);
        let has = |w: &[&str]| a.windows(w.len()).any(|x| x.iter().zip(w).all(|(p, q)| p == q));
        // Of its sandbox directory, its own pieces alone, on directories of the view.
        assert!(has(&["--dir", "/s/sandboxes/abc"]) && has(&["--dir", "/s/sandboxes/abc/vm"]));
        assert!(has(&["--bind", "/s/sandboxes/abc/net", "/s/sandboxes/abc/net"]));
        assert!(has(&["--bind", "/s/sandboxes/abc/vm/wire", "/s/sandboxes/abc/vm/wire"]));
        assert!(has(&["--bind", "/s/sandboxes/abc/vm/console.log", "/s/sandboxes/abc/vm/console.log"]));
        assert!(has(&["--bind", "/s/sandboxes/abc/qemu.log", "/s/sandboxes/abc/qemu.log"]));
        for whole in ["/s/sandboxes/abc", "/s/sandboxes/abc/vm"] {
            assert!(
                !has(&["--bind", whole, whole]) && !has(&["--ro-bind", whole, whole]),
                "{whole} is shown"
            );
        }
        assert!(has(&["--ro-bind", "/opt/atoll", "/opt/atoll"]));
        assert!(has(&["--unshare-user"]) && has(&["--cap-drop", "ALL"]));
        assert!(has(&["--info-fd", "9"]));
        assert!(!a.iter().any(|x| x == "/s/.secrets/bindings"), "the store is not shown");
        assert!(has(&["--perms", "0700", "--dir", "/s/.secrets"]));
        assert!(has(&["--bind", "/s/.secrets/sandboxes/abc", "/s/.secrets/sandboxes/abc"]));
        assert!(has(&["--perms", "0700", "--dir", "/s"]));
        assert!(has(&["--unshare-ipc"]) && has(&["--unshare-uts"]) && !has(&["--unshare-net"]));
        assert!(has(&["--unshare-pid", "--as-pid-1"]) && has(&["--ro-bind", "/proc/sys", "/proc/sys"]));
        assert!(!a.iter().any(|x| x.contains("kill")), "no capability is kept");
        assert!(!a.iter().any(|x| x == "/home" || x == "/root"));
        // Other sandboxes stay out: their parent is an empty directory of the view.
        assert!(!has(&["--bind", "/s/sandboxes", "/s/sandboxes"]) && has(&["--dir", "/s/sandboxes"]));
        assert!(!a.iter().any(|x| x == "--die-with-parent"), "a sandbox outlives its command");

        // As root: never uid 0; the view's state and store (bwrap's) become the user's.
        let a = bwrap_args(
            Path::new("/opt/atoll"),
            Path::new("/s/sandboxes/abc"),
            Some(&secrets),
            None,
            9,
            Some((995, 996)),
        );
        let has = |w: &[&str]| a.windows(w.len()).any(|x| x.iter().zip(w).all(|(p, q)| p == q));
        assert!(has(&[
            "995:996",
            "/s",
            "/s/.secrets",
            "--",
            "setpriv",
            "--reuid=995",
            "--regid=996",
            "--clear-groups"
        ]));
        assert!(has(&["--bounding-set=-all"]) && has(&["--no-new-privs", "--"]) && !has(&["--unshare-user"]));
    }
}
