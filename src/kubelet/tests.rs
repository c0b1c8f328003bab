//! Sync loop behaviours (upstream syncLoopIteration and its handlers, the parts that
//! live in the loop itself): config handlers, admission, the PLEG and probe arms,
//! housekeeping's gates. The loop runs with real pod workers over a recording syncer
//! and a runtime that is never there (housekeeping's runtime listing fails, after
//! SyncKnownPods). A `bNN_` prefix is a tag kept from the first test plan; the rest
//! of the name says the behaviour.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver};

use super::*;
use crate::api::pod::PodStatus;
use crate::api::quantity::Quantity;
use crate::cri::{ConnectOptions, Endpoint};
use crate::pleg::{LastRelist, PlegHealth};
use crate::pod_workers::{Cancel, PodSyncer, StatusFn, SyncError, Synced, WorkerTimings};
use crate::runtime::cache::PodStatusCache;
use crate::runtime::hooks::CriHookRunner;
use crate::runtime::manager::{RuntimeConditions, RuntimeSettings};
use crate::runtime::model::{ContainerState, RunningContainer};
use crate::runtime::model::{PodRuntimeStatus, RunningPod};
use crate::sources::{SOURCE_API, SOURCE_FILE};

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Sync(String, UpdateType),
    Terminating(String, Option<i64>),
    Terminated(String),
    /// A pod only the runtime knows (an orphan) was stopped.
    RuntimePod(String),
}

/// Records every call; all of them succeed at once.
#[derive(Default)]
struct RecordingSyncer {
    calls: Mutex<Vec<Call>>,
}

impl RecordingSyncer {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl PodSyncer for RecordingSyncer {
    fn sync_pod(
        &self,
        _: &Cancel,
        update_type: UpdateType,
        pod: &Arc<Pod>,
        _: Option<&Arc<Pod>>,
        _: &PodRuntimeStatus,
    ) -> Result<Synced, SyncError> {
        let call = Call::Sync(pod.uid().into(), update_type);
        self.calls.lock().unwrap().push(call);
        Ok(Synced::default())
    }

    fn sync_terminating_pod(
        &self,
        _: &Cancel,
        pod: &Arc<Pod>,
        _: &PodRuntimeStatus,
        grace: Option<i64>,
        _: Option<StatusFn>,
    ) -> Result<(), SyncError> {
        let call = Call::Terminating(pod.uid().into(), grace);
        self.calls.lock().unwrap().push(call);
        Ok(())
    }

    fn sync_terminating_runtime_pod(&self, _: &Cancel, pod: &RunningPod) -> Result<(), SyncError> {
        let call = Call::RuntimePod(pod.uid.clone());
        self.calls.lock().unwrap().push(call);
        Ok(())
    }

