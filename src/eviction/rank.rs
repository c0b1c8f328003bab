//! Which pod goes first (upstream `rankMemoryPressure`, `rankDiskPressureFunc`,
//! `rankPIDPressure`), and the eviction message. Pure.
//!
//! - memory: pods using more than they request first, then lower priority, then the
//!   largest usage above request;
//! - disk (nodefs: writable layers + logs + local volumes; imagefs: writable layers):
//!   the same with `ephemeral-storage` requests (inodes have no request);
//! - PIDs: lower priority, then the most processes.
//!
//! A pod without usage numbers sorts last (upstream: first; see `missing_last`). Critical pods (static,
//! mirror, or priority ≥ 2000000000) are never evicted ([`is_critical`]).

use std::cmp::Ordering;

use crate::api::pod::Pod;
use crate::api::quantity::{Format, Quantity};
use crate::cgroups::pod_resources::{container_requests, memory_bytes, pod_requests};

use super::config::Signal;
use super::signals::{ContainerUsage, Observation, PodUsage};

pub use crate::cgroups::qos::{is_critical, SYSTEM_CRITICAL_PRIORITY};

/// A pod with the usage the ranking reads (`None`: the sampler has none).
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub pod: &'a Pod,
    pub usage: Option<PodUsage>,
}

fn ephemeral_request(pod: &Pod) -> i64 {
    pod_requests(pod)
        .get("ephemeral-storage")
        .map_or(0, Quantity::value)
}

/// The usage and request the ranking compares for `signal`.
fn usage_and_request(signal: Signal, c: &Candidate<'_>) -> Option<(i64, i64)> {
    let u = c.usage?;
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
            Some((u.memory_working_set?, memory_bytes(&pod_requests(c.pod))))
        }
        Signal::NodeFsAvailable => Some((u.disk_bytes, ephemeral_request(c.pod))),
        Signal::NodeFsInodesFree => Some((u.disk_inodes, 0)),
        Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
            Some((u.rootfs_bytes, ephemeral_request(c.pod)))
        }
        Signal::ImageFsInodesFree | Signal::ContainerFsInodesFree => Some((u.rootfs_inodes, 0)),
        Signal::PidAvailable => Some((u.processes?, 0)),
    }
}

/// Missing numbers last. Upstream puts them first, but it measures afresh for every
/// round; litelet's sample can be 10 s old, and a pod missing from it is almost always
/// one that started since — evicting it first would kill the newest pod, not the one
/// using the resource.
fn missing_last(a: Option<(i64, i64)>, b: Option<(i64, i64)>) -> Option<Ordering> {
    match (a.is_none(), b.is_none()) {
        (false, false) => None,
        (x, y) => Some(x.cmp(&y)),
    }
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.priority.unwrap_or(0)
}

fn compare(signal: Signal, a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    let (ua, ub) = (usage_and_request(signal, a), usage_and_request(signal, b));
    let by_priority = priority(a.pod).cmp(&priority(b.pod));
    if signal == Signal::PidAvailable {
        return by_priority.then_with(|| {
            missing_last(ua, ub).unwrap_or_else(|| ub.map(|u| u.0).cmp(&ua.map(|u| u.0)))
        });
    }
    let exceeds = |u: Option<(i64, i64)>| u.is_some_and(|(used, req)| used > req);
    missing_last(ua, ub)
        .unwrap_or_else(|| exceeds(ub).cmp(&exceeds(ua)))
        .then(by_priority)
        .then_with(|| {
            let over = |u: Option<(i64, i64)>| u.map_or(0, |(used, req)| used - req);
            missing_last(ua, ub).unwrap_or_else(|| over(ub).cmp(&over(ua)))
        })
}

/// Sorts `pods` into eviction order for `signal`.
pub fn rank(signal: Signal, pods: &mut [Candidate<'_>]) {
    pods.sort_by(|a, b| compare(signal, a, b));
}

/// The quantity as the API prints it (`Mi`-style for bytes, plain for counts).
fn show(v: i64, signal: Signal) -> String {
    let format = match signal.resource() {
        "memory" | "ephemeral-storage" => Format::BinarySI,
        _ => Format::DecimalSI,
    };
    Quantity::from_value(v, format).to_string()
}

/// Upstream's eviction message: the resource, the threshold and what is available,
/// and each container that used more than it requested.
pub fn message(
    signal: Signal,
    threshold_amount: i64,
    obs: Option<&Observation>,
    pod: &Pod,
    containers: &[ContainerUsage],
) -> String {
    let resource = signal.resource();
    let mut m = format!("The node was low on resource: {resource}. ");
    if let Some(o) = obs {
        m += &format!(
            "Threshold quantity: {}, available: {}. ",
            show(threshold_amount, signal),
            show(o.available, signal)
        );
    }
    for container in &pod.spec.containers {
        let Some(used) = containers.iter().find(|c| c.name == container.name) else {
            continue;
        };
        let requests = container_requests(container);
        let (usage, request) = match resource {
            "memory" => (used.memory_working_set, memory_bytes(&requests)),
            "ephemeral-storage" => (
                Some(used.disk_bytes),
                requests.get(resource).map_or(0, Quantity::value),
            ),
            _ => (None, 0),
        };
        if let Some(usage) = usage.filter(|u| *u > request) {
            m += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                container.name,
                show(usage, signal),
                show(request, signal)
            );
        }
    }
    m
}
