//! Turns a probe spec into a concrete action and runs it (upstream `prober.go`
//! `runProbe`): exec through CRI ExecSync, HTTP GET, TCP connect or gRPC health check.
//!
//! [`action`] is pure and runs on the `probe-timer` thread: it resolves ports (by
//! number or by the name of a container port), the host (the probe's own, else the pod
//! IP) and the exec command (`$(VAR)` from the container's literal env). A spec that
//! cannot be resolved is a failure right away, without taking an attempt thread.
//! [`Prober::run`] runs on `probe-N` attempt threads; every kind is bounded by the
//! probe's timeout.

use std::collections::HashMap;
use std::time::Duration;

use crate::api::pod::{Container, IntOrString, Probe};
use crate::cri::RuntimeClient;

use crate::probe::http::{self, HttpClient, HttpTarget};
use crate::probe::{resolve_port, SpecError};

use super::{exec, grpc, tcp, Attempt, PROBE_USER_AGENT};

/// One resolved probe attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Exec {
        container_id: String,
        command: Vec<String>,
    },
    Http(HttpTarget),
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        host: String,
        port: u16,
        service: String,
    },
}

fn host_or_pod_ip(host: Option<&str>, pod_ip: &str) -> Result<String, SpecError> {
    match host.filter(|h| !h.is_empty()) {
        Some(host) => Ok(host.to_owned()),
        None if pod_ip.is_empty() => Err(SpecError::NoPodIp),
        None => Ok(pod_ip.to_owned()),
    }
}

/// The action `probe` asks for against container `container_id` of a pod at `pod_ip`.
pub fn action(
    probe: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: &str,
) -> Result<Action, SpecError> {
    let handler = &probe.handler;
    if let Some(exec) = &handler.exec {
        if exec.command.is_empty() {
            return Err(SpecError::EmptyCommand);
        }
        return Ok(Action::Exec {
            container_id: container_id.to_owned(),
            command: expand_static(&exec.command, container),
        });
    }
    if let Some(get) = &handler.http_get {
        return http::target(get, container, pod_ip).map(Action::Http);
    }
    if let Some(tcp) = &handler.tcp_socket {
        return Ok(Action::Tcp {
            host: host_or_pod_ip(tcp.host.as_deref(), pod_ip)?,
            port: resolve_port(&tcp.port, container)?,
        });
    }
    if let Some(grpc) = &handler.grpc {
        return Ok(Action::Grpc {
            host: host_or_pod_ip(None, pod_ip)?,
            port: resolve_port(&IntOrString::Int(grpc.port), container)?,
            service: grpc.service.clone().unwrap_or_default(),
        });
    }
    Err(SpecError::NoHandler)
}

/// `$(VAR)` in an exec probe's command, from the container's literal env values only
/// (upstream `ExpandContainerCommandOnlyStatic`: no fieldRefs, no secrets).
fn expand_static(command: &[String], container: &Container) -> Vec<String> {
    let vars: HashMap<&str, &str> = container
        .env
        .iter()
        .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
        .collect();
    let lookup = |name: &str| vars.get(name).map(|v| (*v).to_owned());
    command
        .iter()
        .map(|arg| crate::runtime::env::expand(arg, &lookup))
        .collect()
}

/// Runs actions; shared by every attempt thread.
pub struct Prober {
    runtime: RuntimeClient,
    http: HttpClient,
    grpc: grpc::GrpcProber,
}

impl Prober {
    pub fn new(runtime: RuntimeClient) -> Prober {
        Prober {
            runtime,
            http: HttpClient::new(),
            grpc: grpc::GrpcProber::default(),
        }
    }

    /// Runs one attempt, which ends within about `timeout`.
    pub fn run(&self, action: &Action, timeout: Duration) -> Attempt {
        match action {
            Action::Exec {
                container_id,
                command,
            } => exec::probe(&self.runtime, container_id, command, timeout),
            Action::Http(target) => http::probe(&self.http, target, timeout, PROBE_USER_AGENT),
            Action::Tcp { host, port } => tcp::probe(host, *port, timeout),
            Action::Grpc {
                host,
                port,
                service,
            } => self.grpc.probe(host, *port, service, timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        ContainerPort, EnvVar, ExecAction, GrpcAction, HttpGetAction, ProbeHandler, TcpSocketAction,
    };

    fn container() -> Container {
        Container {
            name: "app".into(),
            ports: vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }],
            env: vec![EnvVar {
                name: "FILE".into(),
                value: Some("/tmp/healthy".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn probe(handler: ProbeHandler) -> Probe {
        Probe {
            handler,
            ..Default::default()
        }
    }

    #[test]
    fn ports_by_number_and_by_name() {
        let c = container();
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("9090".into()), &c),
            Ok(9090)
        );
        let err = resolve_port(&IntOrString::String("metrics".into()), &c).unwrap_err();
        assert_eq!(
            err.to_string(),
            "port \"metrics\" is not a named port of container \"app\""
        );
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &c).is_err());
    }

    #[test]
    fn actions_from_specs() {
        let c = container();
        let exec = probe(ProbeHandler {
            exec: Some(ExecAction {
                command: vec!["cat".into(), "$(FILE)".into(), "$(OTHER)".into()],
            }),
            ..Default::default()
        });
        assert_eq!(
            action(&exec, &c, "cid", "10.0.0.5"),
            Ok(Action::Exec {
                container_id: "cid".into(),
                command: vec!["cat".into(), "/tmp/healthy".into(), "$(OTHER)".into()],
            })
        );

        let tcp = probe(ProbeHandler {
            tcp_socket: Some(TcpSocketAction {
                port: IntOrString::String("http".into()),
                host: None,
            }),
            ..Default::default()
        });
        assert_eq!(
            action(&tcp, &c, "cid", "10.0.0.5"),
            Ok(Action::Tcp {
                host: "10.0.0.5".into(),
                port: 8080
            })
        );
        assert_eq!(
            action(&tcp, &c, "cid", "").map_err(|e| e.to_string()),
            Err("the pod has no IP yet".into())
        );

        let grpc = probe(ProbeHandler {
            grpc: Some(GrpcAction {
                port: 9090,
                service: Some("web".into()),
            }),
            ..Default::default()
        });
        assert_eq!(
            action(&grpc, &c, "cid", "10.0.0.5"),
            Ok(Action::Grpc {
                host: "10.0.0.5".into(),
                port: 9090,
                service: "web".into()
            })
        );

        let http_missing_port = probe(ProbeHandler {
            http_get: Some(HttpGetAction {
                port: IntOrString::String("metrics".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = action(&http_missing_port, &c, "cid", "10.0.0.5")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"metrics\" is not a named port"), "{err}");

        assert!(action(&probe(ProbeHandler::default()), &c, "cid", "10.0.0.5").is_err());
    }
}