    fn sync_terminated_pod(
        &self,
        _: &Cancel,
        pod: &Arc<Pod>,
        _: &PodRuntimeStatus,
    ) -> Result<(), SyncError> {
        let call = Call::Terminated(pod.uid().into());
        self.calls.lock().unwrap().push(call);
        Ok(())
    }
}

struct Harness {
    kubelet: Kubelet,
    syncer: Arc<RecordingSyncer>,
    workers: PodWorkers,
    deaths: Receiver<super::gc_loop::GcRequest>,
    /// The PLEG's last relist as housekeeping reads it (nothing published at first).
    relist: LastRelist,
    _root: tempfile::TempDir,
}

fn harness(sources: &[&'static str], max_pods: &str) -> Harness {
    harness_with(sources, max_pods, None)
}

/// [`harness`] with pod cgroups (for the `gc` thread's cleaner).
fn harness_with(
    sources: &[&'static str],
    max_pods: &str,
    cgroups: Option<Arc<PodCgroupManager>>,
) -> Harness {
    let root = tempfile::tempdir().unwrap();
    // A runtime that is never there: calls fail fast with "unavailable".
    let endpoint = Endpoint::parse("unix:///nonexistent/litelet-kubelet-test.sock").unwrap();
    let options = ConnectOptions {
        request_timeout: Duration::from_secs(2),
        pull_timeout: Duration::from_secs(2),
    };
    let (runtime, images) = crate::cri::connect(&endpoint, &options);
    let manager = Arc::new(RuntimeManager::new(
        runtime.clone(),
        images,
        Arc::new(CriHookRunner::new(runtime)),
        Recorder::log_only(),
        RuntimeSettings {
            root_dir: root.path().to_owned(),
            pod_logs_dir: root.path().join("logs"),
            dns: Default::default(),
            memory_capacity: 1 << 30,
            enforce_cpu_limits: true,
            apparmor_enabled: false,
            node_hosts_file: "/etc/hosts".into(),
            swap: Default::default(),
            seccomp_default: false,
        },
    ));
    let syncer = Arc::new(RecordingSyncer::default());
    let queue = WorkQueue::new();
    let cache = PodStatusCache::new();
    // Every read of the cache is fresh enough: the global time lies far ahead.
    cache.update_time(Instant::now() + Duration::from_secs(86_400));
    let workers = PodWorkers::new(
        syncer.clone(),
        queue.clone(),
        cache,
        Recorder::log_only(),
        WorkerTimings::default(),
    );
    let node = NodeView {
        name: "unit-node".into(),
        labels: BTreeMap::new(),
        taints: vec![],
        allocatable: BTreeMap::from([("pods".to_owned(), Quantity::parse(max_pods).unwrap())]),
        ..Default::default()
    };
    let (deaths_tx, deaths) = bounded(16);
    let relist = LastRelist::default();
    let (resize, problem) = ResizeManager::open(
        root.path(),
        crate::runtime::resize::ResizeConfig::new(node.clone()),
    );
    assert!(problem.is_none(), "{problem:?}");
    let kubelet = Kubelet::new(KubeletDeps {
        workers: workers.clone(),
        queue,
        runtime: manager,
        runtime_state: RuntimeState::new(PlegHealth::default()),
        status: StatusManager::standalone(),
        probes: Arc::new(deps::NoProbes),
        recorder: Recorder::log_only(),
        node,
        root_dir: root.path().to_owned(),
        expected_sources: sources.iter().copied().collect::<HashSet<_>>(),
        resize: Arc::new(resize),
        volumes: Arc::new(deps::NoVolumes),
        deaths: deaths_tx,
        last_relist: relist.clone(),
        cgroups,
        mirrors: None,
        node_lister: None,
        extra_admission: None,
        devices: None,
    });
    Harness {
        kubelet,
        syncer,
        workers,
        deaths,
        relist,
        _root: root,
    }
}

fn pod(uid: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.into());
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("default".into());
    pod.spec.node_name = Some("unit-node".into());
    pod.spec.termination_grace_period_seconds = Some(30);
    pod
}

fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Long enough for a worker that was (wrongly) signalled to have called the syncer.
fn quiet() {
    std::thread::sleep(Duration::from_millis(100));
}

impl Harness {
    fn config(&mut self, source: &'static str, op: PodOperation, pods: Vec<Pod>) {
        self.kubelet.handle(Event::Config(PodUpdate {
            pods: pods.into_iter().map(Arc::new).collect(),
            op,
            source,
            provisional: false,
        }));
    }

    /// An update from the source's checkpoint (edge autonomy).
    fn provisional(&mut self, source: &'static str, op: PodOperation, pods: Vec<Pod>) {
        self.kubelet.handle(Event::Config(PodUpdate {
            pods: pods.into_iter().map(Arc::new).collect(),
            op,
            source,
            provisional: true,
        }));
    }

    fn pleg(&mut self, uid: &str, kind: PodLifecycleEventType) {
        self.kubelet.handle(Event::Pleg(PodLifecycleEvent {
            uid: uid.into(),
            kind,
            container_id: "c1".into(),
        }));
    }

    fn probe(&mut self, uid: &str, kind: ProbeKind, result: ProbeResult) {
        self.kubelet.handle(Event::Probe(ProbeUpdate {
            uid: uid.into(),
            container_id: "c1".into(),
            kind,
            result,
        }));
    }

    fn count(&self, call: &Call) -> usize {
        self.syncer.calls().iter().filter(|c| *c == call).count()
    }

    fn wait_call(&self, call: Call) {
        wait(&format!("{call:?}"), || self.count(&call) > 0);
    }

    fn phase(&self, uid: &str) -> Option<PodPhase> {
        self.kubelet
            .status
            .get_pod_status(uid)
            .and_then(|s| s.phase)
    }

    /// Whether a housekeeping run has reconciled the workers (SyncKnownPods answers
    /// for unknown UIDs differently afterwards).
    fn housekeeping_ran(&self) -> bool {
        !self.workers.could_have_running_containers("never-seen-uid")
    }
}

#[test]
fn terminated_pods_leave_their_slot_to_new_pods() {
    let mut h = harness(&[SOURCE_API], "1");
    h.config(SOURCE_API, PodOperation::Add, vec![pod("a")]);
    h.wait_call(Call::Sync("a".into(), UpdateType::Create));
    // The node is full: the control case is rejected.
    h.config(SOURCE_API, PodOperation::Add, vec![pod("b")]);
    assert_eq!(h.phase("b"), Some(PodPhase::Failed));
    assert_eq!(
        h.kubelet
            .status
            .get_pod_status("b")
            .and_then(|s| s.reason)
            .as_deref(),
        Some("OutOfpods")
    );

    // A's containers stopped (known terminated, its API phase is still unset): its
    // slot is free.
    h.workers
        .update_pod(UpdatePodOptions::new(UpdateType::Kill, Arc::new(pod("a"))));
    wait("a known terminated", || {
        h.workers.is_pod_known_terminated("a")
    });
    h.config(SOURCE_API, PodOperation::Add, vec![pod("c")]);
    h.wait_call(Call::Sync("c".into(), UpdateType::Create));
    assert_ne!(h.phase("c"), Some(PodPhase::Failed));

    // C succeeded (its worker has not terminated it yet): it no longer counts either.
    let succeeded = PodStatus {
        phase: Some(PodPhase::Succeeded),
        ..Default::default()
    };
    h.kubelet
        .status
        .set_pod_status(&Arc::new(pod("c")), succeeded);
    h.config(SOURCE_API, PodOperation::Add, vec![pod("d")]);
    h.wait_call(Call::Sync("d".into(), UpdateType::Create));
    assert_ne!(h.phase("d"), Some(PodPhase::Failed));

    // D is active: the node is full again.
    h.config(SOURCE_API, PodOperation::Add, vec![pod("e")]);
    assert_eq!(h.phase("e"), Some(PodPhase::Failed));
    quiet();
    assert_eq!(h.count(&Call::Sync("b".into(), UpdateType::Create)), 0);
    assert_eq!(h.count(&Call::Sync("e".into(), UpdateType::Create)), 0);
}

#[test]
fn remove_kills_at_once_with_the_pods_own_grace() {
    let mut h = harness(&[SOURCE_API], "110");
    h.config(SOURCE_API, PodOperation::Add, vec![pod("r1")]);
    h.wait_call(Call::Sync("r1".into(), UpdateType::Create));
    h.config(SOURCE_API, PodOperation::Remove, vec![pod("r1")]);
    // A kill with no override: the spec's grace.
    h.wait_call(Call::Terminating("r1".into(), Some(30)));
    h.wait_call(Call::Terminated("r1".into()));

    // The last copy seen carried a deletion grace of 0: the floor of 1 applies.
    let mut forced = pod("r2");
    h.config(SOURCE_API, PodOperation::Add, vec![forced.clone()]);
    h.wait_call(Call::Sync("r2".into(), UpdateType::Create));
    forced.metadata.deletion_timestamp = Some(Time::now());
    forced.metadata.deletion_grace_period_seconds = Some(0);
    h.config(SOURCE_API, PodOperation::Remove, vec![forced]);
    h.wait_call(Call::Terminating("r2".into(), Some(1)));
    assert!(
        !h.housekeeping_ran(),
        "the kill came from the removal itself"
    );
}

#[test]
fn remove_before_every_source_is_ready_is_left_to_housekeeping() {
    let mut h = harness(&[SOURCE_API, SOURCE_FILE], "110");
    h.config(SOURCE_API, PodOperation::Add, vec![pod("d1")]);
    h.wait_call(Call::Sync("d1".into(), UpdateType::Create));
    h.config(SOURCE_API, PodOperation::Remove, vec![pod("d1")]);
    quiet();
    assert!(
        !h.workers.is_pod_termination_requested("d1"),
        "no kill while the file source has not reported"
    );
    assert!(!h
        .syncer
        .calls()
        .iter()
        .any(|c| matches!(c, Call::Terminating(..))));

    h.config(SOURCE_FILE, PodOperation::Add, vec![]);
    h.kubelet.handle(Event::Housekeeping);
    // Terminated as an orphan: no grace override.
    h.wait_call(Call::Terminating("d1".into(), None));
    h.wait_call(Call::Terminated("d1".into()));
}

#[test]
fn housekeeping_waits_until_every_source_has_reported() {
    let mut h = harness(&[SOURCE_API, SOURCE_FILE], "110");
    h.kubelet.handle(Event::Housekeeping);
    assert!(!h.housekeeping_ran(), "no source has reported");
    h.config(SOURCE_API, PodOperation::Add, vec![]);
    h.kubelet.handle(Event::Housekeeping);
    assert!(!h.housekeeping_ran(), "the file source has not reported");
    assert!(!h.kubelet.sources_ready.load(Ordering::Relaxed));
    h.config(SOURCE_FILE, PodOperation::Add, vec![]);
    assert!(h.kubelet.sources_ready.load(Ordering::Relaxed));
    h.kubelet.handle(Event::Housekeeping);
    assert!(h.housekeeping_ran());
}

#[test]
fn no_housekeeping_while_the_runtime_is_not_ready() {
    let mut h = harness(&[SOURCE_API], "110");
    // Sources are ready before the loop starts: only the runtime gate holds it back.
    h.config(SOURCE_API, PodOperation::Add, vec![]);
    let Harness {
        kubelet, workers, ..
    } = h;
    let runtime_state = kubelet.runtime_state.clone();
    let housekeeping_ran = || !workers.could_have_running_containers("never-seen-uid");
    let (_updates_tx, updates) = unbounded();
    let (_pleg_tx, pleg) = unbounded();
    let (_probes_tx, probes) = unbounded();
    let (shutdown_tx, shutdown) = bounded::<()>(0);
    let sync = std::thread::spawn(move || kubelet.run(updates, pleg, probes, shutdown));
    // Three housekeeping periods and then some.
    std::thread::sleep(3 * HOUSEKEEPING_PERIOD + Duration::from_millis(500));
    assert!(
        !housekeeping_ran(),
        "housekeeping ran before the runtime was ready"
    );
    runtime_state.record(
        Ok(RuntimeConditions {
            runtime_ready: true,
            network_ready: true,
            problems: vec![],
            ..Default::default()
        }),
        Instant::now(),
    );
    wait("housekeeping once the runtime is ready", housekeeping_ran);
    drop(shutdown_tx);
    sync.join().unwrap();
}

fn runtime_pod(uid: &str, state: ContainerState) -> RunningPod {
    let part = |id: &str| RunningContainer {
        id: format!("{id}-{uid}"),
        name: id.into(),
        state,
    };
    RunningPod {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        containers: vec![part("app")],
        sandboxes: vec![part("sandbox")],
    }
}

/// A refusal at admission is final: no later update, probe-driven sync or
/// housekeeping round starts the pod, even once the status manager has lost its
/// Failed status (a 403 from a Node authorizer that had not caught up with the
/// binding once made it forget the status, and housekeeping then started the pod).
#[test]
fn a_rejected_pod_never_reaches_a_worker_whatever_follows() {
    let mut h = harness(&[SOURCE_API], "1");
    let relist = h.relist.clone();
    h.config(SOURCE_API, PodOperation::Add, vec![pod("a")]);
    h.wait_call(Call::Sync("a".into(), UpdateType::Create));
    h.config(SOURCE_API, PodOperation::Add, vec![pod("b")]);
    assert_eq!(h.phase("b"), Some(PodPhase::Failed));

    h.kubelet
        .status
        .remove_orphaned_statuses(&HashSet::from(["a".to_owned()]));
    assert_eq!(h.phase("b"), None, "the status manager lost the rejection");
    // The slot frees up too: only the rejection itself keeps b from running.
    h.workers
        .update_pod(UpdatePodOptions::new(UpdateType::Kill, Arc::new(pod("a"))));
    wait("a known terminated", || {
        h.workers.is_pod_known_terminated("a")
    });

    let mut changed = pod("b");
    changed.metadata.resource_version = Some("2".into());
    h.config(SOURCE_API, PodOperation::Update, vec![changed.clone()]);
    h.config(SOURCE_API, PodOperation::Add, vec![changed]);
    h.probe("b", ProbeKind::Readiness, ProbeResult::Success);
    relist.publish(Instant::now(), Arc::new(Default::default()));
    h.kubelet.handle(Event::Housekeeping);
    assert!(h.housekeeping_ran());
    quiet();
    let synced: Vec<Call> = h
        .syncer
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Sync(uid, _) if uid == "b"))
        .collect();
    assert_eq!(synced, vec![], "a rejected pod never syncs");

