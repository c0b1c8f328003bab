//! `ResizeManager`: admission, the checkpoint across a restart, conditions and events
//! (upstream's allocation manager and `handlePodResourcesResize`, at API 1.33+).

use super::*;
use crate::admission::NodeView;
use crate::api::quantity::Quantity;
use crate::cgroups::pod_resources::tests::container;
use crate::runtime::model::{ContainerResources, ContainerState, ContainerStatus};
use crate::runtime::resize::allocation::allocated_pod;
use crate::runtime::resize::values::container_values;

const NOW: i64 = 1_000;

fn now() -> Time {
    Time::from_unix_seconds(NOW)
}

fn node() -> NodeView {
    let mut n = NodeView::default();
    for (k, v) in [("cpu", "1"), ("memory", "4Gi"), ("pods", "110")] {
        n.allocatable.insert(k.into(), Quantity::parse(v).unwrap());
    }
    n
}

fn open(dir: &std::path::Path) -> ResizeManager {
    let (m, problem) = ResizeManager::open(dir, ResizeConfig::new(node()));
    assert!(problem.is_none(), "{problem:?}");
    m
}

/// A running API pod with one Burstable container requesting `cpu` (shared, as the
/// pod workers hand it over).
fn pod(uid: &str, cpu: &str, generation: i64) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(uid.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.generation = Some(generation);
    p.spec.containers = vec![container("c", &[("cpu", cpu)], &[("memory", "1Gi")])];
    p.status.phase = Some(PodPhase::Running);
    Arc::new(p)
}

/// The runtime running the container as created from `pod`'s spec.
fn runtime_of(pod: &Pod) -> PodRuntimeStatus {
    let c = &pod.spec.containers[0];
    let v = container_values(c);
    PodRuntimeStatus {
        uid: pod.uid().into(),
        containers: vec![ContainerStatus {
            id: "id-c".into(),
            name: "c".into(),
            state: ContainerState::Running,
            resources: Some(ContainerResources {
                cpu_shares: Some(v.cpu_shares),
                cpu_quota: v.cpu_quota,
                cpu_period: Some(v.cpu_period),
                memory_limit: v.memory_limit,
            }),
            ..ContainerStatus::default()
        }],
        ..PodRuntimeStatus::default()
    }
}

fn cpu_of(p: &Pod) -> String {
    p.spec.containers[0].resources.as_ref().unwrap().requests["cpu"].to_string()
}

fn types(m: &ResizeManager, uid: &str) -> Vec<(String, Option<String>)> {
    m.conditions(uid)
        .into_iter()
        .map(|c| (c.type_, c.reason))
        .collect()
}

fn reasons(events: &[ResizeEvent]) -> Vec<&str> {
    events.iter().map(|e| e.reason).collect()
}

#[test]
fn admitted_resize_is_checkpointed_in_progress_then_completed() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let v1 = pod("a", "100m", 1);
    m.record_admitted(&v1).unwrap();
    let v2 = pod("a", "200m", 2);
    let synced = m.sync(&v2, now()).unwrap();
    assert_eq!(cpu_of(&synced.pod), "200m");
    assert_eq!(reasons(&synced.events), [RESIZE_STARTED]);
    assert!(
        synced.events[0].message.contains("cpu=200m"),
        "{:?}",
        synced.events
    );
    assert_eq!(types(&m, "a"), [(POD_RESIZE_IN_PROGRESS.into(), None)]);
    let cond = &m.conditions("a")[0];
    assert_eq!(cond.observed_generation, Some(2));
    assert_eq!(cond.last_transition_time, Some(now()));

    // The allocation survives a restart, and is what the pod is admitted at.
    let restarted = open(dir.path());
    assert_eq!(cpu_of(&restarted.allocated_pod(&v1)), "200m");

    // Still running the old values: in progress.
    assert!(m
        .observe(&v2, &runtime_of(&v1), Actuation::None, now())
        .is_empty());
    assert_eq!(types(&m, "a").len(), 1);
    // Resized: done, one event.
    let events = m.observe(&v2, &runtime_of(&v2), Actuation::Applied, now());
    assert_eq!(reasons(&events), [RESIZE_COMPLETED]);
    assert!(m.conditions("a").is_empty());
    assert!(m
        .observe(&v2, &runtime_of(&v2), Actuation::None, now())
        .is_empty());
}

