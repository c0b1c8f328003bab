//! The checks a static pod must pass before it is run: the API server's `ValidatePod`
//! for what a kubelet runs, so that no static pod runs that the API server would
//! refuse (its mirror pod would be refused with a 422, leaving a pod with no API
//! object): names, labels and annotations (`meta`), resources (`resources`:
//! non-negative, requests at most limits), containers (unique DNS-label names, image,
//! enum values, ports, volume mounts and devices, probes, env names), volumes and
//! the pod-level fields (restart policy, DNS policy, grace and deadline).
//!
//! Runs after the defaults are applied, like upstream (`tryDecodeSinglePod`), so an
//! unset field that has a default is fine. Returns the first problem as
//! `(field path, reason)`, e.g. `("spec.containers[1].image", "required")`.
//!
//! Pure; called by the `static-pods` thread while parsing.

mod meta;
mod resources;
use std::collections::HashSet;

use crate::api::pod::{
    Container, ContainerPort, DnsPolicy, ImagePullPolicy, Pod, Probe, Protocol, RestartPolicy,
    TerminationMessagePolicy,
};

/// A field path and what is wrong with it.
pub(crate) type Invalid = (String, String);

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Invalid {
    (field.into(), reason.into())
}

/// RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both ends.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 bytes.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

const DNS_LABEL_HINT: &str = "lowercase letters, digits and '-', starting and ending \
                              with a letter or digit, at most 63 characters";

/// Checks a defaulted static pod.
pub(super) fn validate_pod(pod: &Pod) -> Result<(), Invalid> {
    let name = pod.name();
    if !is_dns_subdomain(name) {
        return Err(invalid(
            "metadata.name",
            format!("{name:?} (with the node name appended) is not a valid DNS subdomain"),
        ));
    }
    let ns = pod.namespace();
    if !is_dns_label(ns) {
        return Err(invalid(
            "metadata.namespace",
            format!("{ns:?}: must be {DNS_LABEL_HINT}"),
        ));
    }
    meta::validate_labels("metadata.labels", &pod.metadata.labels)?;
    meta::validate_annotations("metadata.annotations", &pod.metadata.annotations)?;
    let spec = &pod.spec;
    if spec.containers.is_empty() {
        return Err(invalid(
            "spec.containers",
            "at least one container is required",
        ));
    }
    check_enum(
        "spec.restartPolicy",
        spec.restart_policy.as_ref(),
        |p| matches!(p, RestartPolicy::Other(_)),
        "Always, OnFailure or Never",
    )?;
    check_enum(
        "spec.dnsPolicy",
        spec.dns_policy.as_ref(),
        |p| matches!(p, DnsPolicy::Other(_)),
        "ClusterFirst, ClusterFirstWithHostNet, Default or None",
    )?;
    if spec.termination_grace_period_seconds.is_some_and(|g| g < 0) {
        return Err(invalid(
            "spec.terminationGracePeriodSeconds",
            "must not be negative",
        ));
    }
    if let Some(d) = spec.active_deadline_seconds.filter(|d| *d <= 0) {
        return Err(invalid(
            "spec.activeDeadlineSeconds",
            format!("{d}: must be greater than 0"),
        ));
    }
    if let Some(r) = &spec.resources {
        resources::validate_resources("spec.resources", r)?;
    }

    let mut volumes = HashSet::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        if !is_dns_label(&v.name) {
            return Err(invalid(
                format!("spec.volumes[{i}].name"),
                format!("{:?}: must be {DNS_LABEL_HINT}", v.name),
            ));
        }
        if !volumes.insert(v.name.as_str()) {
            return Err(invalid(
                format!("spec.volumes[{i}].name"),
                format!("duplicate volume {:?}", v.name),
            ));
        }
    }

    let mut names = HashSet::new();
    let mut host_ports = HashSet::new();
    let all = [
        ("spec.initContainers", &spec.init_containers),
        ("spec.containers", &spec.containers),
    ];
    for (list, containers) in all {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{list}[{i}]");
            validate_container(&at, c, &volumes)?;
            check_host_ports(&at, c, &mut host_ports)?;
            if !names.insert(c.name.as_str()) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("duplicate container name {:?}", c.name),
                ));
            }
        }
    }
    for (i, e) in spec.ephemeral_containers.iter().enumerate() {
        let at = format!("spec.ephemeralContainers[{i}]");
        validate_container(&at, &e.container, &volumes)?;
        if !names.insert(e.container.name.as_str()) {
            return Err(invalid(
                format!("{at}.name"),
                format!("duplicate container name {:?}", e.container.name),
            ));
        }
    }
    Ok(())
}