    // Its removal is the end of the refusal's record.
    h.config(SOURCE_API, PodOperation::Remove, vec![pod("b")]);
    assert!(!h.kubelet.rejected.contains("b"));
}

/// The harness' runtime is never there, so whatever housekeeping finds running can
/// only come from the PLEG's last relist.
#[test]
fn housekeeping_stops_runtime_orphans_found_by_a_fresh_relist() {
    let mut h = harness(&[SOURCE_API], "110");
    let relist = h.relist.clone();
    h.config(SOURCE_API, PodOperation::Add, vec![pod("kept")]);
    h.wait_call(Call::Sync("kept".into(), UpdateType::Create));
    let pods = [
        runtime_pod("kept", ContainerState::Running),
        runtime_pod("orphan", ContainerState::Running),
        runtime_pod("dead", ContainerState::Exited),
    ];
    let snapshot = Arc::new(pods.into_iter().map(|p| (p.uid.clone(), p)).collect());

    // Older than housekeeping accepts: the runtime is asked instead (and fails).
    let stale = Instant::now().checked_sub(Duration::from_secs(3)).unwrap();
    relist.publish(stale, Arc::clone(&snapshot));
    h.kubelet.handle(Event::Housekeeping);
    quiet();
    assert_eq!(h.count(&Call::RuntimePod("orphan".into())), 0);

    relist.publish(Instant::now(), snapshot);
    h.kubelet.handle(Event::Housekeeping);
    h.wait_call(Call::RuntimePod("orphan".into()));
    quiet();
    // Nothing of "dead" runs and "kept" has a worker: neither is stopped.
    let stopped: Vec<Call> = h
        .syncer
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::RuntimePod(_)))
        .collect();
    assert_eq!(stopped, vec![Call::RuntimePod("orphan".into())]);
}

