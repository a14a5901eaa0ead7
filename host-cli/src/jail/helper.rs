//! The network helper's view of the host, as `bwrap` builds it: new mount, PID, IPC,
//! UTS and cgroup namespaces (not the network's: it makes the guest's connections and
//! listens on published ports on the host's network), PID 1 of its own namespace (no
//! other process is visible to it, its watcher included, and anything it forks dies
//! with it), no capabilities, no supplementary groups, no new privileges, and a root
//! holding only
//!
//! - the system's programs and libraries (`/usr`, read-only), `/etc/ld.so.cache`, the
//!   host's resolver and CA files (`/etc/resolv.conf`, `/etc/hosts`, `/etc/ssl`,
//!   `ATOLL_SECRETS_CA_FILE`), read-only; a minimal `/dev` and its own `/proc`, with
//!   the kernel's settings (`/proc/sys`, `/proc/sysrq-trigger`) read-only;
//! - the atoll program itself, read-only;
//! - its own sandbox directory, read-write (its sockets, `net.json`, its logs, the
//!   console it bounds), and no other sandbox's;
//! - of the secrets store, only its sandbox's private directory (read-write: its CA is
//!   made there). Secrets' bindings and values come from the secrets runner outside the
//!   jail (`secrets::runner`), which also resumes a paused sandbox for it.
//!
//! The helper's pid is the one bwrap reports and the sandbox records, so `atoll kill`
//! signals the helper itself; it then removes its sockets. It installs its own seccomp
//! filter as it starts ([`super::seccomp`]).

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
/// including) the program, showing it `secrets` ([`secrets`]); bwrap writes the
/// helper's pid as JSON to `info_fd`.
pub fn bwrap_args(exe: &Path, dir: &Path, secrets: Option<&Secrets>, info_fd: i32) -> Vec<String> {
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
    let root = rustix::process::geteuid().is_root();
    if !root {
        a.push("--unshare-user".into());
    }
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
    if let Some(ca) = std::env::var_os("ATOLL_SECRETS_CA_FILE").filter(|v| !v.is_empty()) {
        let ca = PathBuf::from(ca);
        a.extend(["--ro-bind-try".into(), s(&ca), s(&ca)]);
    }
    a.extend(["--dev", "/dev", "--proc", "/proc", "--chdir", "/"].map(String::from));
    // The kernel's settings, written by uid (a root helper has no capability, but
    // `kernel.core_pattern` or `kernel.modprobe` would run its code as root): read-only.
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
        // The state directory as atoll checks it: private (0700), the helper's own.
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(state)]);
        a.extend(["--perms".into(), "0700".into(), "--dir".into(), s(store)]);
        a.extend(["--bind".into(), s(private), s(private)]);
    }
    a.extend(["--bind".into(), s(dir), s(dir)]);
    a.extend(["--ro-bind".into(), s(exe), s(exe)]);
    a.extend(["--info-fd".into(), info_fd.to_string()]);
    if root {
        // setpriv (util-linux, in /usr) drops root's supplementary groups, then every
        // capability. A paused sandbox is resumed by the secrets runner outside the jail.
        a.extend(
            [
                "setpriv",
                "--clear-groups",
                "--bounding-set",
                "-all",
                "--inh-caps",
                "-all",
                "--no-new-privs",
                "--",
            ]
            .map(String::from),
        );
    } else {
        a.extend(["--cap-drop".into(), "ALL".into()]);
    }
    a
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
        let a = bwrap_args(Path::new("/opt/atoll"), Path::new("/s/sandboxes/abc"), Some(&secrets), 9);
        let has = |w: &[&str]| a.windows(w.len()).any(|x| x.iter().zip(w).all(|(p, q)| p == q));
        assert!(has(&["--bind", "/s/sandboxes/abc", "/s/sandboxes/abc"]));
        assert!(has(&["--ro-bind", "/opt/atoll", "/opt/atoll"]));
        assert!(has(&["--info-fd", "9"]));
        assert!(!a.iter().any(|x| x == "/s/.secrets/bindings"), "the store is not shown");
        assert!(has(&["--perms", "0700", "--dir", "/s/.secrets"]));
        assert!(has(&["--bind", "/s/.secrets/sandboxes/abc", "/s/.secrets/sandboxes/abc"]));
        assert!(has(&["--perms", "0700", "--dir", "/s"]));
        assert!(has(&["--unshare-ipc"]) && has(&["--unshare-uts"]) && !has(&["--unshare-net"]));
        assert!(has(&["--unshare-pid", "--as-pid-1"]) && has(&["--ro-bind", "/proc/sys", "/proc/sys"]));
        assert!(!a.iter().any(|x| x.contains("kill")), "no capability is kept");
        assert!(!a.iter().any(|x| x == "/home" || x == "/root" || x == "/s/sandboxes"));
        assert!(!a.iter().any(|x| x == "--die-with-parent"), "a sandbox outlives its command");
    }
}
