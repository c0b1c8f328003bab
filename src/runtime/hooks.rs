//! Container lifecycle hooks (postStart, preStop): exec through CRI ExecSync, an HTTP
//! GET against the pod, or a sleep.
//!
//! Called from pod worker threads (and from the kill path's per-container threads).
//! A hook never runs longer than the timeout it is given, and a sleep hook ends when
//! the pod worker's [`Cancel`] token fires; its failure is a [`HookError`].
//! The HTTP GET and port resolution are the probes' (`probe::http`), so hooks and
//! probes build URLs, follow redirects and bound bodies the same way.

use std::time::Duration;

use super::cancel::Cancel;
use crate::api::pod::{Container, LifecycleHandler, Pod};
use crate::cri::{pb, CriError, RuntimeClient};
use crate::probe::http::{self, HttpClient};

/// Why a lifecycle hook failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HookError {
    /// ExecSync itself failed (runtime down, container gone, deadline).
    #[error("exec hook {command:?}: {source}")]
    Exec {
        command: Vec<String>,
        source: CriError,
    },
    /// The command ran and exited non-zero.
    #[error("exec hook {command:?} exited with {code}: {output}")]
    ExecExit {
        command: Vec<String>,
        code: i32,
        output: String,
    },
    /// The HTTP GET could not be built from the handler.
    #[error("http hook: {0}")]
    HttpTarget(#[source] crate::probe::SpecError),
    /// The HTTP GET got no answer.
    #[error("http hook: {0}")]
    HttpGet(#[source] http::GetError),
    /// An HTTP failure known only by its text (a runner that does not send, as in tests).
    #[error("http hook: {0}")]
    Http(String),
    /// The server answered outside 2xx/3xx.
    #[error("http hook {url} returned status {status}")]
    HttpStatus { url: String, status: u16 },
    /// The handler names no action.
    #[error("lifecycle handler has no action")]
    NoAction,
    /// The pod worker's sync was cancelled while the hook ran.
    #[error("hook cancelled")]
    Cancelled,
}

/// One hook to run: the handler and the container it belongs to.
pub struct HookCall<'a> {
    pub pod: &'a Pod,
    /// Where an httpGet without a host connects.
    pub pod_ip: &'a str,
    pub container: &'a Container,
    pub container_id: &'a str,
    pub handler: &'a LifecycleHandler,
}

/// Runs hooks; a trait so the kill and start paths can be tested without a runtime.
pub trait HookRunner: Send + Sync {
    /// Runs `call`'s handler within `timeout`; a sleep ends early when `cancel` fires.
    fn run(&self, call: &HookCall<'_>, timeout: Duration, cancel: &Cancel)
        -> Result<(), HookError>;
}

/// The real runner: exec via CRI, HTTP via ureq, sleep on the calling thread.
pub struct CriHookRunner {
    runtime: RuntimeClient,
    http: HttpClient,
}

impl CriHookRunner {
    pub fn new(runtime: RuntimeClient) -> CriHookRunner {
        CriHookRunner {
            runtime,
            http: HttpClient::new(),
        }
    }
}

/// Resolves a port given as a number or as the name of one of the container's ports
/// (shared with probes).
pub use crate::probe::resolve_port;

/// The user agent of hook requests (upstream sends `kube-lifecycle/<major>.<minor>`).
pub const HOOK_USER_AGENT: &str = "kube-lifecycle/litelet";

/// Runs an HTTP hook with the probes' GET (same URL rules, same-host redirects, body
/// cut at 10 KiB); a 2xx or 3xx answer is success.
fn http_hook(
    client: &HttpClient,
    pod_ip: &str,
    container: &Container,
    handler: &crate::api::pod::HttpGetAction,
    timeout: Duration,
) -> Result<(), HookError> {
    let target = http::target(handler, container, pod_ip).map_err(HookError::HttpTarget)?;
    let response = client
        .get(&target, timeout, HOOK_USER_AGENT)
        .map_err(HookError::HttpGet)?;
    if (200..400).contains(&response.status) {
        Ok(())
    } else {
        Err(HookError::HttpStatus {
            url: response.url,
            status: response.status,
        })
    }
}

impl HookRunner for CriHookRunner {
    fn run(
        &self,
        call: &HookCall<'_>,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<(), HookError> {
        let handler = call.handler;
        if let Some(exec) = &handler.exec {
            let response = self
                .runtime
                .exec_sync(&pb::ExecSyncRequest {
                    container_id: call.container_id.to_owned(),
                    cmd: exec.command.clone(),
                    timeout: timeout.as_secs().max(1) as i64,
                    ..Default::default()
                })
                .map_err(|source| HookError::Exec {
                    command: exec.command.clone(),
                    source,
                })?;
            if response.exit_code != 0 {
                return Err(HookError::ExecExit {
                    command: exec.command.clone(),
                    code: response.exit_code,
                    output: String::from_utf8_lossy(&response.stdout).trim().to_owned(),
                });
            }
            return Ok(());
        }
        if let Some(http) = &handler.http_get {
            return http_hook(&self.http, call.pod_ip, call.container, http, timeout);
        }
        if let Some(sleep) = &handler.sleep {
            let wanted = Duration::from_secs(sleep.seconds.max(0) as u64);
            // Upstream's sleep action returns when its context is cancelled.
            return match cancel.sleep(wanted.min(timeout)) {
                true => Err(HookError::Cancelled),
                false => Ok(()),
            };
        }
        if handler.tcp_socket.is_some() {
            // Accepted by the API for compatibility only; upstream does not run it either.
            return Ok(());
        }
        Err(HookError::NoAction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{ContainerPort, HttpGetAction, IntOrString};
    use std::io::{Read, Write};

    /// A sleep hook is a wait that the pod worker's cancel token ends.
    #[test]
    fn a_sleep_hook_ends_when_its_sync_is_cancelled() {
        let endpoint = crate::cri::Endpoint::parse("unix:///nonexistent/cri.sock").unwrap();
        let (runtime, _) = crate::cri::connect(&endpoint, &Default::default());
        let runner = CriHookRunner::new(runtime);
        let handler = LifecycleHandler {
            sleep: Some(crate::api::pod::SleepAction { seconds: 60 }),
            ..Default::default()
        };
        let (pod, container) = (Pod::default(), Container::default());
        let call = HookCall {
            pod: &pod,
            pod_ip: "",
            container: &container,
            container_id: "c1",
            handler: &handler,
        };
        let cancel = Cancel::new();
        let canceller = cancel.clone();
        let started = std::time::Instant::now();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            canceller.cancel();
        });
        let got = runner.run(&call, Duration::from_secs(60), &cancel);
        waker.join().unwrap();
        assert!(matches!(got, Err(HookError::Cancelled)), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "woken, not waited out"
        );
        let short = LifecycleHandler {
            sleep: Some(crate::api::pod::SleepAction { seconds: 0 }),
            ..Default::default()
        };
        let call = HookCall {
            handler: &short,
            ..call
        };
        let got = runner.run(&call, Duration::from_secs(1), &Cancel::new());
        assert!(got.is_ok(), "{got:?}");
    }

