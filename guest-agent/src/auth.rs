//! Who may talk to the agent over TCP: a shared token, sent by clients as
//! `authorization: Bearer <token>` and compared in constant time.
//!
//! vsock is reachable only from the VM's host and Unix sockets are created 0600, so
//! they need no token. A TCP listener on a loopback address is as private as the
//! machine; on any other address the agent refuses to start without a token
//! (`--token-file` or `ATOLL_AGENT_TOKEN`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// The environment variable holding the token, read by both the agent and the CLI.
pub const TOKEN_ENV: &str = "ATOLL_AGENT_TOKEN";

/// Why the token could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file could not be read.
    #[error("cannot read the token file {}; check the path given to --token-file", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// The token is empty (after trimming whitespace).
    #[error("the token from {0} is empty; put a long random string there (e.g. `openssl rand -hex 32`)")]
    Empty(String),
}

/// A shared secret that TCP clients must present.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token from `file` if given, else from [`TOKEN_ENV`]; `None` when neither is set.
    pub fn load(file: Option<&Path>) -> Result<Option<Token>, AuthError> {
        let (text, origin) = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| AuthError::Read { path: path.to_owned(), source })?;
                (text, path.display().to_string())
            }
            None => match std::env::var(TOKEN_ENV) {
                Ok(text) => (text, TOKEN_ENV.to_owned()),
                Err(_) => return Ok(None),
            },
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(AuthError::Empty(origin));
        }
        Ok(Some(Token(text.as_bytes().into())))
    }

    /// Checks a request's `authorization` header against the token.
    pub fn check(&self, req: &Request<()>) -> Result<(), Status> {
        let given = req.metadata().get("authorization").map(|v| v.as_bytes());
        let Some(given) = given else {
            return Err(Status::unauthenticated(format!(
                "this agent requires a token on TCP; set {TOKEN_ENV} to the agent's token before calling"
            )));
        };
        let presented = given.strip_prefix(b"Bearer ").unwrap_or(b"");
        if bool::from(presented.ct_eq(&self.0)) {
            Ok(())
        } else {
            Err(Status::unauthenticated(format!(
                "the token presented does not match the agent's; check {TOKEN_ENV} (sent as `authorization: Bearer ...`)"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(auth: Option<&str>) -> Request<()> {
        let mut req = Request::new(());
        if let Some(auth) = auth {
            req.metadata_mut().insert("authorization", auth.parse().unwrap());
        }
        req
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let token = Token(b"s3cret".as_slice().into());
        assert!(token.check(&request(Some("Bearer s3cret"))).is_ok());
        for bad in [None, Some("Bearer s3cre"), Some("Bearer s3cret2"), Some("s3cret"), Some("Basic s3cret")]
        {
            let status = token.check(&request(bad)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
