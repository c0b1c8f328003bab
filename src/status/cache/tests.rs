//! Tests of `cache.rs`, one behaviour each.

use super::*;
use crate::api::meta::ConditionStatus::{self, False, True};
use crate::api::pod::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, PodCondition,
    PodPhase, PodReadinessGate, RestartPolicy, CONFIG_SOURCE_ANNOTATION_KEY, POD_CONTAINERS_READY,
    POD_READY, SOURCE_FILE,
};
use crate::status::conditions::READINESS_GATES_NOT_READY;

const NOW: i64 = 1000;

fn now(t: i64) -> Time {
    Time::from_unix_seconds(t)
}

/// A pod as the pod workers share it (`Arc::make_mut` edits a test's own copy).
fn pod(policy: RestartPolicy) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.uid = Some("u1".into());
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("prod".into());
    p.spec.restart_policy = Some(policy);
    p.spec.containers = vec![Container {
        name: "a".into(),
        ..Default::default()
    }];
    Arc::new(p)
}

fn running(ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: "a".into(),
        container_id: Some("containerd://c1".into()),
        ready,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(now(5)),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn exited(code: i32) -> ContainerStatus {
    ContainerStatus {
        name: "a".into(),
        container_id: Some("containerd://c1".into()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cond(type_: &str, status: ConditionStatus, ltt: i64) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status,
        last_transition_time: Some(now(ltt)),
        ..Default::default()
    }
}

fn status(phase: PodPhase, c: ContainerStatus, ready: ConditionStatus, ltt: i64) -> PodStatus {
    PodStatus {
        phase: Some(phase),
        conditions: vec![cond(POD_READY, ready, ltt)],
        container_statuses: vec![c],
        ..Default::default()
    }
}

fn version(cache: &StatusCache) -> Option<u64> {
    cache.get("u1").map(|v| v.version)
}

fn ltt(cache: &StatusCache, type_: &str) -> Option<i64> {
    let c = cache.get("u1")?.status.condition(type_)?;
    c.last_transition_time.map(|t| t.unix_seconds())
}

#[test]
fn first_status_is_version_one_with_a_start_time() {
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    let st = status(PodPhase::Running, running(false), False, 1);
    assert!(cache.set_pod_status(&p, st, now(NOW)));
    assert_eq!(version(&cache), Some(1));
    let v = cache.get("u1").unwrap();
    assert_eq!(v.status.start_time, Some(now(NOW)));
    assert!(!v.finished);
    assert_eq!(v.pod.status, PodStatus::default());
    // The API copy's start time wins over "now" when the pod has one.
    let mut cache = StatusCache::default();
    let mut p = pod(RestartPolicy::Always);
    Arc::make_mut(&mut p).status.start_time = Some(now(7));
    cache.set_pod_status(&p, PodStatus::default(), now(NOW));
    assert_eq!(cache.get("u1").unwrap().status.start_time, Some(now(7)));
}

#[test]
fn equal_status_keeps_the_version_unless_the_pod_is_being_deleted() {
    let mut cache = StatusCache::default();
    let mut p = pod(RestartPolicy::Always);
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(true), True, 1),
        now(NOW),
    );
    // Only the condition's transition time differs → nothing stored.
    let again = status(PodPhase::Running, running(true), True, 999);
    assert!(!cache.set_pod_status(&p, again.clone(), now(NOW + 1)));
    assert_eq!(version(&cache), Some(1));
    assert_eq!(ltt(&cache, POD_READY), Some(NOW));
    // The same status for a pod with a deletionTimestamp → forced.
    Arc::make_mut(&mut p).metadata.deletion_timestamp = Some(now(NOW));
    assert!(cache.set_pod_status(&p, again, now(NOW + 2)));
    assert_eq!(version(&cache), Some(2));
}

#[test]
fn transition_times_move_only_when_the_status_flips() {
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(false), False, 1),
        now(NOW),
    );
    assert_eq!(ltt(&cache, POD_READY), Some(NOW));
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(true), True, 1),
        now(NOW + 5),
    );
    assert_eq!(ltt(&cache, POD_READY), Some(NOW + 5));
    let mut st = status(PodPhase::Running, running(true), True, 1);
    st.message = Some("changed".into());
    cache.set_pod_status(&p, st, now(NOW + 9));
    assert_eq!(version(&cache), Some(3));
    assert_eq!(ltt(&cache, POD_READY), Some(NOW + 5));
}

#[test]
fn terminated_containers_do_not_come_back() {
    for (policy, code, accepted) in [
        (RestartPolicy::OnFailure, 0, false),
        (RestartPolicy::Never, 1, false),
        (RestartPolicy::Always, 0, true),
        (RestartPolicy::OnFailure, 1, true),
    ] {
        let mut cache = StatusCache::default();
        let p = pod(policy.clone());
        cache.set_pod_status(
            &p,
            status(PodPhase::Running, exited(code), False, 1),
            now(NOW),
        );
        let changed = cache.set_pod_status(
            &p,
            status(PodPhase::Running, running(false), False, 1),
            now(NOW),
        );
        assert_eq!(changed, accepted, "{policy:?} exit {code}");
        assert_eq!(version(&cache), Some(if accepted { 2 } else { 1 }));
    }
}

