//! The core/v1 Pod object: spec (containers, volumes, probes, security
//! settings), status (conditions, container statuses) and the well-known
//! annotation keys and string constants the kubelet works with.
//!
//! This module holds wire types only: it models the JSON the API server
//! sends and accepts and performs no I/O. Objects the kubelet reads and
//! writes back whole keep unmodelled fields in an `extra` map.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, string_enum, ConditionStatus, ObjectMeta, Time};
use crate::api::node::TaintEffect;
use crate::api::quantity::Quantity;

/// Annotation naming where a pod came from (`api`, `file`, `http`).
pub const CONFIG_SOURCE_ANNOTATION_KEY: &str = "kubernetes.io/config.source";
/// Annotation with the hash the kubelet computed for a static pod.
pub const CONFIG_HASH_ANNOTATION_KEY: &str = "kubernetes.io/config.hash";
/// Annotation present on mirror pods (the API copy of a static pod).
pub const CONFIG_MIRROR_ANNOTATION_KEY: &str = "kubernetes.io/config.mirror";
/// Annotation with the time the kubelet first saw a pod.
pub const CONFIG_SEEN_ANNOTATION_KEY: &str = "kubernetes.io/config.seen";
/// `config.source` value for pods that came from the API server.
pub const SOURCE_API: &str = "api";
/// `config.source` value for static pods read from a manifest directory.
pub const SOURCE_FILE: &str = "file";
/// `config.source` value for static pods fetched from a URL.
pub const SOURCE_HTTP: &str = "http";

/// Pod condition types (kept as strings: readiness gates add arbitrary ones).
pub const POD_SCHEDULED: &str = "PodScheduled";
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
pub const POD_INITIALIZED: &str = "Initialized";
pub const POD_CONTAINERS_READY: &str = "ContainersReady";
pub const POD_READY: &str = "Ready";
pub const POD_DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// Standard resource names used as keys of resource maps.
pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const RESOURCE_PODS: &str = "pods";
/// Prefix of huge page resources, e.g. `hugepages-2Mi`.
pub const RESOURCE_HUGEPAGES_PREFIX: &str = "hugepages-";

string_enum! {
    /// Lifecycle phase of a pod. `Unknown` is a real API value; values not
    /// listed here land in `Other`.
    pub enum PodPhase {
        Pending = "Pending",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        Unknown = "Unknown",
    }
}

impl PodPhase {
    /// Succeeded or Failed: the pod's containers will not run again.
    pub fn is_terminal(&self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// Whether a pod's phase, if it has one, is terminal ([`PodPhase::is_terminal`]).
pub fn is_terminal_phase(phase: Option<&PodPhase>) -> bool {
    phase.is_some_and(PodPhase::is_terminal)
}

string_enum! {
    /// Restart policy of a pod, or of a single (sidecar) init container.
    pub enum RestartPolicy {
        Always = "Always",
        OnFailure = "OnFailure",
        Never = "Never",
    }
}

string_enum! {
    pub enum ImagePullPolicy {
        Always = "Always",
        Never = "Never",
        IfNotPresent = "IfNotPresent",
    }
}

string_enum! {
    pub enum DnsPolicy {
        ClusterFirst = "ClusterFirst",
        ClusterFirstWithHostNet = "ClusterFirstWithHostNet",
        Default = "Default",
        None = "None",
    }
}

string_enum! {
    pub enum Protocol {
        Tcp = "TCP",
        Udp = "UDP",
        Sctp = "SCTP",
    }
}

string_enum! {
    pub enum TerminationMessagePolicy {
        File = "File",
        FallbackToLogsOnError = "FallbackToLogsOnError",
    }
}

string_enum! {
    pub enum MountPropagationMode {
        None = "None",
        HostToContainer = "HostToContainer",
        Bidirectional = "Bidirectional",
    }
}

string_enum! {
    pub enum UriScheme {
        Http = "HTTP",
        Https = "HTTPS",
    }
}

string_enum! {
    pub enum TolerationOperator {
        Exists = "Exists",
        Equal = "Equal",
    }
}

string_enum! {
    pub enum QosClass {
        Guaranteed = "Guaranteed",
        Burstable = "Burstable",
        BestEffort = "BestEffort",
    }
}

string_enum! {
    /// What to do with a container when one of its resources is resized.
    pub enum ResizeRestartPolicy {
        NotRequired = "NotRequired",
        RestartContainer = "RestartContainer",
    }
}

string_enum! {
    pub enum SeccompProfileType {
        Unconfined = "Unconfined",
        RuntimeDefault = "RuntimeDefault",
        Localhost = "Localhost",
    }
}

/// A port or similar value given either as a number or as a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        Self::Int(0)
    }
}

