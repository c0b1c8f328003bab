//! Operator commands on machines where crictl is not packaged: `litelet runtime-info`
//! (what the runtime says about itself) and `litelet ps` (the pods and containers
//! litelet runs). Formatting over a few CRI calls, so tests run them against the fake
//! runtime.

use std::fmt::Write as _;

use crate::cri::cgroup_driver::{self, RuntimeDriver};
use crate::cri::{pb, CriError, RuntimeClient};
use crate::runtime::inspect;
use crate::runtime::model::SandboxState;

/// Queries Version, Status and the cgroup driver, and renders them as aligned text.
pub fn report(client: &RuntimeClient) -> Result<String, CriError> {
    let version = client.check_version()?;
    let status = client.status(&pb::StatusRequest {
        verbose: false,
        ..Default::default()
    })?;
    let driver = cgroup_driver::detect(client);
    Ok(render(
        client.endpoint().to_string(),
        &version,
        &status,
        &driver,
    ))
}

/// Lists every pod litelet created in the runtime with its containers, newest first.
pub fn pods_report(client: &RuntimeClient) -> Result<String, CriError> {
    client.check_version()?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<36} {:<10} {:<9} {:<16} {:<8} {:>7} {:>5}",
        "POD", "UID", "SANDBOX", "CONTAINER", "STATE", "RESTART", "EXIT"
    );
    for pod in inspect::running_pods(client, true)? {
        let status = inspect::pod_status(client, &pod.uid, &pod.name, &pod.namespace)?;
        let sandbox = match status.sandboxes.first().map(|s| s.state) {
            Some(SandboxState::Ready) => "READY",
            Some(SandboxState::NotReady) => "NOTREADY",
            _ => "-",
        };
        let name = format!("{}/{}", pod.namespace, pod.name);
        let uid: String = pod.uid.chars().take(8).collect();
        if status.containers.is_empty() {
            let _ = writeln!(
                out,
                "{name:<36} {uid:<10} {sandbox:<9} {:<16} {:<8} {:>7} {:>5}",
                "-", "-", "-", "-"
            );
        }
        for c in &status.containers {
            let _ = writeln!(
                out,
                "{name:<36} {uid:<10} {sandbox:<9} {:<16} {:<8} {:>7} {:>5}",
                c.name,
                format!("{:?}", c.state),
                c.restart_count,
                c.exit_code
            );
        }
    }
    Ok(out)
}

fn render(
    endpoint: String,
    version: &pb::VersionResponse,
    status: &pb::StatusResponse,
    driver: &RuntimeDriver,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Endpoint:        {endpoint}");
    let _ = writeln!(out, "RuntimeName:     {}", version.runtime_name);
    let _ = writeln!(out, "RuntimeVersion:  {}", version.runtime_version);
    let _ = writeln!(out, "RuntimeApiVersion: {}", version.runtime_api_version);
    let _ = match driver {
        RuntimeDriver::Known { driver, source } => {
            writeln!(out, "CgroupDriver:    {driver} (from {source})")
        }
        RuntimeDriver::Unknown(why) => writeln!(out, "CgroupDriver:    unknown ({why})"),
    };
    let _ = writeln!(out, "Conditions:");
    let conditions = status
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if conditions.is_empty() {
        let _ = writeln!(out, "  (none reported)");
    }
    for condition in conditions {
        let _ = write!(out, "  {:<14} {}", condition.type_, condition.status);
        if !condition.reason.is_empty() {
            let _ = write!(out, "  reason={}", condition.reason);
        }
        if !condition.message.is_empty() {
            let _ = write!(out, "  message={:?}", condition.message);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_conditions_and_versions() {
        let version = pb::VersionResponse {
            runtime_name: "containerd".into(),
            runtime_version: "1.6.20".into(),
            runtime_api_version: "v1".into(),
            ..Default::default()
        };
        let mut status = pb::StatusResponse::default();
        let mut runtime_status = pb::RuntimeStatus::default();
        runtime_status.conditions.push(pb::RuntimeCondition {
            type_: "NetworkReady".into(),
            status: false,
            reason: "NetworkPluginNotReady".into(),
            message: "cni config uninitialized".into(),
            ..Default::default()
        });
        status.status = Some(runtime_status).into();
        let driver = RuntimeDriver::Known {
            driver: "systemd",
            source: "CRI RuntimeConfig",
        };
        let text = render("unix:///x.sock".into(), &version, &status, &driver);
        assert!(
            text.contains("CgroupDriver:    systemd (from CRI RuntimeConfig)"),
            "{text}"
        );
        assert!(text.contains("RuntimeName:     containerd"), "{text}");
        assert!(text.contains("RuntimeApiVersion: v1"), "{text}");
        assert!(
            text.contains("NetworkReady   false  reason=NetworkPluginNotReady"),
            "{text}"
        );
    }
}
