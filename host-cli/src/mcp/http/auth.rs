//! The bearer token of `atoll mcp --http`: where it comes from, and the check every HTTP
//! request passes before rmcp sees it.
//!
//! Only the token's SHA-256 digest is kept; a request's token is hashed and the two
//! digests compared in constant time ([`subtle`]), so neither the token's bytes nor its
//! length leak through timing. The token is never logged, and its `Debug` says only that
//! it is set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;

/// How a user makes a token, for error messages and docs.
pub const MAKE_TOKEN: &str =
    "umask 077; mkdir -p ~/.config/atoll; head -c32 /dev/urandom | base64 > ~/.config/atoll/mcp-token";

/// Why a token could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("could not read the token file {path}; make one with `{MAKE_TOKEN}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token is shorter than [`MIN_TOKEN_LEN`].
    #[error(
        "the bearer token from {from} is {len} characters; use at least {MIN_TOKEN_LEN}, e.g. `{MAKE_TOKEN}`"
    )]
    TooShort {
        /// Where it came from.
        from: String,
        /// Its length.
        len: usize,
    },
    /// The made token file exists but others could read or replace it.
    #[error(
        "{path} is not a private file of this user (mode 0600); remove it and start again, and \
         atoll mcp makes a new one"
    )]
    Unsafe {
        /// The file.
        path: PathBuf,
    },
    /// The token holds a character an HTTP header cannot carry.
    #[error(
        "the bearer token from {from} has spaces or characters outside printable ASCII; \
         a token must fit in an `Authorization: Bearer` header, e.g. `{MAKE_TOKEN}`"
    )]
    NotPrintable {
        /// Where it came from.
        from: String,
    },
}

/// Who an HTTP request comes from: a short hash of the token it presented (never the
/// token). Each token is one client: its sessions, its in-flight requests and the
/// sandboxes it creates are counted and owned apart from another token's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientId(pub String);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The tokens HTTP clients may present as `Authorization: Bearer TOKEN`: one per line of
/// the token file, each a client of its own.
#[derive(Clone)]
pub struct BearerToken {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BearerToken(<{} set>)", self.digests.len())
    }
}

impl BearerToken {
    /// The token in `text` (surrounding whitespace, such as the newline `base64` ends
    /// with, is dropped); `from` names its source in errors.
    pub fn new(text: &str, from: &str) -> Result<Self, TokenError> {
        Ok(BearerToken { digests: vec![digest_of(text.trim(), from)?] })
    }

    /// The tokens in the file at `path`, one per non-empty line.
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TokenError::Read { path: path.to_owned(), source })?;
        let from = path.display().to_string();
        let mut digests = Vec::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            digests.push(digest_of(line.trim(), &format!("{from} line {}", n + 1))?);
        }
        if digests.is_empty() {
            return Err(TokenError::TooShort { from, len: 0 });
        }
        Ok(BearerToken { digests })
    }

    /// The client whose token `presented` is, compared in constant time with every token.
    pub fn matches(&self, presented: &[u8]) -> Option<ClientId> {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut found = None;
        for known in &self.digests {
            if bool::from(known.ct_eq(&digest)) {
                found = Some(known);
            }
        }
        found.map(client_id)
    }
}

/// A token's client id: the start of a second hash of it, so the id says nothing usable
/// about the token or its digest.
fn client_id(digest: &[u8; 32]) -> ClientId {
    let id: [u8; 32] = Sha256::new().chain_update(b"atoll mcp client").chain_update(digest).finalize().into();
    ClientId(format!("http:{}", id[..8].iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

fn digest_of(token: &str, from: &str) -> Result<[u8; 32], TokenError> {
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::NotPrintable { from: from.to_owned() });
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort { from: from.to_owned(), len: token.len() });
    }
    Ok(Sha256::digest(token.as_bytes()).into())
}

