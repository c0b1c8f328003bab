//! The whole API status of one pod from everything the kubelet knows about it
//! (upstream `generateAPIPodStatus` and `convertStatusToAPIStatus`).
//!
//! Called by pod workers after each sync (SyncPod, SyncTerminatingPod,
//! SyncTerminatedPod) with one [`PodStatusInput`]; pure: the caller gathers the runtime
//! status, probe results and sync errors, passes `now`, and hands the result to the
//! status manager.
//!
//! Phase rules beyond `phase.rs`: a terminal phase in the previous (cached) status
//! (kept even against the other terminal phase) or in the API is sticky, reason and message are kept while the phase is unchanged, and
//! an eviction forces Failed. Conditions: foreign ones are kept from the API copy, a
//! DisruptionTarget from the previous status, the kubelet's own are regenerated and
//! their transition times carried from the previous status.

use std::net::IpAddr;

use crate::api::pod::{IpAddress, PodCondition, PodPhase, PodStatus, POD_DISRUPTION_TARGET};
use crate::runtime::model::SandboxState;

use super::conditions::{
    carry_transition_times, containers_ready, initialized, is_owned_by_kubelet, pod_ready,
    ready_to_start_containers, replace_or_append, scheduled,
};
use super::containers::{container_statuses, ContainerKind};
pub use super::input::{Eviction, PodStatusInput};
use super::is_terminal_phase;
use super::phase::pod_phase;

fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// Pod IPs in the node's preference: the first IP of the node's primary family, then
/// the first of the other family. Unparsable entries are dropped.
pub fn sort_pod_ips(ips: &[String], node_prefers_v6: bool) -> Vec<String> {
    let family = |want_v6: bool| {
        ips.iter()
            .find(|ip| parse_ip(ip).is_some_and(|a| a.is_ipv6() == want_v6))
            .cloned()
    };
    [family(node_prefers_v6), family(!node_prefers_v6)]
        .into_iter()
        .flatten()
        .collect()
}

fn is_v6(ip: &str) -> Option<bool> {
    parse_ip(ip).map(|a| a.is_ipv6())
}

fn ip_list(ips: &[String]) -> Vec<IpAddress> {
    ips.iter().map(|ip| IpAddress { ip: ip.clone() }).collect()
}

/// Sets podIP(s) and hostIP(s).
fn set_ips(input: &PodStatusInput, previous: &PodStatus, s: &mut PodStatus) {
    let host: Vec<String> = input.host_ips.iter().take(2).cloned().collect();
    if let Some(primary) = host.first() {
        s.host_ip = Some(primary.clone());
        s.host_ips = ip_list(&host);
    } else {
        s.host_ip = previous.host_ip.clone();
        s.host_ips = previous.host_ips.clone();
    }

    let prefers_v6 = host.first().and_then(|ip| is_v6(ip)).unwrap_or(false);
    let ips = sort_pod_ips(&input.runtime.ips, prefers_v6);
    let sandbox_ready = input
        .runtime
        .sandboxes
        .iter()
        .any(|sb| sb.state == SandboxState::Ready);
    if ips.is_empty() && !sandbox_ready {
        // The sandbox is gone (pod finished or being recreated): its IP was real, keep
        // reporting it rather than blanking it (kubernetes#125370).
        s.pod_ip = previous.pod_ip.clone();
        s.pod_ips = previous.pod_ips.clone();
    } else {
        s.pod_ip = ips.first().cloned();
        s.pod_ips = ip_list(&ips);
    }

    if input.pod.spec.host_network == Some(true) {
        if let Some(primary) = host.first() {
            if s.pod_ip.as_deref().unwrap_or("").is_empty() {
                s.pod_ip = Some(primary.clone());
                s.pod_ips = ip_list(&host[..1]);
            }
            if let (Some(second), [only]) = (host.get(1), s.pod_ips.as_slice()) {
                if is_v6(&only.ip) != is_v6(second) {
                    s.pod_ips.push(IpAddress { ip: second.clone() });
                }
            }
        }
    }
}

