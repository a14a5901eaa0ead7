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

/// The token HTTP clients must present as `Authorization: Bearer TOKEN`.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<set>)")
    }
}

impl BearerToken {
    /// The token in `text` (surrounding whitespace, such as the newline `base64` ends
    /// with, is dropped); `from` names its source in errors.
    pub fn new(text: &str, from: &str) -> Result<Self, TokenError> {
        let token = text.trim();
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable { from: from.to_owned() });
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(TokenError::TooShort { from: from.to_owned(), len: token.len() });
        }
        Ok(BearerToken { digest: Sha256::digest(token.as_bytes()).into() })
    }

    /// The token in the file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TokenError::Read { path: path.to_owned(), source })?;
        Self::new(&text, &path.display().to_string())
    }

    /// Whether `presented` is the token, compared in constant time.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        self.digest.ct_eq(&digest).into()
    }
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
pub async fn require_bearer(State(token): State<Arc<BearerToken>>, request: Request, next: Next) -> Response {
    let refusal = match presented(&request) {
        Presented::Bearer(given) if token.matches(given) => return next.run(request).await,
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
        assert!(token.matches(b"s3cret-token-0123456789"));
        assert!(!token.matches(b"s3cret-token-012345678"));
        assert!(!token.matches(b""));
        assert_eq!(format!("{token:?}"), "BearerToken(<set>)");
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
