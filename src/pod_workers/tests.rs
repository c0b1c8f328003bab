//! Pod worker behaviours (upstream pod_workers.go): a fake syncer that records calls
//! and can block or fail, a status cache that always answers at once, and the real
//! work queue. A `bNN_` prefix is a tag kept from the first test plan; the rest of
//! the name says the behaviour.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::api::meta::Time;
use crate::api::pod::{Pod, PodPhase, CONFIG_SOURCE_ANNOTATION_KEY};
use crate::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus, RunningPod};

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Sync {
        uid: String,
        update_type: UpdateType,
        version: String,
    },
    Terminating {
        uid: String,
        grace: Option<i64>,
        status_fn: Option<String>,
    },
    TerminatingRuntime {
        uid: String,
    },
    Terminated {
        uid: String,
    },
}

#[derive(Default)]
struct Gates {
    blocked: HashMap<&'static str, bool>,
    entered: HashMap<&'static str, usize>,
}

#[derive(Default)]
struct FakeSyncer {
    calls: Mutex<Vec<Call>>,
    sync_results: Mutex<VecDeque<Result<bool, SyncError>>>,
    terminating_results: Mutex<VecDeque<Result<(), SyncError>>>,
    gates: Mutex<Gates>,
    changed: Condvar,
}

impl FakeSyncer {
    fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn block(&self, kind: &'static str, on: bool) {
        self.gates.lock().unwrap().blocked.insert(kind, on);
        self.changed.notify_all();
    }

    fn entered(&self, kind: &'static str) -> usize {
        self.gates
            .lock()
            .unwrap()
            .entered
            .get(kind)
            .copied()
            .unwrap_or(0)
    }

    /// Blocks while `kind` is blocked; a cancelled token ends the wait with Canceled.
    fn gate(&self, kind: &'static str, cancel: &Cancel) -> Result<(), SyncError> {
        let mut gates = self.gates.lock().unwrap();
        *gates.entered.entry(kind).or_default() += 1;
        self.changed.notify_all();
        while gates.blocked.get(kind).copied().unwrap_or(false) {
            if cancel.is_cancelled() {
                return Err(SyncError::Canceled);
            }
            gates = self
                .changed
                .wait_timeout(gates, Duration::from_millis(5))
                .unwrap()
                .0;
        }
        Ok(())
    }
}

fn version(pod: &Pod) -> String {
    pod.metadata.resource_version.clone().unwrap_or_default()
}

impl PodSyncer for FakeSyncer {
    fn sync_pod(
        &self,
        cancel: &Cancel,
        update_type: UpdateType,
        pod: &Arc<Pod>,
        _: Option<&Arc<Pod>>,
        _: &PodRuntimeStatus,
    ) -> Result<Synced, SyncError> {
        self.record(Call::Sync {
            uid: pod.uid().into(),
            update_type,
            version: version(pod),
        });
        self.gate("sync", cancel)?;
        self.sync_results
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(false))
            .map(Synced::from)
    }

    fn sync_terminating_pod(
        &self,
        cancel: &Cancel,
        pod: &Arc<Pod>,
        _: &PodRuntimeStatus,
        grace: Option<i64>,
        status_fn: Option<StatusFn>,
    ) -> Result<(), SyncError> {
        let tag = status_fn.map(|f| {
            let mut status = crate::api::pod::PodStatus::default();
            f(&mut status);
            status.reason.unwrap_or_default()
        });
        self.record(Call::Terminating {
            uid: pod.uid().into(),
            grace,
            status_fn: tag,
        });
        self.gate("terminating", cancel)?;
        self.terminating_results
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(()))
    }

    fn sync_terminating_runtime_pod(
        &self,
        cancel: &Cancel,
        running: &RunningPod,
    ) -> Result<(), SyncError> {
        self.record(Call::TerminatingRuntime {
            uid: running.uid.clone(),
        });
        self.gate("runtime", cancel)
    }

    fn sync_terminated_pod(
        &self,
        cancel: &Cancel,
        pod: &Arc<Pod>,
        _: &PodRuntimeStatus,
    ) -> Result<(), SyncError> {
        self.record(Call::Terminated {
            uid: pod.uid().into(),
        });
        self.gate("terminated", cancel)
    }
}

struct Harness {
    workers: PodWorkers,
    syncer: Arc<FakeSyncer>,
    queue: WorkQueue,
    cache: PodStatusCache,
}

fn harness() -> Harness {
    harness_with(Recorder::log_only())
}

fn harness_with(recorder: Recorder) -> Harness {
    let syncer = Arc::new(FakeSyncer::default());
    let queue = WorkQueue::new();
    let cache = PodStatusCache::new();
    // Every read of the cache is fresh enough: the global time lies far ahead.
    cache.update_time(Instant::now() + Duration::from_secs(86_400));
    let timings = WorkerTimings {
        status_wait: Duration::from_secs(5),
        ..Default::default()
    };
    let workers = PodWorkers::new(
        syncer.clone(),
        queue.clone(),
        cache.clone(),
        recorder,
        timings,
    );
    Harness {
        workers,
        syncer,
        queue,
        cache,
    }
}

fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn pod(uid: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.into());
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("default".into());
    pod.metadata.resource_version = Some("v1".into());
    pod.spec.termination_grace_period_seconds = Some(30);
    pod
}

fn static_pod(uid: &str, name: &str) -> Pod {
    let mut p = pod(uid);
    p.metadata.name = Some(name.into());
    p.metadata
        .annotations
        .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), "file".into());
    p
}

