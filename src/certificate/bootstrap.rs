//! TLS bootstrap at start-up (upstream `LoadClientCert`): make sure `--kubeconfig`
//! holds a usable client certificate before litelet talks to the API server.
//!
//! In order: a kubeconfig that loads and whose client certificate has not expired is
//! kept as it is (a kubeconfig without a certificate too: a token, say); else the
//! certificate directory's current pair, when usable, gets a kubeconfig written for
//! it; else a new ECDSA key and a CertificateSigningRequest (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`) go to the API server with the
//! bootstrap kubeconfig's credentials, and litelet waits, watching the request, for
//! it to be approved and signed (bounded: [`Bootstrap::wait`]). The signed pair goes
//! to the certificate directory, and the kubeconfig (mode 0600) names its
//! `kubelet-client-current.pem`. A certificate that expired while the node was off
//! so falls back to the bootstrap kubeconfig, as upstream.
//!
//! Time: every check reads the clock when it is made (`now` is a clock, never a
//! value taken before a wait of up to an hour), and only expiry is judged: a
//! notBefore ahead of the node's clock is accepted as upstream does (the signer
//! back-dates by five minutes only; a request approved late or a node clock behind
//! would otherwise discard a good certificate and file a new request each retry).
//! An issued pair is checked (key matches, usable by rustls, not expired) before it
//! is stored.
//!
//! Runs on the main thread; every failure is a [`BootstrapError`] naming the file or
//! the request, and litelet does not start without a certificate.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::api::csr::{CertificateSigningRequest, CsrState};
use crate::api::kubeconfig::{self, KubeconfigError};
use crate::api::ratelimit::Backoff;
use crate::api::{paths, ApiClient, ApiError, ClientConfig, WatchOptions};

use super::request::{kubelet_client_request, kubelet_serving_request};
use super::store::{CertStore, StoreError};

/// What the bootstrap works with.
pub struct Bootstrap<'a> {
    /// `--kubeconfig`: read when usable, (re)written otherwise.
    pub kubeconfig: &'a Path,
    /// `--bootstrap-kubeconfig`: the credentials that may ask for a certificate.
    pub bootstrap_kubeconfig: &'a Path,
    /// `--cert-dir`.
    pub cert_dir: &'a Path,
    pub node_name: &'a str,
    /// How long to wait for the request to be approved and signed.
    pub wait: Duration,
}

/// How the kubeconfig came to be usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It already was.
    Kept,
    /// Written for the certificate directory's current pair.
    FromStore,
    /// Written for a pair issued now through the named request.
    Issued { request: String },
}

