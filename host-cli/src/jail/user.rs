//! Who QEMU runs as. When atoll runs as an ordinary user, QEMU runs as that user (in a
//! user namespace of its own, without capabilities; the kernel does not let an
//! unprivileged user namespace drop the user's supplementary groups, so QEMU keeps
//! them). When atoll runs as root, QEMU never has uid 0, gid 0 or any of root's
//! groups: it runs as the owner of the sandbox's read-write shared folders (files the
//! guest makes there are then that user's, as if they had run atoll), with that
//! user's group unless it is root's (then the `atoll` group), or, with no read-write
//! share, as the one ordinary owner of its read-only shares, else as the `atoll`
//! system user, created on first use. Either way its only
//! supplementary group is `atoll` (and `/dev/kvm`'s under KVM), which is all it needs
//! of the sandbox's files ([`grant`]).
//!
//! Read-write shares owned by root, or by several users, cannot be served by one
//! unprivileged QEMU: such a sandbox is refused, saying what to change
//! ([`UserError::RootShare`], [`UserError::SeveralOwners`]).

use std::path::{Path, PathBuf};

use crate::vmm::storage::Storage;

/// The system user (and group) jailed processes run as when atoll runs as root.
pub const USER: &str = "atoll";
/// The system user network helpers run as when atoll runs as root: not QEMU's `atoll`
/// (a QEMU without shares runs as that one, and its control socket is its user's
/// alone), in the `atoll` group (what it shares with QEMU: the NIC's socket, `vm/`).
pub const HELPER_USER: &str = "atoll-net";

/// Why the unprivileged user could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// `useradd` failed.
    #[error(
        "could not create the system user `{user}` that atoll's jailed processes run as ({output}); create it with `useradd --system --user-group {USER}`, then `useradd --system --gid {USER} {HELPER_USER}`"
    )]
    Create {
        /// Which user.
        user: &'static str,
        /// What useradd said.
        output: String,
    },
    /// A file QEMU needs could not be handed to it.
    #[error("could not give QEMU's user access to {}", path.display())]
    Grant {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A read-write share is root's.
    #[error(
        "{} is owned by root, and QEMU never runs as root: share it read-only (`:ro`), or give it to an ordinary user first (`chown -R USER {}`), whom QEMU then runs as",
        path.display(), path.display()
    )]
    RootShare {
        /// The folder.
        path: PathBuf,
    },
    /// Read-write shares of several owners.
    #[error(
        "the read-write shared folders have different owners ({}), and one QEMU can write as only one of them: share all but one owner's read-only (`:ro`), or give them one owner",
        .0.iter().map(|(p, u)| format!("{} uid {u}", p.display())).collect::<Vec<_>>().join(", ")
    )]
    SeveralOwners(Vec<(PathBuf, u32)>),
}

/// An unprivileged identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// The `atoll` group, held besides.
    pub atoll_gid: u32,
}

/// Who QEMU of a sandbox with `storage` runs as: `None` when atoll is not root (QEMU
/// keeps the user's uid); an error when no unprivileged identity can serve its shares.
/// `owner`: a share's (uid, gid), read from the handle it was opened as.
pub fn for_qemu(
    storage: &Storage,
    owner: impl Fn(&Path) -> Option<(u32, u32)>,
) -> Result<Option<RunAs>, UserError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let atoll = system_user()?;
    let owners = |read_only: bool| -> Vec<Owner> {
        storage
            .mounts
            .iter()
            .filter(|m| m.read_only == read_only)
            .filter_map(|m| owner(&m.host).map(|(uid, gid)| (m.host.clone(), uid, gid)))
            .collect()
    };
    let rw = owners(false);
    if !rw.is_empty() {
        return choose(&rw, atoll).map(Some);
    }
    // Only read-only shares: their one ordinary owner, who can read them whatever
    // their modes; else `atoll`, reading through what others may read.
    let (uid, gid) = atoll;
    Ok(Some(choose(&owners(true), atoll).unwrap_or(RunAs { uid, gid, atoll_gid: gid })))
}

/// A read-write share: (folder, owner uid, owner gid).
type Owner = (PathBuf, u32, u32);

