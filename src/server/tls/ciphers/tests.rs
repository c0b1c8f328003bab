//! Go's names read as upstream reads them, and what a handshake then agrees on.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, ServerConnection};

use super::*;
use crate::server::tls::{self_signed, server_config_with, ServingCert};

fn names(list: &str) -> Vec<String> {
    list.split(',').map(str::to_owned).collect()
}

#[test]
fn go_names_map_to_rustls_suites_or_are_refused_by_name() {
    let cis = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
               TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,\
               TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,\
               TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_GCM_SHA256";
    let policy = parse(&names(cis), "VersionTLS12").unwrap();
    assert_eq!(
        policy.tls12_suites.as_ref().map(Vec::len),
        Some(6),
        "{policy:?}"
    );
    assert_eq!(
        policy.dropped,
        vec![
            "TLS_RSA_WITH_AES_256_GCM_SHA384".to_owned(),
            "TLS_RSA_WITH_AES_128_GCM_SHA256".to_owned()
        ]
    );
    assert_eq!(policy.warnings().len(), 1);

    let cases: Vec<(&str, &str, Result<(), CipherError>)> = vec![
        ("", "", Ok(())),
        ("TLS_AES_128_GCM_SHA256", "VersionTLS13", Ok(())),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "VersionTLS10",
            Ok(()),
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NOPE",
            "",
            Err(CipherError::UnknownSuite("TLS_NOPE".into())),
        ),
        (
            "TLS_RSA_WITH_AES_128_CBC_SHA,TLS_RSA_WITH_RC4_128_SHA",
            "",
            Err(CipherError::NoneUsable(vec![
                "TLS_RSA_WITH_AES_128_CBC_SHA".into(),
                "TLS_RSA_WITH_RC4_128_SHA".into(),
            ])),
        ),
        // With TLS 1.3 as the minimum the TLS 1.2 list does not matter.
        ("TLS_RSA_WITH_AES_128_CBC_SHA", "VersionTLS13", Ok(())),
        (
            "",
            "VersionTLS14",
            Err(CipherError::UnknownVersion("VersionTLS14".into())),
        ),
    ];
    for (suites, version, want) in cases {
        let got = parse(&names(suites), version).map(|_| ());
        assert_eq!(got, want, "{suites:?} {version:?}");
    }
    let old = parse(&[], "VersionTLS11").unwrap();
    assert_eq!(old.min_version, MinVersion::Tls12);
    assert!(
        old.warnings()[0].contains("TLS 1.2"),
        "{:?}",
        old.warnings()
    );
}

/// Trusts any server certificate: these tests are about suites, not names.
#[derive(Debug)]
struct AnyServer;

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client offering only `suites` (all rustls has when empty) over `versions`.
fn client(
    suites: &[CipherSuite],
    versions: &[&'static SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        provider
            .cipher_suites
            .retain(|s| suites.contains(&s.suite()));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer))
        .with_no_client_auth();
    Arc::new(config)
}

/// Runs a handshake in memory; the suite agreed on, or the error.
fn handshake(
    server: Arc<rustls::ServerConfig>,
    client: Arc<ClientConfig>,
) -> Result<CipherSuite, rustls::Error> {
    let name = ServerName::try_from("node-1").unwrap();
    let mut c = ClientConnection::new(client, name).unwrap();
    let mut s = ServerConnection::new(server).unwrap();
    for _ in 0..10 {
        let mut wire = Vec::new();
        c.write_tls(&mut wire).unwrap();
        s.read_tls(&mut wire.as_slice()).unwrap();
        s.process_new_packets()?;
        let mut back = Vec::new();
        s.write_tls(&mut back).unwrap();
        c.read_tls(&mut back.as_slice()).unwrap();
        c.process_new_packets()?;
        if !c.is_handshaking() && !s.is_handshaking() {
            return Ok(s.negotiated_cipher_suite().unwrap().suite());
        }
    }
    Err(rustls::Error::General("handshake did not finish".into()))
}

fn server(policy: &TlsPolicy) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let (cert, key) = self_signed(&["node-1".into()], &[]).unwrap();
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let serving = ServingCert::new(chain, key).unwrap();
    server_config_with(&serving, None, policy).unwrap()
}

#[test]
fn handshakes_agree_only_on_the_allowed_suites_and_versions() {
    use rustls::version::{TLS12, TLS13};
    let gcm128 = CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    let gcm256 = CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384;
    let only_128 = parse(&names("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"), "").unwrap();
    let s = server(&only_128);
    assert_eq!(
        handshake(s.clone(), client(&[gcm128], &[&TLS12])),
        Ok(gcm128)
    );
    assert!(
        handshake(s.clone(), client(&[gcm256], &[&TLS12])).is_err(),
        "a TLS 1.2 suite outside the list"
    );
    // TLS 1.3 is not governed by the list, as in Go.
    assert!(handshake(s, client(&[], &[&TLS13])).is_ok());

    let tls13 = parse(&[], "VersionTLS13").unwrap();
    let s = server(&tls13);
    assert!(handshake(s.clone(), client(&[], &[&TLS12])).is_err());
    assert!(handshake(s, client(&[], &[&TLS13])).is_ok());
    // The default offers TLS 1.2 too.
    let s = server(&TlsPolicy::default());
    assert_eq!(handshake(s, client(&[gcm256], &[&TLS12])), Ok(gcm256));
}
