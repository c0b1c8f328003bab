//! The threads that keep the node's certificates fresh (upstream's certificate
//! managers): `cert-rotate` for the client certificate (`--rotate-certificates`) and
//! `srv-cert` for the node server's (`--rotate-server-certificates`). Neither needs a
//! restart.
//!
//! Loop: from the current certificate's validity, pick a renewal time at a random
//! 70-90 % of its lifetime ([`renewal_time`], so a fleet does not renew in step);
//! sleep until then (waking each minute to refresh the client TTL gauge, and at once
//! on shutdown); send a CertificateSigningRequest authenticated by the node's client
//! certificate, wait for it, store the pair (`<prefix>-current.pem` in the
//! certificate directory, so a restart starts from it) and hand it to the
//! [`Rotation::install`] sink: the API client's [`ApiClient::set_client_certificate`]
//! (new requests and watches use it; those in flight finish on their connections) or
//! the node server's serving pair (new handshakes use it). With no cluster-issued
//! certificate yet (a serving certificate, at first), it asks at once. A failure is
//! logged, reported as a Warning event on the Node (the client's also counted in
//! `kubelet_certificate_manager_client_expiration_renew_errors`), and retried with
//! back-off.
//!
//! Channels: `shutdown` only. Owns its state; talks to the API server through the
//! shared client and writes only the certificate directory.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{after, select, Receiver};

use crate::api::ratelimit::{random_between, Backoff};
use crate::api::ApiClient;
use crate::events::{EventType, Recorder};
use crate::metrics::{CLIENT_CERT_RENEW_ERRORS, CLIENT_CERT_TTL, SERVER_CERT_RENEW_ERRORS};

use super::bootstrap::{request_certificate, CertKind};
use super::store::CertStore;

/// How long one request waits to be approved and signed (upstream's 15 minutes): a
/// serving request may wait for an admin.
const REQUEST_WAIT: Duration = Duration::from_secs(900);
/// The TTL gauge is refreshed at least this often.
const GAUGE_PERIOD: Duration = Duration::from_secs(60);

/// Why a new pair could not be handed to its user (the API client's or the server's).
pub type InstallError = Box<dyn std::error::Error + Send + Sync>;

/// Hands a new pair (PEM chain, PEM key) to its user.
pub type Install = Box<dyn Fn(&[u8], &[u8]) -> Result<(), InstallError> + Send>;

/// Why one renewal failed; logged and sent as the event's message.
#[derive(Debug, thiserror::Error)]
enum RenewError {
    #[error(transparent)]
    Request(#[from] super::BootstrapError),
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
    #[error(transparent)]
    Install(InstallError),
}

/// What one thread works with.
pub struct Rotation {
    pub kind: CertKind,
    /// Sends the requests (the node's own client certificate).
    pub client: ApiClient,
    pub store: CertStore,
    pub node: String,
    /// The cluster-issued certificate (chain, PEM) in use now; None asks at once.
    pub current: Option<Vec<u8>>,
    pub install: Install,
    pub recorder: Recorder,
}

/// When to renew a certificate valid from `not_before` to `not_after` (Unix seconds):
/// at `fraction_per_mille` / 1000 of its lifetime, the caller drawing the fraction
/// from 700 to 900 (upstream's jittered 70-90 %).
pub fn renewal_time(not_before: i64, not_after: i64, fraction_per_mille: u64) -> i64 {
    let lifetime = (not_after - not_before).max(0);
    not_before + lifetime * fraction_per_mille.min(1000) as i64 / 1000
}

/// Starts the rotation's thread (`cert-rotate` or `srv-cert`); it ends on `shutdown`.
/// Essential: without it the node loses the API server (or serves an expired
/// certificate) the day its certificate expires.
pub fn spawn(rotation: Rotation, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
    let name = match rotation.kind {
        CertKind::Client => "cert-rotate",
        CertKind::Serving { .. } => "srv-cert",
    };
    crate::process::spawn_essential(name, 512 * 1024, move || rotation.run(&shutdown))
}

impl Rotation {
    fn what(&self) -> &'static str {
        match self.kind {
            CertKind::Client => "client certificate",
            CertKind::Serving { .. } => "serving certificate",
        }
    }

    fn run(mut self, shutdown: &Receiver<()>) {
        let mut backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        loop {
            if let Some(current) = &self.current {
                let Some((not_before, not_after)) = super::first_certificate(current)
                    .and_then(|der| crate::api::x509::validity(&der))
                else {
                    log::error!("{} cannot be read; not rotating it", self.what());
                    return;
                };
                let renew_at = renewal_time(not_before, not_after, random_between(700, 900));
                log::info!(
                    "{} valid until {not_after} (Unix time); renewing at {renew_at}",
                    self.what()
                );
                loop {
                    let now = super::unix_now();
                    if self.kind == CertKind::Client {
                        CLIENT_CERT_TTL.set(&[], (not_after - now) as f64);
                    }
                    if now >= renew_at {
                        break;
                    }
                    let nap = Duration::from_secs((renew_at - now) as u64).min(GAUGE_PERIOD);
                    select! {
                        recv(shutdown) -> _ => return,
                        recv(after(nap)) -> _ => {}
                    }
                }
            }
            match self.renew() {
                Ok(()) => backoff.reset(),
                Err(why) => {
                    match self.kind {
                        CertKind::Client => CLIENT_CERT_RENEW_ERRORS.inc(&[]),
                        CertKind::Serving { .. } => SERVER_CERT_RENEW_ERRORS.inc(&[]),
                    }
                    log::error!("renewing the {}: {why}", self.what());
                    self.recorder.node(
                        &self.node,
                        EventType::Warning,
                        "CertificateRotationFailed",
                        format!("Renewing the {} failed: {why}", self.what()),
                    );
                    select! {
                        recv(shutdown) -> _ => return,
                        recv(after(backoff.next_delay())) -> _ => {}
                    }
                }
            }
        }
    }

    /// One renewal.
    fn renew(&mut self) -> Result<(), RenewError> {
        let now = super::unix_now();
        let issued = request_certificate(&self.client, &self.kind, &self.node, REQUEST_WAIT, now)?;
        self.store
            .store(&issued.cert_pem, issued.key_pem.as_bytes(), now)?;
        (self.install)(&issued.cert_pem, issued.key_pem.as_bytes()).map_err(RenewError::Install)?;
        log::info!(
            "{} renewed through {}; new connections use it",
            self.what(),
            issued.request
        );
        self.recorder.node(
            &self.node,
            EventType::Normal,
            "CertificateRotated",
            format!(
                "The {} was renewed through CertificateSigningRequest {}",
                self.what(),
                issued.request
            ),
        );
        self.current = Some(issued.cert_pem);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_at_the_drawn_share_of_the_lifetime() {
        assert_eq!(renewal_time(1_000, 2_000, 700), 1_700);
        assert_eq!(renewal_time(1_000, 2_000, 900), 1_900);
        // A fraction past the end is held at the end; a backwards period renews now.
        assert_eq!(renewal_time(1_000, 2_000, 5_000), 2_000);
        assert_eq!(renewal_time(2_000, 1_000, 800), 2_000);
        for _ in 0..100 {
            let at = renewal_time(0, 1_000, random_between(700, 900));
            assert!((700..=900).contains(&at), "{at}");
        }
    }
}
