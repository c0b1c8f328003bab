//! Container lifecycle hooks (postStart, preStop): exec through CRI ExecSync, an HTTP
//! GET against the pod, or a sleep.
//!
//! Called from pod worker threads (and from the kill path's per-container threads).
//! A hook never runs longer than the timeout it is given; its failure is a message.
//! The HTTP GET and port resolution are the probes' (`probe::http`), so hooks and
//! probes build URLs, follow redirects and bound bodies the same way.

use std::time::Duration;

use crate::api::pod::{Container, LifecycleHandler, Pod};
use crate::cri::{pb, RuntimeClient};
use crate::probe::http::{self, HttpClient};

/// Runs hooks; a trait so the kill and start paths can be tested without a runtime.
pub trait HookRunner: Send + Sync {
    /// Runs `handler` for the container `container_id` of `pod`, within `timeout`.
    fn run(
        &self,
        pod: &Pod,
        pod_ip: &str,
        container: &Container,
        container_id: &str,
        handler: &LifecycleHandler,
        timeout: Duration,
    ) -> Result<(), String>;
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
) -> Result<(), String> {
    let target =
        http::target(handler, container, pod_ip).map_err(|err| format!("http hook: {err}"))?;
    let response = client
        .get(&target, timeout, HOOK_USER_AGENT)
        .map_err(|err| format!("http hook: {err}"))?;
    if (200..400).contains(&response.status) {
        Ok(())
    } else {
        Err(format!(
            "http hook {} returned status {}",
            response.url, response.status
        ))
    }
}

impl HookRunner for CriHookRunner {
    fn run(
        &self,
        _pod: &Pod,
        pod_ip: &str,
        container: &Container,
        container_id: &str,
        handler: &LifecycleHandler,
        timeout: Duration,
    ) -> Result<(), String> {
        if let Some(exec) = &handler.exec {
            let response = self
                .runtime
                .exec_sync(&pb::ExecSyncRequest {
                    container_id: container_id.to_owned(),
                    cmd: exec.command.clone(),
                    timeout: timeout.as_secs().max(1) as i64,
                    ..Default::default()
                })
                .map_err(|err| format!("exec hook {:?}: {err}", exec.command))?;
            if response.exit_code != 0 {
                let output = String::from_utf8_lossy(&response.stdout).trim().to_owned();
                return Err(format!(
                    "exec hook {:?} exited with {}: {output}",
                    exec.command, response.exit_code
                ));
            }
            return Ok(());
        }
        if let Some(http) = &handler.http_get {
            return http_hook(&self.http, pod_ip, container, http, timeout);
        }
        if let Some(sleep) = &handler.sleep {
            let wanted = Duration::from_secs(sleep.seconds.max(0) as u64);
            std::thread::sleep(wanted.min(timeout));
            return Ok(());
        }
        if handler.tcp_socket.is_some() {
            // Accepted by the API for compatibility only; upstream does not run it either.
            return Ok(());
        }
        Err("lifecycle handler has no action".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{ContainerPort, HttpGetAction, IntOrString};
    use std::io::{Read, Write};

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
        assert_eq!(
            http_hook(&client, "127.0.0.1", &container, &handler, t),
            Ok(())
        );
        let err = http_hook(&client, "127.0.0.1", &container, &handler, t).unwrap_err();
        assert!(err.contains("returned status 500"), "{err}");
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
        assert_eq!(got, Ok(()));
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /echo?msg=prestop "), "{request}");
    }
}