// ---------------------------------------------------------------------------
// Pod
// ---------------------------------------------------------------------------

/// A pod as stored by the API server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub spec: PodSpec,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub status: PodStatus,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Pod {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "Pod";

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }

    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    /// The kubelet's unique pod key: `name_namespace`.
    pub fn full_name(&self) -> String {
        format!("{}_{}", self.name(), self.namespace())
    }

    /// The `config.source` annotation, if present.
    pub fn config_source(&self) -> Option<&str> {
        self.metadata.annotation(CONFIG_SOURCE_ANNOTATION_KEY)
    }

    /// A static pod: one whose source is known and is not the API server.
    pub fn is_static(&self) -> bool {
        self.config_source().is_some_and(|s| s != SOURCE_API)
    }

    /// A mirror pod: the API server's read-only copy of a static pod.
    pub fn is_mirror(&self) -> bool {
        self.metadata
            .annotations
            .contains_key(CONFIG_MIRROR_ANNOTATION_KEY)
    }

    /// Graceful deletion has been requested (deletionTimestamp is set).
    pub fn deletion_requested(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// Desired state of a pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub volumes: Vec<Volume>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub init_containers: Vec<Container>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub containers: Vec<Container>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub ephemeral_containers: Vec<EphemeralContainer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<DnsPolicy>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(rename = "hostPID", skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<bool>,
    #[serde(rename = "hostIPC", skip_serializing_if = "Option::is_none")]
    pub host_ipc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(rename = "setHostnameAsFQDN", skip_serializing_if = "Option::is_none")]
    pub set_hostname_as_fqdn: Option<bool>,
    /// The pod's hostname as a whole (beta in 1.36): wins over hostname and subdomain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname_override: Option<String>,
    /// Scheduling constraints; the kubelet does not interpret them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub tolerations: Vec<Toleration>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub host_aliases: Vec<HostAlias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDnsConfig>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub readiness_gates: Vec<PodReadinessGate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
    /// "PreemptLowerPriority" or "Never".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    /// Extra resources accounted to the pod sandbox itself.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub overhead: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<PodOs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_users: Option<bool>,
    /// Pod-level resource budget shared by all containers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Reference to an object in the same namespace by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LocalObjectReference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSecurityContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub supplemental_groups: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub sysctls: Vec<Sysctl>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// seLinuxOptions, appArmorProfile, fsGroupChangePolicy, ... kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sysctl {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SeccompProfile {
    #[serde(rename = "type")]
    pub type_: SeccompProfileType,
    /// Path under the kubelet's seccomp directory, for `Localhost`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localhost_profile: Option<String>,
}

/// Security settings of one container (overrides the pod-level ones).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    /// "Default" or "Unmasked".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_mount: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// seLinuxOptions, appArmorProfile, windowsOptions, ... kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Linux capabilities to add to / drop from the runtime's default set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub add: Vec<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub drop: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Toleration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// For `NoExecute`: how long the pod may stay bound after the taint appears.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDnsConfig {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub nameservers: Vec<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub searches: Vec<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub options: Vec<PodDnsConfigOption>,
}

/// A resolver option (`ndots:5` is `{name: "ndots", value: "5"}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDnsConfigOption {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// An extra /etc/hosts entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostAlias {
    pub ip: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub hostnames: Vec<String>,
}

/// An extra condition type that must be True for the pod to be Ready.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodReadinessGate {
    pub condition_type: String,
}

/// Operating system the pod is meant for ("linux" or "windows").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodOs {
    pub name: String,
}

// ---------------------------------------------------------------------------
// Containers
// ---------------------------------------------------------------------------

/// A container in a pod (regular, init or, via [`EphemeralContainer`], ephemeral).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Replaces the image's ENTRYPOINT.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub command: Vec<String>,
    /// Replaces the image's CMD.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub ports: Vec<ContainerPort>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub env_from: Vec<EnvFromSource>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub env: Vec<EnvVar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub resize_policy: Vec<ContainerResizePolicy>,
    /// Only for init containers: `Always` makes it a sidecar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub volume_devices: Vec<VolumeDevice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_policy: Option<TerminationMessagePolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin_once: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Container {
    /// An init container that keeps running beside the main containers.
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy == Some(RestartPolicy::Always)
    }
}