    #[test]
    fn named_and_numbered_ports() {
        let container = Container {
            name: "app".into(),
            ports: vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &container), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &container),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("9090".into()), &container),
            Ok(9090)
        );
        assert!(resolve_port(&IntOrString::String("grpc".into()), &container).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &container).is_err());
    }

    #[test]
    fn http_hook_against_a_real_listener() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for status in ["200 OK", "500 Internal Server Error"] {
                let (mut stream, _) = listener.accept().unwrap();
                let mut buf = [0u8; 1024];
                let n = stream.read(&mut buf).unwrap();
                assert!(String::from_utf8_lossy(&buf[..n]).contains("GET /pre-stop"));
                let reply =
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                stream.write_all(reply.as_bytes()).unwrap();
            }
        });
        let handler = HttpGetAction {
            path: Some("pre-stop".into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        };
        let container = Container::default();
        let client = HttpClient::new();
        let t = Duration::from_secs(5);
        let got = http_hook(&client, "127.0.0.1", &container, &handler, t);
        assert!(got.is_ok(), "{got:?}");
        let err = http_hook(&client, "127.0.0.1", &container, &handler, t).unwrap_err();
        assert!(
            matches!(err, HookError::HttpStatus { status: 500, .. }),
            "{err}"
        );
        server.join().unwrap();
    }

    /// Upstream's e2e serves HTTPS hooks with a certificate for "localhost" and calls
    /// them by pod IP: the certificate is not checked.
    #[test]
    fn https_hook_skips_certificate_verification() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (cert_pem, key_pem) =
            crate::server::tls::self_signed(&["localhost".to_owned()], &[]).unwrap();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let config = crate::server::tls::server_config(chain, key, None).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let conn = rustls::ServerConnection::new(config).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 1024];
            let n = tls.read(&mut buf).unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            tls.flush().unwrap();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            request
        });
        let handler = HttpGetAction {
            path: Some("/echo?msg=prestop".into()),
            port: IntOrString::Int(i32::from(port)),
            scheme: Some(crate::api::pod::UriScheme::Https),
            ..Default::default()
        };
        let got = http_hook(
            &HttpClient::new(),
            "127.0.0.1",
            &Container::default(),
            &handler,
            Duration::from_secs(5),
        );
        assert!(got.is_ok(), "{got:?}");
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /echo?msg=prestop "), "{request}");
    }
}
