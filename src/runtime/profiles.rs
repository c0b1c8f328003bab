//! Seccomp and AppArmor profiles for the CRI security contexts (upstream
//! kuberuntime's getSeccompProfile and the apparmor helper). Pure: the host's AppArmor
//! support and the seccomp profile root are inputs.
//!
//! Seccomp: the container's `seccompProfile`, else the pod's, else Unconfined, or
//! RuntimeDefault with `seccompDefault: true` (upstream's getSeccompProfile; the
//! sandbox gets the same default). A Localhost profile is a file under
//! `<root-dir>/seccomp`.
//!
//! AppArmor: the container's `appArmorProfile`, else its beta annotation
//! `container.apparmor.security.beta.kubernetes.io/<name>`, else the pod's; none
//! leaves the choice to the runtime. A profile that must be enforced on a host without
//! AppArmor is an error: the container does not start, rather than run unconfined
//! while its spec says otherwise (upstream blocks such pods at admission).
//!
//! SELinux: the container's `seLinuxOptions` as a whole, else the pod's (upstream
//! DetermineEffectiveSecurityContext), handed to the runtime, which labels the
//! container when the host runs SELinux and ignores the label otherwise, as upstream.

use std::path::Path;

use protobuf::EnumOrUnknown;
use serde_json::{Map, Value};

use crate::api::pod::{Pod, SeccompProfile, SeccompProfileType};
use crate::cri::pb;

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn profile(kind: pb::security_profile::ProfileType, localhost_ref: String) -> pb::SecurityProfile {
    pb::SecurityProfile {
        profile_type: EnumOrUnknown::new(kind),
        localhost_ref,
        ..Default::default()
    }
}

/// A seccomp or AppArmor profile that cannot be applied; the container does not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("localhostProfile must be set if seccompProfile type is Localhost")]
    SeccompNoLocalhost,
    #[error("seccomp localhostProfile {0:?} must be a relative path without '..'")]
    SeccompPath(String),
    /// The type as the API spelled it.
    #[error("unknown seccomp profile type {0}")]
    SeccompType(String),
    #[error("localhostProfile must be set if appArmorProfile type is Localhost")]
    AppArmorNoLocalhost,
    #[error("unknown AppArmor profile type {0:?}")]
    AppArmorType(String),
    #[error("invalid AppArmor profile {0:?}")]
    AppArmorAnnotation(String),
    #[error("cannot enforce AppArmor profile {0:?}: AppArmor is not enabled on the host")]
    AppArmorDisabled(String),
}

/// The seccomp profile of a container (or of the sandbox, with `container` None);
/// `runtime_default` is `seccompDefault`: the profile when neither sets one.
pub fn seccomp(
    pod: Option<&SeccompProfile>,
    container: Option<&SeccompProfile>,
    seccomp_root: &Path,
    runtime_default: bool,
) -> Result<pb::SecurityProfile, ProfileError> {
    use pb::security_profile::ProfileType;
    let Some(chosen) = container.or(pod) else {
        let kind = match runtime_default {
            true => ProfileType::RuntimeDefault,
            false => ProfileType::Unconfined,
        };
        return Ok(profile(kind, String::new()));
    };
    match &chosen.type_ {
        SeccompProfileType::RuntimeDefault => {
            Ok(profile(ProfileType::RuntimeDefault, String::new()))
        }
        SeccompProfileType::Unconfined => Ok(profile(ProfileType::Unconfined, String::new())),
        SeccompProfileType::Localhost => {
            let name = chosen
                .localhost_profile
                .as_deref()
                .filter(|n| !n.is_empty())
                .ok_or(ProfileError::SeccompNoLocalhost)?;
            if Path::new(name).is_absolute() || name.split('/').any(|p| p == "..") {
                return Err(ProfileError::SeccompPath(name.to_owned()));
            }
            let path = seccomp_root.join(name);
            Ok(profile(ProfileType::Localhost, path.display().to_string()))
        }
        other => Err(ProfileError::SeccompType(format!("{other:?}"))),
    }
}

/// An AppArmor choice: the CRI profile and the deprecated string form older runtimes
/// read (`runtime/default`, `localhost/<name>`, `unconfined`).
#[derive(Clone, Debug, PartialEq)]
pub struct AppArmor {
    pub profile: pb::SecurityProfile,
    pub legacy: String,
}

/// `{"type": ..., "localhostProfile": ...}` of a security context's `appArmorProfile`.
fn from_field(
    extra: Option<&Map<String, Value>>,
) -> Option<Result<(String, String), ProfileError>> {
    let field = extra?.get("appArmorProfile")?;
    let kind = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = field
        .get("localhostProfile")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some(Ok((kind.to_owned(), name.to_owned())))
}