fn with_version(mut pod: Pod, v: &str) -> Pod {
    pod.metadata.resource_version = Some(v.into());
    pod
}

fn deleted(mut pod: Pod, grace: i64) -> Pod {
    pod.metadata.deletion_timestamp = Some(Time::now());
    pod.metadata.deletion_grace_period_seconds = Some(grace);
    pod
}

fn update(kind: UpdateType, pod: &Pod) -> UpdatePodOptions {
    UpdatePodOptions::new(kind, Arc::new(pod.clone()))
}

fn kill(pod: &Pod, grace_override: Option<i64>) -> UpdatePodOptions {
    let mut options = update(UpdateType::Kill, pod);
    options.kill = Some(KillPodOptions {
        grace_override,
        ..Default::default()
    });
    options
}

impl Harness {
    fn settle(&self, uid: &str) {
        wait("worker idle", || !self.workers.is_working(uid));
    }

    fn finished(&self, uid: &str) {
        wait("pod finished", || {
            self.workers.should_pod_be_finished_known(uid)
        });
    }

    fn count(&self, matches: impl Fn(&Call) -> bool) -> usize {
        self.syncer.calls().iter().filter(|c| matches(c)).count()
    }

    fn queued_within(&self, uid: &str, low: Duration, high: Duration, before: Instant) {
        let due = self.queue.due_at(uid).expect("pod is queued");
        let after = Instant::now();
        assert!(due >= before + low, "due too early: {:?}", due - before);
        assert!(
            due <= after + high,
            "due too late: {:?}",
            due.saturating_duration_since(after)
        );
    }
}

impl PodWorkers {
    /// Finished, looking only at a known record (the public query also answers for
    /// forgotten UIDs).
    fn should_pod_be_finished_known(&self, uid: &str) -> bool {
        self.lock().statuses.get(uid).is_some_and(|s| s.finished)
    }
}

#[test]
fn create_syncs_once_and_requeues_at_resync() {
    let h = harness();
    let p = pod("u1");
    let before = Instant::now();
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u1");
    assert_eq!(
        h.syncer.calls(),
        [Call::Sync {
            uid: "u1".into(),
            update_type: UpdateType::Create,
            version: "v1".into()
        }]
    );
    assert!(!h.workers.is_pod_termination_requested("u1"));
    assert!(h.workers.could_have_running_containers("u1"));
    h.queued_within(
        "u1",
        Duration::from_secs(60),
        Duration::from_secs(90),
        before,
    );
}

#[test]
fn errors_requeue_with_backoff() {
    let h = harness();
    let before = Instant::now();
    h.syncer
        .sync_results
        .lock()
        .unwrap()
        .push_back(Err(SyncError::Other("boom".into())));
    h.workers.update_pod(update(UpdateType::Create, &pod("u2")));
    h.settle("u2");
    h.queued_within(
        "u2",
        Duration::from_secs(10),
        Duration::from_secs(15),
        before,
    );
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { .. })),
        1,
        "no retry on its own"
    );

    let before = Instant::now();
    h.syncer
        .sync_results
        .lock()
        .unwrap()
        .push_back(Err(SyncError::NetworkNotReady("cni".into())));
    h.workers.update_pod(update(UpdateType::Sync, &pod("u2")));
    wait("second sync", || {
        h.count(|c| matches!(c, Call::Sync { .. })) == 2
    });
    h.settle("u2");
    h.queued_within(
        "u2",
        Duration::from_secs(1),
        Duration::from_millis(1500),
        before,
    );

    let before = Instant::now();
    h.syncer
        .sync_results
        .lock()
        .unwrap()
        .push_back(Err(SyncError::Canceled));
    h.workers.update_pod(update(UpdateType::Sync, &pod("u2")));
    wait("third sync", || {
        h.count(|c| matches!(c, Call::Sync { .. })) == 3
    });
    h.settle("u2");
    h.queued_within(
        "u2",
        Duration::from_secs(10),
        Duration::from_secs(15),
        before,
    );
}

#[test]
fn terminal_sync_runs_terminating_then_terminated_on_its_own() {
    let h = harness();
    h.syncer.sync_results.lock().unwrap().push_back(Ok(true));
    h.workers.update_pod(update(UpdateType::Create, &pod("u4")));
    h.finished("u4");
    let calls = h.syncer.calls();
    assert!(matches!(calls[0], Call::Sync { .. }));
    assert_eq!(
        calls[1..],
        [
            Call::Terminating {
                uid: "u4".into(),
                grace: None,
                status_fn: None
            },
            Call::Terminated { uid: "u4".into() }
        ]
    );
    assert!(h.workers.is_pod_known_terminated("u4"));
    assert!(h.workers.should_pod_be_finished("u4"));
    assert!(!h.workers.should_pod_content_be_removed("u4"));
    wait("worker thread ends", || h.workers.live_threads() == 0);
}

#[test]
fn kill_uses_spec_grace_and_the_thread_exits() {
    let h = harness();
    let p = pod("u5");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u5");
    h.workers.update_pod(kill(&p, None));
    h.finished("u5");
    assert!(h.syncer.calls().contains(&Call::Terminating {
        uid: "u5".into(),
        grace: Some(30),
        status_fn: None
    }));
    wait("worker thread ends", || h.workers.live_threads() == 0);
}

