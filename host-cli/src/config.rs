//! The config file: `$ATOLL_CONFIG`, else `$XDG_CONFIG_HOME/atoll/config.toml`, else
//! `$HOME/.config/atoll/config.toml`. It is optional (a missing default file is no
//! error; a missing `$ATOLL_CONFIG` is). Today it holds the host quotas:
//!
//! ```toml
//! [quotas]
//! max_sandboxes = 8
//! max_memory_mib = 16384
//! max_vcpus = 32
//! max_disk = "200G"          # sandboxes' disks, at their full size
//! max_snapshot_disk = "50G"  # snapshots, templates, the image and step caches, as stored
//! ```
//!
//! An unknown key is refused with its name, a bad value with its line; environment
//! variables override the file (see [`crate::sandbox::quota`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Points at another config file.
pub const CONFIG_ENV: &str = "ATOLL_CONFIG";

/// What the config file holds.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Host quotas.
    #[serde(default)]
    pub quotas: QuotaConfig,
}

/// `[quotas]`: each unset key keeps the machine's default.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Sandboxes running at once.
    pub max_sandboxes: Option<u64>,
    /// Guest memory of the running sandboxes, MiB.
    pub max_memory_mib: Option<u64>,
    /// vCPUs of the running sandboxes.
    pub max_vcpus: Option<u64>,
    /// Sandboxes' disks at their full size.
    pub max_disk: Option<Size>,
    /// What is stored in named snapshots, templates (with their snapshots and staged
    /// builds), the Dockerfile step cache (`images/steps`) and the image blob cache
    /// (`images/blobs`), each file once.
    pub max_snapshot_disk: Option<Size>,
}

/// A byte count: a whole number of bytes, or a string with a unit (`"50G"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SizeText")]
pub struct Size(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

impl TryFrom<SizeText> for Size {
    type Error = String;
    fn try_from(v: SizeText) -> Result<Size, String> {
        match v {
            SizeText::Bytes(b) => Ok(Size(b)),
            SizeText::Text(t) => parse_size(&t).map(Size),
        }
    }
}

/// `"50G"`, `"512M"`, `"2T"`, `"4096K"` (powers of 1024; `GiB`/`GB` read the same) or
/// plain bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{text}` has an unknown unit; use K, M, G or T, e.g. \"50G\"")),
    };
    let value: u64 =
        number.parse().map_err(|_| format!("`{text}` is not a whole number with a unit, e.g. \"50G\""))?;
    value.checked_mul(1 << shift).ok_or_else(|| format!("`{text}` is too large"))
}

/// Why the config file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `$ATOLL_CONFIG` names a file that cannot be read.
    #[error("cannot read the config file {} (${CONFIG_ENV}): {source}; fix the path or unset ${CONFIG_ENV}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Not valid, or a key or value refused.
    #[error("config file {}: {why}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// toml's message: the line, the column and what is wrong.
        why: String,
    },
}

/// The config file in force, and where it is (`None`: no file, all defaults).
pub fn load() -> Result<(Config, Option<PathBuf>), ConfigError> {
    let explicit = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    let path = match explicit {
        Some(p) => p,
        None => match default_path() {
            Some(p) if p.exists() => p,
            _ => return Ok((Config::default(), None)),
        },
    };
    // Read bounded: a config file is a few lines.
    let text = read_bounded(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    let config = parse(&text).map_err(|why| ConfigError::Bad { path: path.clone(), why })?;
    Ok((config, Some(path)))
}

/// `$XDG_CONFIG_HOME/atoll/config.toml`, else `$HOME/.config/atoll/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = non_empty("XDG_CONFIG_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".config")))?;
    Some(dir.join("atoll").join("config.toml"))
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    const MAX: u64 = 1 << 20;
    let mut text = String::new();
    std::fs::File::open(path)?.take(MAX + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX {
        return Err(std::io::Error::other("larger than 1 MiB; a config file is a few lines"));
    }
    Ok(text)
}

/// Parses config text; the error names the line and the key or value.
pub fn parse(text: &str) -> Result<Config, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().replace("TOML parse error at ", ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_quotas_and_refuses_unknown_keys_and_bad_values() {
        let c =
            parse("[quotas]\nmax_sandboxes = 3\nmax_disk = \"50G\"\nmax_snapshot_disk = 1048576\n").unwrap();
        assert_eq!(c.quotas.max_sandboxes, Some(3));
        assert_eq!(c.quotas.max_disk, Some(Size(50 << 30)));
        assert_eq!(c.quotas.max_snapshot_disk, Some(Size(1 << 20)));
        assert_eq!(parse("").unwrap(), Config::default());

        let e = parse("[quotas]\nmax_sandbox = 3\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("unknown field `max_sandbox`"), "{e}");
        let e = parse("[quota]\n").unwrap_err();
        assert!(e.contains("unknown field `quota`"), "{e}");
        let e = parse("[quotas]\n\nmax_disk = \"50 parsecs\"\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        let e = parse("[quotas]\nmax_vcpus = -1\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("5X").unwrap_err().contains("unknown unit"));
        assert!(parse_size("99999999999T").unwrap_err().contains("too large"));
    }
}
