//! What a node shutdown does to the pods, pure (upstream nodeshutdown's
//! groupByPriority, the grace period override and the status edit): which group each
//! active pod is killed in, with which grace period, and the status it ends with.

use std::sync::Arc;

use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{Pod, PodCondition, PodPhase, PodStatus, POD_DISRUPTION_TARGET};
use crate::status::conditions::update_condition;

use super::config::PriorityPeriod;

/// The reason of a pod killed for the shutdown.
pub const SHUTDOWN_REASON: &str = "Terminated";
/// Its message (status message and DisruptionTarget condition).
pub const SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Admission's reason while the node shuts down.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Admission's message while the node shuts down.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The DisruptionTarget reason of a termination the kubelet decided.
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// The Ready condition's message while the node shuts down (upstream ShutdownStatus).
pub const NODE_SHUTTING_DOWN: &str = "node is shutting down";

/// One group of pods killed together, within the group's period.
#[derive(Clone, Debug)]
pub struct Group {
    pub period: PriorityPeriod,
    pub pods: Vec<Arc<Pod>>,
}

/// Puts each pod into the group of the highest row whose priority it reaches; pods
/// below the lowest row go to the lowest, above the highest to the highest (upstream
/// groupByPriority). `periods` are sorted by priority, lowest first. A pod without a
/// priority counts as 0. Every row gives a group, empty or not, in order.
pub fn group_by_priority(periods: &[PriorityPeriod], pods: &[Arc<Pod>]) -> Vec<Group> {
    let mut groups: Vec<Group> = periods
        .iter()
        .map(|&period| Group {
            period,
            pods: Vec::new(),
        })
        .collect();
    if groups.is_empty() {
        return groups;
    }
    for pod in pods {
        let priority = pod.spec.priority.unwrap_or(0);
        // The last row whose priority ≤ the pod's, else the first.
        let index = groups
            .iter()
            .rposition(|g| g.period.priority <= priority)
            .unwrap_or(0);
        groups[index].pods.push(pod.clone());
    }
    groups
}

/// The grace period a pod is killed with: the group's, or the pod's own when that is
/// shorter (upstream: a pod without one gets the group's).
pub fn pod_grace_seconds(pod: &Pod, group: &PriorityPeriod) -> i64 {
    let group_seconds = group.shutdown_grace_period_seconds.max(0);
    match pod.spec.termination_grace_period_seconds {
        Some(own) if own <= group_seconds => own.max(0),
        _ => group_seconds,
    }
}