#[test]
fn terminate_pod_finishes_the_pod() {
    // A Running → Terminated 137 ContainerStatusUnknown, phase Failed, finished,
    // version bumped.
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(true), True, 1),
        now(NOW),
    );
    assert!(cache.terminate_pod(&p, now(NOW + 1)));
    let v = cache.get("u1").unwrap();
    assert_eq!(v.version, 2);
    assert!(v.finished);
    assert_eq!(v.status.phase, Some(PodPhase::Failed));
    let t = v.status.container_statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    // Forced: terminating again stores a new version even though nothing changed.
    assert!(cache.terminate_pod(&p, now(NOW + 2)));
    assert_eq!(version(&cache), Some(3));
}

#[test]
fn finished_is_sticky() {
    // A status set after TerminatePod keeps the pod finished...
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    cache.terminate_pod(&p, now(NOW));
    let mut st = cache.get("u1").unwrap().status.clone();
    st.message = Some("later".into());
    assert!(cache.set_pod_status(&p, st.clone(), now(NOW + 1)));
    assert!(cache.get("u1").unwrap().finished);
    // ...except for static pods.
    let mut s = pod(RestartPolicy::Always);
    Arc::make_mut(&mut s)
        .metadata
        .annotations
        .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
    let mut cache = StatusCache::default();
    cache.terminate_pod(&s, now(NOW));
    st.message = Some("again".into());
    cache.set_pod_status(&s, st, now(NOW + 1));
    assert!(!cache.get("u1").unwrap().finished);
}

#[test]
fn readiness_updates_conditions() {
    // Manager side: all containers ready, no gates → ContainersReady and
    // Ready True; with a missing gate condition → Ready False.
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(false), False, 1),
        now(NOW),
    );
    assert!(cache.set_container_readiness("u1", "containerd://c1", true, now(NOW + 3)));
    let st = &cache.get("u1").unwrap().status;
    assert!(st.container_statuses[0].ready);
    for t in [POD_CONTAINERS_READY, POD_READY] {
        assert_eq!(st.condition(t).map(|c| c.status.clone()), Some(True), "{t}");
    }
    assert_eq!(ltt(&cache, POD_READY), Some(NOW + 3));
    assert_eq!(version(&cache), Some(2));
    // Unchanged readiness → nothing. The bare runtime ID works too.
    assert!(!cache.set_container_readiness("u1", "c1", true, now(NOW + 4)));

    let mut gated = pod(RestartPolicy::Always);
    Arc::make_mut(&mut gated).spec.readiness_gates = vec![PodReadinessGate {
        condition_type: "example.com/gate".into(),
    }];
    let mut cache = StatusCache::default();
    cache.set_pod_status(
        &gated,
        status(PodPhase::Running, running(false), False, 1),
        now(NOW),
    );
    cache.set_container_readiness("u1", "c1", true, now(NOW));
    let ready = cache
        .get("u1")
        .unwrap()
        .status
        .condition(POD_READY)
        .cloned();
    let ready = ready.unwrap();
    assert_eq!(ready.status, False);
    assert_eq!(ready.reason.as_deref(), Some(READINESS_GATES_NOT_READY));
}

#[test]
fn probe_results_before_a_status_or_for_unknown_containers_are_ignored() {
    let mut cache = StatusCache::default();
    assert!(!cache.set_container_readiness("u1", "c1", true, now(NOW)));
    assert!(!cache.set_container_startup("u1", "c1", true, now(NOW)));
    assert!(cache.is_empty());
    let p = pod(RestartPolicy::Always);
    cache.set_pod_status(
        &p,
        status(PodPhase::Running, running(false), False, 1),
        now(NOW),
    );
    assert!(!cache.set_container_readiness("u1", "nope", true, now(NOW)));
    assert!(!cache.set_container_startup("u1", "nope", true, now(NOW)));
    assert_eq!(version(&cache), Some(1));
    // Startup: set once, then unchanged.
    assert!(cache.set_container_startup("u1", "c1", true, now(NOW)));
    assert!(!cache.set_container_startup("u1", "c1", true, now(NOW)));
    let st = &cache.get("u1").unwrap().status;
    assert_eq!(st.container_statuses[0].started, Some(true));
}

#[test]
fn orphans_are_removed() {
    let mut cache = StatusCache::default();
    let p = pod(RestartPolicy::Always);
    cache.set_pod_status(&p, PodStatus::default(), now(NOW));
    let mut q = pod(RestartPolicy::Always);
    Arc::make_mut(&mut q).metadata.uid = Some("u2".into());
    cache.set_pod_status(&q, PodStatus::default(), now(NOW));
    let keep: HashSet<String> = ["u2".to_owned()].into();
    assert_eq!(cache.remove_orphans(&keep), 1);
    assert!(cache.get("u1").is_none());
    assert!(cache.get("u2").is_some());
}

#[test]
fn an_unchanged_status_keeps_the_newer_pod_and_no_copy() {
    // The pod is the caller's shared version; an older one is not kept for the
    // cache alone when a sync of a newer one changes nothing.
    let mut cache = StatusCache::default();
    let v1 = pod(RestartPolicy::Always);
    let st = status(PodPhase::Running, running(false), False, 1);
    assert!(cache.set_pod_status(&v1, st.clone(), now(NOW)));
    assert!(Arc::ptr_eq(&cache.get("u1").unwrap().pod, &v1), "no copy");
    let mut v2 = pod(RestartPolicy::Always);
    Arc::make_mut(&mut v2).metadata.resource_version = Some("2".into());
    assert!(!cache.set_pod_status(&v2, st, now(NOW + 1)));
    assert_eq!(version(&cache), Some(1), "nothing new to send");
    assert!(Arc::ptr_eq(&cache.get("u1").unwrap().pod, &v2));
    assert_eq!(Arc::strong_count(&v1), 1, "the old version is released");
}