#[test]
fn deletion_grace_and_content_removal() {
    let h = harness();
    let p = pod("u6");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u6");
    h.workers
        .update_pod(update(UpdateType::Update, &deleted(p, 10)));
    h.finished("u6");
    assert!(h.syncer.calls().contains(&Call::Terminating {
        uid: "u6".into(),
        grace: Some(10),
        status_fn: None
    }));
    assert!(h.workers.should_pod_content_be_removed("u6"));
}

#[test]
fn shorter_grace_interrupts_and_longer_is_ignored() {
    let h = harness();
    let p = pod("u7");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u7");
    h.syncer.block("terminating", true);
    h.workers.update_pod(kill(&p, None));
    wait("terminating entered", || {
        h.syncer.entered("terminating") == 1
    });
    // A shorter deletion grace cancels the in-flight call; the retry gets 5.
    h.workers
        .update_pod(update(UpdateType::Update, &deleted(p.clone(), 5)));
    wait("second terminating call", || {
        h.syncer.entered("terminating") == 2
    });
    h.workers
        .update_pod(update(UpdateType::Update, &deleted(p, 20)));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        h.syncer.entered("terminating"),
        2,
        "a longer grace does not interrupt"
    );
    h.syncer.block("terminating", false);
    h.finished("u7");
    let graces: Vec<Option<i64>> = h
        .syncer
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Terminating { grace, .. } => Some(*grace),
            _ => None,
        })
        .collect();
    assert_eq!(graces[..2], [Some(30), Some(5)]);
    assert!(graces[2..].iter().all(|g| *g == Some(5)), "{graces:?}");
}