/// The status edit of a pod killed for the shutdown: Failed (a Succeeded pod stays
/// so), reason `Terminated`, the shutdown message, and a `DisruptionTarget`
/// condition (reason `TerminationByKubelet`).
pub fn shutdown_status(status: &mut PodStatus, now: Time) {
    if status.phase != Some(PodPhase::Succeeded) {
        status.phase = Some(PodPhase::Failed);
    }
    status.reason = Some(SHUTDOWN_REASON.to_owned());
    status.message = Some(SHUTDOWN_MESSAGE.to_owned());
    let condition = PodCondition {
        type_: POD_DISRUPTION_TARGET.to_owned(),
        status: ConditionStatus::True,
        observed_generation: None,
        last_probe_time: None,
        last_transition_time: None,
        reason: Some(TERMINATION_BY_KUBELET.to_owned()),
        message: Some(SHUTDOWN_MESSAGE.to_owned()),
    };
    update_condition(status, condition, now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::qos::SYSTEM_CRITICAL_PRIORITY;

    fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.spec.priority = priority;
        p.spec.termination_grace_period_seconds = grace;
        Arc::new(p)
    }

    fn row(priority: i32, seconds: i64) -> PriorityPeriod {
        PriorityPeriod {
            priority,
            shutdown_grace_period_seconds: seconds,
        }
    }

    fn names(g: &Group) -> Vec<&str> {
        g.pods.iter().map(|p| p.name()).collect()
    }

    #[test]
    fn regular_pods_go_first_and_critical_ones_last() {
        let periods = [row(0, 20), row(SYSTEM_CRITICAL_PRIORITY, 10)];
        let pods = [
            pod("plain", None, None),
            pod("cluster-critical", Some(SYSTEM_CRITICAL_PRIORITY), None),
            pod("node-critical", Some(SYSTEM_CRITICAL_PRIORITY + 1000), None),
            pod("high", Some(1_000_000), None),
            pod("negative", Some(-5), None),
        ];
        let groups = group_by_priority(&periods, &pods);
        assert_eq!(groups.len(), 2);
        assert_eq!(names(&groups[0]), ["plain", "high", "negative"]);
        assert_eq!(names(&groups[1]), ["cluster-critical", "node-critical"]);
    }

    #[test]
    fn a_table_puts_each_pod_in_the_highest_row_it_reaches() {
        // Upstream's documented example rows.
        let periods = [
            row(0, 60),
            row(10000, 180),
            row(100000, 120),
            row(SYSTEM_CRITICAL_PRIORITY, 60),
        ];
        let pods = [
            pod("p0", Some(0), None),
            pod("p9999", Some(9999), None),
            pod("p10000", Some(10000), None),
            pod("p50000", Some(50000), None),
            pod("p100000", Some(100000), None),
            pod("below", Some(-1), None),
            pod("top", Some(i32::MAX), None),
        ];
        let groups = group_by_priority(&periods, &pods);
        assert_eq!(names(&groups[0]), ["p0", "p9999", "below"]);
        assert_eq!(names(&groups[1]), ["p10000", "p50000"]);
        assert_eq!(names(&groups[2]), ["p100000"]);
        assert_eq!(names(&groups[3]), ["top"]);
        // A table that starts above a pod's priority: the lowest row takes it.
        let high_only = [row(1000, 5)];
        let groups = group_by_priority(&high_only, &[pod("low", Some(1), None)]);
        assert_eq!(names(&groups[0]), ["low"]);
        assert!(group_by_priority(&[], &pods).is_empty());
    }

    #[test]
    fn a_pod_is_killed_with_its_own_grace_when_shorter_than_the_groups() {
        let group = row(0, 20);
        assert_eq!(pod_grace_seconds(&pod("a", None, Some(5)), &group), 5);
        assert_eq!(pod_grace_seconds(&pod("a", None, Some(20)), &group), 20);
        assert_eq!(pod_grace_seconds(&pod("a", None, Some(30)), &group), 20);
        assert_eq!(pod_grace_seconds(&pod("a", None, None), &group), 20);
        assert_eq!(pod_grace_seconds(&pod("a", None, Some(0)), &group), 0);
        assert_eq!(pod_grace_seconds(&pod("a", None, Some(3)), &row(0, 0)), 0);
    }

    #[test]
    fn the_status_says_the_node_shut_down() {
        let now = Time::from_unix_seconds(1_700_000_000);
        let mut running = PodStatus {
            phase: Some(PodPhase::Running),
            ..Default::default()
        };
        shutdown_status(&mut running, now);
        assert_eq!(running.phase, Some(PodPhase::Failed));
        assert_eq!(running.reason.as_deref(), Some("Terminated"));
        assert_eq!(
            running.message.as_deref(),
            Some("Pod was terminated in response to imminent node shutdown.")
        );
        let c = &running.conditions[0];
        assert_eq!(c.type_, "DisruptionTarget");
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(c.reason.as_deref(), Some("TerminationByKubelet"));
        assert_eq!(c.message.as_deref(), Some(SHUTDOWN_MESSAGE));
        assert_eq!(c.last_transition_time, Some(now));
        // A pod that already succeeded keeps its phase.
        let mut done = PodStatus {
            phase: Some(PodPhase::Succeeded),
            ..Default::default()
        };
        shutdown_status(&mut done, now);
        assert_eq!(done.phase, Some(PodPhase::Succeeded));
        assert_eq!(done.reason.as_deref(), Some("Terminated"));
    }
}
