//! A sandbox's bindings (variable, secret name, placeholder; never a value), in
//! `<state>/.secrets/bindings/<id>.json`, and its CA (made by its network helper), in
//! `<state>/.secrets/sandboxes/<id>/`: in the store, not in the sandbox directory (which
//! QEMU can write, see docs/security.md), so a compromised VM cannot bind itself another
//! secret or swap the CA. The bindings are not in the CA's directory either, which the
//! jailed helper writes: a helper taken over by a guest could otherwise bind its sandbox
//! every secret and have the secret command runner run their commands.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SecretError;

/// The directory of the bindings files, in the store.
pub const BINDINGS_DIR: &str = "bindings";
/// The CA certificate.
pub const CA_CERT: &str = "ca.pem";
/// The CA key (0600).
pub const CA_KEY: &str = "ca.key";
/// Where the guest gets the CA, and the bundle of its system roots plus the CA.
pub const GUEST_CA: &str = "/etc/atoll/secrets-ca.pem";
/// The bundle the TLS variables name.
pub const GUEST_BUNDLE: &str = "/etc/atoll/ca-bundle.pem";

/// One secret bound to a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Binding {
    /// The guest's variable.
    pub env: String,
    /// The secret's name.
    pub secret: String,
    /// What the variable holds.
    pub placeholder: String,
}

/// Where the private directory of the sandbox whose directory is `dir` (named by its id)
/// is; nothing is created.
fn private_path(dir: &Path) -> Option<PathBuf> {
    let id = sandbox_id(dir)?;
    Some(crate::vmm::dirs::state_dir().ok()?.join(".secrets").join("sandboxes").join(id))
}

/// The sandbox id `dir` is named by, if it is a plain one.
fn sandbox_id(dir: &Path) -> Option<&str> {
    dir.file_name().and_then(|n| n.to_str()).filter(|id| crate::vmm::template::is_plain_name(id))
}

/// Where the bindings of the sandbox whose directory is `dir` are; nothing is created.
fn bindings_path(dir: &Path) -> Option<PathBuf> {
    let id = sandbox_id(dir)?;
    Some(crate::vmm::dirs::state_dir().ok()?.join(".secrets").join(BINDINGS_DIR).join(format!("{id}.json")))
}

/// The private directory of the sandbox whose directory is `dir`, created 0700 (in the
/// store's directory, checked private).
pub fn private_dir(dir: &Path) -> Result<PathBuf, SecretError> {
    super::store::dir()?;
    let path = private_path(dir)
        .ok_or_else(|| SecretError::Io(format!("{} is not a sandbox directory", dir.display())))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)
        .map_err(|e| SecretError::Io(format!("cannot create {}: {e}", path.display())))?;
    Ok(path)
}

/// Removes the private directory and the bindings of the sandbox whose directory is
/// `dir` (at kill).
pub fn forget(dir: &Path) {
    if let Some(path) = private_path(dir) {
        let _ = std::fs::remove_dir_all(path);
    }
    if let Some(path) = bindings_path(dir) {
        let _ = std::fs::remove_file(path);
    }
}

/// The bindings of the sandbox in `dir` (none when there are none, or they cannot be read).
pub fn load(dir: &Path) -> Vec<Binding> {
    let Some(path) = bindings_path(dir) else { return Vec::new() };
    std::fs::read(path).ok().and_then(|t| serde_json::from_slice(&t).ok()).unwrap_or_default()
}

/// Writes the bindings atomically.
pub fn save(dir: &Path, bindings: &[Binding]) -> Result<(), SecretError> {
    let text = serde_json::to_vec_pretty(bindings).map_err(|e| SecretError::Io(e.to_string()))?;
    super::store::dir()?;
    let path = bindings_path(dir)
        .ok_or_else(|| SecretError::Io(format!("{} is not a sandbox directory", dir.display())))?;
    let parent = path.parent().expect("a bindings file has a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(|e| SecretError::Io(format!("cannot create {}: {e}", parent.display())))?;
    write_private(&path, &text)
}

/// Writes `path` atomically, 0600.
pub(crate) fn write_private(path: &Path, text: &[u8]) -> Result<(), SecretError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(parent)
        .map_err(|e| SecretError::Io(format!("{}: {e}", parent.display())))?;
    tmp.write_all(text)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| SecretError::Io(e.to_string()))?;
    tmp.persist(path).map_err(|e| SecretError::Io(e.to_string()))?;
    Ok(())
}

/// A new placeholder for `secret`: `atoll-secret-<secret>-<32 hex>`.
pub fn placeholder(secret: &str) -> Result<String, SecretError> {
    use std::io::Read;
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| SecretError::Io(format!("no randomness for a placeholder: {e}")))?;
    let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("atoll-secret-{secret}-{hex}"))
}

/// The sandbox's CA (certificate PEM, key PEM), made now if it has none.
pub fn ensure_ca(dir: &Path, label: &str) -> Result<(String, String), SecretError> {
    let private = private_dir(dir)?;
    let (cert, key) = (private.join(CA_CERT), private.join(CA_KEY));
    if let (Ok(c), Ok(k)) = (std::fs::read_to_string(&cert), std::fs::read_to_string(&key)) {
        return Ok((c, k));
    }
    let (c, k) = atoll_net::secrets::ca::new_ca(label).map_err(|e| SecretError::Io(e.to_string()))?;
    write_private(&key, k.as_bytes())?;
    write_private(&cert, c.as_bytes())?;
    let _ = std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o600));
    Ok((c, k))
}

/// The CA certificate of the sandbox in `dir`, if its helper made one. The helper can
/// write that directory, so what is read there is checked before it goes into the guest:
/// a regular file (no link followed, no FIFO waited on) of at most 16 KiB holding one
/// PEM certificate and nothing else; a helper taken over by a guest cannot so have a
/// host file copied into the guest.
pub fn ca_cert(dir: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits().cast_signed())
        .open(private_path(dir)?.join(CA_CERT))
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > 16 * 1024 {
        return None;
    }
    let mut text = String::new();
    file.take(16 * 1024).read_to_string(&mut text).ok()?;
    one_certificate(&text).then_some(text)
}

/// Whether `pem` is one PEM certificate block and nothing else.
fn one_certificate(pem: &str) -> bool {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let t = pem.trim();
    t.starts_with(BEGIN)
        && t.ends_with(END)
        && t.matches("-----").count() == 4
        && t[BEGIN.len()..t.len() - END.len()]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '\n' | '\r'))
}

/// The command defaults the bindings add: each variable's placeholder and, once any
/// secret is bound, the variables TLS clients read for their trust (the bundle with the
/// sandbox CA).
pub fn env_defaults(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let bindings = load(dir);
    let mut env = std::collections::BTreeMap::new();
    if bindings.is_empty() {
        return env;
    }
    for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"] {
        env.insert(var.to_owned(), GUEST_BUNDLE.to_owned());
    }
    env.insert("NODE_EXTRA_CA_CERTS".to_owned(), GUEST_CA.to_owned());
    for b in bindings {
        env.insert(b.env, b.placeholder);
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_pem_certificate_passes() {
        let (cert, key) = atoll_net::secrets::ca::new_ca("t").unwrap();
        assert!(one_certificate(&cert));
        assert!(!one_certificate(&key), "a key is not a certificate");
        assert!(!one_certificate(&format!("{cert}{cert}")), "two blocks");
        assert!(!one_certificate("root:x:0:0:root:/root:/bin/bash\n"));
        assert!(!one_certificate(&format!("{cert}\nroot:x:0:0")), "trailing text");
    }
}