#[test]
fn evicted_kill_marks_content_removable_at_once() {
    let h = harness();
    let p = pod("u9");
    h.syncer.block("terminating", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u9");
    let mut options = kill(&p, Some(0));
    if let Some(k) = options.kill.as_mut() {
        k.evict = true;
    }
    h.workers.update_pod(options);
    assert!(h.workers.should_pod_content_be_removed("u9"));
    wait("terminating entered", || {
        h.syncer.entered("terminating") == 1
    });
    h.syncer.block("terminating", false);
    h.finished("u9");
    assert!(h.syncer.calls().contains(&Call::Terminating {
        uid: "u9".into(),
        grace: Some(1),
        status_fn: None
    }));
}

#[test]
fn updates_coalesce_to_the_newest_with_the_oldest_start_time() {
    let h = harness();
    let p = pod("u10");
    h.syncer.block("sync", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    wait("first sync entered", || h.syncer.entered("sync") == 1);
    let mut starts = Vec::new();
    for v in ["v2", "v3", "v4"] {
        let options = update(UpdateType::Update, &with_version(p.clone(), v));
        starts.push(options.start_time);
        h.workers.update_pod(options);
    }
    let pending_start = h.workers.lock().statuses["u10"]
        .pending
        .as_ref()
        .and_then(|u| u.start_time);
    assert_eq!(
        pending_start, starts[0],
        "the oldest pending start time is kept"
    );
    h.syncer.block("sync", false);
    h.settle("u10");
    let versions: Vec<String> = h
        .syncer
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Sync { version, .. } => Some(version.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(versions, ["v1", "v4"]);
}

#[test]
fn kill_cancels_sync_and_no_sync_follows() {
    let h = harness();
    let p = pod("u11");
    h.syncer.block("sync", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    wait("sync entered", || h.syncer.entered("sync") == 1);
    h.workers.update_pod(kill(&p, None));
    assert!(!h.workers.should_pod_containers_be_terminating("u11"));
    // The blocked SyncPod sees its cancellation and returns.
    h.finished("u11");
    assert!(h.workers.should_pod_containers_be_terminating("u11"));
    assert_eq!(h.count(|c| matches!(c, Call::Sync { .. })), 1);
    assert_eq!(h.count(|c| matches!(c, Call::Terminating { .. })), 1);
    h.syncer.block("sync", false);
}

#[test]
fn uid_reuse_restarts_after_finish() {
    let h = harness();
    let p = pod("u12");
    h.syncer.block("terminating", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u12");
    h.workers.update_pod(kill(&p, None));
    wait("terminating", || h.syncer.entered("terminating") == 1);
    let again = with_version(p.clone(), "v2");
    h.workers.update_pod(update(UpdateType::Create, &again));
    assert!(h.workers.lock().statuses["u12"].restart_requested);
    h.syncer.block("terminating", false);
    h.finished("u12");
    let known = h.workers.sync_known_pods(std::slice::from_ref(&again));
    assert!(!known.contains_key("u12"));
    assert!(!h.workers.lock().statuses.contains_key("u12"));
    h.workers.update_pod(update(UpdateType::Create, &again));
    wait("new sync", || {
        h.syncer.calls().contains(&Call::Sync {
            uid: "u12".into(),
            update_type: UpdateType::Create,
            version: "v2".into(),
        })
    });
}

#[test]
fn finished_pods_ignore_updates() {
    let h = harness();
    let p = pod("u13");
    h.syncer.sync_results.lock().unwrap().push_back(Ok(true));
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.finished("u13");
    let before = h.syncer.calls().len();
    for kind in [UpdateType::Update, UpdateType::Sync, UpdateType::Create] {
        h.workers.update_pod(update(kind, &p));
    }
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(h.syncer.calls().len(), before);
}

#[test]
fn kill_waiters_are_released_when_containers_stop() {
    let h = harness();
    let p = pod("u15");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u15");
    h.syncer.block("terminated", true);
    // killPodNow returns once SyncTerminatingPod succeeded, before SyncTerminatedPod ends.
    h.workers
        .kill_pod_now(&Arc::new(p.clone()), false, None, None)
        .expect("kill returns");
    wait("terminated entered", || h.syncer.entered("terminated") == 1);
    // B14: terminated but not finished: a new kill's channel closes at once.
    let started = Instant::now();
    h.workers
        .kill_pod_now(&Arc::new(p.clone()), false, Some(1), None)
        .expect("closed at once");
    assert!(started.elapsed() < Duration::from_secs(5));
    h.syncer.block("terminated", false);
    h.finished("u15");
}

#[test]
fn the_last_status_function_wins() {
    let h = harness();
    let p = pod("u18");
    h.syncer.block("sync", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    wait("sync entered", || h.syncer.entered("sync") == 1);
    for reason in ["first", "second"] {
        let mut options = kill(&p, None);
        let reason = reason.to_owned();
        if let Some(k) = options.kill.as_mut() {
            k.status_fn = Some(Arc::new(move |s: &mut crate::api::pod::PodStatus| {
                s.reason = Some(reason.clone())
            }));
        }
        h.workers.update_pod(options);
    }
    h.syncer.block("sync", false);
    h.finished("u18");
    let fns: Vec<Option<String>> = h
        .syncer
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Terminating { status_fn, .. } => Some(status_fn.clone()),
            _ => None,
        })
        .collect();
    assert!(!fns.is_empty());
    assert!(
        fns.iter().all(|f| f.as_deref() == Some("second")),
        "{fns:?}"
    );
}

#[test]
fn failed_termination_waits_for_the_next_update() {
    let h = harness();
    let p = pod("u19");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u19");
    h.syncer
        .terminating_results
        .lock()
        .unwrap()
        .push_back(Err(SyncError::Other("stop failed".into())));
    let before = Instant::now();
    h.workers.update_pod(kill(&p, None));
    wait("first terminating", || h.syncer.entered("terminating") == 1);
    h.settle("u19");
    h.queued_within(
        "u19",
        Duration::from_secs(10),
        Duration::from_secs(15),
        before,
    );
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(h.syncer.entered("terminating"), 1, "no retry on its own");
    h.workers.update_pod(update(UpdateType::Sync, &p));
    h.finished("u19");
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { .. })),
        1,
        "never SyncPod again"
    );
    assert_eq!(
        h.count(|c| matches!(
            c,
            Call::Terminating {
                grace: Some(30),
                ..
            }
        )),
        2
    );
}

fn running_pod(uid: &str) -> RunningPod {
    RunningPod {
        uid: uid.into(),
        name: format!("orphan-{uid}"),
        namespace: "default".into(),
        ..Default::default()
    }
}

#[test]
fn runtime_only_pods_are_killed_and_forgotten() {
    let h = harness();
    let mut sync_only = UpdatePodOptions::kill_runtime_pod(running_pod("r1"), Some(1));
    sync_only.update_type = UpdateType::Sync;
    h.workers.update_pod(sync_only);
    assert!(
        !h.workers.lock().statuses.contains_key("r1"),
        "B21: non-kill runtime updates are dropped"
    );

    h.workers.update_pod(UpdatePodOptions::kill_runtime_pod(
        running_pod("r1"),
        Some(1),
    ));
    wait("runtime kill done", || {
        !h.workers.lock().statuses.contains_key("r1")
    });
    assert_eq!(
        h.syncer.calls(),
        [Call::TerminatingRuntime { uid: "r1".into() }]
    );
    assert!(!h.workers.is_pod_known_terminated("r1"));
    assert!(
        h.workers.could_have_running_containers("r1"),
        "before SyncKnownPods"
    );
    h.workers.sync_known_pods(&[]);
    assert!(!h.workers.could_have_running_containers("r1"));
}

#[test]
fn runtime_kill_of_a_known_pod_uses_the_pod() {
    let h = harness();
    let p = pod("u22");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u22");
    h.workers.update_pod(UpdatePodOptions::kill_runtime_pod(
        running_pod("u22"),
        Some(1),
    ));
    h.finished("u22");
    assert_eq!(h.count(|c| matches!(c, Call::TerminatingRuntime { .. })), 0);
    assert_eq!(
        h.count(|c| matches!(c, Call::Terminating { uid, .. } if uid == "u22")),
        1
    );
    assert!(h.workers.lock().statuses["u22"].deleted);
}

#[test]
fn first_sighting_of_finished_or_deleted_pods() {
    let h = harness();
    // B24: Succeeded in the API, nothing in the runtime: only SyncTerminatedPod.
    let mut done = pod("u24");
    done.status.phase = Some(PodPhase::Succeeded);
    h.workers.update_pod(update(UpdateType::Create, &done));
    assert!(h.workers.is_pod_known_terminated("u24"));
    h.finished("u24");
    assert_eq!(h.syncer.calls(), [Call::Terminated { uid: "u24".into() }]);

    // B25: Failed in the API but a container still runs: terminating first.
    let mut failed = pod("u25");
    failed.status.phase = Some(PodPhase::Failed);
    let running = PodRuntimeStatus {
        uid: "u25".into(),
        containers: vec![ContainerStatus {
            id: "c".into(),
            name: "app".into(),
            state: ContainerState::Running,
            ..Default::default()
        }],
        ..Default::default()
    };
    h.cache.set(
        "u25",
        Ok(running),
        Instant::now() + Duration::from_secs(86_400),
    );
    h.workers.update_pod(update(UpdateType::Create, &failed));
    h.finished("u25");
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { uid, .. } if uid == "u25")),
        0,
        "B25: a pod first seen Failed never gets SyncPod"
    );
    let calls: Vec<Call> = h.syncer.calls().into_iter().filter(|c| matches!(c, Call::Terminating { uid, .. } | Call::Terminated { uid } if uid == "u25")).collect();
    assert_eq!(calls.len(), 2);
    assert!(matches!(calls[0], Call::Terminating { .. }));

    // B29: a first update that already carries a deletion timestamp.
    h.workers
        .update_pod(update(UpdateType::Create, &deleted(pod("u29"), 3)));
    h.finished("u29");
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { uid, .. } if uid == "u29")),
        0
    );
    assert_eq!(
        h.count(|c| matches!(c, Call::Terminating { uid, grace: Some(3), .. } if uid == "u29")),
        1
    );
}

