//! The labels and annotations litelet puts on sandboxes and containers, and the parsers
//! that read them back (upstream kuberuntime `labels.go`).
//!
//! Labels identify (pod name, namespace and UID, container name: the runtime can filter
//! on them); annotations carry what the kill path needs when the pod object is gone
//! (grace periods, preStop handler, termination message settings, ports) and what the
//! sync decisions compare (spec hashes, restart count). Key names are upstream's, plus
//! `io.kubernetes.container.hashWithoutResources`, which litelet always writes.
//!
//! Pure. Builders are called by the sync path when it creates sandboxes and containers;
//! parsers by `runtime::inspect` on every relist and by the kill path. Parsers never
//! panic: [`ContainerAnnotations::parse`] is lenient (a malformed value reads as unset,
//! as upstream), the `try_`/`from_` forms return a [`LabelError`] naming the key.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::api::pod::{
    Container, ContainerPort, Lifecycle, LifecycleHandler, Pod, TerminationMessagePolicy,
};
use crate::runtime::hash::ContainerHashes;

// Named where the relist's lean listing reads them.
pub use crate::cri::{
    POD_NAMESPACE_LABEL as POD_NAMESPACE, POD_NAME_LABEL as POD_NAME, POD_UID_LABEL as POD_UID,
};
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_HASH_WITHOUT_RESOURCES: &str = "io.kubernetes.container.hashWithoutResources";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const CONTAINER_PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
pub const CONTAINER_TYPE: &str = "io.kubernetes.container.type";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";

/// Longest excerpt of a bad value kept in an error (preStop JSON can be long).
const MAX_VALUE_IN_ERROR: usize = 80;

/// A label or annotation that is missing or cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label {key} is missing")]
    Missing { key: &'static str },
    #[error("annotation {key} has malformed value {value:?}: {reason}")]
    Malformed {
        key: &'static str,
        value: String,
        reason: String,
    },
}

impl LabelError {
    fn malformed(key: &'static str, value: &str, reason: impl ToString) -> Self {
        let mut value = value.to_owned();
        if value.len() > MAX_VALUE_IN_ERROR {
            let mut cut = MAX_VALUE_IN_ERROR;
            while !value.is_char_boundary(cut) {
                cut -= 1;
            }
            value.truncate(cut);
            value.push('…');
        }
        Self::Malformed {
            key,
            value,
            reason: reason.to_string(),
        }
    }
}

/// Read access to a string map, so parsers take CRI's `HashMap`s and our `BTreeMap`s.
pub trait StringMap {
    fn lookup(&self, key: &str) -> Option<&str>;
}

impl<S: BuildHasher> StringMap for HashMap<String, String, S> {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl StringMap for BTreeMap<String, String> {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Which list of the pod spec a container comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerType {
    Init,
    Regular,
    Ephemeral,
}

impl ContainerType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Init => "init",
            Self::Regular => "container",
            Self::Ephemeral => "ephemeral",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        match value {
            "init" => Some(Self::Init),
            "container" => Some(Self::Regular),
            "ephemeral" => Some(Self::Ephemeral),
            _ => None,
        }
    }

    /// The list of `pod` that holds a container named `name`.
    pub fn of(pod: &Pod, name: &str) -> Option<Self> {
        let spec = &pod.spec;
        if spec.init_containers.iter().any(|c| c.name == name) {
            Some(Self::Init)
        } else if spec.containers.iter().any(|c| c.name == name) {
            Some(Self::Regular)
        } else if spec
            .ephemeral_containers
            .iter()
            .any(|c| c.container.name == name)
        {
            Some(Self::Ephemeral)
        } else {
            None
        }
    }
}

fn pod_identity(pod: &Pod) -> BTreeMap<String, String> {
    BTreeMap::from([
        (POD_NAME.to_owned(), pod.name().to_owned()),
        (POD_NAMESPACE.to_owned(), pod.namespace().to_owned()),
        (POD_UID.to_owned(), pod.uid().to_owned()),
    ])
}

/// Sandbox labels: the pod's own labels plus its identity (ours win on a clash).
pub fn sandbox_labels(pod: &Pod) -> BTreeMap<String, String> {
    let mut labels = pod.metadata.labels.clone();
    labels.extend(pod_identity(pod));
    labels
}