/// Edge autonomy: pods from the API source's checkpoint are run (workers start) and
/// housekeeping runs, but nothing is stopped as an orphan until the source answers.
#[test]
fn checkpoint_pods_run_and_no_orphan_is_stopped_until_the_source_answers() {
    let mut h = harness(&[SOURCE_API], "110");
    let relist = h.relist.clone();
    h.provisional(SOURCE_API, PodOperation::Add, vec![pod("kept")]);
    h.wait_call(Call::Sync("kept".into(), UpdateType::Create));
    let pods = [
        runtime_pod("kept", ContainerState::Running),
        runtime_pod("missed", ContainerState::Running),
    ];
    let snapshot = Arc::new(pods.into_iter().map(|p| (p.uid.clone(), p)).collect());
    relist.publish(Instant::now(), Arc::clone(&snapshot));
    h.kubelet.handle(Event::Housekeeping);
    assert!(h.housekeeping_ran(), "housekeeping runs on the checkpoint");
    quiet();
    assert_eq!(h.count(&Call::RuntimePod("missed".into())), 0);

    // The first real list (here: nothing new) ends the provisional time.
    h.config(SOURCE_API, PodOperation::Add, vec![]);
    relist.publish(Instant::now(), snapshot);
    h.kubelet.handle(Event::Housekeeping);
    h.wait_call(Call::RuntimePod("missed".into()));
    assert_eq!(h.count(&Call::RuntimePod("kept".into())), 0);
}

