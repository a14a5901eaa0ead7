//! The TLS client toward real servers: verified against the host's trust store, plus
//! CA files the operator names (`ATOLL_SECRETS_CA_FILE`, for a private or test CA).
//!
//! The host's roots are read and parsed on the first connection that needs them, not
//! when the helper starts: that takes tens of milliseconds (151 certificates on Debian,
//! about 28 ms in a debug build), on the start of every sandbox, and most sandboxes never
//! swap a secret. The operator's files are read at once, so a bad one still stops the
//! helper's start with its name.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The upstream trust could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("secrets: cannot set up the trust for real servers: {0}")]
pub struct UpstreamError(String);

/// How real servers are verified: the operator's extra roots, read when made, and the
/// host's, read on first use ([`Upstream::config`]).
pub struct Upstream {
    extra: Vec<CertificateDer<'static>>,
    config: tokio::sync::OnceCell<Arc<rustls::ClientConfig>>,
}

impl Upstream {
    /// Reads and checks the certificates in the `extra` files now; the host's roots are
    /// left for the first [`Upstream::config`].
    pub fn new(extra: &[&Path]) -> Result<Self, UpstreamError> {
        let extra = read_extra(extra)?;
        Ok(Self { extra, config: tokio::sync::OnceCell::new() })
    }

    /// An upstream whose config is made already (tests give their own roots).
    pub fn ready(config: rustls::ClientConfig) -> Self {
        Self { extra: Vec::new(), config: tokio::sync::OnceCell::new_with(Some(Arc::new(config))) }
    }

    /// The client config, made on the first call (off the async runtime: it reads the
    /// host's trust store) and shared after.
    pub async fn config(&self) -> Arc<rustls::ClientConfig> {
        self.config
            .get_or_init(|| async {
                let extra = self.extra.clone();
                let made = tokio::task::spawn_blocking(move || build(native_roots(), &extra)).await;
                Arc::new(made.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())))
            })
            .await
            .clone()
    }
}

/// A client config trusting the host's roots and the certificates in `extra` files;
/// offers HTTP/1.1 only. Reads everything now ([`Upstream`] leaves the host's roots
/// for their first use).
pub fn client_config(extra: &[&Path]) -> Result<rustls::ClientConfig, UpstreamError> {
    Ok(build(native_roots(), &read_extra(extra)?))
}

/// The host's trust store; a certificate rustls cannot take is left out.
fn native_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}

/// The certificates of the `extra` files, each checked to be a root rustls takes.
fn read_extra(extra: &[&Path]) -> Result<Vec<CertificateDer<'static>>, UpstreamError> {
    let mut all = Vec::new();
    for path in extra {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| UpstreamError(format!("cannot read CA file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(UpstreamError(format!("{} holds no PEM certificate", path.display())));
        }
        for cert in certs {
            rustls::RootCertStore::empty()
                .add(cert.clone())
                .map_err(|e| UpstreamError(format!("{}: {e}", path.display())))?;
            all.push(cert);
        }
    }
    Ok(all)
}

/// A client config over `roots` plus `extra` (checked already by [`read_extra`]).
fn build(mut roots: rustls::RootCertStore, extra: &[CertificateDer<'static>]) -> rustls::ClientConfig {
    for cert in extra {
        let _ = roots.add(cert.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports rustls's default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn extra_roots_are_checked_at_once_and_the_config_made_once() {
        let d = tempfile::tempdir().unwrap();
        let bad = d.path().join("bad.pem");
        std::fs::write(&bad, "not a certificate\n").unwrap();
        let err = Upstream::new(&[bad.as_path()]).err().expect("a file without a certificate is refused");
        assert!(err.to_string().contains("bad.pem holds no PEM certificate"), "{err}");
        let missing = d.path().join("missing.pem");
        let err = Upstream::new(&[missing.as_path()]).err().expect("a missing file is refused");
        assert!(err.to_string().contains("cannot read CA file"), "{err}");
        let (cert, _key) = crate::secrets::ca::new_ca("test").unwrap();
        let good = d.path().join("good.pem");
        std::fs::write(&good, cert).unwrap();
        let upstream = Upstream::new(&[good.as_path()]).unwrap();
        let first = upstream.config().await;
        assert_eq!(first.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(Arc::ptr_eq(&first, &upstream.config().await), "made once, then shared");
    }
}
