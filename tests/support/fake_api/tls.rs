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

/// Makes the CA and both certificates under `dir`; `None` when openssl is missing or fails.
pub fn generate(dir: &Path, node: &str) -> Option<TlsFiles> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=fake-ca",
        "-days",
        "2",
    ]);
    openssl(dir, &ca)?;
    let leaf = |name: &str, subject: &str, ext: &str| -> Option<()> {
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        let extfile = format!("{name}.ext");
        std::fs::write(dir.join(&extfile), ext).ok()?;
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
        openssl(dir, &req)?;
        openssl(
            dir,
            &[
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
                "-extfile",
                &extfile,
            ],
        )
    };
    leaf(
        "server",
        "/CN=kube-apiserver",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )?;
    leaf(
        "client",
        &format!("/O=system:nodes/CN=system:node:{node}"),
        "extendedKeyUsage=clientAuth\n",
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
