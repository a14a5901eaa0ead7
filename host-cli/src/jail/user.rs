//! Who QEMU runs as. When atoll runs as an ordinary user, QEMU runs as that user (in a
//! user namespace of its own, without capabilities). When atoll runs as root, QEMU
//! never does: it runs as the owner of the sandbox's shared folders when that is one
//! ordinary user (files the guest makes there are then that user's, as if they had run
//! atoll), else as the `atoll` system user, created on first use. Either way it holds
//! the `atoll` group, which is all it needs of the sandbox's files ([`grant`]).
//!
//! A shared folder owned by root, or folders of several owners, cannot be served by
//! one unprivileged QEMU: such a sandbox's QEMU stays uid 0, still without any
//! capability and in its namespaces (docs/security.md: not defended).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::vmm::storage::Storage;

/// The system user (and group) jailed processes run as when atoll runs as root.
pub const USER: &str = "atoll";

/// Why the unprivileged user could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// `useradd` failed.
    #[error(
        "could not create the system user `{USER}` that QEMU runs as ({output}); create it with `useradd --system --user-group {USER}`"
    )]
    Create {
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
/// keeps the user's uid) or when no single ordinary user can serve its shares.
pub fn for_qemu(storage: &Storage) -> Result<Option<RunAs>, UserError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let (uid, gid) = system_user()?;
    let owners: Vec<(u32, u32)> = storage
        .mounts
        .iter()
        .filter_map(|m| std::fs::metadata(&m.host).ok().map(|meta| (meta.uid(), meta.gid())))
        .collect();
    let Some(&first) = owners.first() else { return Ok(Some(RunAs { uid, gid, atoll_gid: gid })) };
    if first.0 == 0 || owners.iter().any(|o| o.0 != first.0) {
        tracing::warn!(
            "QEMU keeps uid 0 (without capabilities): a shared folder is owned by root, or the folders have several owners"
        );
        return Ok(None);
    }
    Ok(Some(RunAs { uid: first.0, gid: first.1, atoll_gid: gid }))
}

/// The `atoll` system user's (uid, gid), created on first use.
fn system_user() -> Result<(u32, u32), UserError> {
    if let Some(ids) = lookup(USER) {
        return Ok(ids);
    }
    let out = std::process::Command::new("useradd")
        .args(["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"])
        .args(["--shell", "/usr/sbin/nologin", "--comment", "atoll sandboxes (QEMU)", USER])
        .output();
    let output = match out {
        Ok(o) if o.status.success() => String::new(),
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => e.to_string(),
    };
    // Another atoll may have created it meanwhile (useradd then says it exists).
    lookup(USER).ok_or(UserError::Create { output })
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
    #[test]
    fn looks_up_root() {
        assert_eq!(super::lookup("root"), Some((0, 0)));
        assert_eq!(super::lookup("atoll-no-such-user"), None);
    }
}
