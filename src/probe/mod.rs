//! What probes and lifecycle hooks share, below both (upstream `pkg/probe`): the
//! outcome of one attempt, the output limit, port resolution and the HTTP GET.
//!
//! `prober` (probes) and `runtime::hooks` (postStart / preStop hooks) both call
//! [`http`]; keeping it here lets the runtime run hooks without importing the prober,
//! which sits above it.

pub mod http;

use crate::api::pod::{Container, IntOrString};

/// The most output an attempt keeps: exec output and HTTP bodies are cut here.
pub const MAX_OUTPUT: usize = 10 * 1024;

/// What one probe attempt found, before thresholds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Healthy; the output (exec stdout, HTTP body) for debug logs.
    Success(String),
    /// Counted as a success, with a warning event (an HTTP redirect to another host).
    Warning(String),
    /// Unhealthy, with the reason for the event.
    Failure(String),
    /// The probe could not be run (the runtime is unreachable, the container is
    /// already gone): reported in an event and otherwise ignored, as upstream ignores
    /// prober errors.
    Unknown(String),
}

/// A probe or hook spec that cannot be turned into something to run; nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("port {name:?} is not a named port of container {container:?}")]
    UnknownPortName { name: String, container: String },
    #[error("port {0} is out of range")]
    PortRange(i32),
    #[error("the pod has no IP yet")]
    NoPodIp,
    #[error("exec probe has an empty command")]
    EmptyCommand,
    #[error("probe has no handler (exec, httpGet, tcpSocket or grpc)")]
    NoHandler,
}

/// Resolves a port given as a number or as the name of one of the container's ports
/// (upstream tries the name first, then a number written as a string).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, SpecError> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            let named = container
                .ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port);
            match named.or_else(|| name.parse::<i32>().ok()) {
                Some(n) => n,
                None => {
                    return Err(SpecError::UnknownPortName {
                        name: name.clone(),
                        container: container.name.clone(),
                    })
                }
            }
        }
    };
    u16::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or(SpecError::PortRange(number))
}