/// Sandbox annotations: the pod's annotations as they are.
pub fn sandbox_annotations(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.annotations.clone()
}

/// Container labels: the pod's identity and the container name.
pub fn container_labels(pod: &Pod, container_name: &str) -> BTreeMap<String, String> {
    let mut labels = pod_identity(pod);
    labels.insert(CONTAINER_NAME.to_owned(), container_name.to_owned());
    labels
}

/// Container annotations: spec hashes (lower-case hex), restart count, termination
/// message settings, grace periods, preStop handler and ports (JSON), container type.
pub fn container_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: i32,
    hashes: ContainerHashes,
) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        a.insert(k.to_owned(), v);
    };
    put(CONTAINER_HASH, format!("{:x}", hashes.hash));
    put(
        CONTAINER_HASH_WITHOUT_RESOURCES,
        format!("{:x}", hashes.hash_without_resources),
    );
    put(CONTAINER_RESTART_COUNT, restart_count.to_string());
    put(
        CONTAINER_TERMINATION_MESSAGE_PATH,
        container
            .termination_message_path
            .clone()
            .unwrap_or_default(),
    );
    put(
        CONTAINER_TERMINATION_MESSAGE_POLICY,
        container
            .termination_message_policy
            .as_ref()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
    );
    if let Some(secs) = pod.metadata.deletion_grace_period_seconds {
        put(POD_DELETION_GRACE_PERIOD, secs.to_string());
    }
    if let Some(secs) = pod.spec.termination_grace_period_seconds {
        put(POD_TERMINATION_GRACE_PERIOD, secs.to_string());
    }
    let pre_stop = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref());
    // Serialising api types cannot fail (string keys only); if it did, the annotation
    // is left out, as upstream does.
    if let Some(json) = pre_stop.and_then(|h| serde_json::to_string(h).ok()) {
        put(CONTAINER_PRE_STOP_HANDLER, json);
    }
    if !container.ports.is_empty() {
        if let Ok(json) = serde_json::to_string(&container.ports) {
            put(CONTAINER_PORTS, json);
        }
    }
    if let Some(kind) = ContainerType::of(pod, &container.name) {
        put(CONTAINER_TYPE, kind.as_str().to_owned());
    }
    a
}

/// What a sandbox's labels say about its pod.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SandboxInfo {
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    /// The pod's own labels (ours removed).
    pub pod_labels: BTreeMap<String, String>,
}

impl SandboxInfo {
    /// Reads a sandbox's labels; the pod UID, name and namespace must be present.
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, LabelError> {
        let mut info = SandboxInfo::default();
        let (mut name, mut namespace, mut uid) = (None, None, None);
        for (k, v) in labels {
            match k.as_str() {
                POD_NAME => name = Some(v.clone()),
                POD_NAMESPACE => namespace = Some(v.clone()),
                POD_UID => uid = Some(v.clone()),
                _ => {
                    info.pod_labels.insert(k.clone(), v.clone());
                }
            }
        }
        info.pod_name = name.ok_or(LabelError::Missing { key: POD_NAME })?;
        info.pod_namespace = namespace.ok_or(LabelError::Missing { key: POD_NAMESPACE })?;
        info.pod_uid = uid.ok_or(LabelError::Missing { key: POD_UID })?;
        Ok(info)
    }
}

/// What a container's annotations say. Absent annotations read as zero / unset (older
/// or foreign containers lack some).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ContainerAnnotations {
    pub hash: u64,
    pub hash_without_resources: u64,
    pub restart_count: i32,
    pub pod_deletion_grace_period: Option<i64>,
    pub pod_termination_grace_period: Option<i64>,
    pub termination_message_path: Option<String>,
    pub termination_message_policy: Option<TerminationMessagePolicy>,
    pub pre_stop: Option<LifecycleHandler>,
    pub ports: Vec<ContainerPort>,
    pub container_type: Option<ContainerType>,
}

impl ContainerAnnotations {
    /// Lenient read for status building: a malformed value reads as if absent.
    pub fn parse(annotations: &impl StringMap) -> Self {
        Self::read(annotations).0
    }

    /// Strict read: the first malformed annotation is an error.
    pub fn try_parse(annotations: &impl StringMap) -> Result<Self, LabelError> {
        match Self::read(annotations) {
            (parsed, None) => Ok(parsed),
            (_, Some(err)) => Err(err),
        }
    }

