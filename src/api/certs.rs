//! Checks of PEM certificates and keys at load time, so that a file rustls would
//! refuse stops litelet at start with a reason, instead of panicking later inside the
//! HTTP client on the first connection (ureq builds its rustls config lazily and
//! treats a refused client certificate as a bug).
//!
//! What is checked is what rustls itself checks when it builds a config: every
//! certificate parses as DER, the leaf of a chain is an X.509 v3 certificate webpki
//! accepts, the key is one the ring provider can sign with, and the key belongs to
//! the leaf. CA bundles must hold at least one certificate and every one of them must
//! be usable as a trust anchor (v1 roots are fine there, as in webpki).
//!
//! Pure apart from the crypto; called on the main thread at start-up by
//! `api::kubeconfig`, `api::client` and the node server's TLS set-up. Errors are
//! plain reasons; callers add the file or field.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Why a certificate, key or bundle cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("invalid PEM: {0}")]
    Pem(String),
    #[error("no PEM certificate found")]
    NoCertificate,
    #[error("no PEM private key found")]
    NoKey,
    /// The leaf certificate (or bundle entry `index`, from 1) cannot be used.
    #[error("certificate {index}: {reason}")]
    Certificate { index: usize, reason: String },
    #[error("private key: {0}")]
    Key(String),
    #[error("private key does not belong to the certificate")]
    KeyMismatch,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM text, in order.
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(CertError::NoCertificate);
    }
    Ok(certs)
}

/// The first private key of a PEM text (PKCS#8, PKCS#1 or SEC1).
pub fn parse_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, CertError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CertError::NoKey,
        other => CertError::Pem(other.to_string()),
    })
}

/// Checks a certificate chain (leaf first) and its key as rustls will use them for a
/// client or serving certificate.
pub fn check_pair(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), CertError> {
    let leaf = chain.first().ok_or(CertError::NoCertificate)?;
    if let Some(reason) = version_problem(leaf) {
        return Err(CertError::Certificate { index: 1, reason });
    }
    let signer = provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| CertError::Key(e.to_string()))?;
    let certified = CertifiedKey::new(chain.to_vec(), signer);
    match certified.keys_match() {
        Ok(()) => Ok(()),
        // The provider cannot tell the key's public half: rustls accepts that too.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(CertError::KeyMismatch)
        }
        Err(e) => Err(CertError::Certificate {
            index: 1,
            reason: e.to_string(),
        }),
    }
}

/// Checks PEM texts of a certificate chain and its key (see [`check_pair`]).
pub fn check_pair_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), CertError> {
    check_pair(&parse_certs(cert_pem)?, &parse_key(key_pem)?)
}

/// Checks a CA bundle; returns the number of trust anchors in it.
pub fn check_ca_bundle(pem: &[u8]) -> Result<usize, CertError> {
    let certs = parse_certs(pem)?;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.iter().enumerate() {
        roots
            .add(cert.clone())
            .map_err(|e| CertError::Certificate {
                index: i + 1,
                reason: format!("not usable as a trust anchor: {e}"),
            })?;
    }
    Ok(certs.len())
}

/// One DER TLV: (tag, content, rest); None when the length runs past the input.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | usize::from(b);
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// A readable reason when `cert` is not an X.509 v3 certificate, which webpki (and so
/// rustls) requires of a leaf; `None` when it is, or when the DER is too odd to tell
/// (rustls then names the problem itself).
fn version_problem(cert: &[u8]) -> Option<String> {
    let (tag, certificate, _) = tlv(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = tlv(certificate)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, field, _) = tlv(tbs)?;
    // TBSCertificate starts with `[0] EXPLICIT Version DEFAULT v1`: absent means v1.
    let version = if tag == 0xa0 {
        match tlv(field)? {
            (0x02, [v], _) => i64::from(*v) + 1,
            _ => return None,
        }
    } else {
        1
    };
    (version != 3).then(|| {
        format!(
            "X.509 version {version} certificate; TLS needs version 3 \
             (issue it with extensions, e.g. openssl x509 -req -extfile)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["node-1".into()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_matching_v3_pair_passes() {
        let (cert, key) = pair();
        check_pair_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(check_ca_bundle(cert.as_bytes()), Ok(1));
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let (cert, _) = pair();
        let (_, other_key) = pair();
        assert_eq!(
            check_pair_pem(cert.as_bytes(), other_key.as_bytes()),
            Err(CertError::KeyMismatch)
        );
    }

    #[test]
    fn missing_and_broken_pem_are_named() {
        let (cert, key) = pair();
        assert_eq!(
            check_pair_pem(b"", key.as_bytes()),
            Err(CertError::NoCertificate)
        );
        assert_eq!(
            check_pair_pem(cert.as_bytes(), cert.as_bytes()),
            Err(CertError::NoKey)
        );
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(matches!(check_ca_bundle(broken), Err(CertError::Pem(_))));
    }

    #[test]
    fn a_v1_leaf_is_refused_with_its_version() {
        let (cert, key) = pair();
        let der = parse_certs(cert.as_bytes()).unwrap().remove(0);
        let v1 = strip_version(&der);
        assert!(version_problem(&v1).unwrap().contains("version 1"));
        let err = check_pair(
            &[CertificateDer::from(v1)],
            &parse_key(key.as_bytes()).unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("X.509 version 1"), "{err}");
        assert_eq!(version_problem(&der), None);
    }

    /// The same certificate without its version field (a v1 shape; the signature no
    /// longer matches, which the version check does not look at).
    fn strip_version(der: &[u8]) -> Vec<u8> {
        let (_, cert, _) = tlv(der).unwrap();
        let (_, tbs, after_tbs) = tlv(cert).unwrap();
        let (_, _, tbs_rest) = tlv(tbs).unwrap();
        let tbs = wrap(0x30, tbs_rest);
        let mut body = tbs;
        body.extend_from_slice(after_tbs);
        wrap(0x30, &body)
    }

    fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = content.len();
        if len < 0x80 {
            out.push(len as u8);
        } else if len < 0x100 {
            out.extend([0x81, len as u8]);
        } else {
            out.extend([0x82, (len >> 8) as u8, len as u8]);
        }
        out.extend_from_slice(content);
        out
    }
}