#[test]
fn infeasible_keeps_the_allocation_and_reports_why_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.record_admitted(&pod("a", "100m", 1)).unwrap();
    let big = pod("a", "2", 2);
    let synced = m.sync(&big, now()).unwrap();
    assert_eq!(cpu_of(&synced.pod), "100m");
    assert_eq!(reasons(&synced.events), [RESIZE_INFEASIBLE]);
    let pending = &m.conditions("a")[0];
    assert_eq!(pending.type_, POD_RESIZE_PENDING);
    assert_eq!(pending.reason.as_deref(), Some("Infeasible"));
    assert_eq!(
        pending.message.as_deref(),
        Some("Node didn't have enough capacity: cpu, requested: 2, capacity: 1")
    );
    // Judged again on the next sync: same verdict, no second event.
    let later = Time::from_unix_seconds(NOW + 60);
    assert!(m.sync(&big, later).unwrap().events.is_empty());
    assert_eq!(m.conditions("a")[0].last_transition_time, Some(now()));
    assert_eq!(cpu_of(&m.allocated_pod(&big)), "100m");
    // Reverting the spec clears it.
    m.sync(&pod("a", "100m", 3), later).unwrap();
    assert!(m.conditions("a").is_empty());
}

#[test]
fn deferred_is_retried_when_resources_free_up() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.record_admitted(&pod("b", "800m", 1)).unwrap();
    m.record_admitted(&pod("a", "100m", 1)).unwrap();
    let wants = pod("a", "500m", 2);
    let synced = m.sync(&wants, now()).unwrap();
    assert_eq!(cpu_of(&synced.pod), "100m");
    assert_eq!(reasons(&synced.events), [RESIZE_DEFERRED]);
    assert_eq!(
        types(&m, "a"),
        [(POD_RESIZE_PENDING.into(), Some("Deferred".into()))]
    );
    assert!(m.take_retries().is_empty());
    m.remove_pod("b").unwrap();
    assert_eq!(m.take_retries(), ["a"]);
    assert!(m.take_retries().is_empty());
    let synced = m.sync(&wants, now()).unwrap();
    assert_eq!(cpu_of(&synced.pod), "500m");
    assert_eq!(types(&m, "a"), [(POD_RESIZE_IN_PROGRESS.into(), None)]);
}

#[test]
fn pods_not_running_are_not_judged_yet() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.record_admitted(&pod("a", "100m", 1)).unwrap();
    let mut pending = pod("a", "2", 2);
    Arc::make_mut(&mut pending).status.phase = Some(PodPhase::Pending);
    let synced = m.sync(&pending, now()).unwrap();
    assert_eq!(cpu_of(&synced.pod), "100m");
    assert!(synced.events.is_empty() && m.conditions("a").is_empty());
}

#[test]
fn failed_actuation_is_reported_until_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let (v1, v2) = (pod("a", "100m", 1), pod("a", "200m", 2));
    m.record_admitted(&v1).unwrap();
    m.sync(&v2, now()).unwrap();
    let failed = Actuation::Failed("updating resources of container c: boom".into());
    let events = m.observe(&v2, &runtime_of(&v1), failed.clone(), now());
    assert_eq!(reasons(&events), [RESIZE_ERROR]);
    let cond = &m.conditions("a")[0];
    assert_eq!(cond.reason.as_deref(), Some(REASON_ERROR));
    assert_eq!(
        cond.message.as_deref(),
        Some("updating resources of container c: boom")
    );
    assert!(m.observe(&v2, &runtime_of(&v1), failed, now()).is_empty());
    // A sync with no resize step keeps the error.
    m.observe(&v2, &runtime_of(&v1), Actuation::None, now());
    assert_eq!(m.conditions("a")[0].reason.as_deref(), Some(REASON_ERROR));
    let events = m.observe(&v2, &runtime_of(&v2), Actuation::Applied, now());
    assert_eq!(reasons(&events), [RESIZE_COMPLETED]);
}

