//! TLS for the head's one port (`--tls-cert FILE --tls-key FILE`): REST, the dashboard and the
//! agent protocol (gRPC) over rustls, HTTP/1.1 or HTTP/2 by ALPN, as the plain port serves
//! them. rustls with the `ring` provider: pure Rust and C, nothing to install.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// The head's certificate chain and key, PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (`--tls-cert`), leaf first.
    pub cert: PathBuf,
    /// Its private key (`--tls-key`): PKCS#8, PKCS#1 or SEC1.
    pub key: PathBuf,
}

/// Why the TLS files cannot be used; names the file and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct TlsError {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

fn error(path: &Path, problem: impl std::fmt::Display) -> TlsError {
    TlsError { path: path.display().to_string(), problem: problem.to_string() }
}

/// Makes ring the process's default rustls provider, unless one is installed already. Berth's
/// TLS uses ring (pure Rust and C, nothing to install); the HTTP clients in the same process
/// (reqwest built without a provider of its own, so it does not bring aws-lc's C build) find
/// it there, even for plain HTTP. Every head start calls it; so does the CLI.
pub fn install_crypto_provider() {
    // An error means a provider is installed already: that one serves.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}

/// The acceptor of `files`, offering HTTP/2 (gRPC) and HTTP/1.1.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| error(&files.cert, format!("cannot read certificates: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| error(&files.cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(error(&files.cert, "holds no certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| error(&files.key, format!("not a PEM private key: {e}")))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| error(&files.cert, e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| error(&files.key, format!("does not go with the certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        // A directory per pair: the cases are all written before any is read.
        let dir = tempfile::tempdir_in(dir).unwrap().keep();
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        TlsFiles { cert: c, key: k }
    }

    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn a_matching_certificate_and_key_make_an_acceptor() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        assert!(acceptor(&files(dir.path(), &cert, &key)).is_ok());
    }

    #[test]
    fn each_bad_file_is_named_with_its_problem() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        let (_, other_key) = self_signed();
        let cases = [
            (files(dir.path(), "", &key), "cert.pem", "holds no certificate"),
            (files(dir.path(), "not pem at all", &key), "cert.pem", "holds no certificate"),
            (files(dir.path(), &cert, ""), "key.pem", "not a PEM private key"),
            (files(dir.path(), &cert, &cert), "key.pem", "not a PEM private key"),
            (files(dir.path(), &cert, &other_key), "key.pem", "does not go with the certificate"),
        ];
        for (files, file, problem) in cases {
            let err = acceptor(&files).err().expect("refused").to_string();
            assert!(err.contains(file) && err.contains(problem), "{err}");
        }
        let missing = TlsFiles { cert: dir.path().join("absent.pem"), key: dir.path().join("k") };
        let err = acceptor(&missing).err().expect("refused").to_string();
        assert!(err.contains("absent.pem") && err.contains("cannot read"), "{err}");
    }
}
