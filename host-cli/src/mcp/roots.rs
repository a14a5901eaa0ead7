//! Which host folders an MCP client may mount into a sandbox: those under the roots
//! the client declares (MCP `roots/list`, asked of the client at each `sandbox_create`
//! that mounts something, so a client that changed its roots is heard), and those
//! under `atoll mcp --allow-mount DIR`. Both are made canonical before the check in
//! [`crate::sandbox::mounts::check_allowed`], so a symlink or `..` cannot lead out.

use std::path::PathBuf;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::service::Peer;

/// How long a client has to answer `roots/list`.
const ROOTS_TIMEOUT: Duration = Duration::from_secs(10);

/// The folders `peer` declared as its roots, canonical; none when it declares no roots
/// capability, does not answer, or names no existing folder. Roots that are not
/// `file://` URIs or not folders are skipped.
#[allow(deprecated, reason = "roots/list is what MCP clients implement today (SEP-2577 is not out yet)")]
pub(crate) async fn client_roots(peer: &Peer<RoleServer>) -> Vec<PathBuf> {
    let declares = peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
    if !declares {
        return Vec::new();
    }
    let asked = tokio::time::timeout(ROOTS_TIMEOUT, peer.list_roots()).await;
    let roots = match asked {
        Ok(Ok(result)) => result.roots,
        Ok(Err(e)) => {
            tracing::warn!("roots/list failed: {e}");
            return Vec::new();
        }
        Err(_) => {
            tracing::warn!("the client did not answer roots/list within {} s", ROOTS_TIMEOUT.as_secs());
            return Vec::new();
        }
    };
    roots
        .iter()
        .filter_map(|r| file_uri_path(&r.uri))
        .filter_map(|p| crate::sandbox::mounts::canonical_dir(&p).ok())
        .collect()
}

/// The path of a `file://` URI (`file:///home/u/a%20b` -> `/home/u/a b`); `None` for
/// other schemes, a remote host, or bad escapes.
fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_decode_to_paths() {
        assert_eq!(file_uri_path("file:///home/u/a%20b"), Some(PathBuf::from("/home/u/a b")));
        assert_eq!(file_uri_path("file://localhost/srv"), Some(PathBuf::from("/srv")));
        assert_eq!(file_uri_path("file://server/share"), None);
        assert_eq!(file_uri_path("https://example.com/x"), None);
        assert_eq!(file_uri_path("file:///bad%zz"), None);
    }
}