#[test]
fn static_pods_start_one_per_full_name() {
    let h = harness();
    let a = static_pod("sa", "etcd-node");
    let b = static_pod("sb", "etcd-node");
    h.workers.update_pod(update(UpdateType::Create, &a));
    h.settle("sa");
    let before = Instant::now();
    h.workers.update_pod(update(UpdateType::Create, &b));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { uid, .. } if uid == "sb")),
        0
    );
    h.queued_within(
        "sb",
        Duration::from_secs(10),
        Duration::from_secs(15),
        before,
    );

    h.syncer.block("terminating", true);
    h.workers.update_pod(kill(&a, None));
    wait("a terminating", || h.syncer.entered("terminating") == 1);
    assert!(h
        .workers
        .is_pod_for_mirror_pod_terminating_by_fullname("etcd-node_default"));
    h.syncer.block("terminating", false);
    h.finished("sa");
    assert!(!h
        .workers
        .is_pod_for_mirror_pod_terminating_by_fullname("etcd-node_default"));
    h.workers.update_pod(update(UpdateType::Sync, &b));
    wait("b starts", || {
        h.syncer.calls().contains(&Call::Sync {
            uid: "sb".into(),
            update_type: UpdateType::Sync,
            version: "v1".into(),
        })
    });

    // B28: a static pod deleted before it could start finishes with no sync at all.
    let c = static_pod("sc", "etcd-node");
    h.workers.update_pod(update(UpdateType::Create, &c));
    h.workers.update_pod(kill(&c, None));
    h.finished("sc");
    assert_eq!(h.count(|c| matches!(c, Call::Sync { uid, .. } | Call::Terminating { uid, .. } | Call::Terminated { uid } if uid == "sc")), 0);
}

#[test]
fn orphans_and_unknown_uids() {
    let h = harness();
    // B32: unknown UIDs before and after the first SyncKnownPods.
    assert!(h.workers.could_have_running_containers("x"));
    assert!(!h.workers.should_pod_content_be_removed("x"));
    assert!(!h.workers.should_pod_runtime_be_removed("x"));
    assert!(!h.workers.should_pod_containers_be_terminating("x"));
    assert!(!h.workers.should_pod_be_finished("x"));

    let p = pod("u30");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u30");
    h.syncer.block("terminating", true);
    let known = h.workers.sync_known_pods(&[]);
    assert_eq!(
        known["u30"],
        PodWorkerSync {
            state: WorkType::Terminating,
            orphan: true,
            has_config: true,
            is_static: false
        }
    );
    assert!(!h.workers.could_have_running_containers("x"));
    assert!(h.workers.should_pod_content_be_removed("x"));
    assert!(h.workers.should_pod_runtime_be_removed("x"));
    assert!(h.workers.should_pod_containers_be_terminating("x"));
    assert!(h.workers.should_pod_be_finished("x"));
    wait("orphan terminating", || {
        h.syncer.entered("terminating") == 1
    });
    h.syncer.block("terminating", false);
    h.finished("u30");
    assert!(h.syncer.calls().contains(&Call::Terminating {
        uid: "u30".into(),
        grace: None,
        status_fn: None
    }));
    assert!(!h.workers.sync_known_pods(&[]).contains_key("u30"));

    // B31: a static pod that never started is dropped at once.
    let a = static_pod("s31a", "web");
    let b = static_pod("s31b", "web");
    h.workers.update_pod(update(UpdateType::Create, &a));
    h.settle("s31a");
    h.workers.update_pod(update(UpdateType::Create, &b));
    std::thread::sleep(Duration::from_millis(20));
    let known = h.workers.sync_known_pods(std::slice::from_ref(&a));
    assert!(!known.contains_key("s31b"));
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { uid, .. } if uid == "s31b")),
        0
    );
}

#[test]
fn thousand_pods_leave_no_thread_behind() {
    let h = harness();
    for i in 0..1000 {
        let p = pod(&format!("leak-{i}"));
        h.workers.update_pod(update(UpdateType::Create, &p));
        h.workers.update_pod(kill(&p, Some(1)));
    }
    wait("all finished", || {
        (0..1000).all(|i| h.workers.should_pod_be_finished_known(&format!("leak-{i}")))
    });
    wait("threads gone", || h.workers.live_threads() == 0);
    let known = h.workers.sync_known_pods(&[]);
    assert!(known.is_empty());
    assert!(h.workers.lock().statuses.is_empty());
    assert!(h.workers.lock().updates.is_empty());
}