    /// Reads every field on its own; returns the value and the first problem seen.
    fn read(m: &impl StringMap) -> (Self, Option<LabelError>) {
        let mut err = None;
        let hex = |v: &str| u64::from_str_radix(v, 16);
        let hash = keep(field(m, CONTAINER_HASH, hex), &mut err);
        let hash_wr = keep(field(m, CONTAINER_HASH_WITHOUT_RESOURCES, hex), &mut err);
        let restart_count = keep(
            field(m, CONTAINER_RESTART_COUNT, parse_restart_count),
            &mut err,
        );
        let deletion = keep(
            field(m, POD_DELETION_GRACE_PERIOD, str::parse::<i64>),
            &mut err,
        );
        let termination = keep(
            field(m, POD_TERMINATION_GRACE_PERIOD, str::parse::<i64>),
            &mut err,
        );
        let pre_stop = keep(
            field(m, CONTAINER_PRE_STOP_HANDLER, |v: &str| {
                serde_json::from_str(v)
            }),
            &mut err,
        );
        let ports = keep(
            field(m, CONTAINER_PORTS, |v: &str| serde_json::from_str(v)),
            &mut err,
        );
        let container_type = keep(
            field(m, CONTAINER_TYPE, |v| {
                ContainerType::parse(v).ok_or("unknown container type")
            }),
            &mut err,
        );
        let non_empty = |key| m.lookup(key).filter(|v| !v.is_empty());
        let parsed = Self {
            hash: hash.unwrap_or(0),
            hash_without_resources: hash_wr.unwrap_or(0),
            restart_count: restart_count.unwrap_or(0),
            pod_deletion_grace_period: deletion,
            pod_termination_grace_period: termination,
            termination_message_path: non_empty(CONTAINER_TERMINATION_MESSAGE_PATH)
                .map(str::to_owned),
            termination_message_policy: non_empty(CONTAINER_TERMINATION_MESSAGE_POLICY)
                .map(TerminationMessagePolicy::from),
            pre_stop,
            ports: ports.unwrap_or_default(),
            container_type,
        };
        (parsed, err)
    }
}

/// A restart count annotation that is not a count.
#[derive(Debug, thiserror::Error)]
enum RestartCountError {
    #[error("negative restart count")]
    Negative,
    #[error(transparent)]
    NotANumber(#[from] std::num::ParseIntError),
}

fn parse_restart_count(v: &str) -> Result<i32, RestartCountError> {
    match v.parse::<i32>()? {
        n if n >= 0 => Ok(n),
        _ => Err(RestartCountError::Negative),
    }
}

/// The value of a field read, remembering the first error in `first`.
fn keep<T>(read: Result<Option<T>, LabelError>, first: &mut Option<LabelError>) -> Option<T> {
    match read {
        Ok(v) => v,
        Err(e) => {
            first.get_or_insert(e);
            None
        }
    }
}

/// `Ok(None)` when `key` is absent, the parsed value when present and good.
fn field<T, E: ToString>(
    m: &impl StringMap,
    key: &'static str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<Option<T>, LabelError> {
    match m.lookup(key) {
        None => Ok(None),
        Some(v) => parse(v)
            .map(Some)
            .map_err(|e| LabelError::malformed(key, v, e)),
    }
}

/// Everything litelet wrote on a container, for stopping it without its pod object.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ContainerInfo {
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    pub container_name: String,
    pub annotations: ContainerAnnotations,
}

