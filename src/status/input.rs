//! What pod status generation reads: [`PodStatusInput`] (built by the pod worker after
//! each sync), with the probe results and an eviction decision in it. Plain data
//! shared by `generate.rs` and `containers.rs`, so neither imports the other's types.

use std::collections::BTreeMap;

use crate::api::meta::Time;
use crate::api::pod::{Pod, PodCondition, PodStatus, QosClass};
use crate::runtime::model::PodRuntimeStatus;
use crate::runtime::result::WaitingReason;

/// The latest probe results, keyed by the runtime's container ID (without the
/// `<runtime>://` prefix). `true` is Success; Failure and Unknown are `false`. A
/// container with a probe in its spec and no entry here has not been probed yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeResults {
    pub readiness: BTreeMap<String, bool>,
    pub startup: BTreeMap<String, bool>,
}

/// A decision to fail the pod with a reason (upstream pod sync handlers' `ShouldEvict`,
/// e.g. `DeadlineExceeded` when activeDeadlineSeconds passed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Eviction {
    pub reason: String,
    pub message: String,
}

/// Everything [`generate_pod_status`](crate::status::generate_pod_status) looks at. Build it with [`PodStatusInput::new`]
/// and set the fields that apply.
#[derive(Clone, Debug)]
pub struct PodStatusInput<'a> {
    /// The pod as the kubelet has it; `pod.status` is the API copy.
    pub pod: &'a Pod,
    /// The runtime's view: sandboxes and every container instance, newest first.
    pub runtime: &'a PodRuntimeStatus,
    /// The status manager's cached status; `None` means use the API copy
    /// (`pod.status`), e.g. right after a kubelet restart.
    pub previous: Option<&'a PodStatus>,
    /// Readiness and startup results by container ID.
    pub probes: ProbeResults,
    /// Why the last sync could not start a container, by container name.
    pub sync_errors: BTreeMap<String, WaitingReason>,
    /// The pod's containers will not run again (termination finished): all-stopped
    /// means Succeeded or Failed whatever the restart policy.
    pub pod_is_terminal: bool,
    /// The pod is being terminated (killed) though not deleted: nothing restarts.
    pub terminating: bool,
    /// Fail the pod with this reason (active deadline, eviction).
    pub eviction: Option<Eviction>,
    /// The node's IPs, primary first (empty: keep what the previous status says).
    pub host_ips: Vec<String>,
    /// Prefix of container IDs, e.g. `containerd`.
    pub runtime_name: String,
    /// The pod's QoS class; `None` keeps the previous one.
    pub qos_class: Option<QosClass>,
    /// Resize conditions (PodResizePending / PodResizeInProgress) to report.
    pub resize_conditions: Vec<PodCondition>,
    pub now: Time,
}

impl<'a> PodStatusInput<'a> {
    /// An input with no previous status, probe results or sync errors.
    pub fn new(pod: &'a Pod, runtime: &'a PodRuntimeStatus, runtime_name: &str, now: Time) -> Self {
        Self {
            pod,
            runtime,
            previous: None,
            probes: ProbeResults::default(),
            sync_errors: BTreeMap::new(),
            pod_is_terminal: false,
            terminating: false,
            eviction: None,
            host_ips: Vec::new(),
            runtime_name: runtime_name.to_owned(),
            qos_class: None,
            resize_conditions: Vec::new(),
            now,
        }
    }
}