/// The beta annotation's value as a (type, localhost name) pair.
fn from_annotation(value: &str) -> Result<(String, String), ProfileError> {
    match value {
        "runtime/default" => Ok(("RuntimeDefault".into(), String::new())),
        "unconfined" => Ok(("Unconfined".into(), String::new())),
        _ => match value.strip_prefix("localhost/") {
            Some(name) => Ok(("Localhost".into(), name.to_owned())),
            None => Err(ProfileError::AppArmorAnnotation(value.to_owned())),
        },
    }
}

/// A `seLinuxOptions` object as CRI's SELinuxOption; None when unset or empty.
fn selinux_from(extra: Option<&Map<String, Value>>) -> Option<pb::SELinuxOption> {
    let options = extra?.get("seLinuxOptions")?.as_object()?;
    let part = |key: &str| {
        options
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let option = pb::SELinuxOption {
        user: part("user"),
        role: part("role"),
        type_: part("type"),
        level: part("level"),
        ..Default::default()
    };
    (option != pb::SELinuxOption::default()).then_some(option)
}

/// The SELinux label of a container (its own options, else the pod's), or of the
/// sandbox (`container_extra` None: the pod's).
pub fn selinux(
    pod: &Pod,
    container_extra: Option<&Map<String, Value>>,
) -> Option<pb::SELinuxOption> {
    let pod_extra = pod.spec.security_context.as_ref().map(|sc| &sc.extra);
    let container_set = container_extra.is_some_and(|e| e.contains_key("seLinuxOptions"));
    if container_set {
        selinux_from(container_extra)
    } else {
        selinux_from(pod_extra)
    }
}

/// The AppArmor profile of container `name` in `pod`; None leaves it to the runtime.
pub fn apparmor(
    pod: &Pod,
    name: &str,
    container_extra: Option<&Map<String, Value>>,
    host_enabled: bool,
) -> Result<Option<AppArmor>, ProfileError> {
    use pb::security_profile::ProfileType;
    let annotation = pod
        .metadata
        .annotations
        .get(&format!("{APPARMOR_ANNOTATION_PREFIX}{name}"))
        .map(|v| from_annotation(v));
    let pod_extra = pod.spec.security_context.as_ref().map(|sc| &sc.extra);
    let Some(chosen) = from_field(container_extra)
        .or(annotation)
        .or_else(|| from_field(pod_extra))
    else {
        return Ok(None);
    };
    let (kind, localhost) = chosen?;
    let (kind, legacy) = match kind.as_str() {
        "Unconfined" => (ProfileType::Unconfined, "unconfined".to_owned()),
        "RuntimeDefault" => (ProfileType::RuntimeDefault, "runtime/default".to_owned()),
        "Localhost" if !localhost.is_empty() => {
            (ProfileType::Localhost, format!("localhost/{localhost}"))
        }
        "Localhost" => return Err(ProfileError::AppArmorNoLocalhost),
        other => return Err(ProfileError::AppArmorType(other.to_owned())),
    };
    if kind == ProfileType::Unconfined {
        // Nothing to enforce, so nothing to refuse on a host without AppArmor.
        return Ok(host_enabled.then(|| AppArmor {
            profile: profile(kind, String::new()),
            legacy,
        }));
    }
    if !host_enabled {
        return Err(ProfileError::AppArmorDisabled(legacy));
    }
    let localhost_ref = if kind == ProfileType::Localhost {
        localhost
    } else {
        String::new()
    };
    Ok(Some(AppArmor {
        profile: profile(kind, localhost_ref),
        legacy,
    }))
}

/// Whether the kernel enforces AppArmor (read once at start-up).
pub fn apparmor_enabled_on_host() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|v| v.trim() == "Y")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::security_profile::ProfileType;
    use serde_json::json;

    fn seccomp_of(kind: SeccompProfileType, name: Option<&str>) -> SeccompProfile {
        SeccompProfile {
            type_: kind,
            localhost_profile: name.map(str::to_owned),
        }
    }

    fn kind(p: &pb::SecurityProfile) -> ProfileType {
        p.profile_type.enum_value_or_default()
    }

    #[test]
    fn seccomp_container_over_pod_over_unconfined() {
        let root = Path::new("/var/lib/litelet/seccomp");
        let pod = seccomp_of(SeccompProfileType::RuntimeDefault, None);
        let local = seccomp_of(SeccompProfileType::Localhost, Some("audit.json"));
        assert_eq!(
            kind(&seccomp(None, None, root, false).unwrap()),
            ProfileType::Unconfined
        );
        assert_eq!(
            kind(&seccomp(Some(&pod), None, root, false).unwrap()),
            ProfileType::RuntimeDefault
        );
        let p = seccomp(Some(&pod), Some(&local), root, false).unwrap();
        assert_eq!(kind(&p), ProfileType::Localhost);
        assert_eq!(p.localhost_ref, "/var/lib/litelet/seccomp/audit.json");
    }

    #[test]
    fn seccomp_default_fills_in_runtime_default_only_where_nothing_is_set() {
        let root = Path::new("/r");
        let unconfined = seccomp_of(SeccompProfileType::Unconfined, None);
        let local = seccomp_of(SeccompProfileType::Localhost, Some("a.json"));
        let cases = [
            ("nothing set", None, None, ProfileType::RuntimeDefault),
            (
                "pod Unconfined",
                Some(&unconfined),
                None,
                ProfileType::Unconfined,
            ),
            (
                "container Unconfined",
                None,
                Some(&unconfined),
                ProfileType::Unconfined,
            ),
            ("pod Localhost", Some(&local), None, ProfileType::Localhost),
        ];
        for (name, pod, container, want) in cases {
            assert_eq!(
                kind(&seccomp(pod, container, root, true).unwrap()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn seccomp_localhost_needs_a_safe_name() {
        let root = Path::new("/r");
        for bad in [None, Some(""), Some("/etc/x.json"), Some("../x.json")] {
            let p = seccomp_of(SeccompProfileType::Localhost, bad);
            assert!(seccomp(None, Some(&p), root, true).is_err(), "{bad:?}");
        }
    }

    fn pod_with(annotations: &[(&str, &str)], pod_field: Option<Value>) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        }))
        .unwrap();
        for (k, v) in annotations {
            pod.metadata
                .annotations
                .insert(k.to_string(), v.to_string());
        }
        if let Some(field) = pod_field {
            let mut sc = pod.spec.security_context.clone().unwrap_or_default();
            sc.extra.insert("appArmorProfile".into(), field);
            pod.spec.security_context = Some(sc);
        }
        pod
    }

    fn field(v: Value) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("appArmorProfile".into(), v);
        m
    }

    /// seLinuxOptions reach the sandbox (the pod's) and each container (its own as a
    /// whole, else the pod's); the field audit names this test.
    #[test]
    fn selinux_options_container_over_pod_reach_the_cri() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "spec": {
                "securityContext": {"seLinuxOptions": {"level": "s0:c1,c2", "type": "spc_t"}},
                "containers": [{"name": "app"}]
            }
        }))
        .unwrap();
        let pod_label = selinux(&p, None).expect("pod label");
        assert_eq!(
            (pod_label.level.as_str(), pod_label.type_.as_str()),
            ("s0:c1,c2", "spc_t")
        );
        let mut own = Map::new();
        own.insert(
            "seLinuxOptions".into(),
            serde_json::json!({"level": "s0:c3"}),
        );
        let container = selinux(&p, Some(&own)).expect("container label");
        assert_eq!(container.level, "s0:c3");
        assert_eq!(
            container.type_, "",
            "the container's options replace the pod's whole"
        );
        assert_eq!(selinux(&p, Some(&Map::new())), Some(pod_label));
        p.spec.security_context = None;
        assert_eq!(selinux(&p, None), None);
    }

    #[test]
    fn apparmor_container_field_then_annotation_then_pod() {
        let key = format!("{APPARMOR_ANNOTATION_PREFIX}app");
        let pod = pod_with(
            &[(&key, "localhost/from-annotation")],
            Some(json!({"type": "RuntimeDefault"})),
        );
        let container = field(json!({"type": "Localhost", "localhostProfile": "from-field"}));
        let got = apparmor(&pod, "app", Some(&container), true)
            .unwrap()
            .unwrap();
        assert_eq!(got.legacy, "localhost/from-field");
        assert_eq!(got.profile.localhost_ref, "from-field");
        let got = apparmor(&pod, "app", None, true).unwrap().unwrap();
        assert_eq!(got.legacy, "localhost/from-annotation");
        let got = apparmor(&pod, "other", None, true).unwrap().unwrap();
        assert_eq!(kind(&got.profile), ProfileType::RuntimeDefault);
        assert_eq!(
            apparmor(&pod_with(&[], None), "app", None, true).unwrap(),
            None
        );
    }

    #[test]
    fn apparmor_that_cannot_be_enforced_is_an_error_not_silence() {
        let pod = pod_with(&[], Some(json!({"type": "RuntimeDefault"})));
        let err = apparmor(&pod, "app", None, false).unwrap_err();
        assert!(err.to_string().contains("AppArmor is not enabled"), "{err}");
        // Unconfined asks for nothing: fine anywhere.
        let pod = pod_with(&[], Some(json!({"type": "Unconfined"})));
        assert_eq!(apparmor(&pod, "app", None, false).unwrap(), None);
        // Bad values are errors too.
        let key = format!("{APPARMOR_ANNOTATION_PREFIX}app");
        assert!(apparmor(&pod_with(&[(&key, "bogus")], None), "app", None, true).is_err());
        let pod = pod_with(&[], Some(json!({"type": "Localhost"})));
        assert!(apparmor(&pod, "app", None, true).is_err());
    }
}
