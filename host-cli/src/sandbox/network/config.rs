//! The network files of a sandbox directory: `net.json`, the network mode, the egress
//! policy and the published ports as the helper holds them, which it rewrites (temp
//! file, then rename) on every change; and atoll's own record of what it asked of the
//! helper ([`NetAuthority`]), which is what atoll hands on.
//!
//! Everything the helper makes lies in `net/` ([`NET_DIR`]), a directory of the helper's
//! own user (the `atoll` system user when atoll is root, see docs/security.md): its
//! sockets (`net.ctl`, `agent.sock`), `net.json`, its log and the audit log, each rotated
//! by rename there. Nothing else of the sandbox directory is the helper's to write, so
//! what atoll reads back from `net/` is read as hostile ([`NetConfig::load`], the audit
//! log reader): no link followed, no FIFO waited on, a bounded size, an owner checked.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::spec::{NetworkMode, PortSpec, PublishedPort};

/// The helper's own directory in the sandbox directory.
pub const NET_DIR: &str = "net";
/// The largest `net.json` read (a policy of a few thousand rules and every port fits).
pub const MAX_JSON_BYTES: u64 = 1 << 20;

/// The helper's own directory of the sandbox in `dir`.
pub fn net_dir(dir: &Path) -> PathBuf {
    dir.join(NET_DIR)
}

/// The helper's control socket (JSON lines).
pub fn ctl_path(dir: &Path) -> PathBuf {
    net_dir(dir).join("net.ctl")
}

/// The agent link's socket ([`crate::vmm::agent_link`]), which the helper serves.
pub fn agent_socket_path(dir: &Path) -> PathBuf {
    net_dir(dir).join(crate::vmm::agent_link::AGENT_SOCKET)
}

/// The sandbox directory whose agent link is `socket` (`<dir>/net/agent.sock`).
pub fn sandbox_dir_of_agent_socket(socket: &Path) -> Option<&Path> {
    let net = socket.parent()?;
    (net.file_name()? == NET_DIR).then(|| net.parent()).flatten()
}

/// The Unix socket QEMU's NIC connects to (`-netdev stream`), in the part of the
/// sandbox directory QEMU shares with the helper (`vm/wire/`).
pub fn frames_path(dir: &Path) -> PathBuf {
    crate::vmm::state::wire_dir(dir).join("net.sock")
}

/// The Unix socket QEMU's serial console connects to (`-chardev socket,server=off`), in
/// `vm/wire/`: the helper writes what comes in to `vm/console.log`
/// ([`super::helper::console`]).
pub fn console_socket_path(dir: &Path) -> PathBuf {
    crate::vmm::state::wire_dir(dir).join("tty.sock")
}

/// The Unix socket atoll connects to and hands to QEMU (and its bwrap) as stdout and
/// stderr: the helper writes what comes in to `qemu.log` ([`super::helper::console`]). In
/// the helper's own `net/`, out of QEMU's sight.
pub fn stderr_socket_path(dir: &Path) -> PathBuf {
    net_dir(dir).join("stderr.sock")
}

/// The helper's record of the network.
pub fn json_path(dir: &Path) -> PathBuf {
    net_dir(dir).join("net.json")
}

/// The audit log of connections (JSON lines).
pub fn audit_log_path(dir: &Path) -> PathBuf {
    net_dir(dir).join("net.log")
}

/// The helper's own messages.
pub fn helper_log_path(dir: &Path) -> PathBuf {
    net_dir(dir).join("net-helper.log")
}