/// Why litelet has no client certificate.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("bootstrap kubeconfig: {0}")]
    BootstrapConfig(#[source] KubeconfigError),
    #[error("bootstrap kubeconfig {path}: {source}")]
    Client {
        path: PathBuf,
        #[source]
        source: ApiError,
    },
    #[error("making a key pair and certificate request: {0}")]
    Request(#[source] rcgen::Error),
    #[error("sending the CertificateSigningRequest: {0}")]
    Create(#[source] ApiError),
    #[error("CertificateSigningRequest {name} was refused: {why}")]
    Refused { name: String, why: String },
    #[error(
        "CertificateSigningRequest {name} was not approved and signed within {waited:?}: \
         does the cluster approve it (client requests: the csrapproving controller and \
         the system:certificates.k8s.io:certificatesigningrequests:nodeclient binding; \
         serving requests: an admin or an approver of the cluster's choosing)?"
    )]
    Timeout { name: String, waited: Duration },
    #[error("CertificateSigningRequest {name}: the issued certificate is unusable: {why}")]
    BadCertificate { name: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("rendering kubeconfig {path}: {source}")]
    RenderKubeconfig {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
}

/// Makes `b.kubeconfig` usable (see the module doc); `now` reads the clock (Unix
/// seconds).
pub fn ensure_client_certificate(
    b: &Bootstrap<'_>,
    now: &dyn Fn() -> i64,
) -> Result<Outcome, BootstrapError> {
    match kubeconfig::load(b.kubeconfig) {
        Ok(config) => match &config.client_cert_pem {
            Some(cert) if !super::usable_at(cert, now()) => log::warn!(
                "kubeconfig {}: the client certificate has expired; bootstrapping a new one",
                b.kubeconfig.display()
            ),
            _ => return Ok(Outcome::Kept),
        },
        Err(KubeconfigError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => log::warn!("{err}; bootstrapping a client certificate"),
    }
    let bootstrap =
        kubeconfig::load(b.bootstrap_kubeconfig).map_err(BootstrapError::BootstrapConfig)?;
    let store = CertStore::new(b.cert_dir, "kubelet-client");
    if let Some(pem) = store.current()? {
        let usable = super::check_pair_at(&pem, &pem, now());
        if let Err(why) = &usable {
            log::warn!(
                "the stored client certificate {} is unusable ({why}); bootstrapping a new one",
                store.current_path().display()
            );
        }
        if usable.is_ok() {
            write_kubeconfig(b.kubeconfig, &bootstrap, &store.current_path())?;
            log::info!(
                "kubeconfig {} written for the stored client certificate {}",
                b.kubeconfig.display(),
                store.current_path().display()
            );
            return Ok(Outcome::FromStore);
        }
    }
    let client = ApiClient::new(&bootstrap).map_err(|source| BootstrapError::Client {
        path: b.bootstrap_kubeconfig.to_owned(),
        source,
    })?;
    let issued = request_certificate(&client, &CertKind::Client, b.node_name, b.wait, now)?;
    let current = store.store(&issued.cert_pem, issued.key_pem.as_bytes(), now())?;
    write_kubeconfig(b.kubeconfig, &bootstrap, &current)?;
    log::info!(
        "client certificate issued through {}: {} (kubeconfig {})",
        issued.request,
        current.display(),
        b.kubeconfig.display()
    );
    Ok(Outcome::Issued {
        request: issued.request,
    })
}

/// A pair the cluster signed.
pub struct Issued {
    pub cert_pem: Vec<u8>,
    pub key_pem: String,
    /// The CertificateSigningRequest's name.
    pub request: String,
}

/// Which certificate a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertKind {
    /// The node's client certificate (to the API server).
    Client,
    /// The node server's certificate, for these host names and addresses.
    Serving {
        names: Vec<String>,
        ips: Vec<std::net::IpAddr>,
    },
}

impl CertKind {
    /// The certificate directory's file prefix, as upstream names them.
    pub fn prefix(&self) -> &'static str {
        match self {
            CertKind::Client => "kubelet-client",
            CertKind::Serving { .. } => "kubelet-server",
        }
    }
}

/// Asks for a certificate of `kind` for `node` with `client`'s credentials (bootstrap
/// ones, or the current client certificate) and waits up to `wait` for it; the pair
/// is checked with the clock `now` read once it has come.
pub fn request_certificate(
    client: &ApiClient,
    kind: &CertKind,
    node: &str,
    wait: Duration,
    now: &dyn Fn() -> i64,
) -> Result<Issued, BootstrapError> {
    let (pair, csr) = match kind {
        CertKind::Client => {
            let pair = kubelet_client_request(node).map_err(BootstrapError::Request)?;
            let csr = CertificateSigningRequest::kubelet_client(&pair.request_pem);
            (pair, csr)
        }
        CertKind::Serving { names, ips } => {
            let pair =
                kubelet_serving_request(node, names, ips).map_err(BootstrapError::Request)?;
            let csr = CertificateSigningRequest::kubelet_serving(&pair.request_pem);
            (pair, csr)
        }
    };
    let created: CertificateSigningRequest = client
        .create(&paths::csrs(), &csr)
        .map_err(BootstrapError::Create)?;
    let name = created.metadata.name.clone().unwrap_or_default();
    log::info!(
        "CertificateSigningRequest {name} sent for system:node:{node}; waiting up to {wait:?} \
         for approval"
    );
    let cert = wait_for_certificate(client, &name, created, wait)?;
    accept_issued(&cert, &pair.key_pem, now()).map_err(|why| BootstrapError::BadCertificate {
        name: name.clone(),
        why: why.to_string(),
    })?;
    Ok(Issued {
        cert_pem: cert,
        key_pem: pair.key_pem,
        request: name,
    })
}

