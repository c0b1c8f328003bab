//! Pod fields litelet does not carry out, refused at admission rather than ignored:
//! a pod either gets what every field of its spec asks for, or fails at once with a
//! reason and a message naming the field. Pure; called by [`super::admit`] first.
//!
//! What is refused, and why:
//! - `hostUsers: false` (user namespaces) when the runtime reports no handler with user
//!   namespace support (CRI Status; containerd 1.6 reports none): upstream fails the
//!   sandbox with the same message; litelet refuses at admission. Where supported, the
//!   pod gets its own ID range (`userns.rs`); the sandbox's own handler is
//!   checked again at creation, so such a pod never runs in the host's user namespace.
//!   With `hostNetwork`, `hostPID` or `hostIPC` (which the API server refuses) too.
//! - `runtimeClassName` without an API server (standalone): nothing can resolve it.
//! - `supplementalGroupsPolicy: Strict`: upstream's `SupplementalGroupsPolicyNotSupported`
//!   when the runtime lacks it; litelet does not pass the policy to the runtime either.
//! - Dynamic resource allocation (`resourceClaims`, a container's `resources.claims`),
//!   `schedulingGroup` and `restartPolicyRules` (alpha, gated off upstream), raw block
//!   devices (`volumeDevices`), `seLinuxChangePolicy: MountOption` (no `-o context=`
//!   volume mounts), `windowsOptions`, and every volume source but emptyDir,
//!   hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim,
//!   ephemeral and csi (the in-tree network and cloud disks, gitRepo, image).
//! - Any field of PodSpec, Container, PodSecurityContext, SecurityContext or Volume that
//!   litelet does not know at all (an API newer than v1.36): it cannot be honoured.
//!
//! `tests/fakes/field_audit.rs` lists every v1.36 field of those types as honoured (naming
//! the test that proves it) or refused here (and checks the refusal).

use serde_json::{Map, Value};

use super::Rejection;
use crate::api::pod::{Container, Pod, PodSecurityContext, SecurityContext, Volume};
use crate::runtime::manager::RuntimeFeatures;

/// The reason of a refused field.
pub const NOT_SUPPORTED_REASON: &str = "PodFieldNotSupported";
/// The reason of a refused `hostUsers: false`.
pub const USERNS_REASON: &str = "UserNamespacesNotSupported";
/// Upstream's message when the runtime has no user namespace support (kubelet
/// userns manager, kubernetes#131623).
pub const USERNS_RUNTIME_MESSAGE: &str = crate::userns::NO_RUNTIME_SUPPORT;
/// Upstream's reason and message for a Strict supplemental groups policy the runtime
/// cannot enforce (lifecycle predicate admission).
pub const SUPPLEMENTAL_GROUPS_POLICY_REASON: &str = "SupplementalGroupsPolicyNotSupported";
pub const SUPPLEMENTAL_GROUPS_POLICY_MESSAGE: &str =
    "SupplementalGroupsPolicy=Strict is not supported in this node";

/// What the node can do beyond its resources, for this check.
#[derive(Clone, Debug, Default)]
pub struct NodeSupport {
    /// The runtime's handlers and features from its last Status answer.
    pub runtime: RuntimeFeatures,
    /// An API server is there to resolve `runtimeClassName`.
    pub runtime_classes: bool,
}

/// Fields of PodSpec litelet knows but keeps in `extra` (the scheduler's, or the API
/// server's own): set or not, the pod runs as upstream runs it.
const POD_SPEC_KNOWN: &[&str] = &[
    "schedulingGates",
    "topologySpreadConstraints",
    "serviceAccount",
];
/// PodSecurityContext fields kept in `extra` and carried out (`runtime/profiles.rs`,
/// the volume manager).
const POD_SECURITY_KNOWN: &[&str] = &["appArmorProfile", "fsGroupChangePolicy", "seLinuxOptions"];
/// SecurityContext fields kept in `extra` and carried out (`runtime/profiles.rs`).
const SECURITY_KNOWN: &[&str] = &["appArmorProfile", "seLinuxOptions"];
/// Volume sources litelet sets up that live in `extra`.
const VOLUME_KNOWN: &[&str] = &["csi", "ephemeral"];

/// Fields refused with the reason why, per object kind.
const POD_SPEC_REFUSED: &[(&str, &str)] = &[
    (
        "resourceClaims",
        "litelet has no dynamic resource allocation (DRA) support",
    ),
    (
        "schedulingGroup",
        "it is alpha and gated off upstream; litelet does not carry it out",
    ),
];
const CONTAINER_REFUSED: &[(&str, &str)] = &[(
    "restartPolicyRules",
    "container restart rules are alpha and gated off upstream; litelet does not carry them out",
)];
const POD_SECURITY_REFUSED: &[(&str, &str)] = &[("windowsOptions", "this is a linux node")];
const SECURITY_REFUSED: &[(&str, &str)] = &[("windowsOptions", "this is a linux node")];

