//! The checks a static pod must pass before it is run: the part of the API server's
//! `ValidatePod` that protects the kubelet from a manifest no API server would have
//! accepted (names, containers, images, ports, enum values, volume references).
//!
//! Runs after the defaults are applied, like upstream (`tryDecodeSinglePod`), so an
//! unset field that has a default is fine. Returns the first problem as
//! `(field path, reason)`, e.g. `("spec.containers[1].image", "required")`.
//!
//! Pure; called by the `static-pods` thread while parsing.

use std::collections::HashSet;

use crate::api::pod::{
    Container, ContainerPort, DnsPolicy, ImagePullPolicy, Pod, Protocol, RestartPolicy,
    TerminationMessagePolicy,
};

/// A field path and what is wrong with it.
pub(super) type Invalid = (String, String);

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
    let all = [
        ("spec.initContainers", &spec.init_containers),
        ("spec.containers", &spec.containers),
    ];
    for (list, containers) in all {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{list}[{i}]");
            validate_container(&at, c, &volumes)?;
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
    for (j, p) in c.ports.iter().enumerate() {
        validate_port(&format!("{at}.ports[{j}]"), p)?;
    }
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
    }
    Ok(())
}

fn validate_port(at: &str, p: &ContainerPort) -> Result<(), Invalid> {
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