fn non_empty(a: &Option<String>) -> Option<String> {
    a.as_ref().filter(|s| !s.is_empty()).cloned()
}

/// Phase, reason and message.
fn set_phase(input: &PodStatusInput, previous: &PodStatus, s: &mut PodStatus) {
    let api = &input.pod.status;
    let mut phase = pod_phase(
        input.pod,
        &s.init_container_statuses,
        &s.container_statuses,
        input.pod_is_terminal,
    );
    // A terminal phase once set is never changed, not even to the other terminal phase
    // (upstream's status manager refuses "illegal phase transition"): an evicted pod
    // whose container then exits 0 stays Failed/Evicted rather than Succeeded.
    if is_terminal_phase(previous.phase.as_ref()) {
        phase = previous.phase.clone().unwrap_or(phase);
    } else if !is_terminal_phase(Some(&phase)) && is_terminal_phase(api.phase.as_ref()) {
        phase = api.phase.clone().unwrap_or(phase);
    }
    let (mut reason, mut message) = (None, None);
    if previous.phase.as_ref() == Some(&phase) {
        reason = non_empty(&previous.reason).or_else(|| non_empty(&api.reason));
        message = non_empty(&previous.message).or_else(|| non_empty(&api.message));
    }
    if let Some(ev) = &input.eviction {
        phase = PodPhase::Failed;
        reason = Some(ev.reason.clone());
        message = Some(ev.message.clone());
    }
    // A pod the API shows as finished never leaves that phase.
    if let Some(api_phase) = api.phase.as_ref().filter(|p| is_terminal_phase(Some(p))) {
        phase = api_phase.clone();
    }
    s.phase = Some(phase);
    s.reason = reason;
    s.message = message;
}

/// Foreign conditions from the API, DisruptionTarget from the previous status, then
/// the kubelet's own, in upstream's order.
fn set_conditions(input: &PodStatusInput, previous: &PodStatus, s: &mut PodStatus) {
    let pod = input.pod;
    let phase = s.phase.clone().unwrap_or_default();
    let (init, regular) = (&s.init_container_statuses, &s.container_statuses);
    let mut conds: Vec<PodCondition> = pod
        .status
        .conditions
        .iter()
        .filter(|c| !is_owned_by_kubelet(&c.type_))
        .cloned()
        .collect();
    if let Some(dt) = previous.condition(POD_DISRUPTION_TARGET) {
        replace_or_append(&mut conds, dt.clone());
    }
    conds.push(ready_to_start_containers(pod, input.runtime));
    conds.push(initialized(pod, init, regular, &phase));
    let ready = pod_ready(pod, &conds, init, regular, &phase);
    conds.push(ready);
    conds.push(containers_ready(pod, init, regular, &phase));
    conds.push(scheduled(pod));
    for c in &input.resize_conditions {
        replace_or_append(&mut conds, c.clone());
    }
    s.conditions = conds;
    carry_transition_times(s, previous, input.now);
}

/// The API status of `input.pod`.
pub fn generate_pod_status(input: &PodStatusInput) -> PodStatus {
    let pod = input.pod;
    let previous = input.previous.unwrap_or(&pod.status);
    let mut s = PodStatus {
        observed_generation: pod.metadata.generation,
        qos_class: input
            .qos_class
            .clone()
            .or_else(|| previous.qos_class.clone()),
        start_time: previous
            .start_time
            .or(pod.status.start_time)
            .or(Some(input.now)),
        ..PodStatus::default()
    };
    s.container_statuses =
        container_statuses(input, ContainerKind::Regular, &previous.container_statuses);
    s.init_container_statuses = container_statuses(
        input,
        ContainerKind::Init,
        &previous.init_container_statuses,
    );
    s.ephemeral_container_statuses = container_statuses(
        input,
        ContainerKind::Ephemeral,
        &previous.ephemeral_container_statuses,
    );
    set_ips(input, previous, &mut s);
    set_phase(input, previous, &mut s);
    set_conditions(input, previous, &mut s);
    s
}

#[cfg(test)]
mod tests;