/// A debugging container added to a running pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EphemeralContainer {
    #[serde(flatten)]
    pub container: Container,
    /// Container whose namespaces (process, ...) this one joins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_container_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    pub container_port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvFromSource {
    /// Prepended to every key taken from the source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<OptionalNameRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<OptionalNameRef>,
}

/// A named ConfigMap/Secret that may be allowed to be missing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OptionalNameRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    /// Literal value; `$(VAR)` references are expanded by the kubelet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// Where an environment variable's value comes from (exactly one is set).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvVarSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
}

/// A field of the pod, e.g. `metadata.name` or `status.podIP`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub field_path: String,
}

/// A container resource (`limits.cpu`, `requests.memory`, ...) scaled by `divisor`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceFieldSelector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divisor: Option<Quantity>,
}

/// One key of a ConfigMap or Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeySelector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// Resource limits and requests, keyed by resource name (see `RESOURCE_*`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceRequirements {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub requests: BTreeMap<String, Quantity>,
    /// Dynamic resource claims used by this container.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub claims: Vec<ResourceClaim>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceClaim {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerResizePolicy {
    pub resource_name: String,
    pub restart_policy: ResizeRestartPolicy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// "Disabled", "IfPossible" or "Enabled".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recursive_read_only: Option<String>,
    pub mount_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<MountPropagationMode>,
    /// Like `sub_path` but with `$(VAR)` expansion from the container env.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_path_expr: Option<String>,
}

/// A raw block device from a PVC exposed at `device_path`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeDevice {
    pub name: String,
    pub device_path: String,
}

// ---------------------------------------------------------------------------
// Probes and lifecycle hooks
// ---------------------------------------------------------------------------

/// A health check run by the kubelet against a container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Probe {
    #[serde(flatten)]
    pub handler: ProbeHandler,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    /// Overrides the pod's grace period when a liveness failure kills the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// The action of a probe (exactly one is set).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProbeHandler {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcAction>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecAction {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub command: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Port number or the name of a container port.
    pub port: IntOrString,
    /// Defaults to the pod IP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<UriScheme>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub http_headers: Vec<HttpHeader>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpSocketAction {
    pub port: IntOrString,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// A gRPC health check (grpc.health.v1) against a numeric port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GrpcAction {
    pub port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SleepAction {
    pub seconds: i64,
}

/// Hooks run after a container starts and before it is stopped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_start: Option<LifecycleHandler>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<LifecycleHandler>,
    /// Signal name (e.g. "SIGTERM") used to stop the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LifecycleHandler {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    /// Accepted by the API for compatibility but not run by kubelets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepAction>,
}

// ---------------------------------------------------------------------------
// Volumes
// ---------------------------------------------------------------------------

/// A named volume; at most one source is set. Source kinds not modelled
/// here (csi, nfs, image, ...) stay in `extra` and survive a round trip.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    #[serde(rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<DownwardApiVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projected: Option<ProjectedVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Volume {
    /// True for volumes the kubelet writes (configMap, secret, downwardAPI, projected),
    /// a claim with `readOnly` and an inline CSI volume with `readOnly`: containers
    /// always get them read-only, whatever the volumeMount says. The source is the
    /// first one set in `volumes::setup`'s order (emptyDir and hostPath first), so
    /// both agree even on a volume that names two sources.
    pub fn forces_read_only(&self) -> bool {
        if self.empty_dir.is_some() || self.host_path.is_some() {
            return false;
        }
        if self.config_map.is_some()
            || self.secret.is_some()
            || self.downward_api.is_some()
            || self.projected.is_some()
        {
            return true;
        }
        if let Some(claim) = &self.persistent_volume_claim {
            return claim.read_only == Some(true);
        }
        !self.extra.contains_key("ephemeral")
            && self.extra.get("csi").is_some_and(|c| c["readOnly"] == true)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EmptyDirVolumeSource {
    /// "" (node disk), "Memory" (tmpfs) or "HugePages".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub medium: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostPathVolumeSource {
    pub path: String,
    /// Expected file type: "", "DirectoryOrCreate", "Directory", "FileOrCreate",
    /// "File", "Socket", "CharDevice" or "BlockDevice".
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// Maps a ConfigMap/Secret key to a relative file path inside the volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigMapVolumeSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<KeyToPath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecretVolumeSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<KeyToPath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DownwardApiVolumeSource {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<DownwardApiVolumeFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
}

/// One file of a downward API volume: a pod field or a container resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DownwardApiVolumeFile {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i32>,
}

/// Several sources merged into one directory (e.g. `kube-api-access-*`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProjectedVolumeSource {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub sources: Vec<VolumeProjection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
}

