//! Pure node status generation (upstream `nodestatus` setters): capacity and
//! allocatable, the MemoryPressure/DiskPressure/PIDPressure/Ready conditions with
//! their heartbeat and transition times, addresses, nodeInfo, daemon endpoints and
//! `images` (largest first, at most 50);
//! plus "did anything but heartbeats change" and the status PATCH body.
//!
//! No I/O, no clock: the `node` thread passes the machine facts, the health of the
//! runtime, network and PLEG, and `now`. [`apply`] updates the status the API server
//! has (so fields litelet does not own, like other writers' conditions or extended
//! resources, stay as they are) and returns the condition events to record.
//!
//! Invariants: allocatable = capacity − (kube-reserved + system-reserved + hard
//! eviction threshold), never negative, with huge pages also taken from memory; a
//! condition's lastTransitionTime only moves when its status changes; Ready is the last
//! of litelet's conditions when they are first added.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::meta::{ConditionStatus, Time};
use crate::api::node::{
    ContainerImage, DaemonEndpoint, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
    NODE_DISK_PRESSURE, NODE_MEMORY_PRESSURE, NODE_PID_PRESSURE, NODE_READY,
};
use crate::api::node_patch;
use crate::api::quantity::{Format, Quantity};
use crate::node::addresses::node_addresses;
use crate::node::config::NodeConfig;
use crate::node::machine::MachineInfo;

/// The Kubernetes release whose kubelet behaviour litelet implements (its flags,
/// config fields and feature gates are that release's).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The version litelet reports as `nodeInfo.kubeletVersion` (and, run as `kubelet`,
/// to `--version`): [`KUBERNETES_VERSION`] with litelet's own version as semver build
/// metadata (as k3s does with `+k3s1`), so version parsers accept it and compare it
/// as that release.
pub const KUBELET_VERSION: &str = concat!("v1.36.3+litelet.", env!("CARGO_PKG_VERSION"));

/// The conditions litelet owns (others, such as NetworkUnavailable, belong to other
/// writers and are never sent).
pub const OWNED_CONDITIONS: [&str; 4] = [
    NODE_MEMORY_PRESSURE,
    NODE_DISK_PRESSURE,
    NODE_PID_PRESSURE,
    NODE_READY,
];

/// Capacities without which the node is not Ready.
const REQUIRED_CAPACITY: [&str; 4] = ["cpu", "memory", "pods", "ephemeral-storage"];

pub const READY_MESSAGE: &str = "kubelet is posting ready status";

/// What the rest of litelet says about the node when a status is computed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Container runtime problems (runtime not ready or down, PLEG unhealthy).
    pub runtime_errors: Vec<String>,
    /// Pod network problems (the runtime's NetworkReady condition).
    pub network_errors: Vec<String>,
    pub memory_pressure: bool,
    pub disk_pressure: bool,
    pub pid_pressure: bool,
    /// The node is shutting down (graceful node shutdown): Ready turns false.
    pub shutting_down: bool,
}

/// Everything one status computation depends on.
#[derive(Clone, Copy, Debug)]
pub struct StatusInputs<'a> {
    pub config: &'a NodeConfig,
    pub machine: &'a MachineInfo,
    pub health: &'a Health,
    /// `<runtime name>://<version>`; `None` (runtime unreachable) keeps the last value.
    pub runtime_version: Option<&'a str>,
    /// The images on the node (see [`node_images`]); `None` keeps the last list.
    pub images: Option<&'a [ContainerImage]>,
    pub now: Time,
}

/// Upstream's `nodeStatusMaxImages` default and `MaxNamesPerImageInNodeStatus`.
pub const MAX_IMAGES: usize = 50;
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// An image as the runtime lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeImage {
    pub repo_digests: Vec<String>,
    pub repo_tags: Vec<String>,
    pub size_bytes: u64,
}

