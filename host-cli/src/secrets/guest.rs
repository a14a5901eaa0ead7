//! The sandbox CA into the guest: `/etc/atoll/secrets-ca.pem`, the system store (where
//! there is a Debian-style one: what `update-ca-certificates` does for one added
//! certificate, done directly: the copy in /usr/local/share/ca-certificates, its link
//! and hash link in /etc/ssl/certs, appended to ca-certificates.crt; the script itself
//! forks a few processes per certificate and took 205 s in a TCG debian guest on a
//! loaded machine, past [`INSTALL_TIMEOUT`]) and `/etc/atoll/ca-bundle.pem` (the
//! system roots plus the CA), which the TLS variables of [`super::binding::env_defaults`]
//! name. Run as root over the agent, before a binding is written.

use std::time::Duration;

use super::SecretError;
use super::binding::{GUEST_BUNDLE, GUEST_CA};

/// How long the install may take (TCG guests are slow).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Installs `cert` (PEM) in the guest of `record`.
pub(super) async fn install_ca(record: &crate::vmm::state::Record, cert: &str) -> Result<(), SecretError> {
    let script = format!(
        r#"set -e
umask 022
mkdir -p /etc/atoll
cat > {GUEST_CA}.new && mv {GUEST_CA}.new {GUEST_CA}
if [ -d /usr/local/share/ca-certificates ] && [ -d /etc/ssl/certs ]; then
  cp {GUEST_CA} /usr/local/share/ca-certificates/atoll-secrets-ca.crt
  ln -sf /usr/local/share/ca-certificates/atoll-secrets-ca.crt /etc/ssl/certs/atoll-secrets-ca.pem
  if command -v openssl >/dev/null 2>&1; then
    h="$(openssl x509 -subject_hash -noout -in {GUEST_CA})" && ln -sf atoll-secrets-ca.pem "/etc/ssl/certs/$h.0"
  fi
  b=/etc/ssl/certs/ca-certificates.crt
  if [ -f "$b" ] && ! grep -qxF "$(sed -n 2p {GUEST_CA})" "$b"; then cat {GUEST_CA} >> "$b"; fi
fi
sys=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
  if [ -f "$f" ]; then sys="$f"; break; fi
done
{{ if [ -n "$sys" ]; then cat "$sys"; echo; fi; cat {GUEST_CA}; }} > {GUEST_BUNDLE}.new
mv {GUEST_BUNDLE}.new {GUEST_BUNDLE}
"#
    );
    let why = |e: String| SecretError::Sandbox {
        sandbox: record.name.clone(),
        why: format!("could not install its secrets CA in the guest: {e}"),
    };
    let addr = crate::sandbox::agent_address(record);
    let client = crate::client::Client::connect(&addr, Duration::from_secs(30))
        .await
        .map_err(|e| why(e.to_string()))?;
    let mut spec = crate::client::ExecSpec::shell(script);
    spec.user = Some("0".into());
    spec.timeout = Some(INSTALL_TIMEOUT);
    spec.stdin = bytes::Bytes::from(cert.to_owned());
    let done = client.exec(&spec).await.map_err(|e| why(e.to_string()))?;
    if done.status.code != Some(0) {
        return Err(why(String::from_utf8_lossy(&done.stderr.data).trim().to_owned()));
    }
    Ok(())
}