#[test]
fn kill_timeout_is_one_and_a_half_grace_periods_and_at_least_ten_seconds() {
    // (spec grace, kill override, expected timeout in seconds)
    let cases = [
        (Some(4), None, 10),
        (Some(30), None, 45),
        (None, None, 10),
        (Some(7), None, 10),
        (Some(9), None, 13),
        (Some(30), Some(0), 10),
        (Some(30), Some(100), 150),
        (Some(-5), None, 10),
    ];
    for (spec, grace_override, want) in cases {
        let mut p = pod("t16");
        p.spec.termination_grace_period_seconds = spec;
        assert_eq!(
            kill_timeout(&p, grace_override),
            Duration::from_secs(want),
            "spec {spec:?}, override {grace_override:?}"
        );
    }
}

#[test]
fn kill_pod_now_gives_up_with_exceeded_grace_period() {
    let (events_tx, events) = crossbeam_channel::unbounded();
    let h = harness_with(Recorder::new(events_tx));
    let mut p = pod("u16");
    p.spec.termination_grace_period_seconds = Some(4);
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u16");
    // SyncTerminatingPod hangs: the containers never stop.
    h.syncer.block("terminating", true);
    let started = Instant::now();
    let result = h
        .workers
        .kill_pod_now(&Arc::new(p.clone()), false, None, None);
    let waited = started.elapsed();
    assert_eq!(result, Err(KillTimeout));
    assert_eq!(KillTimeout.to_string(), "timeout waiting to kill pod");
    assert!(
        waited >= Duration::from_secs(10),
        "grace 4 waits the 10 s floor, returned after {waited:?}"
    );
    let exceeded: Vec<crate::events::EventRecord> = events
        .try_iter()
        .filter(|e| e.reason == "ExceededGracePeriod")
        .collect();
    assert_eq!(exceeded.len(), 1, "{exceeded:?}");
    assert_eq!(exceeded[0].kind, EventType::Warning);
    assert_eq!(
        exceeded[0].message,
        "Container runtime did not kill the pod within specified grace period."
    );
    assert!(
        matches!(&exceeded[0].object, crate::events::EventObject::Pod { uid, .. } if uid == "u16")
    );
    assert!(h.syncer.calls().contains(&Call::Terminating {
        uid: "u16".into(),
        grace: Some(4),
        status_fn: None
    }));
    h.syncer.block("terminating", false);
    h.finished("u16");
}

/// Pins a deliberate difference from upstream (documented on `kill_pod_now`):
/// upstream never closes the completion channel of a kill that reaches a finished pod,
/// so killPodNow waits out its timeout (45 s here) and reports ExceededGracePeriod.
/// litelet releases the waiter at once: the containers are known to be stopped.
#[test]
fn kill_of_a_finished_pod_returns_at_once_unlike_upstream() {
    let (events_tx, events) = crossbeam_channel::unbounded();
    let h = harness_with(Recorder::new(events_tx));
    let p = pod("u17");
    h.syncer.sync_results.lock().unwrap().push_back(Ok(true));
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.finished("u17");
    let calls = h.syncer.calls().len();
    let started = Instant::now();
    assert_eq!(
        h.workers
            .kill_pod_now(&Arc::new(p.clone()), false, None, None),
        Ok(())
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the 45 s timeout was not waited out"
    );
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(h.syncer.calls().len(), calls, "a finished pod gets no sync");
    assert!(events.try_iter().all(|e| e.reason != "ExceededGracePeriod"));
}

#[test]
fn runtime_kill_of_a_terminated_pod_is_ignored() {
    let h = harness();
    let p = pod("u23");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u23");
    h.syncer.block("terminated", true);
    h.workers.update_pod(kill(&p, None));
    wait("terminated entered", || h.syncer.entered("terminated") == 1);
    assert!(h.workers.is_pod_known_terminated("u23"));
    // Housekeeping still sees the stopped sandbox and asks to kill it as a runtime pod.
    h.workers.update_pod(UpdatePodOptions::kill_runtime_pod(
        running_pod("u23"),
        Some(1),
    ));
    assert!(
        h.workers.lock().statuses["u23"].pending.is_none(),
        "the stale runtime kill is not queued"
    );
    h.syncer.block("terminated", false);
    h.finished("u23");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(h.count(|c| matches!(c, Call::Terminated { .. })), 1);
    assert_eq!(h.count(|c| matches!(c, Call::Terminating { .. })), 1);
    assert_eq!(h.count(|c| matches!(c, Call::TerminatingRuntime { .. })), 0);
    assert!(
        h.workers.lock().statuses.contains_key("u23"),
        "the record stays until SyncKnownPods"
    );
}

fn syncs_of(h: &Harness, uid: &str) -> usize {
    h.count(|c| matches!(c, Call::Sync { uid: u, .. } if u == uid))
}

#[test]
fn queued_static_pods_start_in_arrival_order() {
    let h = harness();
    let a = static_pod("qa", "kube-proxy");
    let b = static_pod("qb", "kube-proxy");
    let c = static_pod("qc", "kube-proxy");
    h.workers.update_pod(update(UpdateType::Create, &a));
    h.settle("qa");
    h.workers.update_pod(update(UpdateType::Create, &b));
    h.settle("qb");
    h.workers.update_pod(update(UpdateType::Create, &c));
    h.settle("qc");
    h.workers.update_pod(kill(&a, None));
    h.finished("qa");

    // C asks first, but B came first: C keeps waiting.
    h.workers.update_pod(update(UpdateType::Sync, &c));
    h.settle("qc");
    assert_eq!(syncs_of(&h, "qc"), 0, "C must not overtake B");
    h.workers.update_pod(update(UpdateType::Sync, &b));
    wait("B starts", || syncs_of(&h, "qb") == 1);
    h.workers.update_pod(update(UpdateType::Sync, &c));
    h.settle("qc");
    assert_eq!(
        syncs_of(&h, "qc"),
        0,
        "one static pod per full name at a time"
    );

    // B gone: C's turn.
    h.workers.update_pod(kill(&b, None));
    h.finished("qb");
    h.workers.update_pod(update(UpdateType::Sync, &c));
    wait("C starts", || syncs_of(&h, "qc") == 1);
}

