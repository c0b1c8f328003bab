//! The threads that keep the node's certificates fresh (upstream's certificate
//! managers): `cert-rotate` for the client certificate (`--rotate-certificates`, or
//! only at expiry when a `--bootstrap-kubeconfig` is given without rotation) and
//! `srv-cert` for the node server's (`--rotate-server-certificates`). Neither needs a
//! restart.
//!
//! Loop: from the current certificate's validity, pick a renewal time at a random
//! 70-90 % of its lifetime ([`renewal_time`], so a fleet does not renew in step; its
//! expiry under [`Schedule::AtExpiry`]);
//! sleep until then (waking each minute to refresh the client TTL gauge, and at once
//! on shutdown); send a CertificateSigningRequest authenticated by the node's client
//! certificate, wait for it, store the pair (`<prefix>-current.pem` in the
//! certificate directory, so a restart starts from it) and hand it to the
//! [`Rotation::install`] sink: the API client's [`ApiClient::set_client_certificate`]
//! (new requests and watches use it; those in flight finish on their connections) or
//! the node server's serving pair (new handshakes use it). With no cluster-issued
//! certificate yet (a serving certificate, at first), it asks at once. When the
//! client certificate has expired (by the clock read then), or the API server
//! refuses it (401/403 to the request), the request goes with the bootstrap
//! kubeconfig's credentials, read from the file at that moment: the node gets a
//! certificate again without a restart (upstream exits instead, to re-bootstrap at
//! its next start). The new pair is checked before it is stored (`store.rs`). A
//! failure is
//! logged, reported as a Warning event on the Node (the client's also counted in
//! `kubelet_certificate_manager_client_expiration_renew_errors`), and retried with
//! back-off.
//!
//! Channels: `shutdown` only. Owns its state; talks to the API server through the
//! shared client and writes only the certificate directory.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{after, select, Receiver};

use crate::api::ratelimit::{random_between, Backoff};
use crate::api::{kubeconfig, ApiClient, ApiError};
use crate::events::{EventType, Recorder};
use crate::metrics::{CLIENT_CERT_RENEW_ERRORS, CLIENT_CERT_TTL};

use super::bootstrap::{request_certificate, BootstrapError, CertKind, Issued};
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

/// When a certificate is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// At a random 70-90 % of its lifetime (`--rotate-certificates`).
    Rotate,
    /// Once it has expired (no rotation, but a bootstrap kubeconfig to fall back on).
    AtExpiry,
}

/// Whose credentials a renewal was asked with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Own,
    Bootstrap,
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
    /// `--bootstrap-kubeconfig` (client certificate only): the credentials a request
    /// goes with when the certificate has expired or is refused.
    pub bootstrap: Option<PathBuf>,
    pub schedule: Schedule,
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
                match super::validity(current) {
                    Some((not_before, not_after)) => {
                        let renew_at = match self.schedule {
                            Schedule::Rotate => {
                                renewal_time(not_before, not_after, random_between(700, 900))
                            }
                            Schedule::AtExpiry => not_after,
                        };
                        log::info!(
                            "{} valid until {not_after} (Unix time); renewing at {renew_at}",
                            self.what()
                        );
                        if !self.sleep_until(renew_at, not_after, shutdown) {
                            return;
                        }
                    }
                    // Unreadable: replace it now rather than never.
                    None => log::error!("{} cannot be read; renewing it now", self.what()),
                }
            }
            match self.renew() {
                Ok(()) => backoff.reset(),
                Err(why) => {
                    if self.kind == CertKind::Client {
                        CLIENT_CERT_RENEW_ERRORS.inc(&[]);
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

    /// Sleeps until `renew_at` by the clock (read each time it wakes), refreshing the
    /// client TTL gauge; false on shutdown.
    fn sleep_until(&self, renew_at: i64, not_after: i64, shutdown: &Receiver<()>) -> bool {
        loop {
            let now = super::unix_now();
            if self.kind == CertKind::Client {
                CLIENT_CERT_TTL.set(&[], (not_after - now) as f64);
            }
            if now >= renew_at {
                return true;
            }
            let nap = Duration::from_secs((renew_at - now) as u64).min(GAUGE_PERIOD);
            select! {
                recv(shutdown) -> _ => return false,
                recv(after(nap)) -> _ => {}
            }
        }
    }

    /// One renewal.
    fn renew(&mut self) -> Result<(), RenewError> {
        let (issued, via) = self.request()?;
        self.store.store(
            &issued.cert_pem,
            issued.key_pem.as_bytes(),
            super::unix_now(),
        )?;
        (self.install)(&issued.cert_pem, issued.key_pem.as_bytes()).map_err(RenewError::Install)?;
        let how = match via {
            Via::Own => "",
            Via::Bootstrap => " with the bootstrap credentials",
        };
        log::info!(
            "{} renewed through {}{how}; new connections use it",
            self.what(),
            issued.request
        );
        self.recorder.node(
            &self.node,
            EventType::Normal,
            "CertificateRotated",
            format!(
                "The {} was renewed through CertificateSigningRequest {}{how}",
                self.what(),
                issued.request
            ),
        );
        self.current = Some(issued.cert_pem);
        Ok(())
    }

    /// Asks for a new pair: with the current certificate, unless it has expired or
    /// is refused and a bootstrap kubeconfig is there to fall back on.
    fn request(&self) -> Result<(Issued, Via), RenewError> {
        let ask = |client: &ApiClient| {
            request_certificate(
                client,
                &self.kind,
                &self.node,
                REQUEST_WAIT,
                &super::unix_now,
            )
        };
        let bootstrap = match (&self.kind, &self.bootstrap) {
            (CertKind::Client, Some(path)) => path,
            _ => return Ok((ask(&self.client)?, Via::Own)),
        };
        let expired = self
            .current
            .as_deref()
            .is_some_and(|pem| !super::usable_at(pem, super::unix_now()));
        if expired {
            log::warn!(
                "the client certificate has expired; asking for a new one with the bootstrap \
                 credentials of {}",
                bootstrap.display()
            );
        } else {
            match ask(&self.client) {
                Ok(issued) => return Ok((issued, Via::Own)),
                Err(err) if refused(&err) => log::warn!(
                    "{err}; asking for a new client certificate with the bootstrap credentials \
                     of {}",
                    bootstrap.display()
                ),
                Err(err) => return Err(err.into()),
            }
        }
        let config = kubeconfig::load(bootstrap).map_err(BootstrapError::BootstrapConfig)?;
        let client = ApiClient::new(&config).map_err(|source| BootstrapError::Client {
            path: bootstrap.clone(),
            source,
        })?;
        Ok((ask(&client)?, Via::Bootstrap))
    }
}

/// True when the API server refused the request's credentials (an expired or
/// revoked client certificate: 401, or 403 once it counts as anonymous).
fn refused(err: &BootstrapError) -> bool {
    matches!(
        err,
        BootstrapError::Create(ApiError::Unauthorized { .. } | ApiError::Forbidden { .. })
    )
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
