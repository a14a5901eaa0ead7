//! The TLS client toward real servers: verified against the host's trust store, plus
//! CA files the operator names (`ATOLL_SECRETS_EXTRA_CA`, for a private or test CA).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The upstream trust could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("secrets: cannot set up the trust for real servers: {0}")]
pub struct UpstreamError(String);

/// A client config trusting the host's roots and the certificates in `extra` files;
/// offers HTTP/1.1 only.
pub fn client_config(extra: &[&Path]) -> Result<rustls::ClientConfig, UpstreamError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    for path in extra {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| UpstreamError(format!("cannot read CA file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(UpstreamError(format!("{} holds no PEM certificate", path.display())));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| UpstreamError(format!("{}: {e}", path.display())))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| UpstreamError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