#[test]
fn a_queued_static_pod_killed_before_it_starts_lets_the_next_one_start() {
    let h = harness();
    let a = static_pod("ka", "coredns");
    let b = static_pod("kb", "coredns");
    let c = static_pod("kc", "coredns");
    h.workers.update_pod(update(UpdateType::Create, &a));
    h.settle("ka");
    h.workers.update_pod(update(UpdateType::Create, &b));
    h.settle("kb");
    h.workers.update_pod(update(UpdateType::Create, &c));
    h.settle("kc");

    // B is deleted while it waits behind A: finished with no syncer call at all.
    h.workers.update_pod(kill(&b, None));
    h.finished("kb");
    assert_eq!(
        h.count(|x| matches!(x, Call::Sync { uid, .. } | Call::Terminating { uid, .. } | Call::Terminated { uid } if uid == "kb")),
        0
    );

    h.workers.update_pod(kill(&a, None));
    h.finished("ka");
    wait("only C's worker is left", || h.workers.live_threads() == 1);
    h.workers.update_pod(update(UpdateType::Sync, &c));
    wait("C starts", || syncs_of(&h, "kc") == 1);
}

#[test]
fn a_pod_whose_worker_has_not_consumed_its_update_is_dropped_at_once() {
    let h = harness();
    // Hold every worker signal until released (upstream's workerChannelFn).
    let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
    let wrap: ChannelFn = Arc::new(move |rx: Receiver<()>| {
        let (tx, held) = bounded(1);
        let release = release_rx.clone();
        std::thread::spawn(move || {
            while rx.recv().is_ok() {
                if release.recv().is_err() {
                    return;
                }
                let _ = tx.send(());
            }
        });
        held
    });
    *h.workers.inner.worker_channel.lock().unwrap() = Some(wrap);
    let p = pod("u31");
    h.workers.update_pod(update(UpdateType::Create, &p));
    assert!(h.workers.is_working("u31"), "the update is pending");

    let known = h.workers.sync_known_pods(&[]);
    assert!(!known.contains_key("u31"));
    assert!(!h.workers.lock().statuses.contains_key("u31"));
    assert!(!h.workers.lock().updates.contains_key("u31"));
    // The held signal arrives late: the worker finds nothing and ends.
    release_tx.send(()).unwrap();
    wait("worker thread ends", || h.workers.live_threads() == 0);
    assert!(h.syncer.calls().is_empty(), "{:?}", h.syncer.calls());
}

#[test]
fn termination_requeues_with_no_delay_and_the_terminated_sync_runs_unaided() {
    let h = harness();
    let p = pod("u34");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("u34");
    let resync = h.queue.due_at("u34").expect("queued for resync");
    h.syncer.block("terminated", true);
    h.workers.update_pod(kill(&p, None));
    wait("terminated entered", || h.syncer.entered("terminated") == 1);
    let due = h.queue.due_at("u34").expect("queued after terminating");
    let now = Instant::now();
    assert!(
        due <= now,
        "delay 0 expected, due in {:?}",
        due.saturating_duration_since(now)
    );
    assert!(due < resync);
    h.syncer.block("terminated", false);
    h.finished("u34");
}

#[test]
fn a_cancelled_sync_backs_off_and_the_cancelling_update_runs_at_once() {
    let h = harness();
    let p = pod("u35");
    h.syncer.block("sync", true);
    h.syncer.block("terminating", true);
    h.workers.update_pod(update(UpdateType::Create, &p));
    wait("sync entered", || h.syncer.entered("sync") == 1);
    let before = Instant::now();
    // The deletion cancels the blocked SyncPod, which returns `context canceled`.
    h.workers
        .update_pod(update(UpdateType::Update, &deleted(p.clone(), 5)));
    // The deletion itself runs next, with no further update from anyone.
    wait("terminating entered", || {
        h.syncer.entered("terminating") == 1
    });
    h.queued_within(
        "u35",
        Duration::from_secs(10),
        Duration::from_secs(15),
        before,
    );
    h.syncer.block("terminating", false);
    h.finished("u35");
    h.syncer.block("sync", false);
    let calls = h.syncer.calls();
    assert_eq!(
        calls[..2],
        [
            Call::Sync {
                uid: "u35".into(),
                update_type: UpdateType::Create,
                version: "v1".into()
            },
            Call::Terminating {
                uid: "u35".into(),
                grace: Some(5),
                status_fn: None
            }
        ]
    );
    assert_eq!(syncs_of(&h, "u35"), 1);
}

/// A harness whose cache saw one relist, now, and will see no other.
fn harness_without_relists() -> Harness {
    let h = harness();
    h.cache.update_time(Instant::now());
    h
}

#[test]
fn issue_18_an_update_after_a_sync_does_not_wait_for_the_next_relist() {
    // A resize or spec change arrives from the watch right after a sync: nothing
    // changed the pod in the runtime since its last status, so the worker syncs at
    // once (it used to wait for a relist newer than its last sync, up to a period).
    let h = harness_without_relists();
    let p = pod("r1");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("r1");
    h.workers
        .update_pod(update(UpdateType::Update, &with_version(p, "v2")));
    wait("the update synced without a relist", || {
        h.count(|c| matches!(c, Call::Sync { version, .. } if version == "v2")) == 1
    });
}