/// `status.images` as upstream's images setter makes it: largest first, at most
/// [`MAX_IMAGES`], each named by its digests then its tags, at most
/// [`MAX_NAMES_PER_IMAGE`] names.
pub fn node_images(images: &[RuntimeImage]) -> Vec<ContainerImage> {
    let mut sorted: Vec<&RuntimeImage> = images.iter().collect();
    sorted.sort_by_key(|i| std::cmp::Reverse(i.size_bytes));
    sorted
        .into_iter()
        .take(MAX_IMAGES)
        .map(|i| ContainerImage {
            names: i
                .repo_digests
                .iter()
                .chain(&i.repo_tags)
                .take(MAX_NAMES_PER_IMAGE)
                .cloned()
                .collect(),
            size_bytes: Some(i64::try_from(i.size_bytes).unwrap_or(i64::MAX)),
        })
        .collect()
}

/// The node event to record when a condition changes (upstream's event reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionEvent {
    pub reason: &'static str,
}

/// `hugepages-2Mi` for 2 MiB pages.
pub fn hugepage_resource(page_size_bytes: u64) -> String {
    let size = i64::try_from(page_size_bytes).unwrap_or(i64::MAX);
    format!("hugepages-{}", Quantity::from_value(size, Format::BinarySI))
}

fn bytes(b: u64) -> Quantity {
    Quantity::from_value(i64::try_from(b).unwrap_or(i64::MAX), Format::BinarySI)
}

/// Capacity from the machine facts; resources that could not be read are absent.
pub fn machine_capacity(machine: &MachineInfo, max_pods: u32) -> BTreeMap<String, Quantity> {
    let mut c = BTreeMap::new();
    if let Some(n) = machine.num_cpus {
        c.insert(
            "cpu".to_owned(),
            Quantity::from_milli(i64::from(n) * 1000, Format::DecimalSI),
        );
    }
    if let Some(m) = machine.memory_bytes {
        c.insert("memory".to_owned(), bytes(m));
    }
    c.insert(
        "pods".to_owned(),
        Quantity::from_value(i64::from(max_pods), Format::DecimalSI),
    );
    if let Some(s) = machine.ephemeral_storage_bytes {
        c.insert("ephemeral-storage".to_owned(), bytes(s));
    }
    for hp in &machine.hugepages {
        let total = hp.page_size_bytes.saturating_mul(hp.count);
        c.insert(hugepage_resource(hp.page_size_bytes), bytes(total));
    }
    c
}

/// What is held back from pods per resource: kube-reserved + system-reserved + the
/// hard eviction threshold (`memory.available` from memory, `nodefs.available` from
/// ephemeral storage).
pub fn reservation(
    config: &NodeConfig,
    capacity: &BTreeMap<String, Quantity>,
) -> BTreeMap<String, Quantity> {
    let mut total: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut add = |name: &str, q: &Quantity| {
        let sum = match total.get(name) {
            Some(cur) => cur.add(q).unwrap_or_else(|| cur.clone()),
            None => q.clone(),
        };
        total.insert(name.to_owned(), sum);
    };
    for reserved in [&config.kube_reserved, &config.system_reserved] {
        for (name, q) in reserved {
            add(name, q);
        }
    }
    for (signal, resource) in [
        ("memory.available", "memory"),
        ("nodefs.available", "ephemeral-storage"),
    ] {
        if let (Some(t), Some(cap)) = (config.eviction_hard.get(signal), capacity.get(resource)) {
            add(resource, &t.reservation(cap));
        }
    }
    total
}

/// Allocatable for every capacity entry: capacity − reservation, at least zero; memory
/// also loses what huge pages take.
pub fn allocatable(
    capacity: &BTreeMap<String, Quantity>,
    reserved: &BTreeMap<String, Quantity>,
) -> BTreeMap<String, Quantity> {
    let clamp = |q: Quantity| if q.is_negative() { Quantity::zero() } else { q };
    let minus = |a: &Quantity, b: &Quantity| clamp(a.sub(b).unwrap_or_else(Quantity::zero));
    let mut out: BTreeMap<String, Quantity> = capacity
        .iter()
        .map(|(name, cap)| {
            let v = match reserved.get(name) {
                Some(r) => minus(cap, r),
                None => cap.clone(),
            };
            (name.clone(), v)
        })
        .collect();
    if let Some(mem) = out.get("memory").cloned() {
        let after = capacity
            .iter()
            .filter(|(name, _)| name.starts_with("hugepages-"))
            .fold(mem, |m, (_, hp)| minus(&m, hp));
        out.insert("memory".to_owned(), after);
    }
    out
}

