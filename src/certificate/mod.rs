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
//!   client certificate (`--rotate-certificates`) and `srv-cert` for the node
//!   server's (`--rotate-server-certificates`); each renews at 70-90 % of the
//!   lifetime and hands the new pair to whoever uses it, without a restart.

pub mod bootstrap;
pub mod request;
pub mod rotation;
pub mod store;

pub use bootstrap::{ensure_client_certificate, Bootstrap, BootstrapError, CertKind, Outcome};

/// Now in Unix seconds, as certificate validity is compared.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The first certificate of a PEM chain, DER.
fn first_certificate(pem: &[u8]) -> Option<Vec<u8>> {
    ureq::tls::parse_pem(pem).find_map(|item| match item {
        Ok(ureq::tls::PemItem::Certificate(der)) => Some(der.der().to_vec()),
        _ => None,
    })
}

/// True when the first certificate of `pem` is valid at `now` (Unix seconds).
pub fn valid_at(pem: &[u8], now: i64) -> bool {
    first_certificate(pem)
        .and_then(|der| crate::api::x509::validity(&der))
        .is_some_and(|(not_before, not_after)| not_before <= now && now < not_after)
}