#[test]
fn pleg_events_for_pods_no_source_wants_are_ignored() {
    let mut h = harness(&[SOURCE_API], "110");
    h.config(SOURCE_API, PodOperation::Add, vec![pod("k1")]);
    h.wait_call(Call::Sync("k1".into(), UpdateType::Create));

    h.pleg("ghost", PodLifecycleEventType::ContainerStarted);
    h.pleg("ghost", PodLifecycleEventType::ContainerDied);
    assert!(!h.workers.is_working("ghost"));
    assert!(h.workers.active_pod("ghost").is_none(), "no worker for it");

    // The control: an event for a known pod syncs it; a removal event does not.
    h.pleg("k1", PodLifecycleEventType::ContainerRemoved);
    quiet();
    assert_eq!(h.count(&Call::Sync("k1".into(), UpdateType::Sync)), 0);
    h.pleg("k1", PodLifecycleEventType::ContainerDied);
    h.wait_call(Call::Sync("k1".into(), UpdateType::Sync));
    quiet();
    assert!(h
        .syncer
        .calls()
        .iter()
        .all(|c| matches!(c, Call::Sync(uid, _) if uid == "k1")));
}

#[test]
fn liveness_failures_sync_the_pod_and_successes_do_not() {
    let mut h = harness(&[SOURCE_API], "110");
    h.config(SOURCE_API, PodOperation::Add, vec![pod("l1")]);
    h.wait_call(Call::Sync("l1".into(), UpdateType::Create));
    let resync = Call::Sync("l1".into(), UpdateType::Sync);

    h.probe("l1", ProbeKind::Liveness, ProbeResult::Success);
    quiet();
    assert_eq!(h.count(&resync), 0, "a liveness success wakes nobody");
    h.probe("l1", ProbeKind::Liveness, ProbeResult::Failure);
    wait("a sync after the liveness failure", || {
        h.count(&resync) == 1
    });
    h.probe("l1", ProbeKind::Readiness, ProbeResult::Success);
    wait("a sync after the readiness result", || {
        h.count(&resync) == 2
    });
    h.probe("ghost", ProbeKind::Liveness, ProbeResult::Failure);
    quiet();
    assert_eq!(h.syncer.calls().len(), 3, "{:?}", h.syncer.calls());
}