/// The token file `atoll mcp --http` uses when given none: `path`, made with a fresh
/// random token (0600) when missing. An existing one is used only when it is a regular
/// file of this user that no one else may read.
pub fn made_token(path: &Path) -> Result<BearerToken, TokenError> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let made = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    match made {
        Ok(mut file) => {
            let mut raw = [0u8; 32];
            getrandom_bytes(&mut raw).map_err(|source| TokenError::Read { path: path.to_owned(), source })?;
            let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|source| TokenError::Read { path: path.to_owned(), source })?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path)
                .map_err(|source| TokenError::Read { path: path.to_owned(), source })?;
            if !meta.is_file()
                || meta.uid() != rustix::process::geteuid().as_raw()
                || meta.permissions().mode() & 0o077 != 0
            {
                return Err(TokenError::Unsafe { path: path.to_owned() });
            }
        }
        Err(source) => return Err(TokenError::Read { path: path.to_owned(), source }),
    }
    BearerToken::from_file(path)
}

fn getrandom_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// What a request carried in its `Authorization` header.
enum Presented<'a> {
    Nothing,
    Bearer(&'a [u8]),
    OtherScheme,
}

fn presented(request: &Request) -> Presented<'_> {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else { return Presented::Nothing };
    let bytes = value.as_bytes();
    match bytes.iter().position(|&b| b == b' ') {
        Some(space) if bytes[..space].eq_ignore_ascii_case(b"bearer") => {
            Presented::Bearer(bytes[space + 1..].trim_ascii())
        }
        _ => Presented::OtherScheme,
    }
}

/// Middleware: lets a request through only when it carries the token; otherwise answers
/// 401 with `WWW-Authenticate: Bearer`, and nothing behind it runs.
pub async fn require_bearer(
    State(token): State<Arc<BearerToken>>,
    mut request: Request,
    next: Next,
) -> Response {
    let client = match presented(&request) {
        Presented::Bearer(given) => token.matches(given),
        _ => None,
    };
    if let Some(client) = client {
        request.extensions_mut().insert(client);
        return next.run(request).await;
    }
    let refusal = match presented(&request) {
        Presented::Bearer(_) => (
            r#"Bearer realm="atoll mcp", error="invalid_token""#,
            "wrong bearer token: send the token in the server's --token-file (or ATOLL_MCP_TOKEN) as \
             `Authorization: Bearer TOKEN`\n",
        ),
        Presented::Nothing | Presented::OtherScheme => (
            r#"Bearer realm="atoll mcp""#,
            "this server needs a bearer token: send `Authorization: Bearer TOKEN`, the token in the \
             server's --token-file (or ATOLL_MCP_TOKEN)\n",
        ),
    };
    tracing::warn!(method = %request.method(), uri = %request.uri(), "refused an HTTP request without the right bearer token");
    let (challenge, body) = refusal;
    // The body is left unread, so the connection cannot carry another request: say so,
    // or a client reusing it races the close.
    let headers = [
        (header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge)),
        (header::CONNECTION, HeaderValue::from_static("close")),
    ];
    (StatusCode::UNAUTHORIZED, headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_itself_only() {
        let token = BearerToken::new("s3cret-token-0123456789\n", "test").unwrap();
        assert!(token.matches(b"s3cret-token-0123456789").is_some());
        assert!(token.matches(b"s3cret-token-012345678").is_none());
        assert!(token.matches(b"").is_none());
        assert_eq!(format!("{token:?}"), "BearerToken(<1 set>)");
    }

    #[test]
    fn each_line_of_a_token_file_is_a_client_of_its_own() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("tokens");
        std::fs::write(&path, "first-token-0123456789\n\nsecond-token-0123456789\n").unwrap();
        let tokens = BearerToken::from_file(&path).unwrap();
        let a = tokens.matches(b"first-token-0123456789").unwrap();
        let b = tokens.matches(b"second-token-0123456789").unwrap();
        assert_ne!(a, b);
        assert!(!a.0.contains("first"), "{a}");
    }

    #[test]
    fn a_made_token_file_is_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("mcp-token");
        made_token(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        made_token(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(made_token(&path), Err(TokenError::Unsafe { .. })));
    }

    #[test]
    fn short_or_unprintable_tokens_are_refused() {
        assert!(matches!(BearerToken::new("short", "x"), Err(TokenError::TooShort { len: 5, .. })));
        assert!(matches!(
            BearerToken::new("with a space inside it", "x"),
            Err(TokenError::NotPrintable { .. })
        ));
        assert!(matches!(BearerToken::new("", "x"), Err(TokenError::TooShort { len: 0, .. })));
    }
}
