//! The node's client certificate from the cluster (upstream
//! `pkg/kubelet/certificate/bootstrap`): the TLS bootstrap that turns a bootstrap-token
//! kubeconfig into the node's own `system:node:<name>` certificate through the
//! CertificateSigningRequest API, and the certificate directory that keeps the pairs.
//!
//! - `request.rs`: a fresh ECDSA P-256 key and its PKCS#10 request (pure).
//! - `store.rs`: `<cert-dir>/kubelet-client-<time>.pem` (certificate and key, 0600)
//!   and the `kubelet-client-current.pem` link the kubeconfig names.
//! - `bootstrap.rs`: the start-up decision (keep the kubeconfig, reuse the stored
//!   pair, or request a new one and wait for it) and its I/O; runs once on the main
//!   thread before any thread talks to the API server.
//! - `rotation.rs`: the threads that keep a certificate fresh: `cert-rotate` for the
//!   client certificate (`--rotate-certificates`, or at expiry only when a bootstrap
//!   kubeconfig is given) and `srv-cert` for the node server's
//!   (`--rotate-server-certificates`); each renews at 70-90 % of the lifetime and
//!   hands the new pair to whoever uses it, without a restart; an expired or refused
//!   client certificate is replaced with the bootstrap credentials.
//!
//! Validity is judged here (`check_usable_at`, `check_pair_at`) with the clock read
//! at the time of use, and by expiry only: see `bootstrap.rs` for why.

pub mod bootstrap;
pub mod request;
pub mod rotation;
pub mod store;

pub use bootstrap::{ensure_client_certificate, Bootstrap, BootstrapError, CertKind, Outcome};

/// Now in Unix seconds, as certificate validity is compared: read at the time of
/// use, never carried across a wait.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Why a certificate or pair cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("no certificate with a readable validity period in the PEM")]
    Unreadable,
    #[error("expired at {not_after} (Unix time; now {now})")]
    Expired { not_after: i64, now: i64 },
    #[error(transparent)]
    Pair(#[from] crate::api::certs::CertError),
}

/// The first certificate of a PEM chain, DER.
fn first_certificate(pem: &[u8]) -> Option<Vec<u8>> {
    ureq::tls::parse_pem(pem).find_map(|item| match item {
        Ok(ureq::tls::PemItem::Certificate(der)) => Some(der.der().to_vec()),
        _ => None,
    })
}

/// The validity period (notBefore, notAfter; Unix seconds) of the first certificate.
pub fn validity(pem: &[u8]) -> Option<(i64, i64)> {
    first_certificate(pem).and_then(|der| crate::api::x509::validity(&der))
}

/// Checks that the first certificate of `pem` can be used at `now`: it has not
/// expired. A notBefore still ahead is accepted, as upstream's certificate manager
/// does: the signer back-dates by five minutes only, so a node whose clock is behind
/// the cluster's (an edge board without a real-time clock) or a request approved
/// late would otherwise throw away good certificates; the API server judges the
/// certificate by its own clock.
pub fn check_usable_at(pem: &[u8], now: i64) -> Result<(), Unusable> {
    let (_, not_after) = validity(pem).ok_or(Unusable::Unreadable)?;
    if now >= not_after {
        return Err(Unusable::Expired { not_after, now });
    }
    Ok(())
}

/// True when [`check_usable_at`] accepts `pem` at `now`.
pub fn usable_at(pem: &[u8], now: i64) -> bool {
    check_usable_at(pem, now).is_ok()
}

/// Checks a pair before it is stored or used: rustls can use both, the key belongs to
/// the certificate, and the certificate has not expired at `now`. `key_pem` may be
/// the same PEM as `cert_pem` (a stored pair holds both).
pub fn check_pair_at(cert_pem: &[u8], key_pem: &[u8], now: i64) -> Result<(), Unusable> {
    crate::api::certs::check_pair_pem(cert_pem, key_pem)?;
    check_usable_at(cert_pem, now)
}

/// How far `now` is behind the first certificate's notBefore, when it is: the
/// node's clock is behind the signer's by at least that much (logged, not refused).
pub fn clock_behind(pem: &[u8], now: i64) -> Option<i64> {
    let (not_before, _) = validity(pem)?;
    (not_before > now).then_some(not_before - now)
}

/// Certificates with chosen validity periods, for the module's tests.
#[cfg(test)]
pub(crate) mod test_pairs {
    use std::time::Duration;

    /// A self-signed certificate valid from `from` to `to` (Unix seconds), PEM, with
    /// its key.
    pub fn pair(from: i64, to: i64) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(from as u64);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(to as u64);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