/// A JSON value that says something: not null, not an empty list, map or string.
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

fn refuse(path: &str, why: &str) -> Rejection {
    Rejection {
        reason: NOT_SUPPORTED_REASON.to_owned(),
        message: format!("{path} is not supported by this node: {why}"),
    }
}

/// The first field of `extra` that is set and either refused or unknown.
fn check_extra(
    at: &str,
    extra: &Map<String, Value>,
    known: &[&str],
    refused: &[(&str, &str)],
) -> Result<(), Rejection> {
    for key in extra.iter().filter(|(_, v)| is_set(v)).map(|(k, _)| k) {
        if let Some((_, why)) = refused.iter().find(|(name, _)| name == key) {
            return Err(refuse(&format!("{at}.{key}"), why));
        }
        if !known.contains(&key.as_str()) {
            return Err(refuse(
                &format!("{at}.{key}"),
                "litelet does not know this field (an API newer than v1.36?)",
            ));
        }
    }
    Ok(())
}

fn check_pod_security(
    at: &str,
    sc: &PodSecurityContext,
    node: &NodeSupport,
) -> Result<(), Rejection> {
    if let Some(policy) = sc
        .extra
        .get("supplementalGroupsPolicy")
        .and_then(Value::as_str)
    {
        if policy == "Strict" {
            return Err(if node.runtime.supplemental_groups_policy {
                refuse(
                    &format!("{at}.supplementalGroupsPolicy"),
                    "litelet does not pass the Strict policy to the runtime yet",
                )
            } else {
                Rejection {
                    reason: SUPPLEMENTAL_GROUPS_POLICY_REASON.to_owned(),
                    message: SUPPLEMENTAL_GROUPS_POLICY_MESSAGE.to_owned(),
                }
            });
        }
    }
    // Recursive relabelling is the default and what a runtime does with a label;
    // MountOption asks the kubelet to mount volumes with `-o context=`, which it does
    // not do.
    if let Some(policy) = sc.extra.get("seLinuxChangePolicy").and_then(Value::as_str) {
        if policy == "MountOption" {
            return Err(refuse(
                &format!("{at}.seLinuxChangePolicy"),
                "litelet does not mount volumes with SELinux context options (MountOption)",
            ));
        }
    }
    let mut known = POD_SECURITY_KNOWN.to_vec();
    // Merge is the default: what the runtime does without the field.
    known.push("supplementalGroupsPolicy");
    known.push("seLinuxChangePolicy");
    check_extra(at, &sc.extra, &known, POD_SECURITY_REFUSED)
}

fn check_container(at: &str, c: &Container) -> Result<(), Rejection> {
    if !c.volume_devices.is_empty() {
        return Err(refuse(
            &format!("{at}.volumeDevices"),
            "litelet does not attach raw block devices",
        ));
    }
    if c.resources.as_ref().is_some_and(|r| !r.claims.is_empty()) {
        return Err(refuse(
            &format!("{at}.resources.claims"),
            "litelet has no dynamic resource allocation (DRA) support",
        ));
    }
    if let Some(sc) = &c.security_context {
        check_security(&format!("{at}.securityContext"), sc)?;
    }
    check_extra(at, &c.extra, &[], CONTAINER_REFUSED)
}

fn check_security(at: &str, sc: &SecurityContext) -> Result<(), Rejection> {
    check_extra(at, &sc.extra, SECURITY_KNOWN, SECURITY_REFUSED)
}

fn check_volume(at: &str, v: &Volume) -> Result<(), Rejection> {
    for key in v.extra.iter().filter(|(_, v)| is_set(v)).map(|(k, _)| k) {
        if !VOLUME_KNOWN.contains(&key.as_str()) {
            return Err(refuse(
                &format!("{at}.{key}"),
                "litelet does not set up this volume source",
            ));
        }
    }
    Ok(())
}