/// The identity for read-write shares of `owners`, `atoll` the system user's (uid,
/// gid): never uid or gid 0.
fn choose(owners: &[Owner], atoll: (u32, u32)) -> Result<RunAs, UserError> {
    let (uid, gid) = atoll;
    let Some((_, first_uid, first_gid)) = owners.first().cloned() else {
        return Ok(RunAs { uid, gid, atoll_gid: gid });
    };
    if let Some((path, ..)) = owners.iter().find(|o| o.1 == 0) {
        return Err(UserError::RootShare { path: path.clone() });
    }
    if owners.iter().any(|o| o.1 != first_uid) {
        return Err(UserError::SeveralOwners(owners.iter().map(|(p, u, _)| (p.clone(), *u)).collect()));
    }
    let own_gid = if first_gid == 0 { gid } else { first_gid };
    Ok(RunAs { uid: first_uid, gid: own_gid, atoll_gid: gid })
}

/// The `atoll` system user's (uid, gid), created on first use.
fn system_user() -> Result<(u32, u32), UserError> {
    ensure_user(USER, &["--user-group"], "atoll sandboxes (QEMU)")
}

/// Who the network helper runs as: `None` when atoll is not root (it keeps the user's
/// uid in a user namespace of its own); else the `atoll-net` system user's uid
/// ([`HELPER_USER`]) with the `atoll` group's gid, both created on first use.
pub fn for_helper() -> Result<Option<(u32, u32)>, UserError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let (_, atoll_gid) = system_user()?;
    let (uid, _) =
        ensure_user(HELPER_USER, &["--no-user-group", "--gid", USER], "atoll sandboxes (network helpers)")?;
    Ok(Some((uid, atoll_gid)))
}

/// The system user `name`'s (uid, gid), made with `useradd --system` and `group_args`
/// (no home, no shell) if it does not exist yet.
fn ensure_user(name: &'static str, group_args: &[&str], comment: &str) -> Result<(u32, u32), UserError> {
    if let Some(ids) = lookup(name) {
        return Ok(ids);
    }
    let out = std::process::Command::new("useradd")
        .arg("--system")
        .args(group_args)
        .args(["--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"])
        .args(["--comment", comment, name])
        .output();
    let output = match out {
        Ok(o) if o.status.success() => String::new(),
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => e.to_string(),
    };
    // Another atoll may have created it meanwhile (useradd then says it exists).
    lookup(name).ok_or(UserError::Create { user: name, output })
}

/// The uid a file written by the network helper may have besides the effective
/// user's: the `atoll-net` system user's when atoll is root (never created here).
pub fn helper_uid() -> Option<u32> {
    rustix::process::geteuid().is_root().then(|| lookup(HELPER_USER).map(|(uid, _)| uid)).flatten()
}

/// `name`'s (uid, gid) from /etc/passwd.
fn lookup(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// Hands `path` (owned by root) to the `atoll` group with `mode`: the sandbox
/// directory (sticky: QEMU may add its sockets but not remove atoll's files), its
/// disk and console, its NIC's socket, the guest RAM file of a restore.
pub fn grant(path: &Path, run_as: RunAs, mode: u32) -> Result<(), UserError> {
    crate::vmm::safe_fs::chown_group_mode(path, run_as.atoll_gid, mode)
        .map_err(|source| UserError::Grant { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never uid 0 nor gid 0, whatever the shares' owners; a refusal says what to do.
    #[test]
    fn qemu_never_gets_root_ids() {
        let atoll = (990, 995);
        let share = |p: &str, u, g| (PathBuf::from(p), u, g);
        assert_eq!(choose(&[], atoll).unwrap(), RunAs { uid: 990, gid: 995, atoll_gid: 995 });
        let mine = choose(&[share("/a", 1000, 1000), share("/b", 1000, 50)], atoll).unwrap();
        assert_eq!(mine, RunAs { uid: 1000, gid: 1000, atoll_gid: 995 });
        let root_group = choose(&[share("/a", 4242, 0)], atoll).unwrap();
        assert_eq!(root_group, RunAs { uid: 4242, gid: 995, atoll_gid: 995 }, "a root group is not taken");
        let err = choose(&[share("/a", 1000, 1000), share("/srv", 0, 0)], atoll).unwrap_err().to_string();
        assert!(
            err.contains("/srv is owned by root") && err.contains(":ro") && err.contains("chown"),
            "{err}"
        );
        let err = choose(&[share("/a", 1000, 1000), share("/b", 1001, 1001)], atoll).unwrap_err().to_string();
        assert!(err.contains("/a uid 1000, /b uid 1001") && err.contains("read-only"), "{err}");
    }

    #[test]
    fn looks_up_root() {
        assert_eq!(super::lookup("root"), Some((0, 0)));
        assert_eq!(super::lookup("atoll-no-such-user"), None);
    }
}
