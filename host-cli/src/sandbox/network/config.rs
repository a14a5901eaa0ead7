//! The network files of a sandbox directory, and `net.json`: the network mode, the egress
//! policy and the published ports, which the helper rewrites (temp file, then rename) on every change,
//! so that `atoll info` and `atoll port ls` can still say what was there after the helper
//! died.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::spec::{NetworkMode, PublishedPort};

/// The helper's control socket (JSON lines).
pub fn ctl_path(dir: &Path) -> PathBuf {
    dir.join("net.ctl")
}

/// The Unix socket QEMU's NIC connects to (`-netdev stream`), in the part of the
/// sandbox directory QEMU sees.
pub fn frames_path(dir: &Path) -> PathBuf {
    dir.join(crate::vmm::state::VM_DIR).join("net.sock")
}

/// The helper's record of the network.
pub fn json_path(dir: &Path) -> PathBuf {
    dir.join("net.json")
}

/// The audit log of connections (JSON lines).
pub fn audit_log_path(dir: &Path) -> PathBuf {
    dir.join("net.log")
}

/// The helper's own messages.
pub fn helper_log_path(dir: &Path) -> PathBuf {
    dir.join("net-helper.log")
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
    /// Reads `dir/net.json`.
    pub fn load(dir: &Path) -> Result<NetConfig, ConfigError> {
        let path = json_path(dir);
        let text = crate::vmm::safe_fs::read_owned(&path)
            .map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        serde_json::from_slice(&text).map_err(|source| ConfigError::Parse { path, source })
    }

    /// Writes `dir/net.json` atomically (an exclusive temp file, then rename).
    pub fn save(&self, dir: &Path) -> Result<(), ConfigError> {
        let path = json_path(dir);
        let json = serde_json::to_vec_pretty(self).expect("the network config always serializes");
        crate::vmm::safe_fs::write_atomic(&path, &json).map_err(|source| ConfigError::Write { path, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_a_damaged_file_says_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        let c = NetConfig {
            network: NetworkMode::None,
            policy: atoll_net::policy::Policy::from_lists(&["pypi.org"], &["0.0.0.0/0"]).unwrap(),
            ports: vec![PublishedPort::new(80, "127.0.0.1:4000".parse().unwrap())],
            stale_flows: vec![("10.0.2.15:4000".parse().unwrap(), "192.0.2.1:80".parse().unwrap())],
        };
        c.save(d.path()).unwrap();
        assert_eq!(NetConfig::load(d.path()).unwrap(), c);
        std::fs::write(json_path(d.path()), "{").unwrap();
        assert!(NetConfig::load(d.path()).unwrap_err().to_string().contains("atoll kill"));
    }
}
