//! Optional HTTPS for the fake API server: a throwaway CA, a server certificate for
//! 127.0.0.1 and a client certificate (`system:node:<node>`), made with the
//! `openssl` command at test time. Without `openssl` on the PATH there is no TLS and
//! the TLS tests skip themselves.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// PEM files of one fake cluster's PKI.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub ca_pem: Vec<u8>,
    pub client_cert_pem: Vec<u8>,
    pub client_key_pem: Vec<u8>,
    server_cert_pem: Vec<u8>,
    server_key_pem: Vec<u8>,
}

fn openssl(dir: &Path, args: &[&str]) -> Option<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status.success().then_some(())
}

/// `openssl req` options for a new ECDSA P-256 key without a passphrase.
const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A self-signed CA under `dir` (`ca.key`, `ca.crt`) named `cn`; `None` when openssl
/// is missing or fails.
pub fn make_ca(dir: &Path, cn: &str) -> Option<()> {
    let subject = format!("/CN={cn}");
    let mut ca = vec!["req", "-x509"];
    ca.extend(EC_KEY);
    ca.extend([
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", &subject, "-days", "2",
    ]);
    openssl(dir, &ca)
}

/// `<name>.key` and `<name>.crt` under `dir`, signed by the CA of [`make_ca`] with
/// `openssl x509 -req`; with `extensions` (an extfile's text) an X.509 v3
/// certificate, without them a v1 one, as openssl makes it.
pub fn signed_leaf(dir: &Path, name: &str, subject: &str, extensions: Option<&str>) -> Option<()> {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let crt = format!("{name}.crt");
    let extfile = format!("{name}.ext");
    let mut req = vec!["req"];
    req.extend(EC_KEY);
    req.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
    openssl(dir, &req)?;
    let mut sign = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "2",
    ];
    if let Some(ext) = extensions {
        std::fs::write(dir.join(&extfile), ext).ok()?;
        sign.extend(["-extfile", &extfile]);
    }
    openssl(dir, &sign)
}

/// Makes the CA and both certificates under `dir`; `None` when openssl is missing or fails.
pub fn generate(dir: &Path, node: &str) -> Option<TlsFiles> {
    make_ca(dir, "fake-ca")?;
    signed_leaf(
        dir,
        "server",
        "/CN=kube-apiserver",
        Some("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
    )?;
    signed_leaf(
        dir,
        "client",
        &format!("/O=system:nodes/CN=system:node:{node}"),
        Some("extendedKeyUsage=clientAuth\n"),
    )?;
    let read = |f: &str| std::fs::read(dir.join(f)).ok();
    Some(TlsFiles {
        ca_pem: read("ca.crt")?,
        client_cert_pem: read("client.crt")?,
        client_key_pem: read("client.key")?,
        server_cert_pem: read("server.crt")?,
        server_key_pem: read("server.key")?,
    })
}

/// The server's rustls config: its certificate, and client certificates verified
/// against the CA but not required (token-only clients still get in).
pub fn server_config(files: &TlsFiles) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&files.ca_pem) {
        roots.add(cert.expect("fake CA PEM")).expect("fake CA cert");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .expect("client verifier");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&files.server_cert_pem)
            .map(|c| c.expect("fake server cert PEM"))
            .collect();
    let key = PrivateKeyDer::from_pem_slice(&files.server_key_pem).expect("fake server key PEM");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("fake server certificate");
    Arc::new(config)
}