/// Checks an issued certificate against the key it was requested for, at `now`
/// (the time of use); a notBefore ahead of `now` is logged, not refused.
pub fn accept_issued(cert_pem: &[u8], key_pem: &str, now: i64) -> Result<(), super::Unusable> {
    super::check_pair_at(cert_pem, key_pem.as_bytes(), now)?;
    if let Some(ahead) = super::clock_behind(cert_pem, now) {
        log::warn!(
            "the issued certificate is valid only from {ahead} s from now by this node's \
             clock: the clock is behind the cluster's; using it (the API server judges it by \
             its own clock)"
        );
    }
    Ok(())
}

/// Waits for request `name` (last seen as `seen`) to be signed, watching it.
fn wait_for_certificate(
    client: &ApiClient,
    name: &str,
    seen: CertificateSigningRequest,
    wait: Duration,
) -> Result<Vec<u8>, BootstrapError> {
    let deadline = Instant::now() + wait;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
    let mut latest = Some(seen);
    loop {
        let csr = match latest.take() {
            Some(csr) => csr,
            None => match client.get::<CertificateSigningRequest>(&paths::csr(name)) {
                Ok(csr) => csr,
                Err(err) => {
                    log::warn!("reading CertificateSigningRequest {name}: {err}");
                    sleep_until_next(&mut backoff, deadline, name, wait)?;
                    continue;
                }
            },
        };
        match csr.state() {
            CsrState::Issued(pem) => return Ok(pem),
            CsrState::Refused(why) => {
                return Err(BootstrapError::Refused {
                    name: name.to_owned(),
                    why,
                })
            }
            CsrState::Pending => {}
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(BootstrapError::Timeout {
                name: name.to_owned(),
                waited: wait,
            });
        }
        let opts = WatchOptions {
            field_selector: Some(format!("metadata.name={name}")),
            resource_version: csr.metadata.resource_version.clone(),
            timeout_seconds: Some(remaining.as_secs().clamp(1, 300)),
            ..WatchOptions::default()
        };
        match client.watch(&paths::csrs(), &opts) {
            Ok(stream) => {
                for event in stream {
                    let Ok(event) = event else { break };
                    match event.decode::<CertificateSigningRequest>() {
                        Ok(csr) if !matches!(csr.state(), CsrState::Pending) => {
                            latest = Some(csr);
                            break;
                        }
                        _ => {}
                    }
                }
                backoff.reset();
            }
            Err(err) => {
                log::warn!("watching CertificateSigningRequest {name}: {err}");
                sleep_until_next(&mut backoff, deadline, name, wait)?;
            }
        }
    }
}

fn sleep_until_next(
    backoff: &mut Backoff,
    deadline: Instant,
    name: &str,
    wait: Duration,
) -> Result<(), BootstrapError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(BootstrapError::Timeout {
            name: name.to_owned(),
            waited: wait,
        });
    }
    std::thread::sleep(backoff.next_delay().min(remaining));
    Ok(())
}