/// Makes (or reuses) the helper's directory of the sandbox in `dir`, mode 0700, owned
/// by `owner` (uid, gid) when given (atoll is root and the helper runs as `atoll`).
/// A link or anything but a directory in its place is refused, never followed.
pub fn prepare_net_dir(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<PathBuf> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let path = net_dir(dir);
    match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = rustix::fs::open(&path, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    if let Some((uid, gid)) = owner {
        let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
        rustix::fs::chownat(&fd, "", Some(uid), Some(gid), AtFlags::EMPTY_PATH)?;
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    Ok(path)
}

/// Removes from the helper's directory `net/` of the sandbox in `dir` everything but
/// regular files (its record and logs) not named as its sockets: a socket there is stale once its helper ended,
/// and a directory, a link or a FIFO is nothing a helper makes: one its guest made after
/// taking it over would keep the next helper from binding its sockets (or atoll from
/// writing `net.json`), and so a parked sandbox from coming back. Nothing is followed.
/// Only while no helper of the sandbox runs (before one starts).
pub fn clear_stale(dir: &Path) -> std::io::Result<()> {
    let net = net_dir(dir);
    match std::fs::symlink_metadata(&net) {
        Ok(m) if m.is_dir() => {}
        // Missing, or not a directory: `prepare_net_dir` makes it, or refuses it.
        _ => return Ok(()),
    }
    for entry in std::fs::read_dir(&net)? {
        let entry = entry?;
        // The entry's own type: a link is not followed.
        let kind = entry.file_type()?;
        let path = entry.path();
        // A regular file is kept, unless in a socket's place (where the next helper's
        // agent link refuses anything but a socket).
        if kind.is_file() && ![ctl_path(dir), agent_socket_path(dir)].contains(&path) {
            continue;
        }
        if kind.is_dir() { crate::vmm::safe_fs::remove_tree(&path)? } else { std::fs::remove_file(&path)? }
    }
    Ok(())
}

/// Whether a file of the helper's directory owned by `uid` may be trusted as atoll's or
/// its helper's: the effective user's, root's, or (atoll being root) the helper's.
pub fn trusted_owner(uid: u32) -> bool {
    uid == rustix::process::geteuid().as_raw() || uid == 0 || crate::jail::user::helper_uid() == Some(uid)
}

/// Opens `path` in the helper's directory to read it as hostile: no link followed, no
/// FIFO waited on, a regular file with one name and a trusted owner ([`trusted_owner`]).
pub fn open_hostile(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let f = crate::vmm::safe_fs::open_read(path)?;
    let meta = f.metadata()?;
    if meta.nlink() != 1 || !trusted_owner(meta.uid()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} has another name or an owner atoll does not trust; it was not written by atoll",
                path.display()
            ),
        ));
    }
    Ok(f)
}

/// Why `net.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading failed.
    #[error("could not read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not what atoll writes.
    #[error("{} is damaged; remove the sandbox with `atoll kill` and create it again", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: serde_json::Error,
    },
    /// What a former helper left in `net/` could not be removed.
    #[error("could not clear {} of what the sandbox's former network helper left there (anything but a regular file); remove that by hand", path.display())]
    Stale {
        /// The directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("could not write {}; check free space", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// What `net.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetConfig {
    /// Whether the sandbox has a NIC.
    pub network: NetworkMode,
    /// The egress policy (rules on top of the built-in default).
    #[serde(default)]
    pub policy: atoll_net::policy::Policy,
    /// The published ports, by guest port.
    #[serde(default)]
    pub ports: Vec<PublishedPort>,
    /// For a helper starting under a restored guest: the connections the guest had open
    /// when it was saved, to reset in it (the helper clears this once started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_flows: Vec<atoll_net::stack::FlowKey>,
}

impl NetConfig {
    /// Reads `net.json` of the sandbox in `dir`, as hostile ([`open_hostile`]), at most
    /// [`MAX_JSON_BYTES`]: the helper, which a guest may have taken over, writes it.
    pub fn load(dir: &Path) -> Result<NetConfig, ConfigError> {
        use std::io::Read;
        let path = json_path(dir);
        let read = |path: &Path| -> std::io::Result<Vec<u8>> {
            let mut text = Vec::new();
            open_hostile(path)?.take(MAX_JSON_BYTES + 1).read_to_end(&mut text)?;
            if text.len() as u64 > MAX_JSON_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("it is over {MAX_JSON_BYTES} bytes"),
                ));
            }
            Ok(text)
        };
        let text = read(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        serde_json::from_slice(&text).map_err(|source| ConfigError::Parse { path, source })
    }

    /// Writes `net.json` for the helper about to start in `dir` (its directory made
    /// first), given to the helper's user `owner` when atoll is root.
    pub fn save_for_helper(&self, dir: &Path, owner: Option<(u32, u32)>) -> Result<(), ConfigError> {
        let path = json_path(dir);
        let write = |source| ConfigError::Write { path: path.clone(), source };
        prepare_net_dir(dir, owner).map_err(write)?;
        self.save(dir)?;
        if let Some((uid, gid)) = owner {
            chown_file(&path, uid, gid).map_err(write)?;
        }
        Ok(())
    }

    /// Writes `dir/net.json` atomically (an exclusive temp file, then rename).
    pub fn save(&self, dir: &Path) -> Result<(), ConfigError> {
        let path = json_path(dir);
        let json = serde_json::to_vec_pretty(self).expect("the network config always serializes");
        crate::vmm::safe_fs::write_atomic(&path, &json).map_err(|source| ConfigError::Write { path, source })
    }
}

