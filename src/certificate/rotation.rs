//! The `cert-rotate` thread (upstream's client certificate manager,
//! `--rotate-certificates`): renews the node's client certificate before it expires
//! and swaps it into the running API client, without a restart.
//!
//! Loop: from the current certificate's validity, pick a renewal time at a random
//! 70-90 % of its lifetime ([`renewal_time`], so a fleet does not renew in step);
//! sleep until then (waking each minute to refresh the TTL gauge, and at once on
//! shutdown); send a CertificateSigningRequest authenticated by the current
//! certificate (the cluster's `selfnodeclient` approval applies), wait for it, store
//! the pair (`kubelet-client-current.pem`, which the kubeconfig names, so a restart
//! uses it too) and hand it to [`ApiClient::set_client_certificate`]: new requests
//! and watches use it, those in flight finish on their connections. A failure is
//! logged, counted (`kubelet_certificate_manager_client_expiration_renew_errors`),
//! reported as a Warning event on the Node, and retried with back-off.
//!
//! Channels: `shutdown` only. Owns its state; talks to the API server through the
//! shared client and writes only the certificate directory.

use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{after, select, Receiver};

use crate::api::ratelimit::{random_between, Backoff};
use crate::api::ApiClient;
use crate::events::{EventType, Recorder};
use crate::metrics::{CLIENT_CERT_RENEW_ERRORS, CLIENT_CERT_TTL};

use super::bootstrap::request_certificate;
use super::store::CertStore;

/// How long one renewal waits for its request to be approved and signed.
const RENEWAL_WAIT: Duration = Duration::from_secs(300);
/// The TTL gauge is refreshed at least this often.
const GAUGE_PERIOD: Duration = Duration::from_secs(60);

/// What the thread works with.
pub struct Rotation {
    pub client: ApiClient,
    pub store: CertStore,
    pub node: String,
    /// The certificate (chain, PEM) the client uses now.
    pub current: Vec<u8>,
    pub recorder: Recorder,
}

/// When to renew a certificate valid from `not_before` to `not_after` (Unix seconds):
/// at `fraction_per_mille` / 1000 of its lifetime, the caller drawing the fraction
/// from 700 to 900 (upstream's jittered 70-90 %).
pub fn renewal_time(not_before: i64, not_after: i64, fraction_per_mille: u64) -> i64 {
    let lifetime = (not_after - not_before).max(0);
    not_before + lifetime * fraction_per_mille.min(1000) as i64 / 1000
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Starts the `cert-rotate` thread; it ends on `shutdown`. Essential: without it
/// the node loses the API server the day its certificate expires.
pub fn spawn(rotation: Rotation, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
    crate::process::spawn_essential("cert-rotate", 512 * 1024, move || rotation.run(&shutdown))
}

impl Rotation {
    fn run(mut self, shutdown: &Receiver<()>) {
        let mut backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        loop {
            let Some((not_before, not_after)) = super::first_certificate(&self.current)
                .and_then(|der| crate::api::x509::validity(&der))
            else {
                log::error!("cert-rotate: the client certificate cannot be read; not rotating");
                return;
            };
            let renew_at = renewal_time(not_before, not_after, random_between(700, 900));
            log::info!(
                "cert-rotate: client certificate valid until {not_after} (Unix time); renewing \
                 at {renew_at}"
            );
            loop {
                let now = now();
                CLIENT_CERT_TTL.set(&[], (not_after - now) as f64);
                if now >= renew_at {
                    break;
                }
                let nap = Duration::from_secs((renew_at - now) as u64).min(GAUGE_PERIOD);
                select! {
                    recv(shutdown) -> _ => return,
                    recv(after(nap)) -> _ => {}
                }
            }
            match self.renew() {
                Ok(()) => backoff.reset(),
                Err(why) => {
                    CLIENT_CERT_RENEW_ERRORS.inc(&[]);
                    log::error!("cert-rotate: renewing the client certificate: {why}");
                    self.recorder.node(
                        &self.node,
                        EventType::Warning,
                        "CertificateRotationFailed",
                        format!("Renewing the client certificate failed: {why}"),
                    );
                    select! {
                        recv(shutdown) -> _ => return,
                        recv(after(backoff.next_delay())) -> _ => {}
                    }
                }
            }
        }
    }

    /// One renewal; the error as text for the log and the event.
    fn renew(&mut self) -> Result<(), String> {
        let now = now();
        let issued = request_certificate(&self.client, &self.node, RENEWAL_WAIT, now)
            .map_err(|e| e.to_string())?;
        self.store
            .store(&issued.cert_pem, issued.key_pem.as_bytes(), now)
            .map_err(|e| e.to_string())?;
        self.client
            .set_client_certificate(&issued.cert_pem, issued.key_pem.as_bytes())
            .map_err(|e| e.to_string())?;
        log::info!(
            "cert-rotate: client certificate renewed through {}; new connections use it",
            issued.request
        );
        self.recorder.node(
            &self.node,
            EventType::Normal,
            "CertificateRotated",
            format!(
                "Client certificate renewed through CertificateSigningRequest {}",
                issued.request
            ),
        );
        self.current = issued.cert_pem;
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