/// Writes (0600) the kubeconfig for the pair at `credentials`, with the bootstrap
/// kubeconfig's server and CA.
fn write_kubeconfig(
    path: &Path,
    bootstrap: &ClientConfig,
    credentials: &Path,
) -> Result<(), BootstrapError> {
    let text = kubeconfig::client_cert_kubeconfig(
        &bootstrap.server,
        bootstrap.ca_pem.as_deref(),
        credentials,
    )
    .map_err(|source| BootstrapError::RenderKubeconfig {
        path: path.to_owned(),
        source,
    })?;
    let io = |source| BootstrapError::WriteKubeconfig {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    crate::fsutil::write_atomic(path, text.as_bytes(), 0o600).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::super::test_pairs::pair;
    use super::*;

    fn bootstrap_file(dir: &Path) -> PathBuf {
        let path = dir.join("bootstrap.conf");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    token: abcdef.0123456789abcdef\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
        .unwrap();
        path
    }

    #[test]
    fn a_valid_stored_pair_gets_a_kubeconfig_without_a_request_and_an_expired_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubelet.conf");
        let cert_dir = dir.path().join("pki");
        let bootstrap_kubeconfig = bootstrap_file(dir.path());
        let b = Bootstrap {
            kubeconfig: &kubeconfig,
            bootstrap_kubeconfig: &bootstrap_kubeconfig,
            cert_dir: &cert_dir,
            node_name: "n1",
            wait: Duration::from_millis(200),
        };
        let (cert, key) = pair(1_000, 2_000);
        CertStore::new(&cert_dir, "kubelet-client")
            .store(cert.as_bytes(), key.as_bytes(), 1_000)
            .unwrap();
        assert_eq!(
            ensure_client_certificate(&b, &|| 1_500).unwrap(),
            Outcome::FromStore
        );
        let loaded = kubeconfig::load(&kubeconfig).unwrap();
        assert_eq!(loaded.server, "https://127.0.0.1:1");
        assert!(loaded.client_cert_pem.is_some() && loaded.client_key_pem.is_some());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // While it is valid the kubeconfig is kept as it is.
        assert_eq!(
            ensure_client_certificate(&b, &|| 1_999).unwrap(),
            Outcome::Kept
        );
        // Expired (the node was off): the bootstrap credentials ask for a new one;
        // nothing listens at the server here, so that fails, naming the request.
        let err = ensure_client_certificate(&b, &|| 2_000).unwrap_err();
        assert!(
            matches!(err, BootstrapError::Create(_)),
            "expected a failed request: {err}"
        );
    }

    #[test]
    fn a_missing_bootstrap_kubeconfig_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let b = Bootstrap {
            kubeconfig: &dir.path().join("kubelet.conf"),
            bootstrap_kubeconfig: &dir.path().join("missing.conf"),
            cert_dir: &dir.path().join("pki"),
            node_name: "n1",
            wait: Duration::from_millis(200),
        };
        let err = ensure_client_certificate(&b, &|| 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.conf"), "{err}");
    }

    /// The issued certificate is judged when it arrives, and only by its expiry. The
    /// signer back-dates notBefore by 5 minutes; the request was filed at `T`.
    #[test]
    fn an_issued_certificate_is_judged_at_the_time_of_use_and_tolerates_a_clock_behind() {
        const T: i64 = 1_000_000;
        const BACKDATE: i64 = 300;
        let issued_at = |approved: i64| pair(approved - BACKDATE, approved + 3_600);
        // Approved 6 minutes after filing: notBefore is T + 60, after the moment of
        // filing (where the check used to be made), before the moment of use.
        let (cert, key) = issued_at(T + 360);
        assert!(!usable_at_filing_time_was_enough(&cert, T));
        assert_eq!(accept_issued(cert.as_bytes(), &key, T + 361), Ok(()));
        // A node clock 10 minutes behind the signer's: notBefore is 5 minutes ahead
        // of the node's now; accepted.
        let (cert, key) = issued_at(T);
        assert_eq!(accept_issued(cert.as_bytes(), &key, T - 600), Ok(()));
        // An expired one, or one for another key, is refused.
        let (cert, key) = pair(T - 7_200, T - 3_600);
        assert!(matches!(
            accept_issued(cert.as_bytes(), &key, T),
            Err(super::super::Unusable::Expired { .. })
        ));
        let (cert, _) = issued_at(T);
        let (_, other_key) = issued_at(T);
        assert!(matches!(
            accept_issued(cert.as_bytes(), &other_key, T),
            Err(super::super::Unusable::Pair(_))
        ));
    }

    /// What the old check (notBefore <= now < notAfter at the time of filing) said.
    fn usable_at_filing_time_was_enough(cert: &str, filed: i64) -> bool {
        let (not_before, not_after) = super::super::validity(cert.as_bytes()).unwrap();
        not_before <= filed && filed < not_after
    }
}