#[test]
fn container_deaths_wake_the_dead_container_clean_up() {
    let mut h = harness(&[SOURCE_API], "110");
    h.pleg("any", PodLifecycleEventType::ContainerStarted);
    h.pleg("any", PodLifecycleEventType::ContainerRemoved);
    assert!(
        h.deaths.try_recv().is_err(),
        "only deaths ask for a clean-up"
    );
    // Upstream cleans up after every death, known pod or not.
    h.pleg("dead-1", PodLifecycleEventType::ContainerDied);
    assert!(
        matches!(
            h.deaths.try_recv(),
            Ok(super::gc_loop::GcRequest::ContainerDied(uid)) if uid == "dead-1"
        ),
        "a death names its pod"
    );
}

#[test]
fn the_pod_snapshot_is_published_once_a_burst_of_updates_is_handled() {
    let h = harness(&[SOURCE_API], "110");
    let Harness { kubelet, .. } = h;
    let snapshot = kubelet.snapshot.clone();
    kubelet.runtime_state.record(
        Ok(RuntimeConditions {
            runtime_ready: true,
            network_ready: true,
            problems: vec![],
            ..Default::default()
        }),
        Instant::now(),
    );
    let (updates_tx, updates) = unbounded();
    let (_pleg_tx, pleg) = unbounded();
    let (_probes_tx, probes) = unbounded();
    let (shutdown_tx, shutdown) = bounded::<()>(0);
    for i in 0..50 {
        let update = PodUpdate {
            pods: vec![Arc::new(pod(&format!("s{i:02}")))],
            op: PodOperation::Add,
            source: SOURCE_API,
            provisional: false,
        };
        updates_tx.send(update).unwrap();
    }
    let sync = std::thread::spawn(move || kubelet.run(updates, pleg, probes, shutdown));
    wait("all 50 pods in the snapshot", || {
        snapshot.pods().len() == 50
    });
    let removal = PodUpdate {
        pods: vec![Arc::new(pod("s07"))],
        op: PodOperation::Remove,
        source: SOURCE_API,
        provisional: false,
    };
    updates_tx.send(removal).unwrap();
    wait("the removal in the snapshot", || {
        snapshot.find("default", "pod-s07").is_none() && snapshot.pods().len() == 49
    });
    drop(shutdown_tx);
    sync.join().unwrap();
}