#[test]
fn issue_18_a_pod_litelet_changed_waits_for_a_status_taken_after_the_change() {
    let h = harness_without_relists();
    let p = pod("r2");
    h.workers.update_pod(update(UpdateType::Create, &p));
    h.settle("r2");
    // The runtime manager touched the pod (e.g. started a container) after the relist.
    let changed = Instant::now() + Duration::from_millis(1);
    h.cache.runtime_changed("r2", changed);
    h.workers
        .update_pod(update(UpdateType::Update, &with_version(p, "v2")));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        h.count(|c| matches!(c, Call::Sync { .. })),
        1,
        "decided on a status older than its own change"
    );
    h.cache.set("r2", Ok(PodRuntimeStatus::default()), changed);
    wait("the update synced on the fresh status", || {
        h.count(|c| matches!(c, Call::Sync { version, .. } if version == "v2")) == 1
    });
}

/// Syncs of a pod whose image cannot be pulled, until `until` seconds: each sync
/// either pulls (and fails: ErrImagePull) or waits for the pull back-off
/// (ImagePullBackOff), and is requeued by `requeue_delay` with the given jitter.
/// Returns (second, waiting reason) per sync.
fn image_pull_syncs(until: u64, jitter: f64) -> Vec<(u64, &'static str)> {
    use crate::backoff::Backoff;
    use crate::images::manager::image_pull_key;
    use std::time::{SystemTime, UNIX_EPOCH};
    let t = |s: u64| UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s);
    let timings = WorkerTimings::default();
    let mut backoff = Backoff::default();
    let key = image_pull_key("uid", "127.0.0.1:1/nope:1");
    let mut now = 0;
    let mut syncs = Vec::new();
    while now <= until {
        let at: SystemTime = t(now);
        let (reason, synced, error) = match backoff.remaining_since_update(&key, at) {
            Some(left) => {
                let synced = Synced {
                    terminal: false,
                    retry_in: Some(left),
                };
                ("ImagePullBackOff", Some(synced), None)
            }
            None => {
                backoff.next(&key, at, at);
                let error = SyncError::RetryAfter("pull failed".into(), backoff.get(&key));
                ("ErrImagePull", None, Some(error))
            }
        };
        syncs.push((now, reason));
        let delay = worker::requeue_delay(
            &timings,
            false,
            error.as_ref(),
            synced.and_then(|s| s.retry_in),
            |d| d.mul_f64(jitter),
        );
        now += delay.as_secs();
    }
    syncs
}

// Image pulls were once 69, 82 and 95 s apart: the resync period decided, not the
// back-off.
#[test]
fn image_pull_attempts_follow_the_backoff_sequence() {
    for jitter in [1.0, 1.5] {
        let syncs = image_pull_syncs(1500, jitter);
        let pulls: Vec<u64> = syncs
            .iter()
            .filter(|(_, r)| *r == "ErrImagePull")
            .map(|(s, _)| *s)
            .collect();
        let gaps: Vec<u64> = pulls.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            gaps[..7],
            [10, 20, 40, 80, 160, 300, 300],
            "jitter {jitter}: {syncs:?}"
        );
    }
}

#[test]
fn image_pull_reasons_are_err_image_pull_after_a_pull_and_backoff_while_waiting() {
    // (second, reason) with no jitter: a pull fails (ErrImagePull); the next sync,
    // the back-off period later, still waits (ImagePullBackOff) until the back-off
    // ends; a wait never outlasts the resync period.
    let expected = [
        (0, "ErrImagePull"),
        (10, "ErrImagePull"),
        (20, "ImagePullBackOff"),
        (30, "ErrImagePull"),
        (40, "ImagePullBackOff"),
        (70, "ErrImagePull"),
        (80, "ImagePullBackOff"),
        (140, "ImagePullBackOff"),
        (150, "ErrImagePull"),
        (160, "ImagePullBackOff"),
        (220, "ImagePullBackOff"),
        (280, "ImagePullBackOff"),
        (310, "ErrImagePull"),
    ];
    assert_eq!(image_pull_syncs(310, 1.0), expected);
}

#[test]
fn requeue_delay_table() {
    let t = WorkerTimings::default();
    let secs = Duration::from_secs;
    let retry = SyncError::RetryAfter("x".into(), secs(20));
    let other = SyncError::Other("x".into());
    let net = SyncError::NetworkNotReady("x".into());
    // (phase transition, error, back-off hint, expected delay with no jitter)
    let cases: [(bool, Option<&SyncError>, Option<Duration>, Duration); 8] = [
        (true, Some(&other), Some(secs(3)), Duration::ZERO),
        (false, None, None, secs(60)),
        (false, None, Some(secs(7)), secs(7)),
        (false, None, Some(secs(300)), secs(60)),
        (false, Some(&net), None, secs(1)),
        (false, Some(&other), None, secs(10)),
        (false, Some(&retry), None, secs(10)),
        (
            false,
            Some(&SyncError::RetryAfter("x".into(), secs(4))),
            None,
            secs(4),
        ),
    ];
    for (i, (transition, error, hint, want)) in cases.into_iter().enumerate() {
        let got = worker::requeue_delay(&t, transition, error, hint, |d| d);
        assert_eq!(got, want, "case {i}");
    }
}