/// One source of a projected volume. Unmodelled kinds stay in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeProjection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_token: Option<ServiceAccountTokenProjection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapProjection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretProjection>,
    #[serde(rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<DownwardApiProjection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_trust_bundle: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A bound service account token the kubelet requests and keeps fresh.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceAccountTokenProjection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigMapProjection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<KeyToPath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretProjection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<KeyToPath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DownwardApiProjection {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub items: Vec<DownwardApiVolumeFile>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

// ---------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------

/// Observed state of a pod, written by the kubelet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    /// The pod generation this status was computed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodPhase>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub conditions: Vec<PodCondition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Short CamelCase reason, e.g. "Evicted".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(
        rename = "hostIPs",
        deserialize_with = "nullable",
        skip_serializing_if = "is_default"
    )]
    pub host_ips: Vec<IpAddress>,
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(
        rename = "podIPs",
        deserialize_with = "nullable",
        skip_serializing_if = "is_default"
    )]
    pub pod_ips: Vec<IpAddress>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<QosClass>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
    /// Deprecated resize status string; replaced by the PodResize* conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PodStatus {
    /// The condition of the given type (see the `POD_*` constants).
    pub fn condition(&self, type_: &str) -> Option<&PodCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// An entry of `hostIPs` / `podIPs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IpAddress {
    pub ip: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodCondition {
    /// See the `POD_*` condition type constants.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Observed state of one container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    /// The previous termination, if the container has restarted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    pub ready: bool,
    pub restart_count: i32,
    pub image: String,
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// `<runtime>://<id>`, e.g. `containerd://abc...`.
    #[serde(rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Whether the startup probe (if any) has passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    /// Resources actually configured on the running container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Identity of the container's process (uid, gid, groups); not interpreted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<Value>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub volume_mounts: Vec<VolumeMountStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// allocatedResourcesStatus and later additions, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeMountStatus {
    pub name: String,
    pub mount_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recursive_read_only: Option<String>,
}

