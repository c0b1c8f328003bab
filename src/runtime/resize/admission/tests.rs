//! Resize admission verdicts (upstream `canResizePod`, target API 1.33+).

use super::*;
use crate::admission::NodeView;
use crate::api::pod::{QosClass as ApiQos, CONFIG_SOURCE_ANNOTATION_KEY};
use crate::cgroups::pod_resources::tests::{container, pod, sidecar};

fn node(cpu: &str, memory: &str) -> NodeView {
    let mut n = NodeView::default();
    for (k, v) in [("cpu", cpu), ("memory", memory), ("pods", "110")] {
        n.allocatable.insert(k.into(), Quantity::parse(v).unwrap());
    }
    n
}

fn burstable(uid: &str, cpu: &str) -> Pod {
    let mut p = pod(
        vec![container("c", &[("cpu", cpu)], &[("memory", "1Gi")])],
        vec![],
    );
    p.metadata.uid = Some(uid.into());
    p.status.qos_class = Some(ApiQos::Burstable);
    p
}

fn verdict(desired: &Pod, allocated: &Pod, others: &[&Pod]) -> Verdict {
    can_resize(&ResizeRequest {
        desired,
        allocated,
        others,
        node: &node("4", "8Gi"),
    })
}

fn reason(v: &Verdict) -> Option<PendingReason> {
    match v {
        Verdict::Fits => None,
        Verdict::Pending { reason, .. } => Some(*reason),
    }
}

#[test]
fn a_resize_that_fits_is_admitted() {
    let (old, new) = (burstable("a", "100m"), burstable("a", "200m"));
    assert_eq!(verdict(&new, &old, &[]), Verdict::Fits);
}

#[test]
fn beyond_node_allocatable_is_infeasible() {
    let (old, new) = (burstable("a", "100m"), burstable("a", "5"));
    let v = verdict(&new, &old, &[]);
    assert_eq!(
        v,
        Verdict::Pending {
            reason: PendingReason::Infeasible,
            message: "Node didn't have enough capacity: cpu, requested: 5, capacity: 4".into()
        }
    );
}

#[test]
fn not_beside_the_other_pods_is_deferred() {
    let other = burstable("b", "3");
    let (old, new) = (burstable("a", "100m"), burstable("a", "2"));
    let v = verdict(&new, &old, &[&other]);
    assert_eq!(reason(&v), Some(PendingReason::Deferred), "{v:?}");
    // Without the other pod it fits.
    assert_eq!(verdict(&new, &old, &[]), Verdict::Fits);
}

#[test]
fn static_pods_are_infeasible() {
    let (old, mut new) = (burstable("a", "100m"), burstable("a", "200m"));
    new.metadata
        .annotations
        .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), "file".into());
    let v = verdict(&new, &old, &[]);
    assert_eq!(
        v,
        Verdict::Pending {
            reason: PendingReason::Infeasible,
            message: "In-place resize of static pods is not supported".into()
        }
    );
}

#[test]
fn qos_class_changes_are_infeasible_not_a_crash() {
    // BestEffort → Burstable (the API server refuses it; litelet must not act on it).
    let mut old = pod(vec![container("c", &[], &[])], vec![]);
    old.status.qos_class = Some(ApiQos::BestEffort);
    let mut new = old.clone();
    new.spec.containers[0] = container("c", &[("cpu", "100m")], &[]);
    let v = verdict(&new, &old, &[]);
    match v {
        Verdict::Pending {
            reason: PendingReason::Infeasible,
            message,
        } => assert!(
            message.contains("from BestEffort to Burstable"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Burstable → BestEffort.
    let v = verdict(&old, &burstable("uid-1", "100m"), &[]);
    assert_eq!(reason(&v), Some(PendingReason::Infeasible));
}

#[test]
fn init_containers_other_than_sidecars_do_not_resize() {
    let init = |cpu| container("init", &[("cpu", cpu)], &[]);
    let main = container("c", &[("cpu", "100m")], &[]);
    let old = pod(vec![main.clone()], vec![init("100m")]);
    let new = pod(vec![main.clone()], vec![init("200m")]);
    let v = verdict(&new, &old, &[]);
    assert_eq!(reason(&v), Some(PendingReason::Infeasible), "{v:?}");
    let old = pod(vec![main.clone()], vec![sidecar(init("100m"))]);
    let new = pod(vec![main], vec![sidecar(init("200m"))]);
    assert_eq!(verdict(&new, &old, &[]), Verdict::Fits);
}