/// atoll's own record of a sandbox's network mode, egress policy and published ports,
/// beside `sandbox.json` and outside `net/`: written by atoll whenever it gives the
/// helper a policy (at its start, and by `atoll net set` once the helper took it) and
/// whenever the helper published or unpublished a port atoll asked for, and read
/// wherever atoll carries them on (`atoll net show`, `atoll info`, `atoll port ls` of a
/// parked sandbox, a snapshot, a park and its unpark, a restore), so that what a helper
/// taken over by its guest writes into its own `net.json` never becomes a policy or a
/// host port atoll hands on. When atoll is root the helper cannot write the sandbox
/// directory (docs/security.md section 3).
pub fn authority_path(dir: &Path) -> PathBuf {
    dir.join("net-policy.json")
}

/// What [`authority_path`] holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetAuthority {
    /// Whether the sandbox has a NIC.
    pub network: NetworkMode,
    /// The egress policy atoll gave the helper last.
    #[serde(default)]
    pub policy: atoll_net::policy::Policy,
    /// The ports atoll had the helper publish, by guest port, at the bind address atoll
    /// asked for and the host port it asked for (or, asked for none, the one the helper
    /// answered it took): what an unpark or a restore publishes again. `None` in a record
    /// written before atoll kept its ports (until the sandbox's next helper start): its
    /// ports are then those of the helper's `net.json`, as they were before
    /// ([`NetAuthority::own_ports`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<PublishedPort>>,
}

impl NetAuthority {
    /// A record for a helper about to start with `network` and `policy`, which has
    /// published no port yet.
    pub fn starting(network: NetworkMode, policy: atoll_net::policy::Policy) -> NetAuthority {
        NetAuthority { network, policy, ports: Some(Vec::new()) }
    }

    /// Changes atoll's record for the sandbox in `dir` with `change`, under an exclusive
    /// lock on the sandbox directory (two `atoll port` commands at once each keep their
    /// port), and returns what was written.
    pub fn update(dir: &Path, change: impl FnOnce(&mut NetAuthority)) -> Result<NetAuthority, ConfigError> {
        use rustix::fs::{FlockOperation, Mode, OFlags};
        let path = authority_path(dir);
        let locked =
            rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .and_then(|fd| rustix::fs::flock(&fd, FlockOperation::LockExclusive).map(|()| fd))
                .map_err(|e| ConfigError::Write { path: path.clone(), source: e.into() })?;
        let mut record = NetAuthority::load(dir)?;
        change(&mut record);
        record.save(dir)?;
        drop(locked);
        Ok(record)
    }

    /// Records that the helper of the sandbox in `dir` published `spec`, answering that
    /// it took host port `answered`: kept as asked (the bind address, and the host port
    /// when one was asked for), not as the helper answered.
    pub fn record_published(dir: &Path, spec: &PortSpec, answered: u16) -> Result<(), ConfigError> {
        let port = PublishedPort::new(
            spec.guest_port,
            std::net::SocketAddr::new(spec.bind, spec.host_port.unwrap_or(answered)),
        );
        NetAuthority::update(dir, |a| {
            if let Some(ports) = &mut a.ports {
                ports.retain(|p| p.guest_port != port.guest_port);
                ports.push(port);
                ports.sort_by_key(|p| p.guest_port);
            }
        })?;
        Ok(())
    }

    /// Records that guest port `guest_port` of the sandbox in `dir` is no longer
    /// published.
    pub fn record_unpublished(dir: &Path, guest_port: u16) -> Result<(), ConfigError> {
        NetAuthority::update(dir, |a| {
            if let Some(ports) = &mut a.ports {
                ports.retain(|p| p.guest_port != guest_port);
            }
        })?;
        Ok(())
    }