#[test]
fn a_pod_version_is_one_allocation_from_the_source_to_its_worker() {
    let mut h = harness(&[SOURCE_API], "10");
    let send = |h: &mut Harness, op, pod: &Arc<Pod>| {
        h.kubelet.handle(Event::Config(PodUpdate {
            pods: vec![Arc::clone(pod)],
            op,
            source: SOURCE_API,
            provisional: false,
        }));
    };
    let v1 = Arc::new(pod("a"));
    send(&mut h, PodOperation::Add, &v1);
    h.wait_call(Call::Sync("a".into(), UpdateType::Create));
    let desired = h.kubelet.pods.get("a").cloned();
    assert!(desired.is_some_and(|d| Arc::ptr_eq(&d, &v1)), "pod manager");
    let active = h.workers.active_pod("a");
    assert!(active.is_some_and(|a| Arc::ptr_eq(&a, &v1)), "pod worker");

    // A new version replaces the old one in both places, still without a copy.
    let mut v2 = pod("a");
    v2.metadata.labels.insert("version".into(), "2".into());
    let v2 = Arc::new(v2);
    send(&mut h, PodOperation::Update, &v2);
    wait("the worker took v2", || {
        h.workers
            .active_pod("a")
            .is_some_and(|a| Arc::ptr_eq(&a, &v2))
    });
    let desired = h.kubelet.pods.get("a").cloned();
    assert!(desired.is_some_and(|d| Arc::ptr_eq(&d, &v2)));
}

#[test]
fn the_periodic_qos_update_stops_counting_pods_no_worker_may_run() {
    use crate::cgroups::pod_resources::tests::{container, pod as pod_of};
    let model = crate::cgroups::testfs::Model::v1();
    for qos in ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"] {
        model.populate(qos);
    }
    let cgroups = PodCgroupManager::new(model.root(), &model.mountinfo, Default::default());
    let cgroups = Arc::new(cgroups.unwrap());
    let mut h = harness_with(&[SOURCE_API], "110", Some(cgroups.clone()));
    h.config(SOURCE_API, PodOperation::Add, vec![pod("running")]);
    h.wait_call(Call::Sync("running".into(), UpdateType::Create));
    // As the kubelet syncer counts them: 500m each; "gone" has no worker (its end
    // went unreported).
    for uid in ["running", "gone"] {
        let mut p = pod_of(
            vec![container("app", &[("cpu", "500m")], &[("memory", "1Gi")])],
            vec![],
        );
        p.metadata.uid = Some(uid.into());
        cgroups.note_active_pod(&p);
    }
    h.kubelet.handle(Event::Housekeeping);
    assert!(h.housekeeping_ran());
    h.kubelet.cleaner().update_qos_cgroups();
    assert_eq!(
        model.read("cpu", "/kubepods/burstable", "cpu.shares"),
        "512"
    );
    assert_eq!(model.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
}