/// Upstream's error aggregation: one message as is, several as `[a, b]`, repeats dropped.
fn aggregate(messages: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_owned()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// Sets one condition; true when its status changed (or it is new).
fn set_condition(
    conditions: &mut Vec<NodeCondition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Time,
) -> (bool, bool) {
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    let is_new = existing.is_none();
    let c = match existing {
        Some(c) => c,
        None => {
            conditions.push(NodeCondition {
                type_: type_.to_owned(),
                status: ConditionStatus::Unknown,
                ..NodeCondition::default()
            });
            let last = conditions.len() - 1;
            &mut conditions[last]
        }
    };
    let changed = is_new || c.status != status;
    if changed {
        c.last_transition_time = Some(now);
    }
    c.status = status;
    c.reason = Some(reason.to_owned());
    c.message = Some(message.to_owned());
    c.last_heartbeat_time = Some(now);
    (changed, is_new)
}

/// Device plugins' resources into capacity (every device) and allocatable (the
/// healthy ones), as upstream's device manager reports them; a resource whose plugin
/// is gone past its grace reports zero.
pub fn apply_devices(status: &mut NodeStatus, devices: &BTreeMap<String, (i64, i64)>) {
    for (name, (capacity, allocatable)) in devices {
        status.capacity.insert(
            name.clone(),
            Quantity::from_milli(capacity.saturating_mul(1000), Format::DecimalSI),
        );
        status.allocatable.insert(
            name.clone(),
            Quantity::from_milli(allocatable.saturating_mul(1000), Format::DecimalSI),
        );
    }
}

/// Brings `status` (the API server's, or empty for a new node) up to date; returns the
/// events of conditions that changed.
pub fn apply(status: &mut NodeStatus, inputs: &StatusInputs) -> Vec<ConditionEvent> {
    let StatusInputs {
        config,
        machine,
        health,
        runtime_version,
        images,
        now,
    } = *inputs;
    if let Some(images) = images {
        status.images = images.to_vec();
    }

    // Addresses: upstream's setter (`addresses.rs`); the machine reader resolved the
    // detected address when `--node-ip` names none.
    let ips = config.node_ips();
    if let Some(addresses) = node_addresses(
        &status.addresses,
        ips,
        machine.node_ip,
        &config.hostname,
        config.cloud_provider,
    ) {
        status.addresses = addresses;
    }

    // Capacity: litelet's entries replace theirs; huge page sizes the machine no
    // longer has go; anything else (extended resources) stays.
    let fresh = machine_capacity(machine, config.max_pods);
    status
        .capacity
        .retain(|name, _| !name.starts_with("hugepages-") || fresh.contains_key(name));
    status.capacity.extend(fresh);
    status.allocatable = allocatable(&status.capacity, &reservation(config, &status.capacity));

    status.node_info = Some(node_info(
        status.node_info.take().unwrap_or_default(),
        machine,
        runtime_version,
    ));
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(config.port),
        }),
    });

    let mut events = set_pressure_conditions(&mut status.conditions, health, now);
    let (ready, reason, message) = ready_condition(health, &status.capacity);
    let is_true = ready == ConditionStatus::True;
    let (changed, is_new) = set_condition(
        &mut status.conditions,
        NODE_READY,
        ready,
        reason,
        &message,
        now,
    );
    // As upstream: a Ready condition seen for the first time records no event.
    if changed && !is_new {
        events.push(ConditionEvent {
            reason: if is_true { "NodeReady" } else { "NodeNotReady" },
        });
    }
    events
}