    /// The ports the sandbox in `dir` publishes again when its guest comes back (an
    /// unpark, a restore), as atoll recorded them. A sandbox whose record predates the
    /// ports (no `ports` in it, or no record at all) falls back to its helper's
    /// `net.json`, as before atoll kept them: such a record gets its own list at the
    /// sandbox's next helper start. Unreadable: none.
    pub fn own_ports(dir: &Path) -> Vec<PublishedPort> {
        match NetAuthority::load(dir) {
            Ok(NetAuthority { ports: Some(ports), .. }) => ports,
            Ok(NetAuthority { ports: None, .. }) => NetConfig::load(dir).map(|c| c.ports).unwrap_or_default(),
            Err(e) => {
                tracing::warn!("{e}; no port is published again");
                Vec::new()
            }
        }
    }

    /// Writes atoll's record for the sandbox in `dir` atomically (atoll's own file).
    pub fn save(&self, dir: &Path) -> Result<(), ConfigError> {
        let path = authority_path(dir);
        let json = serde_json::to_vec_pretty(self).expect("the network policy always serializes");
        crate::vmm::safe_fs::write_atomic(&path, &json).map_err(|source| ConfigError::Write { path, source })
    }

    /// atoll's record for the sandbox in `dir`: read without following a link, at most
    /// [`MAX_JSON_BYTES`], owned by this user. A sandbox made before the record existed
    /// has only its helper's `net.json`, which is read then ([`NetConfig::load`]).
    pub fn load(dir: &Path) -> Result<NetAuthority, ConfigError> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let path = authority_path(dir);
        let read = |path: &Path| -> std::io::Result<Vec<u8>> {
            let f = crate::vmm::safe_fs::open_read(path)?;
            if f.metadata()?.uid() != rustix::process::geteuid().as_raw() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "not atoll's own file",
                ));
            }
            let mut text = Vec::new();
            f.take(MAX_JSON_BYTES + 1).read_to_end(&mut text)?;
            if text.len() as u64 > MAX_JSON_BYTES {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "it is too large"));
            }
            Ok(text)
        };
        match read(&path) {
            Ok(text) => serde_json::from_slice(&text).map_err(|source| ConfigError::Parse { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => NetConfig::load(dir)
                .map(|c| NetAuthority { network: c.network, policy: c.policy, ports: None }),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }
}

/// Gives the file `path` (a link is refused) to `uid`:`gid`.
pub fn chown_file(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Symlink {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "a symbolic link is in its place"));
    }
    let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
    rustix::fs::chownat(&fd, "", Some(uid), Some(gid), AtFlags::EMPTY_PATH)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::spec;
    use super::*;

    /// What a former helper left in `net/` other than regular files (a stale socket, a
    /// directory in place of a socket holding a link out, a link, a FIFO), or a regular
    /// file in a socket's place, is removed,
    /// nothing followed; its record and logs are kept.
    #[test]
    fn stale_entries_of_the_helper_are_cleared_without_following() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let (dir, outside) = (d.path().join("s"), d.path().join("outside"));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("kept"), "kept").unwrap();
        std::fs::create_dir(&dir).unwrap();
        let net = prepare_net_dir(&dir, None).unwrap();
        std::fs::write(net.join("net.json"), "{}").unwrap();
        std::fs::write(net.join("net.log"), "log").unwrap();
        std::fs::create_dir(net.join("net.ctl.new")).unwrap();
        symlink(&outside, net.join("net.ctl.new/out")).unwrap();
        symlink(&outside, net.join("net-dns.log")).unwrap();
        std::fs::write(net.join("agent.sock"), "not a socket").unwrap();
        let _stale = std::os::unix::net::UnixListener::bind(net.join("net.ctl")).unwrap();
        let fifo = net.join(".1.sock");
        let mode = rustix::fs::Mode::from_raw_mode(0o600);
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0).unwrap();
        clear_stale(&dir).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&net)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["net.json", "net.log"]);
        assert_eq!(std::fs::read_to_string(outside.join("kept")).unwrap(), "kept", "a link was followed");
        assert_eq!(std::fs::read_to_string(net.join("net.log")).unwrap(), "log");
    }

    #[test]
    fn the_agent_socket_names_its_sandbox_directory() {
        let dir = Path::new("/s/sandboxes/abc");
        assert_eq!(sandbox_dir_of_agent_socket(&agent_socket_path(dir)), Some(dir));
        assert_eq!(sandbox_dir_of_agent_socket(Path::new("/tmp/agent.sock")), None);
    }

    #[test]
    fn round_trips_and_a_damaged_file_says_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        let c = NetConfig {
            network: NetworkMode::None,
            policy: atoll_net::policy::Policy::from_lists(&["pypi.org"], &["0.0.0.0/0"]).unwrap(),
            ports: vec![PublishedPort::new(80, "127.0.0.1:4000".parse().unwrap())],
            stale_flows: vec![("10.0.2.15:4000".parse().unwrap(), "192.0.2.1:80".parse().unwrap())],
        };
        c.save_for_helper(d.path(), None).unwrap();
        assert_eq!(NetConfig::load(d.path()).unwrap(), c);
        std::fs::write(json_path(d.path()), "{").unwrap();
        assert!(NetConfig::load(d.path()).unwrap_err().to_string().contains("atoll kill"));
    }

    /// The ports atoll publishes again come from its own record, as asked, whatever the
    /// helper's `net.json` says; a record made before atoll kept ports falls back to it.
    #[test]
    fn own_ports_are_atolls_record_as_asked_not_net_json() {
        let d = tempfile::tempdir().unwrap();
        let planted = PublishedPort::new(80, "0.0.0.0:4444".parse().unwrap());
        let net = NetConfig { ports: vec![planted.clone()], ..NetConfig::default() };
        net.save_for_helper(d.path(), None).unwrap();
        // No record of atoll's, or one without ports: the helper's file, as before.
        assert_eq!(NetAuthority::own_ports(d.path()), std::slice::from_ref(&planted));
        std::fs::write(authority_path(d.path()), r#"{"network":"default"}"#).unwrap();
        assert_eq!(NetAuthority::load(d.path()).unwrap().ports, None);
        assert_eq!(NetAuthority::own_ports(d.path()), std::slice::from_ref(&planted));

        NetAuthority::starting(NetworkMode::Default, Default::default()).save(d.path()).unwrap();
        assert!(NetAuthority::own_ports(d.path()).is_empty());
        let asked = PortSpec { guest_port: 80, host_port: Some(4000), bind: spec::DEFAULT_BIND };
        // The helper answers another host port: the one asked for is kept.
        NetAuthority::record_published(d.path(), &asked, 4444).unwrap();
        let ephemeral = PortSpec { guest_port: 22, host_port: None, bind: spec::DEFAULT_BIND };
        NetAuthority::record_published(d.path(), &ephemeral, 40000).unwrap();
        let ports = NetAuthority::own_ports(d.path());
        assert_eq!(
            ports,
            [
                PublishedPort::new(22, "127.0.0.1:40000".parse().unwrap()),
                PublishedPort::new(80, "127.0.0.1:4000".parse().unwrap())
            ]
        );
        // A policy change keeps them; an unpublish drops one.
        NetAuthority::update(d.path(), |a| a.policy = Default::default()).unwrap();
        assert_eq!(NetAuthority::own_ports(d.path()), ports);
        NetAuthority::record_unpublished(d.path(), 22).unwrap();
        assert_eq!(
            NetAuthority::own_ports(d.path()),
            [PublishedPort::new(80, "127.0.0.1:4000".parse().unwrap())]
        );
    }

    /// What a helper taken over by a guest could put in place of `net.json` is refused:
    /// a link, a file with another name, a file over the bound, a FIFO (not waited on).
    #[test]
    fn a_planted_net_json_is_refused() {
        let d = tempfile::tempdir().unwrap();
        NetConfig::default().save_for_helper(d.path(), None).unwrap();
        let json = json_path(d.path());
        let victim = d.path().join("victim.json");
        std::fs::write(&victim, "{\"network\":\"none\"}").unwrap();
        std::fs::remove_file(&json).unwrap();
        std::os::unix::fs::symlink(&victim, &json).unwrap();
        assert!(NetConfig::load(d.path()).is_err(), "a link is followed");
        std::fs::remove_file(&json).unwrap();
        std::fs::hard_link(&victim, &json).unwrap();
        assert!(NetConfig::load(d.path()).is_err(), "a file with another name is read");
        std::fs::remove_file(&json).unwrap();
        std::fs::write(&json, vec![b' '; usize::try_from(MAX_JSON_BYTES).unwrap() + 1]).unwrap();
        assert!(NetConfig::load(d.path()).is_err(), "an oversized file is read");
        std::fs::remove_file(&json).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &json,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(NetConfig::load(d.path()).is_err(), "a FIFO is read");
    }
}
