//! The host's secret store: one JSON file per secret (0600) in `<state>/.secrets`
//! (0700), outside every sandbox directory and snapshot; written atomically (a
//! temporary file in the same directory, synced, renamed over).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SecretError;

/// Longest secret name.
pub const NAME_MAX: usize = 64;
/// Longest value (bytes).
pub const VALUE_MAX: usize = 8 * 1024;
/// Shortest value: a shorter one would be scrubbed out of unrelated response headers.
pub const VALUE_MIN: usize = 8;
/// Hosts a secret may name.
pub const HOSTS_MAX: usize = 32;

/// Where a secret's value comes from.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// Stored here (read from stdin, or from the host environment at `set` time).
    Value {
        /// The value.
        value: String,
        /// `stdin` or `env VAR`.
        origin: String,
    },
    /// A host command run when the value is needed, its output kept for `cache_secs`.
    Command {
        /// The command line (`sh -c`).
        command: String,
        /// How long one output is used.
        cache_secs: u64,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Source {
    /// Where the value comes from, in words (never the value).
    pub fn describe(&self) -> String {
        match self {
            Source::Value { origin, .. } => origin.clone(),
            Source::Command { command, cache_secs } => format!("command `{command}` (cached {cache_secs} s)"),
        }
    }
}

/// One stored secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretFile {
    /// Its name.
    pub name: String,
    /// The hosts its value may go to.
    pub hosts: Vec<String>,
    /// Its value, or how to get it.
    pub source: Source,
    /// When it was set (ms since the epoch).
    pub updated_unix_ms: i64,
}

/// The store's directory, created private if missing; refused when it is not ours or
/// others may enter it.
pub fn dir() -> Result<PathBuf, SecretError> {
    let dir = crate::vmm::dirs::state_dir()?.join(".secrets");
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| SecretError::Io(format!("cannot create {}: {e}", dir.display())))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| SecretError::Io(format!("cannot set the mode of {}: {e}", dir.display())))?;
    }
    let meta =
        std::fs::symlink_metadata(&dir).map_err(|e| SecretError::Io(format!("{}: {e}", dir.display())))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(SecretError::Io(format!(
            "{} must be a directory of yours that only you can enter (chmod 700)",
            dir.display()
        )));
    }
    Ok(dir)
}

fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// Refuses a name that is not 1 to 64 of `A-Z a-z 0-9 _ -`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), SecretError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(SecretError::BadName(name.escape_debug().to_string())) }
}

/// Refuses a host that is not a host name (`api.example.com`) or `*.` and one.
pub fn check_host(host: &str) -> Result<String, SecretError> {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    let ok = atoll_net::policy::is_host_name(bare)
        && bare.contains('.')
        && bare.parse::<std::net::IpAddr>().is_err()
        && !bare.contains('*');
    if ok {
        Ok(host.trim_end_matches('.').to_ascii_lowercase())
    } else {
        Err(SecretError::BadHost(host.escape_debug().to_string()))
    }
}

/// Refuses a value that could not stand in an HTTP header, or is too short or long.
pub fn check_value(value: &str) -> Result<(), SecretError> {
    if value.len() < VALUE_MIN || value.len() > VALUE_MAX {
        return Err(SecretError::BadValue(format!(
            "it is {} bytes; a value must be {VALUE_MIN} to {VALUE_MAX} bytes",
            value.len()
        )));
    }
    if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
        return Err(SecretError::BadValue("it holds a control character (a newline?)".into()));
    }
    if value.starts_with("atoll-secret-") {
        return Err(SecretError::BadValue("it is an atoll placeholder, not a real value".into()));
    }
    Ok(())
}

/// Writes `secret` (replacing one of the same name).
pub fn save(secret: &SecretFile) -> Result<(), SecretError> {
    let dir = dir()?;
    let text = serde_json::to_vec_pretty(secret).map_err(|e| SecretError::Io(e.to_string()))?;
    // NamedTempFile is created 0600.
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| SecretError::Io(format!("{}: {e}", dir.display())))?;
    tmp.write_all(&text)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| SecretError::Io(e.to_string()))?;
    tmp.persist(path(&dir, &secret.name)).map_err(|e| SecretError::Io(e.to_string()))?;
    Ok(())
}

/// The secret `name`.
pub fn load(name: &str) -> Result<SecretFile, SecretError> {
    check_name(name)?;
    let path = path(&dir()?, name);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SecretError::NotFound(name.into())),
        Err(e) => return Err(SecretError::Io(format!("{}: {e}", path.display()))),
    };
    serde_json::from_slice(&text).map_err(|e| SecretError::Io(format!("{} is damaged: {e}", path.display())))
}

/// Every stored secret, by name.
pub fn all() -> Result<Vec<SecretFile>, SecretError> {
    let dir = dir()?;
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| SecretError::Io(format!("{}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".json")
            && check_name(stem).is_ok()
            && let Ok(secret) = load(stem)
        {
            out.push(secret);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Removes the secret `name`.
pub fn remove(name: &str) -> Result<(), SecretError> {
    check_name(name)?;
    match std::fs::remove_file(path(&dir()?, name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SecretError::NotFound(name.into())),
        Err(e) => Err(SecretError::Io(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hosts_and_values_are_checked() {
        assert!(check_name("github").is_ok() && check_name("a_b-1").is_ok());
        for bad in ["", "-x", "a/b", "../x", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(check_host("API.example.com").unwrap(), "api.example.com");
        assert!(check_host("*.example.com").is_ok());
        for bad in ["*", "*.com.*", "10.0.0.1", "a b.com", "localhost", "x.*.com", ""] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
        assert!(check_value("ghp_0123456789").is_ok());
        assert!(check_value("short").is_err());
        assert!(check_value("abcdefgh\nX-Evil: 1").is_err());
        assert!(check_value("atoll-secret-x-123456").is_err());
    }
}