/// State of a container; at most one member is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerStateWaiting {
    /// e.g. "ContainerCreating", "CrashLoopBackOff", "ImagePullBackOff".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStateRunning {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    pub exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    #[serde(rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod as the API server returns it: service account volume, a sidecar
    /// init container, resources, resize policy, probes and a running status.
    fn api_pod() -> Value {
        json!({
          "apiVersion": "v1",
          "kind": "Pod",
          "metadata": {
            "name": "web-7d4b9c8f6-x2x9k",
            "generateName": "web-7d4b9c8f6-",
            "namespace": "prod",
            "uid": "0b8a2b8e-6f5c-4d8a-9a47-3c1d7e2f9b10",
            "resourceVersion": "123456",
            "generation": 1,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6"},
            "annotations": {"kubernetes.io/config.seen": "2024-05-01T10:00:01.5Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "name": "web-7d4b9c8f6", "uid": "9f1e", "controller": true,
              "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
          },
          "spec": {
            "volumes": [
              {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
              {"name": "logs", "hostPath": {"path": "/var/log/web", "type": "DirectoryOrCreate"}},
              {"name": "kube-api-access-5x7qz", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                  "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                  "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
              ], "defaultMode": 420}},
              {"name": "data", "csi": {"driver": "x.csi.io"}}
            ],
            "initContainers": [{
              "name": "log-shipper",
              "image": "fluent/fluent-bit:3.0",
              "restartPolicy": "Always",
              "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
              "volumeMounts": [{"name": "logs", "mountPath": "/logs", "readOnly": true}],
              "terminationMessagePath": "/dev/termination-log",
              "terminationMessagePolicy": "File",
              "imagePullPolicy": "IfNotPresent"
            }],
            "containers": [{
              "name": "app",
              "image": "registry.example/web:1.2.3",
              "command": ["/bin/web"],
              "args": ["--port=8080"],
              "workingDir": "/srv",
              "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"containerPort": 9000, "hostPort": 9000, "hostIP": "127.0.0.1",
                         "protocol": "UDP"}],
              "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "web-config"}}],
              "env": [
                {"name": "MODE", "value": "prod"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                  "fieldPath": "status.podIP"}}},
                {"name": "MEM_LIMIT", "valueFrom": {"resourceFieldRef": {
                  "containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "web-secret",
                  "key": "token", "optional": false}}}
              ],
              "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                            "requests": {"cpu": "250m", "memory": "128Mi"}},
              "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                               {"resourceName": "memory", "restartPolicy": "RestartContainer"}],
              "volumeMounts": [
                {"name": "cache", "mountPath": "/cache", "subPathExpr": "$(POD_NAME)"},
                {"name": "kube-api-access-5x7qz", "readOnly": true,
                 "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
              ],
              "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http",
                "scheme": "HTTP", "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
                "initialDelaySeconds": 5, "timeoutSeconds": 1, "periodSeconds": 10,
                "successThreshold": 1, "failureThreshold": 3},
              "readinessProbe": {"tcpSocket": {"port": 8080}, "timeoutSeconds": 1,
                "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
              "startupProbe": {"grpc": {"port": 9090, "service": "web"},
                "failureThreshold": 30, "periodSeconds": 2,
                "terminationGracePeriodSeconds": 10},
              "lifecycle": {"preStop": {"sleep": {"seconds": 5}},
                "postStart": {"exec": {"command": ["sh", "-c", "echo hi"]}}},
              "terminationMessagePath": "/dev/termination-log",
              "terminationMessagePolicy": "FallbackToLogsOnError",
              "imagePullPolicy": "Always",
              "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                "seccompProfile": {"type": "RuntimeDefault"},
                "seLinuxOptions": {"level": "s0:c1"}},
              "stdin": false,
              "tty": false
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": "edge-1",
            "hostPID": false,
            "hostIPC": false,
            "setHostnameAsFQDN": false,
            "securityContext": {"fsGroup": 2000, "supplementalGroups": [3000],
              "sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 1"}]},
            "imagePullSecrets": [{"name": "regcred"}],
            "affinity": {"nodeAffinity": {}},
            "schedulerName": "default-scheduler",
            "tolerations": [
              {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
               "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "os": {"name": "linux"}
          },
          "status": {
            "observedGeneration": 1,
            "phase": "Running",
            "conditions": [
              {"type": "PodReadyToStartContainers", "status": "True",
               "lastProbeTime": null, "lastTransitionTime": "2024-05-01T10:00:03Z"},
              {"type": "Initialized", "status": "True", "lastProbeTime": null,
               "lastTransitionTime": "2024-05-01T10:00:04Z"},
              {"type": "Ready", "status": "True", "observedGeneration": 1,
               "lastProbeTime": null, "lastTransitionTime": "2024-05-01T10:00:09Z"},
              {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
               "lastTransitionTime": "2024-05-01T10:00:00Z"}
            ],
            "hostIP": "192.168.1.20",
            "hostIPs": [{"ip": "192.168.1.20"}],
            "podIP": "10.244.1.7",
            "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00::7"}],
            "startTime": "2024-05-01T10:00:01Z",
            "initContainerStatuses": [{
              "name": "log-shipper",
              "state": {"running": {"startedAt": "2024-05-01T10:00:04Z"}},
              "lastState": {},
              "ready": true,
              "restartCount": 0,
              "image": "docker.io/fluent/fluent-bit:3.0",
              "imageID": "docker.io/fluent/fluent-bit@sha256:abc",
              "containerID": "containerd://1111",
              "started": true,
              "allocatedResources": {"cpu": "50m", "memory": "32Mi"},
              "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}
            }],
            "containerStatuses": [{
              "name": "app",
              "state": {"running": {"startedAt": "2024-05-01T10:00:05Z"}},
              "lastState": {"terminated": {"exitCode": 137, "signal": 9,
                "reason": "OOMKilled", "startedAt": "2024-05-01T09:00:00Z",
                "finishedAt": "2024-05-01T09:59:00Z", "containerID": "containerd://0000"}},
              "ready": true,
              "restartCount": 1,
              "image": "registry.example/web:1.2.3",
              "imageID": "registry.example/web@sha256:def",
              "containerID": "containerd://2222",
              "started": true,
              "allocatedResources": {"cpu": "250m", "memory": "128Mi"},
              "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                            "requests": {"cpu": "250m", "memory": "128Mi"}},
              "user": {"linux": {"uid": 1000, "gid": 0, "supplementalGroups": [0, 2000, 3000]}},
              "volumeMounts": [{"name": "kube-api-access-5x7qz",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": true, "recursiveReadOnly": "Disabled"}],
              "stopSignal": "SIGTERM",
              "allocatedResourcesStatus": [{"name": "cpu", "resources": []}]
            }],
            "qosClass": "Burstable"
          }
        })
    }

    fn q(s: &str) -> Quantity {
        serde_json::from_value(json!(s)).unwrap()
    }

    #[test]
    fn decodes_api_server_pod() {
        let pod: Pod = serde_json::from_value(api_pod()).unwrap();
        assert_eq!(pod.name(), "web-7d4b9c8f6-x2x9k");
        assert_eq!(pod.namespace(), "prod");
        assert_eq!(pod.uid(), "0b8a2b8e-6f5c-4d8a-9a47-3c1d7e2f9b10");
        assert_eq!(pod.full_name(), "web-7d4b9c8f6-x2x9k_prod");
        assert!(!pod.is_static() && !pod.is_mirror() && !pod.deletion_requested());
        assert_eq!(
            pod.metadata.owner_references[0].block_owner_deletion,
            Some(true)
        );

        let spec = &pod.spec;
        assert_eq!(spec.restart_policy, Some(RestartPolicy::Always));
        assert_eq!(spec.dns_policy, Some(DnsPolicy::ClusterFirst));
        assert_eq!(spec.host_pid, Some(false));
        assert_eq!(spec.set_hostname_as_fqdn, Some(false));
        assert_eq!(spec.node_name.as_deref(), Some("edge-1"));
        let psc = spec.security_context.as_ref().unwrap();
        assert_eq!(
            (psc.fs_group, psc.supplemental_groups.as_slice()),
            (Some(2000), &[3000][..])
        );
        assert_eq!(spec.tolerations[0].effect, Some(TaintEffect::NoExecute));
        assert_eq!(
            spec.tolerations[0].operator,
            Some(TolerationOperator::Exists)
        );
        assert_eq!(spec.readiness_gates[0].condition_type, "example.com/ready");

        let vols = &spec.volumes;
        assert_eq!(
            vols[0].empty_dir.as_ref().unwrap().size_limit,
            Some(q("64Mi"))
        );
        assert_eq!(
            vols[1].host_path.as_ref().unwrap().type_.as_deref(),
            Some("DirectoryOrCreate")
        );
        let proj = vols[2].projected.as_ref().unwrap();
        assert_eq!(proj.default_mode, Some(420));
        let sat = proj.sources[0].service_account_token.as_ref().unwrap();
        assert_eq!(
            (sat.expiration_seconds, sat.path.as_str()),
            (Some(3607), "token")
        );
        assert_eq!(
            proj.sources[1].config_map.as_ref().unwrap().items[0].key,
            "ca.crt"
        );
        let dapi = proj.sources[2].downward_api.as_ref().unwrap();
        assert_eq!(
            dapi.items[0].field_ref.as_ref().unwrap().field_path,
            "metadata.namespace"
        );
        assert!(vols[3].extra.contains_key("csi"));

        let sidecar = &spec.init_containers[0];
        assert!(sidecar.is_sidecar());
        assert_eq!(sidecar.volume_mounts[0].read_only, Some(true));

        let app = &spec.containers[0];
        assert!(!app.is_sidecar());
        assert_eq!(app.ports[0].protocol, Some(Protocol::Tcp));
        assert_eq!(app.ports[1].host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(
            app.env_from[0]
                .config_map_ref
                .as_ref()
                .unwrap()
                .name
                .as_deref(),
            Some("web-config")
        );
        let rf = app.env[2]
            .value_from
            .as_ref()
            .unwrap()
            .resource_field_ref
            .as_ref()
            .unwrap();
        assert_eq!(rf.divisor, Some(q("1Mi")));
        let sk = app.env[3]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!((sk.key.as_str(), sk.optional), ("token", Some(false)));
        let res = app.resources.as_ref().unwrap();
        assert_eq!(res.limits.get(RESOURCE_CPU), Some(&q("500m")));
        assert_eq!(res.requests.get(RESOURCE_MEMORY), Some(&q("128Mi")));
        assert_eq!(
            app.resize_policy[1].restart_policy,
            ResizeRestartPolicy::RestartContainer
        );
        assert_eq!(
            app.volume_mounts[0].sub_path_expr.as_deref(),
            Some("$(POD_NAME)")
        );

        let live = app.liveness_probe.as_ref().unwrap();
        let get = live.handler.http_get.as_ref().unwrap();
        assert_eq!(get.port, IntOrString::String("http".into()));
        assert_eq!(get.scheme, Some(UriScheme::Http));
        assert_eq!(get.http_headers[0].name, "X-Probe");
        assert_eq!(
            (live.initial_delay_seconds, live.failure_threshold),
            (Some(5), Some(3))
        );
        let ready = app.readiness_probe.as_ref().unwrap();
        assert_eq!(
            ready.handler.tcp_socket.as_ref().unwrap().port,
            IntOrString::Int(8080)
        );
        let startup = app.startup_probe.as_ref().unwrap();
        assert_eq!(startup.handler.grpc.as_ref().unwrap().port, 9090);
        assert_eq!(startup.termination_grace_period_seconds, Some(10));
        let lc = app.lifecycle.as_ref().unwrap();
        assert_eq!(
            lc.pre_stop
                .as_ref()
                .unwrap()
                .sleep
                .as_ref()
                .unwrap()
                .seconds,
            5
        );
        assert_eq!(
            lc.post_start
                .as_ref()
                .unwrap()
                .exec
                .as_ref()
                .unwrap()
                .command
                .len(),
            3
        );
        let sc = app.security_context.as_ref().unwrap();
        assert_eq!(sc.capabilities.as_ref().unwrap().drop, ["ALL"]);
        assert_eq!(
            sc.seccomp_profile.as_ref().unwrap().type_,
            SeccompProfileType::RuntimeDefault
        );
        assert!(sc.extra.contains_key("seLinuxOptions"));
        assert_eq!(
            app.termination_message_policy,
            Some(TerminationMessagePolicy::FallbackToLogsOnError)
        );
        assert_eq!(app.image_pull_policy, Some(ImagePullPolicy::Always));

        let st = &pod.status;
        assert_eq!(st.phase, Some(PodPhase::Running));
        assert_eq!(st.qos_class, Some(QosClass::Burstable));
        assert_eq!(st.host_ip.as_deref(), Some("192.168.1.20"));
        assert_eq!(st.pod_ips[1].ip, "fd00::7");
        assert_eq!(st.start_time.unwrap().to_string(), "2024-05-01T10:00:01Z");
        let ready_cond = st.condition(POD_READY).unwrap();
        assert_eq!(ready_cond.status, ConditionStatus::True);
        assert_eq!(ready_cond.observed_generation, Some(1));
        assert!(ready_cond.last_probe_time.is_none());

        let cs = &st.container_statuses[0];
        assert!(cs.ready && cs.started == Some(true));
        assert_eq!(cs.restart_count, 1);
        assert_eq!(cs.image_id, "registry.example/web@sha256:def");
        assert_eq!(cs.container_id.as_deref(), Some("containerd://2222"));
        assert_eq!(cs.allocated_resources.get("cpu"), Some(&q("250m")));
        assert_eq!(
            cs.resources.as_ref().unwrap().limits.get("memory"),
            Some(&q("256Mi"))
        );
        let term = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((term.exit_code, term.signal), (137, Some(9)));
        assert_eq!(term.reason.as_deref(), Some("OOMKilled"));
        assert!(cs
            .state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .is_some());
        assert_eq!(cs.user.as_ref().unwrap()["linux"]["uid"], 1000);
        assert_eq!(
            cs.volume_mounts[0].recursive_read_only.as_deref(),
            Some("Disabled")
        );
        assert_eq!(cs.stop_signal.as_deref(), Some("SIGTERM"));
        assert!(cs.extra.contains_key("allocatedResourcesStatus"));
        assert_eq!(
            st.init_container_statuses[0].last_state,
            Some(ContainerState::default())
        );

        // Every modelled key was recognised: only genuinely unknown ones are extra.
        assert!(pod.extra.is_empty() && pod.status.extra.is_empty());
        // managedFields is dropped on decoding (never read; the biggest part of a copy).
        assert!(pod.metadata.extra.is_empty());
        assert_eq!(
            pod.spec.extra.keys().collect::<Vec<_>>(),
            ["serviceAccount"]
        );
        assert!(app.extra.is_empty() && sidecar.extra.is_empty());
    }

    #[test]
    fn api_pod_round_trips_exactly() {
        let pod: Pod = serde_json::from_value(api_pod()).unwrap();
        let mut want = api_pod();
        // Nulls are not reproduced (unset fields are omitted), and managedFields is
        // dropped on decoding (never read; the biggest part of a pod copy).
        for c in want["status"]["conditions"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("lastProbeTime");
        }
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(serde_json::to_value(&pod).unwrap(), want);
    }

    #[test]
    fn unknown_fields_survive_read_modify_write() {
        let json = json!({
            "apiVersion": "v1", "kind": "Pod", "futureTop": {"a": 1},
            "metadata": {"name": "p", "futureMeta": "m"},
            "spec": {"futureSpec": [1, 2],
              "containers": [{"name": "c", "futureContainer": true}],
              "ephemeralContainers": [{"name": "dbg", "targetContainerName": "c",
                "futureEphemeral": 1}]},
            "status": {"phase": "Pending", "futureStatus": "s"}
        });
        let mut pod: Pod = serde_json::from_value(json).unwrap();
        pod.status.phase = Some(PodPhase::Running);
        pod.spec.containers[0].image = Some("img".into());
        pod.metadata.labels.insert("k".into(), "v".into());
        let out = serde_json::to_value(&pod).unwrap();
        assert_eq!(out["futureTop"]["a"], 1);
        assert_eq!(out["metadata"]["futureMeta"], "m");
        assert_eq!(out["spec"]["futureSpec"], json!([1, 2]));
        assert_eq!(out["spec"]["containers"][0]["futureContainer"], true);
        assert_eq!(out["spec"]["containers"][0]["image"], "img");
        let eph = &out["spec"]["ephemeralContainers"][0];
        assert_eq!(
            (&eph["name"], &eph["targetContainerName"]),
            (&json!("dbg"), &json!("c"))
        );
        assert_eq!(eph["futureEphemeral"], 1);
        assert_eq!(out["status"]["futureStatus"], "s");
        assert_eq!(out["status"]["phase"], "Running");
        let e = &pod.spec.ephemeral_containers[0];
        assert_eq!(
            e.container.extra.keys().collect::<Vec<_>>(),
            ["futureEphemeral"]
        );
    }

    #[test]
    fn unknown_enum_values_are_kept() {
        let json = json!({"spec": {"restartPolicy": "Sometimes", "dnsPolicy": "Custom",
            "containers": [{"name": "c", "imagePullPolicy": "Maybe"}]},
            "status": {"phase": "Hibernating", "qosClass": "Platinum",
            "conditions": [{"type": "example.com/gate", "status": "Perhaps"}]}});
        let pod: Pod = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            pod.status.phase,
            Some(PodPhase::Other("Hibernating".into()))
        );
        assert_eq!(
            pod.spec.restart_policy,
            Some(RestartPolicy::from("Sometimes"))
        );
        assert_eq!(pod.status.conditions[0].status.as_str(), "Perhaps");
        assert_eq!(serde_json::to_value(&pod).unwrap(), json);
        assert_eq!(PodPhase::from("Unknown"), PodPhase::Unknown);
        assert_eq!(PodPhase::Succeeded.to_string(), "Succeeded");
    }

    #[test]
    fn serialisation_omits_unset_fields() {
        assert_eq!(serde_json::to_string(&Pod::default()).unwrap(), "{}");
        let mut pod = Pod::default();
        pod.status.phase = Some(PodPhase::Failed);
        pod.status.conditions.push(PodCondition {
            type_: POD_READY.into(),
            status: ConditionStatus::False,
            reason: Some("PodFailed".into()),
            ..PodCondition::default()
        });
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            json!({"status": {"phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}]}})
        );
        let c = Container {
            name: "c".into(),
            ..Container::default()
        };
        assert_eq!(serde_json::to_value(&c).unwrap(), json!({"name": "c"}));
        let cs = ContainerStatus {
            name: "c".into(),
            ..ContainerStatus::default()
        };
        // Fields the API always carries (no omitempty in Go) stay present.
        assert_eq!(
            serde_json::to_value(&cs).unwrap(),
            json!({"name": "c", "ready": false, "restartCount": 0, "image": "", "imageID": ""})
        );
        let v = Volume {
            name: "x".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        };
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!({"name": "x", "emptyDir": {}})
        );
    }

    #[test]
    fn nulls_decode_as_empty() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"labels": null},
            "spec": {"containers": [{"name": "c", "args": null, "env": null}],
            "volumes": null}, "status": null}))
        .unwrap();
        assert!(pod.spec.containers[0].args.is_empty());
        assert_eq!(pod.status, PodStatus::default());
    }

    #[test]
    fn static_and_mirror_detection() {
        let mut pod = Pod::default();
        assert!(!pod.is_static());
        let ann = &mut pod.metadata.annotations;
        ann.insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
        assert!(pod.is_static() && !pod.is_mirror());
        pod.metadata
            .annotations
            .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_API.into());
        assert!(!pod.is_static());
        pod.metadata
            .annotations
            .insert(CONFIG_MIRROR_ANNOTATION_KEY.into(), "abc".into());
        assert!(pod.is_mirror());
        pod.metadata.deletion_timestamp = Some(Time::from_unix_seconds(5));
        assert!(pod.deletion_requested());
    }

    #[test]
    fn int_or_string() {
        let v: Vec<IntOrString> = serde_json::from_str(r#"[80, "http"]"#).unwrap();
        assert_eq!(
            v,
            [IntOrString::Int(80), IntOrString::String("http".into())]
        );
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"[80,"http"]"#);
    }
}