/// Refuses a pod that sets a field litelet would otherwise ignore.
pub fn check(pod: &Pod, node: &NodeSupport) -> Result<(), Rejection> {
    let spec = &pod.spec;
    if spec.host_users == Some(false) {
        let host = [
            ("hostNetwork", spec.host_network),
            ("hostPID", spec.host_pid),
            ("hostIPC", spec.host_ipc),
        ];
        if let Some((name, _)) = host.iter().find(|(_, on)| *on == Some(true)) {
            // The API server refuses this pair; a static pod could still ask for it.
            return Err(Rejection {
                reason: USERNS_REASON.to_owned(),
                message: format!(
                    "can't set `spec.hostUsers: false` together with `spec.{name}: true`"
                ),
            });
        }
        if !node.runtime.user_namespaces() {
            return Err(Rejection {
                reason: USERNS_REASON.to_owned(),
                message: USERNS_RUNTIME_MESSAGE.to_owned(),
            });
        }
    }
    if let Some(class) = spec.runtime_class_name.as_deref().filter(|c| !c.is_empty()) {
        if !node.runtime_classes {
            return Err(refuse(
                "spec.runtimeClassName",
                &format!("RuntimeClass {class:?} needs an API server to resolve it, and litelet runs standalone (no --kubeconfig)"),
            ));
        }
    }
    check_extra("spec", &spec.extra, POD_SPEC_KNOWN, POD_SPEC_REFUSED)?;
    if let Some(sc) = &spec.security_context {
        check_pod_security("spec.securityContext", sc, node)?;
    }
    for (i, c) in spec.init_containers.iter().enumerate() {
        check_container(&format!("spec.initContainers[{i}]"), c)?;
    }
    for (i, c) in spec.containers.iter().enumerate() {
        check_container(&format!("spec.containers[{i}]"), c)?;
    }
    for (i, e) in spec.ephemeral_containers.iter().enumerate() {
        check_container(&format!("spec.ephemeralContainers[{i}]"), &e.container)?;
    }
    for (i, v) in spec.volumes.iter().enumerate() {
        check_volume(&format!("spec.volumes[{i}]"), v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::manager::HandlerFeatures;

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn base() -> Value {
        serde_json::json!({"containers": [{"name": "app", "image": "busybox"}]})
    }

    fn with(mut spec: Value, key: &str, value: Value) -> Pod {
        spec[key] = value;
        pod(spec)
    }

    fn api_node() -> NodeSupport {
        NodeSupport {
            runtime_classes: true,
            ..Default::default()
        }
    }

    #[test]
    fn host_users_false_is_refused_with_upstreams_message_when_the_runtime_lacks_userns() {
        let p = with(base(), "hostUsers", Value::Bool(false));
        let r = check(&p, &api_node()).unwrap_err();
        assert_eq!(r.reason, USERNS_REASON);
        assert_eq!(r.message, USERNS_RUNTIME_MESSAGE);
        assert!(check(&with(base(), "hostUsers", Value::Bool(true)), &api_node()).is_ok());
    }

    #[test]
    fn host_users_false_is_admitted_when_the_runtime_supports_userns() {
        let node = NodeSupport {
            runtime: RuntimeFeatures {
                handlers: vec![HandlerFeatures {
                    name: String::new(),
                    user_namespaces: true,
                    ..Default::default()
                }],
                ..Default::default()
            },
            runtime_classes: true,
        };
        assert!(check(&with(base(), "hostUsers", Value::Bool(false)), &node).is_ok());
        let mut spec = base();
        spec["hostUsers"] = Value::Bool(false);
        let r = check(&with(spec, "hostPID", Value::Bool(true)), &node).unwrap_err();
        assert_eq!(r.reason, USERNS_REASON);
        assert!(r.message.contains("spec.hostPID"), "{}", r.message);
    }

    #[test]
    fn runtime_class_without_an_api_server_is_refused() {
        let p = with(base(), "runtimeClassName", Value::from("kata"));
        let r = check(&p, &NodeSupport::default()).unwrap_err();
        assert_eq!(r.reason, NOT_SUPPORTED_REASON);
        assert!(
            r.message.starts_with("spec.runtimeClassName"),
            "{}",
            r.message
        );
        assert!(check(&p, &api_node()).is_ok());
    }

    #[test]
    fn strict_supplemental_groups_policy_gets_upstreams_refusal() {
        let p = with(
            base(),
            "securityContext",
            serde_json::json!({"supplementalGroupsPolicy": "Strict"}),
        );
        let r = check(&p, &api_node()).unwrap_err();
        assert_eq!(r.reason, SUPPLEMENTAL_GROUPS_POLICY_REASON);
        assert_eq!(r.message, SUPPLEMENTAL_GROUPS_POLICY_MESSAGE);
        let merge = with(
            base(),
            "securityContext",
            serde_json::json!({"supplementalGroupsPolicy": "Merge"}),
        );
        assert!(check(&merge, &api_node()).is_ok());
    }

    #[test]
    fn an_unknown_field_is_refused_naming_it_and_empty_values_are_unset() {
        let p = with(base(), "futureField", serde_json::json!({"x": 1}));
        let r = check(&p, &api_node()).unwrap_err();
        assert!(r.message.starts_with("spec.futureField"), "{}", r.message);
        let empty = with(base(), "resourceClaims", serde_json::json!([]));
        assert!(check(&empty, &api_node()).is_ok());
        let nfs = with(
            base(),
            "volumes",
            serde_json::json!([{"name": "v", "nfs": {"server": "s", "path": "/"}}]),
        );
        let r = check(&nfs, &api_node()).unwrap_err();
        assert!(
            r.message.starts_with("spec.volumes[0].nfs"),
            "{}",
            r.message
        );
    }
}
