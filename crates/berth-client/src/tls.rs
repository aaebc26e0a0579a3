//! The HTTP clients' settings and TLS: rustls on ring, trusting only the CA given.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;

use crate::SetupError;

/// How long to wait for a connection to the head.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the clients tell the head they are.
const USER_AGENT: &str = concat!("berth-cli/", env!("CARGO_PKG_VERSION"));

/// Installs ring as the process's default rustls provider, which reqwest needs even for plain
/// HTTP. Idempotent: when a provider is installed already, that one serves.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A blocking HTTP client's settings: the connect timeout, no proxy (the head is on this
/// machine or the cluster's network), and `tls` for an https:// head.
pub fn http_builder(tls: Option<&rustls::ClientConfig>) -> reqwest::blocking::ClientBuilder {
    install_crypto_provider();
    let builder = reqwest::blocking::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .user_agent(USER_AGENT);
    match tls {
        Some(tls) => builder.tls_backend_preconfigured(tls.clone()),
        None => builder,
    }
}

/// The same settings as [`http_builder`] for an async client of a plain-HTTP head, for code
/// already running on a tokio runtime (the benches).
pub fn async_http_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT).no_proxy().user_agent(USER_AGENT)
}

/// TLS settings that trust only the CA certificate(s) in `ca_pem` (PEM).
pub(crate) fn tls_config(ca_pem: &[u8]) -> Result<rustls::ClientConfig, SetupError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| SetupError::new(format!("not a PEM certificate: {e}")))?;
        roots.add(cert).map_err(|e| SetupError::new(format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(SetupError::new("holds no certificate"));
    }
    Ok(rustls::ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SetupError::new(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The crypto of the client's TLS: ring (pure Rust and C, nothing to install).
fn ring_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
