//! Container lifecycle hooks (postStart, preStop): exec through CRI ExecSync, an HTTP
//! GET against the pod, or a sleep.
//!
//! Called from pod worker threads (and from the kill path's per-container threads).
//! A hook never runs longer than the timeout it is given; its failure is a message.

use std::time::Duration;

use crate::api::pod::{Container, IntOrString, LifecycleHandler, Pod, UriScheme};
use crate::cri::{pb, RuntimeClient};

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
}

impl CriHookRunner {
    pub fn new(runtime: RuntimeClient) -> CriHookRunner {
        CriHookRunner { runtime }
    }
}

/// Resolves a port given as a number or as the name of one of the container's ports.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => container
                .ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| {
                    format!(
                        "port {name:?} is not a named port of container {:?}",
                        container.name
                    )
                })?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("port {number} is out of range"))
}

fn http_hook(
    pod_ip: &str,
    container: &Container,
    handler: &crate::api::pod::HttpGetAction,
    timeout: Duration,
) -> Result<(), String> {
    let port = resolve_port(&handler.port, container)?;
    let host = handler
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_owned());
    if host.is_empty() {
        return Err("http hook has no host and the pod has no IP".into());
    }
    let scheme = match handler.scheme {
        Some(UriScheme::Https) => "https",
        _ => "http",
    };
    let path = handler.path.clone().unwrap_or_default();
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let url = format!("{scheme}://{host}:{port}{path}");
    let tls = ureq::tls::TlsConfig::builder()
        .disable_verification(true)
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .into();
    let mut request = agent
        .get(&url)
        .header("User-Agent", concat!("litelet/", env!("CARGO_PKG_VERSION")));
    for header in &handler.http_headers {
        request = request.header(header.name.as_str(), header.value.as_str());
    }
    let response = request
        .call()
        .map_err(|err| format!("http hook {url}: {err}"))?;
    let code = response.status().as_u16();
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("http hook {url} returned status {code}"))
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
            return http_hook(pod_ip, container, http, timeout);
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
    use crate::api::pod::{ContainerPort, HttpGetAction};
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
        assert_eq!(
            http_hook("127.0.0.1", &container, &handler, Duration::from_secs(5)),
            Ok(())
        );
        let err = http_hook("127.0.0.1", &container, &handler, Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("returned status 500"), "{err}");
        server.join().unwrap();
    }
}