#[test]
fn restart_mid_resize_reports_in_progress_again() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (pod("a", "100m", 1), pod("a", "200m", 2));
    {
        let m = open(dir.path());
        m.record_admitted(&v1).unwrap();
        m.sync(&v2, now()).unwrap();
    }
    // litelet restarts before anything was applied: re-admitted at the allocation.
    let m = open(dir.path());
    let allocated = m.allocated_pod(&v2);
    m.record_admitted(&allocated).unwrap();
    let synced = m.sync(&v2, now()).unwrap();
    assert!(synced.events.is_empty());
    m.observe(&synced.pod, &runtime_of(&v1), Actuation::None, now());
    assert_eq!(types(&m, "a"), [(POD_RESIZE_IN_PROGRESS.into(), None)]);
}

#[test]
fn unknown_pods_are_recorded_at_their_spec_and_forgotten_by_retain() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let p = pod("a", "100m", 1);
    assert_eq!(cpu_of(&m.sync(&p, now()).unwrap().pod), "100m");
    assert!(m.allocation("a").is_some());
    m.retain(&HashSet::new());
    m.persist().unwrap();
    assert!(m.allocation("a").is_none());
    assert!(open(dir.path()).allocation("a").is_none());
}

#[test]
fn a_damaged_checkpoint_is_reported_and_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("allocated_pods_state"), b"garbage").unwrap();
    let (m, problem) = ResizeManager::open(dir.path(), ResizeConfig::default());
    assert!(matches!(problem, Some(CheckpointError::Corrupt { .. })));
    assert!(m.allocation("a").is_none());
}

#[test]
fn a_batch_of_admissions_reaches_the_checkpoint_in_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    assert!(m.note_admitted(&pod("a", "100m", 1)));
    assert!(m.note_admitted(&pod("b", "200m", 1)));
    // The same allocation again needs no write.
    assert!(!m.note_admitted(&pod("a", "100m", 1)));
    // Not on disk until the batch is stored: a restart now would know neither pod.
    assert!(open(dir.path()).allocation("a").is_none());
    m.store_allocations().unwrap();
    let restarted = open(dir.path());
    assert_eq!(
        cpu_of(&allocated_pod(
            &pod("a", "1", 1),
            &restarted.allocation("a").unwrap()
        )),
        "100m"
    );
    assert_eq!(
        cpu_of(&allocated_pod(
            &pod("b", "1", 1),
            &restarted.allocation("b").unwrap()
        )),
        "200m"
    );
}

/// The sync loop records additions in memory only; the pod's worker writes them in
/// `sync` before it runs the pod, so no pod runs on an allocation not on disk.
#[test]
fn additions_reach_the_checkpoint_from_the_pods_worker_not_the_sync_loop() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let a = pod("a", "100m", 1);
    {
        let batch = m.admission_batch();
        let allocated = batch.allocated_pod(&a);
        batch.admitted(&allocated);
    }
    assert!(
        open(dir.path()).allocation("a").is_none(),
        "the sync loop wrote the checkpoint"
    );
    assert_eq!(cpu_of(&m.sync(&a, now()).unwrap().pod), "100m");
    let restarted = open(dir.path());
    assert_eq!(
        cpu_of(&allocated_pod(
            &pod("a", "1", 1),
            &restarted.allocation("a").unwrap()
        )),
        "100m"
    );
}