fn validate_container(at: &str, c: &Container, volumes: &HashSet<&str>) -> Result<(), Invalid> {
    if c.name.is_empty() {
        return Err(invalid(format!("{at}.name"), "required"));
    }
    if !is_dns_label(&c.name) {
        return Err(invalid(
            format!("{at}.name"),
            format!("{:?}: must be {DNS_LABEL_HINT}", c.name),
        ));
    }
    if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        return Err(invalid(format!("{at}.image"), "required"));
    }
    check_enum(
        &format!("{at}.imagePullPolicy"),
        c.image_pull_policy.as_ref(),
        |p| matches!(p, ImagePullPolicy::Other(_)),
        "Always, IfNotPresent or Never",
    )?;
    check_enum(
        &format!("{at}.terminationMessagePolicy"),
        c.termination_message_policy.as_ref(),
        |p| matches!(p, TerminationMessagePolicy::Other(_)),
        "File or FallbackToLogsOnError",
    )?;
    check_enum(
        &format!("{at}.restartPolicy"),
        c.restart_policy.as_ref(),
        |p| matches!(p, RestartPolicy::Other(_)),
        "Always, OnFailure or Never",
    )?;
    if let Some(r) = &c.resources {
        resources::validate_resources(&format!("{at}.resources"), r)?;
    }
    let mut port_names = HashSet::new();
    for (j, p) in c.ports.iter().enumerate() {
        let field = format!("{at}.ports[{j}]");
        validate_port(&field, p)?;
        if let Some(name) = &p.name {
            if !port_names.insert(name.as_str()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("duplicate port name {name:?}"),
                ));
            }
        }
    }
    for (j, e) in c.env.iter().enumerate() {
        // Upstream's relaxed rule: printable ASCII, no '='.
        let ok = !e.name.is_empty()
            && e.name
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'=');
        if !ok {
            return Err(invalid(
                format!("{at}.env[{j}].name"),
                format!(
                    "{:?}: must be printable ASCII characters other than '='",
                    e.name
                ),
            ));
        }
    }
    let mut paths = HashSet::new();
    for (j, m) in c.volume_mounts.iter().enumerate() {
        if !volumes.contains(m.name.as_str()) {
            return Err(invalid(
                format!("{at}.volumeMounts[{j}].name"),
                format!("no volume named {:?} in spec.volumes", m.name),
            ));
        }
        if m.mount_path.is_empty() {
            return Err(invalid(
                format!("{at}.volumeMounts[{j}].mountPath"),
                "required",
            ));
        }
        if !paths.insert(m.mount_path.as_str()) {
            return Err(invalid(
                format!("{at}.volumeMounts[{j}].mountPath"),
                format!("{:?}: must be unique", m.mount_path),
            ));
        }
    }
    for (j, d) in c.volume_devices.iter().enumerate() {
        if !volumes.contains(d.name.as_str()) {
            return Err(invalid(
                format!("{at}.volumeDevices[{j}].name"),
                format!("no volume named {:?} in spec.volumes", d.name),
            ));
        }
    }
    let probes = [
        ("livenessProbe", &c.liveness_probe, true),
        ("readinessProbe", &c.readiness_probe, false),
        ("startupProbe", &c.startup_probe, true),
    ];
    for (name, probe, success_once) in probes {
        if let Some(p) = probe {
            validate_probe(&format!("{at}.{name}"), p, success_once)?;
        }
    }
    Ok(())
}

/// Numeric probe fields: never negative, and a liveness or startup probe succeeds
/// after exactly one success.
fn validate_probe(at: &str, p: &Probe, success_once: bool) -> Result<(), Invalid> {
    let fields = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (name, value) in fields {
        if let Some(v) = value.filter(|v| *v < 0) {
            return Err(invalid(
                format!("{at}.{name}"),
                format!("{v}: must be greater than or equal to 0"),
            ));
        }
    }
    if let Some(g) = p.termination_grace_period_seconds.filter(|g| *g <= 0) {
        return Err(invalid(
            format!("{at}.terminationGracePeriodSeconds"),
            format!("{g}: must be greater than 0"),
        ));
    }
    if success_once {
        if let Some(t) = p.success_threshold.filter(|t| *t > 1) {
            return Err(invalid(
                format!("{at}.successThreshold"),
                format!("{t}: must be 1"),
            ));
        }
    }
    Ok(())
}

/// Two containers of a pod cannot claim the same host port (per protocol and host IP).
fn check_host_ports<'a>(
    at: &str,
    c: &'a Container,
    seen: &mut HashSet<(i32, String, &'a str)>,
) -> Result<(), Invalid> {
    for (j, p) in c.ports.iter().enumerate() {
        let Some(host) = p.host_port.filter(|h| *h > 0) else {
            continue;
        };
        let protocol = p
            .protocol
            .as_ref()
            .map_or("TCP".to_owned(), |p| p.to_string());
        let ip = p.host_ip.as_deref().unwrap_or("");
        if !seen.insert((host, protocol.clone(), ip)) {
            return Err(invalid(
                format!("{at}.ports[{j}].hostPort"),
                format!("duplicate host port {host}/{protocol}"),
            ));
        }
    }
    Ok(())
}

/// IANA service name: at most 15 lowercase alphanumerics and '-', at least one
/// letter, no '-' at either end or twice in a row (upstream `IsValidPortName`).
fn is_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

fn validate_port(at: &str, p: &ContainerPort) -> Result<(), Invalid> {
    if let Some(name) = p.name.as_deref().filter(|n| !is_port_name(n)) {
        return Err(invalid(
            format!("{at}.name"),
            format!(
                "{name:?}: must be at most 15 lowercase letters, digits and '-', with \
                 at least one letter"
            ),
        ));
    }
    if !(1..=65535).contains(&p.container_port) {
        return Err(invalid(
            format!("{at}.containerPort"),
            format!("{} is not between 1 and 65535", p.container_port),
        ));
    }
    if let Some(h) = p.host_port {
        if !(0..=65535).contains(&h) {
            return Err(invalid(
                format!("{at}.hostPort"),
                format!("{h} is not between 0 and 65535"),
            ));
        }
    }
    check_enum(
        &format!("{at}.protocol"),
        p.protocol.as_ref(),
        |p| matches!(p, Protocol::Other(_)),
        "TCP, UDP or SCTP",
    )
}

/// Rejects a value of a string enum this version does not know.
fn check_enum<T: std::fmt::Display>(
    field: &str,
    value: Option<&T>,
    unknown: impl Fn(&T) -> bool,
    allowed: &str,
) -> Result<(), Invalid> {
    match value {
        Some(v) if unknown(v) => Err(invalid(
            field,
            format!("unsupported value {:?}: must be {allowed}", v.to_string()),
        )),
        _ => Ok(()),
    }
}
