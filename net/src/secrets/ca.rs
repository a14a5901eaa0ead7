//! The sandbox's CA: made once per sandbox (its certificate goes into the guest's trust
//! store), and the leaf certificates it signs for the names the swap intercepts, one per
//! name, kept for the helper's life.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA could not be made or read, or a leaf not signed.
#[derive(Debug, thiserror::Error)]
#[error("sandbox CA: {0}")]
pub struct CaError(String);

impl From<rcgen::Error> for CaError {
    fn from(e: rcgen::Error) -> CaError {
        CaError(e.to_string())
    }
}

/// A new CA: (certificate PEM, private key PEM), named for `label`.
pub fn new_ca(label: &str) -> Result<(String, String), CaError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, format!("atoll sandbox secrets CA ({label})"));
    params.distinguished_name.push(DnType::OrganizationName, "atoll");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Signs leaves with one CA; a leaf per name is made once.
pub struct LeafIssuer {
    ca_cert: rcgen::Certificate,
    ca_der: CertificateDer<'static>,
    ca_key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl LeafIssuer {
    /// The CA in `cert_pem` with its key `key_pem`.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<LeafIssuer, CaError> {
        let ca_key = KeyPair::from_pem(key_pem)?;
        let params = CertificateParams::from_ca_cert_pem(cert_pem)?;
        let ca_der = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CaError(format!("the CA certificate is not PEM: {e}")))?;
        // The same name and key: what it signs verifies against the certificate on disk.
        let ca_cert = params.self_signed(&ca_key)?;
        Ok(LeafIssuer { ca_cert, ca_der, ca_key, leaves: Mutex::default() })
    }

    /// The leaf for `name` (with the chain up to the CA).
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(leaf) = leaves.get(name) {
            return Ok(leaf.clone());
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(24 * 3600)).into();
        params.not_after = (now + std::time::Duration::from_secs(90 * 24 * 3600)).into();
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| CaError(format!("leaf key: {e}")))?;
        let leaf = Arc::new(CertifiedKey::new(vec![cert.der().clone(), self.ca_der.clone()], signer));
        leaves.insert(name.to_owned(), leaf.clone());
        Ok(leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn a_leaf_names_its_host_and_is_signed_by_the_ca() {
        let (cert, key) = new_ca("test").unwrap();
        assert!(cert.contains("BEGIN CERTIFICATE") && key.contains("PRIVATE KEY"));
        let issuer = LeafIssuer::from_pem(&cert, &key).unwrap();
        let leaf = issuer.leaf("api.example.com").unwrap();
        assert_eq!(leaf.cert.len(), 2);
        assert!(Arc::ptr_eq(&leaf, &issuer.leaf("api.example.com").unwrap()), "leaves are cached");
        // The chain verifies against the CA as a client would check it.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(issuer.ca_der.clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = rustls_pki_types::ServerName::try_from("api.example.com").unwrap();
        let now = rustls_pki_types::UnixTime::now();
        verifier.verify_server_cert(&leaf.cert[0], &leaf.cert[1..], &name, &[], now).unwrap();
        let other = rustls_pki_types::ServerName::try_from("other.example.com").unwrap();
        assert!(verifier.verify_server_cert(&leaf.cert[0], &leaf.cert[1..], &other, &[], now).is_err());
    }
}