/// `nodeInfo` from the machine facts and the runtime's version, over the published
/// one (the base: swap turned off must drop it).
fn node_info(
    mut info: NodeSystemInfo,
    machine: &MachineInfo,
    runtime_version: Option<&str>,
) -> NodeSystemInfo {
    info.machine_id = machine.machine_id.clone();
    info.system_uuid = machine.system_uuid.clone();
    info.boot_id = machine.boot_id.clone();
    info.kernel_version = machine.kernel_version.clone();
    info.os_image = machine.os_image.clone();
    info.kubelet_version = KUBELET_VERSION.to_owned();
    info.operating_system = "linux".to_owned();
    info.architecture = machine.architecture.clone();
    if let Some(v) = runtime_version {
        info.container_runtime_version = v.to_owned();
    }
    // Upstream reports the machine's swap (NodeSwap, on by default since 1.30); the
    // apiserver refuses a capacity of zero, so a node without swap leaves it out.
    // The published one is the base here: swap turned off must drop it.
    match machine.swap_bytes.filter(|&bytes| bytes > 0) {
        Some(swap) => info.set_swap_capacity(swap),
        None => {
            info.clear_swap();
        }
    }
    info
}

/// A pressure condition's type, then its (reason, message, event) when under
/// pressure and when not (upstream's words).
type PressureWords = (
    &'static str,
    (&'static str, &'static str, &'static str),
    (&'static str, &'static str, &'static str),
);

/// The pressure conditions, in the order they are first added.
const PRESSURE_CONDITIONS: [PressureWords; 3] = [
    (
        NODE_MEMORY_PRESSURE,
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ),
    ),
    (
        NODE_DISK_PRESSURE,
        (
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ),
        (
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
        ),
    ),
    (
        NODE_PID_PRESSURE,
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
        ),
    ),
];

/// Sets the memory, disk and PID pressure conditions; the events of those that changed.
fn set_pressure_conditions(
    conditions: &mut Vec<NodeCondition>,
    health: &Health,
    now: Time,
) -> Vec<ConditionEvent> {
    let under = [
        health.memory_pressure,
        health.disk_pressure,
        health.pid_pressure,
    ];
    let mut events = Vec::new();
    for ((type_, yes, no), under) in PRESSURE_CONDITIONS.into_iter().zip(under) {
        let (reason, message, event) = if under { yes } else { no };
        let (changed, _) = set_condition(conditions, type_, under.into(), reason, message, now);
        if changed {
            events.push(ConditionEvent { reason: event });
        }
    }
    events
}

/// The Ready condition's status, reason and message: not ready with the runtime's,
/// the network's and the shutdown's problems and any missing required capacity, in
/// that order.
fn ready_condition(
    health: &Health,
    capacity: &BTreeMap<String, Quantity>,
) -> (ConditionStatus, &'static str, String) {
    let mut errors: Vec<String> = health.runtime_errors.clone();
    errors.extend(health.network_errors.iter().cloned());
    // Upstream's node shutdown manager error, after the runtime's and the network's.
    if health.shutting_down {
        errors.push("node is shutting down".to_owned());
    }
    let missing: Vec<&str> = REQUIRED_CAPACITY
        .iter()
        .copied()
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    match aggregate(&errors) {
        None => (
            ConditionStatus::True,
            "KubeletReady",
            READY_MESSAGE.to_owned(),
        ),
        Some(m) => (ConditionStatus::False, "KubeletNotReady", m),
    }
}

/// The status with heartbeat times blanked and conditions in a fixed order.
fn without_heartbeats(status: &NodeStatus) -> NodeStatus {
    let mut s = status.clone();
    for c in &mut s.conditions {
        c.last_heartbeat_time = None;
    }
    s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    s
}

/// True when something other than heartbeat times differs (upstream's
/// nodeStatusHasChanged).
pub fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    without_heartbeats(old) != without_heartbeats(new)
}

/// Whether to send the status now: on a change, or when the last report is older than
/// the report frequency (or there was none).
pub fn should_report(
    changed: bool,
    since_last_report: Option<std::time::Duration>,
    report_frequency: std::time::Duration,
) -> bool {
    changed || since_last_report.is_none_or(|d| d >= report_frequency)
}

/// The strategic merge patch of `nodes/<name>/status` that sends litelet's fields of
/// `new`, litelet's own conditions among them (shaped by `api/node_patch.rs`).
pub fn status_patch(old: &NodeStatus, new: &NodeStatus) -> Value {
    node_patch::status_patch(old, new, &OWNED_CONDITIONS)
}

#[cfg(test)]
mod tests;