/// Housekeeping prunes on the sync loop in memory; the `gc` thread writes it.
#[test]
fn pruning_is_written_by_persist_not_by_retain() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.sync(&pod("a", "100m", 1), now()).unwrap();
    m.retain(&HashSet::new());
    assert!(open(dir.path()).allocation("a").is_some());
    m.persist().unwrap();
    assert!(open(dir.path()).allocation("a").is_none());
    // Nothing left to write: no second write.
    m.persist().unwrap();
}

#[test]
fn a_resize_waits_for_a_batch_of_additions_and_sees_it() {
    // The sync loop holds the admission lock across a batch of pod additions
    // (`kubelet::handle_pod_additions`); a resize admitted meanwhile on a pod worker
    // waits for the batch and judges against the pods it admitted. And the other
    // way: an addition after an admitted resize counts the pod at its new allocation.
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.record_admitted(&pod("a", "100m", 1)).unwrap();
    let wants = pod("a", "500m", 2);
    let batch = m.admission_lock();
    std::thread::scope(|s| {
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let (m, wants) = (&m, &wants);
        let resize = s.spawn(move || {
            let synced = m.sync(wants, now());
            let _ = done_tx.send(());
            synced
        });
        assert!(
            done.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "the resize was judged in the middle of a batch of additions"
        );
        assert!(m.note_admitted(&pod("b", "800m", 1)));
        m.store_allocations().unwrap();
        drop(batch);
        let synced = resize.join().unwrap().unwrap();
        assert_eq!(cpu_of(&synced.pod), "100m");
        assert_eq!(reasons(&synced.events), [RESIZE_DEFERRED]);
    });
    assert_eq!(
        types(&m, "a"),
        [(POD_RESIZE_PENDING.into(), Some("Deferred".into()))]
    );

    // b leaves; the resize is admitted; a new pod's admission sees a at 500m.
    m.remove_pod("b").unwrap();
    assert_eq!(cpu_of(&m.sync(&wants, now()).unwrap().pod), "500m");
    let _batch = m.admission_lock();
    assert_eq!(cpu_of(&m.allocated_pod(&pod("a", "100m", 1))), "500m");
}

// A pod never resized whose resources failed to apply (an absurd CPU limit the
// cgroup write refused) was told "Pod resize failed".
#[test]
fn a_failure_to_apply_resources_without_a_resize_is_not_called_a_resize() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let v1 = pod("a", "100m", 1);
    m.record_admitted(&v1).unwrap();
    m.sync(&v1, now()).unwrap();
    let failed = Actuation::Failed("updating resources of container c: invalid argument".into());
    let events = m.observe(&v1, &runtime_of(&v1), failed, now());
    assert_eq!(reasons(&events), [FAILED_UPDATE_RESOURCES]);
    assert!(
        !events[0].message.to_lowercase().contains("resize"),
        "{:?}",
        events[0].message
    );
    assert!(m.conditions("a").is_empty(), "{:?}", m.conditions("a"));
}

#[test]
fn a_pod_not_being_resized_is_synced_and_counted_as_the_same_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let v1 = pod("a", "100m", 1);
    m.record_admitted(&v1).unwrap();
    assert!(
        Arc::ptr_eq(&m.allocated_pod(&v1), &v1),
        "no copy when allocation = spec"
    );
    let synced = m.sync(&v1, now()).unwrap();
    assert!(
        Arc::ptr_eq(&synced.pod, &v1),
        "the sync runs the pod it was given"
    );
    // A newer version of the same spec (a status or metadata change) is shared too.
    let v1b = pod("a", "100m", 1);
    assert!(Arc::ptr_eq(&m.allocated_pod(&v1b), &v1b));
    // A resize not yet admitted: a new version at the allocated resources.
    let mut wants = pod("a", "300m", 2);
    Arc::make_mut(&mut wants).status.phase = Some(PodPhase::Pending);
    let allocated = m.allocated_pod(&wants);
    assert!(!Arc::ptr_eq(&allocated, &wants));
    assert_eq!(cpu_of(&allocated), "100m");
    assert_eq!(cpu_of(&wants), "300m", "the shared version is left alone");
}
