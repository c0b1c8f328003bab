//! TLS for the node server (rustls 0.23 with the ring provider, the same stack ureq
//! uses): the serving certificate from `--tls-cert-file`/`--tls-private-key-file`, or
//! a self-signed pair kept under `<root-dir>/pki/` (made once with rcgen, offline, and
//! reused after restarts), and the client-certificate policy.
//!
//! Client certificates are requested, never required, as upstream does
//! (`tls.RequestClientCert`): the handshake only checks that the client holds the key
//! of the certificate it shows; the chain is verified against `--client-ca-file` after
//! the handshake by [`ClientCertCheck`], so an untrusted certificate gets a 401 answer
//! instead of a TLS alert. Called at start-up (config) and from connection threads
//! (verification). Which suites and versions are offered is [`ciphers`]'
//! (`tlsCipherSuites`, `tlsMinVersion`). The serving pair sits behind [`ServingCert`], which the serving
//! certificate's rotation replaces while the server runs.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::api::certs::{self, CertError};

pub mod ciphers;
pub use ciphers::TlsPolicy;

/// A TLS set-up failure (start-up only).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no PEM {what} found", path.display())]
    NoPem { path: PathBuf, what: &'static str },
    #[error("{}: bad PEM: {source}", path.display())]
    BadPem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("generate self-signed certificate: {0}")]
    Generate(#[source] rcgen::Error),
    #[error("write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tls config: {0}")]
    Config(#[source] rustls::Error),
    #[error("tls config: {0}")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// A new pair from certificate rotation that is not PEM.
    #[error("tls config: {0}")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// A new pair from certificate rotation whose key does not match.
    #[error("tls config: {0}")]
    Pair(#[source] CertError),
    /// A certificate or key rustls cannot use (e.g. an X.509 v1 serving certificate).
    #[error("{}: {source}", path.display())]
    Certificate { path: PathBuf, source: CertError },
}

/// Why a client's certificate chain is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    #[error("no certificate")]
    NoCertificate,
    #[error(transparent)]
    Rejected(rustls::Error),
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub client_ca_file: Option<PathBuf>,
    /// Where a self-signed pair is kept when no files are given.
    pub root_dir: PathBuf,
    /// Names and addresses the self-signed certificate is valid for.
    pub host_names: Vec<String>,
    pub host_ips: Vec<IpAddr>,
    /// The suites and versions offered (`tlsCipherSuites`, `tlsMinVersion`).
    pub policy: TlsPolicy,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| TlsError::BadPem {
        path: path.to_owned(),
        source,
    })
}

/// The serving chain and key: from the files when both are given, else the
/// self-signed pair under `<root_dir>/pki/`, made now when missing.
pub fn serving_pair(
    s: &TlsSettings,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let (cert, key) = match (&s.cert_file, &s.key_file) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ => {
            let dir = s.root_dir.join("pki");
            let cert = dir.join("litelet.crt");
            let key = dir.join("litelet.key");
            if !(cert.exists() && key.exists()) {
                let (cert_pem, key_pem) = self_signed(&s.host_names, &s.host_ips)?;
                fs::create_dir_all(&dir).map_err(|source| TlsError::Write {
                    path: dir.clone(),
                    source,
                })?;
                write_atomic(&key, key_pem.as_bytes(), 0o600)?;
                write_atomic(&cert, cert_pem.as_bytes(), 0o644)?;
                log::info!(
                    "generated a self-signed serving certificate at {}",
                    cert.display()
                );
            }
            (cert, key)
        }
    };
    let (chain, private) = (load_certs(&cert)?, load_key(&key)?);
    // Checked here, with the file names, rather than as a bare rustls error later.
    certs::check_pair(&chain, &private).map_err(|source| TlsError::Certificate {
        path: match source {
            CertError::Key(_) => key,
            _ => cert,
        },
        source,
    })?;
    Ok((chain, private))
}

/// Loads everything the node server's TLS needs (client CA bundle, serving pair) and
/// builds the rustls config once, so that a bad file is found at start-up.
pub fn check(s: &TlsSettings) -> Result<(), TlsError> {
    let clients = match &s.client_ca_file {
        Some(path) => Some(ClientCertCheck::from_file(path)?),
        None => None,
    };
    let (chain, key) = serving_pair(s)?;
    server_config(chain, key, clients.as_ref()).map(|_| ())
}