impl ContainerInfo {
    /// Reads a container's labels (identity must be present) and annotations (must be
    /// well formed when present).
    pub fn from_labels_and_annotations(
        labels: &impl StringMap,
        annotations: &impl StringMap,
    ) -> Result<Self, LabelError> {
        let required = |key: &'static str| {
            labels
                .lookup(key)
                .map(str::to_owned)
                .ok_or(LabelError::Missing { key })
        };
        Ok(Self {
            pod_name: required(POD_NAME)?,
            pod_namespace: required(POD_NAMESPACE)?,
            pod_uid: required(POD_UID)?,
            container_name: required(CONTAINER_NAME)?,
            annotations: ContainerAnnotations::try_parse(annotations)?,
        })
    }

    /// A stand-in pod and container holding just what the kill path reads: identity,
    /// grace periods, preStop handler, ports and termination message settings
    /// (upstream `restoreSpecsFromContainerLabels`).
    pub fn restore_pod_and_container(&self) -> (Pod, Container) {
        let a = &self.annotations;
        let mut pod = Pod::default();
        pod.metadata.name = Some(self.pod_name.clone());
        pod.metadata.namespace = Some(self.pod_namespace.clone());
        pod.metadata.uid = Some(self.pod_uid.clone());
        pod.metadata.deletion_grace_period_seconds = a.pod_deletion_grace_period;
        pod.spec.termination_grace_period_seconds = a.pod_termination_grace_period;
        let container = Container {
            name: self.container_name.clone(),
            ports: a.ports.clone(),
            termination_message_path: a.termination_message_path.clone(),
            termination_message_policy: a.termination_message_policy.clone(),
            lifecycle: a.pre_stop.clone().map(|h| Lifecycle {
                pre_stop: Some(h),
                ..Lifecycle::default()
            }),
            ..Container::default()
        };
        match a.container_type {
            Some(ContainerType::Init) => pod.spec.init_containers.push(container.clone()),
            _ => pod.spec.containers.push(container.clone()),
        }
        (pod, container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{ExecAction, Protocol};
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1",
                         "deletionGracePeriodSeconds": 5,
                         "labels": {"app": "web", "io.kubernetes.pod.name": "spoof"},
                         "annotations": {"note": "x"}},
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "initContainers": [{"name": "setup", "image": "busybox"}],
                "containers": [{
                    "name": "app", "image": "busybox",
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 2"]}}}
                }],
                "ephemeralContainers": [{"name": "debug", "image": "busybox"}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn sandbox_labels_round_trip_and_identity_wins() {
        let pod = pod();
        let labels = sandbox_labels(&pod);
        assert_eq!(labels[POD_NAME], "web");
        assert_eq!(labels["app"], "web");
        let info = SandboxInfo::from_labels(&labels).unwrap();
        assert_eq!(
            (
                info.pod_name.as_str(),
                info.pod_namespace.as_str(),
                info.pod_uid.as_str()
            ),
            ("web", "prod", "u-1")
        );
        assert_eq!(
            info.pod_labels,
            BTreeMap::from([("app".into(), "web".into())])
        );
        assert_eq!(sandbox_annotations(&pod)["note"], "x");
        let mut partial = labels.clone();
        partial.remove(POD_UID);
        assert_eq!(
            SandboxInfo::from_labels(&partial),
            Err(LabelError::Missing { key: POD_UID })
        );
    }

    #[test]
    fn container_labels_and_annotations_round_trip() {
        let pod = pod();
        let app = &pod.spec.containers[0];
        let hashes = ContainerHashes::of(app);
        let labels = container_labels(&pod, "app");
        let annotations = container_annotations(&pod, app, 3, hashes);
        // CRI hands maps back as HashMaps.
        let labels: HashMap<String, String> = labels.into_iter().collect();
        let info = ContainerInfo::from_labels_and_annotations(&labels, &annotations).unwrap();
        assert_eq!(info.container_name, "app");
        assert_eq!(info.pod_uid, "u-1");
        let a = &info.annotations;
        assert_eq!(
            (a.hash, a.hash_without_resources),
            (hashes.hash, hashes.hash_without_resources)
        );
        assert_eq!(a.restart_count, 3);
        assert_eq!(a.pod_deletion_grace_period, Some(5));
        assert_eq!(a.pod_termination_grace_period, Some(30));
        assert_eq!(
            a.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(
            a.termination_message_policy,
            Some(TerminationMessagePolicy::FallbackToLogsOnError)
        );
        assert_eq!(a.ports[0].protocol, Some(Protocol::Tcp));
        assert_eq!(a.container_type, Some(ContainerType::Regular));
        assert_eq!(
            a.pre_stop.as_ref().and_then(|h| h.exec.clone()),
            Some(ExecAction {
                command: vec!["sh".into(), "-c".into(), "sleep 2".into()]
            })
        );

        let (stub_pod, stub) = info.restore_pod_and_container();
        assert_eq!(stub_pod.full_name(), "web_prod");
        assert_eq!(stub_pod.metadata.deletion_grace_period_seconds, Some(5));
        assert_eq!(stub_pod.spec.termination_grace_period_seconds, Some(30));
        assert_eq!(stub.ports, app.ports);
        assert_eq!(
            stub.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()),
            app.lifecycle.as_ref().and_then(|l| l.pre_stop.clone())
        );
        assert_eq!(stub_pod.spec.containers, vec![stub]);
    }

    #[test]
    fn container_type_follows_the_spec_list() {
        let pod = pod();
        let kind = |c: &Container| {
            container_annotations(&pod, c, 0, ContainerHashes::default())
                .get(CONTAINER_TYPE)
                .cloned()
        };
        assert_eq!(kind(&pod.spec.init_containers[0]).as_deref(), Some("init"));
        assert_eq!(
            kind(&pod.spec.ephemeral_containers[0].container).as_deref(),
            Some("ephemeral")
        );
        let stranger = Container {
            name: "nope".into(),
            ..Container::default()
        };
        assert_eq!(kind(&stranger), None);
    }

    #[test]
    fn absent_annotations_read_as_unset() {
        let empty = BTreeMap::new();
        assert_eq!(
            ContainerAnnotations::try_parse(&empty),
            Ok(ContainerAnnotations::default())
        );
        // Only the minimum a foreign container has: no pod grace periods, no handler.
        let pod = Pod::default();
        let c = Container {
            name: "c".into(),
            ..Container::default()
        };
        let a = container_annotations(&pod, &c, 0, ContainerHashes::default());
        assert!(!a.contains_key(POD_DELETION_GRACE_PERIOD));
        assert!(!a.contains_key(CONTAINER_PRE_STOP_HANDLER));
        assert!(!a.contains_key(CONTAINER_PORTS));
        let parsed = ContainerAnnotations::try_parse(&a).unwrap();
        assert_eq!(parsed.termination_message_path, None);
        assert_eq!(parsed.termination_message_policy, None);
    }

    #[test]
    fn malformed_annotations_are_errors_naming_the_key() {
        let cases = [
            (CONTAINER_HASH, "not-hex"),
            (CONTAINER_HASH_WITHOUT_RESOURCES, "12345678901234567890"),
            (CONTAINER_RESTART_COUNT, "-1"),
            (CONTAINER_RESTART_COUNT, "three"),
            (POD_TERMINATION_GRACE_PERIOD, "30s"),
            (POD_DELETION_GRACE_PERIOD, ""),
            (CONTAINER_PRE_STOP_HANDLER, "{\"exec\": "),
            (CONTAINER_PORTS, "{\"containerPort\": 80}"),
            (CONTAINER_TYPE, "sidecar"),
        ];
        let labels = container_labels(&pod(), "app");
        for (key, value) in cases {
            let mut annotations = BTreeMap::from([(CONTAINER_HASH.to_owned(), "1f".to_owned())]);
            annotations.insert(key.to_owned(), value.to_owned());
            let err =
                ContainerInfo::from_labels_and_annotations(&labels, &annotations).expect_err(key);
            assert!(
                matches!(&err, LabelError::Malformed { key: k, .. } if *k == key),
                "{key}: {err}"
            );
            assert!(err
                .to_string()
                .starts_with(&format!("annotation {key} has malformed value")));
            // The lenient reader keeps every good field and reads the bad one as unset.
            let lenient = ContainerAnnotations::parse(&annotations);
            if key != CONTAINER_HASH {
                assert_eq!(lenient.hash, 0x1f, "{key}");
            }
        }
    }

    #[test]
    fn long_bad_values_are_cut_in_errors() {
        let long = format!("{{{}", "é".repeat(200));
        let annotations = BTreeMap::from([(CONTAINER_PRE_STOP_HANDLER.to_owned(), long)]);
        let err = ContainerAnnotations::try_parse(&annotations).unwrap_err();
        assert!(err.to_string().len() < 400, "{err}");
    }

    #[test]
    fn missing_identity_labels_are_errors() {
        let annotations = BTreeMap::new();
        for key in [POD_NAME, POD_NAMESPACE, POD_UID, CONTAINER_NAME] {
            let mut labels = container_labels(&pod(), "app");
            labels.remove(key);
            assert_eq!(
                ContainerInfo::from_labels_and_annotations(&labels, &annotations),
                Err(LabelError::Missing { key })
            );
        }
    }
}