/// A self-signed ECDSA P-256 serving certificate (PEM cert, PEM key), valid from the
/// start of this year for two years, named `<host>@<unix time>` as upstream names its own.
pub fn self_signed(names: &[String], ips: &[IpAddr]) -> Result<(String, String), TlsError> {
    let err = TlsError::Generate;
    let mut dns: Vec<String> = names.iter().filter(|n| !n.is_empty()).cloned().collect();
    if dns.is_empty() {
        dns.push("localhost".into());
    }
    let mut params = rcgen::CertificateParams::new(dns.clone()).map_err(err)?;
    for ip in ips {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let year = 1970 + (now / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 2, 1, 1);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{}@{now}", dns[0]));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `data` to `path` durably (`fsutil::write_atomic`, directory fsync included).
fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    crate::fsutil::write_atomic(path, data, mode).map_err(|source| TlsError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Verifies client certificate chains against the client CA bundle.
#[derive(Debug, Clone)]
pub struct ClientCertCheck {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertCheck {
    /// Loads the CA bundle.
    pub fn from_file(path: &Path) -> Result<ClientCertCheck, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in load_certs(path)?.into_iter().enumerate() {
            roots.add(cert).map_err(|e| TlsError::Certificate {
                path: path.to_owned(),
                source: CertError::Certificate {
                    index: i + 1,
                    reason: format!("not usable as a trust anchor: {e}"),
                },
            })?;
        }
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(TlsError::Verifier)?;
        Ok(ClientCertCheck { inner })
    }

    /// Checks a presented chain (leaf first); the error says why it is not trusted.
    pub fn verify(&self, chain: &[CertificateDer<'_>]) -> Result<(), Untrusted> {
        let (leaf, rest) = chain.split_first().ok_or(Untrusted::NoCertificate)?;
        self.inner
            .verify_client_cert(leaf, rest, UnixTime::now())
            .map(|_| ())
            .map_err(Untrusted::Rejected)
    }
}

/// Asks for a client certificate, accepts any chain at handshake time (checked later
/// by [`ClientCertCheck`]) but still proves the client holds its key.
#[derive(Debug)]
struct RequestClientCert {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The serving certificate the node server presents, swappable while it runs (a
/// serving certificate issued by the cluster replaces the self-signed one, and its
/// renewals replace it in turn). Clones share it; a handshake reads the current one.
#[derive(Clone)]
pub struct ServingCert {
    current: Arc<std::sync::RwLock<Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

impl ServingCert {
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<ServingCert, TlsError> {
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::Config)?;
        Ok(ServingCert {
            current: Arc::new(std::sync::RwLock::new(Arc::new(key))),
        })
    }

    /// Replaces the pair (PEM chain, PEM key) for the handshakes from now on;
    /// unusable PEM changes nothing.
    pub fn replace(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(TlsError::Pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::Pem)?;
        certs::check_pair(&chain, &key).map_err(TlsError::Pair)?;
        let fresh = ServingCert::new(chain, key)?;
        let fresh = fresh.current();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// When the certificate served now expires, in Unix seconds.
    pub fn not_after(&self) -> Option<i64> {
        let current = self.current();
        let leaf = current.cert.first()?;
        crate::api::x509::validity(leaf.as_ref()).map(|(_, after)| after)
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl rustls::server::ResolvesServerCert for ServingCert {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The rustls server config: the serving pair, HTTP/1.1 only, and client
/// certificates requested when a client CA is configured.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    clients: Option<&ClientCertCheck>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_with(
        &ServingCert::new(chain, key)?,
        clients,
        &TlsPolicy::default(),
    )
}

/// [`server_config`] presenting whatever `serving` holds at each handshake, with the
/// suites and versions `policy` allows.
pub fn server_config_with(
    serving: &ServingCert,
    clients: Option<&ClientCertCheck>,
    policy: &TlsPolicy,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(policy.provider())
        .with_protocol_versions(policy.versions())
        .map_err(TlsError::Config)?;
    let builder = match clients {
        Some(check) => builder.with_client_cert_verifier(Arc::new(RequestClientCert {
            inner: check.inner.clone(),
        })),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(serving.clone()));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_pair_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let settings = TlsSettings {
            root_dir: dir.path().to_owned(),
            host_names: vec!["node-1".into()],
            host_ips: vec!["127.0.0.1".parse().unwrap()],
            ..Default::default()
        };
        let (chain, _key) = serving_pair(&settings).unwrap();
        let first = fs::read(dir.path().join("pki/litelet.crt")).unwrap();
        let (again, _) = serving_pair(&settings).unwrap();
        assert_eq!(chain, again);
        assert_eq!(first, fs::read(dir.path().join("pki/litelet.crt")).unwrap());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.path().join("pki/litelet.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        server_config(chain, _key, None).unwrap();
    }

    /// A serving key of another certificate is refused when loaded, naming the
    /// certificate file (it used to surface only as a bare rustls error).
    #[test]
    fn a_mismatched_serving_key_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, _) = self_signed(&["node-1".into()], &[]).unwrap();
        let (_, other_key) = self_signed(&["node-1".into()], &[]).unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        fs::write(&cert, cert_pem).unwrap();
        fs::write(&key, other_key).unwrap();
        let settings = TlsSettings {
            cert_file: Some(cert.clone()),
            key_file: Some(key),
            ..Default::default()
        };
        let err = check(&settings).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}: private key does not belong to the certificate",
                cert.display()
            )
        );
    }

    #[test]
    fn missing_files_name_the_path() {
        let settings = TlsSettings {
            cert_file: Some("/nonexistent/c.pem".into()),
            key_file: Some("/nonexistent/k.pem".into()),
            ..Default::default()
        };
        let err = serving_pair(&settings).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/c.pem"), "{err}");
    }
}
