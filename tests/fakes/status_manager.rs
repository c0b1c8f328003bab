//! The status manager (`status::StatusManager` and its `status` thread) against the
//! fake API server over real HTTP, by section 13 behaviour number of
//! `spec/runtime-and-status.md` (the pure half is tested next to the code).
//!
//! Absence checks ("no PATCH") first wait until the manager has finished a few more
//! full reconcile passes (`StatusManager::reconcile_passes`), not for a time; nothing
//! asserts on time. The latency test only prints its figures.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::pods;
use crate::support::wait_until;
use crossbeam_channel::Sender;
use litelet::api::meta::{ConditionStatus, Time};
use litelet::api::patch::pod_status_patch;
use litelet::api::pod::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodPhase, PodStatus,
    CONFIG_HASH_ANNOTATION_KEY, CONFIG_MIRROR_ANNOTATION_KEY, CONFIG_SOURCE_ANNOTATION_KEY,
    POD_CONTAINERS_READY, POD_DISRUPTION_TARGET, POD_INITIALIZED, POD_READY, POD_SCHEDULED,
    SOURCE_FILE,
};
use litelet::api::{paths, PatchType};
use litelet::status::manager::{Options, PodLookup};
use litelet::status::{PodHooks, StatusManager};
use serde_json::{json, Value};

const NS: &str = "default";
const NODE: &str = "node-1";
const LONG: Duration = Duration::from_secs(45);
/// Reconcile period of the managers under test.
const RESYNC: Duration = Duration::from_millis(100);
/// Full reconcile passes an absence check waits for: the first may have begun before
/// the change under test, the second began after it (and syncs every unsent version
/// and due retry), the third leaves room for a retry that came due meanwhile.
const QUIET_PASSES: u64 = 3;

/// The answers the pod workers would give.
#[derive(Clone)]
struct Flags {
    could_run: Arc<AtomicBool>,
    may_delete: Arc<AtomicBool>,
}

impl Flags {
    fn new() -> Self {
        Self {
            could_run: Arc::new(AtomicBool::new(true)),
            may_delete: Arc::new(AtomicBool::new(false)),
        }
    }

    fn hooks(&self) -> PodHooks {
        let (c, d) = (self.could_run.clone(), self.may_delete.clone());
        PodHooks::new(
            Arc::new(move |_| c.load(Ordering::SeqCst)),
            Arc::new(move |_| d.load(Ordering::SeqCst)),
        )
    }
}

struct Manager {
    m: StatusManager,
    shutdown: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl std::ops::Deref for Manager {
    type Target = StatusManager;
    fn deref(&self) -> &StatusManager {
        &self.m
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.shutdown.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Waits until `m` has finished [`QUIET_PASSES`] more full reconcile passes: whatever
/// it would send by now is sent (absence checks only).
fn quiet(m: &StatusManager) {
    let from = m.reconcile_passes();
    assert!(
        wait_until(LONG, || m.reconcile_passes() >= from + QUIET_PASSES),
        "the status thread stopped reconciling"
    );
}

fn start(fake: &FakeApi, hooks: PodHooks) -> Manager {
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let options = Options {
        resync_period: RESYNC,
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
    };
    let (m, handle) = StatusManager::spawn(fake.client(), hooks, options, shutdown_rx).unwrap();
    Manager {
        m,
        shutdown: Some(shutdown),
        handle: Some(handle),
    }
}

/// Pods as the pod workers hand them to the status manager: shared.
fn decode(v: Value) -> Arc<Pod> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn create_pod(fake: &FakeApi, name: &str) -> Arc<Pod> {
    decode(fake.create_pod(NS, name, NODE))
}

fn api_pod(fake: &FakeApi, name: &str) -> Option<Arc<Pod>> {
    fake.get("pods", NS, name).map(decode)
}

fn api_json(fake: &FakeApi, name: &str) -> Value {
    fake.get("pods", NS, name).unwrap_or(Value::Null)
}

fn status_path(name: &str) -> String {
    paths::pod_status(NS, name)
}

fn patches(fake: &FakeApi, name: &str) -> usize {
    fake.count("patch", &status_path(name))
}

fn gets(fake: &FakeApi, name: &str) -> usize {
    fake.count("get", &paths::pod(NS, name))
}

fn cond(type_: &str, ok: bool) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: ConditionStatus::from(ok),
        ..Default::default()
    }
}

/// The status of a pod whose one container `main` runs (ready or not).
fn running(ready: bool) -> PodStatus {
    PodStatus {
        phase: Some(PodPhase::Running),
        conditions: vec![
            cond(POD_INITIALIZED, true),
            cond(POD_READY, ready),
            cond(POD_CONTAINERS_READY, ready),
            cond(POD_SCHEDULED, true),
        ],
        container_statuses: vec![ContainerStatus {
            name: "main".into(),
            image: "busybox:latest".into(),
            container_id: Some("containerd://c-main".into()),
            ready,
            started: Some(true),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time::from_unix_seconds(1_700_000_000)),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn with_phase(mut s: PodStatus, phase: PodPhase) -> PodStatus {
    s.phase = Some(phase);
    s
}

fn phase_of(fake: &FakeApi, name: &str) -> String {
    api_json(fake, name)["status"]["phase"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn condition_of(fake: &FakeApi, name: &str, type_: &str) -> Option<String> {
    let pod = api_pod(fake, name)?;
    pod.status.condition(type_).map(|c| c.status.to_string())
}

#[test]
fn first_status_is_patched_with_the_uid() {
    // #71.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert_eq!(m.versioned_status(pod.uid()).map(|v| v.version), Some(1));
    assert!(wait_until(LONG, || phase_of(&fake, "web") == "Running"));
    assert_eq!(patches(&fake, "web"), 1);
    let req = fake
        .requests()
        .into_iter()
        .find(|r| r.verb == "patch")
        .unwrap();
    assert_eq!(req.content_type, "application/strategic-merge-patch+json");
    assert_eq!(req.status, 200);
    let api = api_pod(&fake, "web").unwrap();
    assert!(api.status.start_time.is_some());
    assert_eq!(
        api.status
            .condition(POD_READY)
            .map(|c| c.status.to_string())
            .as_deref(),
        Some("True")
    );
    assert_eq!(
        api.status.container_statuses[0].container_id.as_deref(),
        Some("containerd://c-main")
    );
}

#[test]
fn nothing_changed_means_no_patch() {
    // #72: an equal status (only transition times differ) stores no version and
    // sends nothing, through several reconcile passes.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    let mut again = running(true);
    for c in &mut again.conditions {
        c.last_transition_time = Some(Time::from_unix_seconds(5));
    }
    m.set_pod_status(&pod, again);
    assert_eq!(m.versioned_status(pod.uid()).map(|v| v.version), Some(1));
    quiet(&m);
    assert_eq!(patches(&fake, "web"), 1);
    // Versions already sent are not even looked up again.
    assert_eq!(gets(&fake, "web"), 1);
}

#[test]
fn status_already_on_the_server_is_not_sent_again() {
    // #84, and a restart of litelet: a fresh manager given the API's copy and the
    // same status finds them equal (one GET, no PATCH), records the version and
    // does not look again.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    {
        let first = start(&fake, Flags::new().hooks());
        first.set_pod_status(&pod, running(true));
        assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    }
    let gets_before = gets(&fake, "web");
    let restarted = start(&fake, Flags::new().hooks());
    let pod = api_pod(&fake, "web").unwrap();
    restarted.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || gets(&fake, "web") == gets_before + 1));
    quiet(&restarted);
    assert_eq!(patches(&fake, "web"), 1);
    assert_eq!(gets(&fake, "web"), gets_before + 1);
}

#[test]
fn deletion_forces_a_sync_of_an_equal_status() {
    // #73.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    fake.delete("pods", NS, "web", Some(30)).unwrap();
    let deleting = api_pod(&fake, "web").unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let gets_before = gets(&fake, "web");
    m.set_pod_status(&deleting, running(true));
    assert_eq!(m.versioned_status(pod.uid()).map(|v| v.version), Some(2));
    assert!(wait_until(LONG, || gets(&fake, "web") > gets_before));
    // Still Running on the server: nothing to patch, nothing to delete.
    quiet(&m);
    assert_eq!(patches(&fake, "web"), 1);
    assert_eq!(fake.count_verb("delete"), 0);
}

#[test]
fn another_writers_conditions_survive() {
    // #80: a foreign condition on the server is kept, the kubelet's are replaced.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.modify("pods", NS, "web", |p| {
        p["status"]["conditions"] = json!([
            {"type": "example.com/gate", "status": "False"},
            {"type": "Ready", "status": "False", "reason": "Old"}
        ]);
    });
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    assert_eq!(
        condition_of(&fake, "web", "example.com/gate").as_deref(),
        Some("False")
    );
    let api = api_pod(&fake, "web").unwrap();
    assert_eq!(
        api.status
            .condition(POD_READY)
            .and_then(|c| c.reason.clone()),
        None
    );

    // The writer flips its condition after the kubelet's PATCH; the next kubelet
    // change leaves it alone.
    fake.modify("pods", NS, "web", |p| {
        let conds = p["status"]["conditions"].as_array_mut().unwrap();
        for c in conds.iter_mut().filter(|c| c["type"] == "example.com/gate") {
            c["status"] = "True".into();
        }
    });
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("False")));
    assert_eq!(
        condition_of(&fake, "web", "example.com/gate").as_deref(),
        Some("True")
    );

    // Race: a patch computed from a copy read before the writer added its condition
    // does not remove it (conditions merge by type).
    let stale = api_pod(&fake, "web").unwrap();
    fake.modify("pods", NS, "web", |p| {
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "example.com/late", "status": "True"}));
    });
    let mut wanted = stale.status.clone();
    wanted.conditions.retain(|c| c.type_ != POD_READY);
    wanted.conditions.push(cond(POD_READY, true));
    let patch = pod_status_patch(pod.uid(), &stale.status, &wanted)
        .unwrap()
        .unwrap();
    let _: Pod = fake
        .client()
        .patch(&status_path("web"), PatchType::StrategicMerge, &patch)
        .unwrap();
    assert_eq!(
        condition_of(&fake, "web", "example.com/late").as_deref(),
        Some("True")
    );
    assert_eq!(
        condition_of(&fake, "web", POD_READY).as_deref(),
        Some("True")
    );
}

#[test]
fn terminal_phase_waits_for_the_containers() {
    // #81: Failed is held back while containers could run; sent once they cannot.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let flags = Flags::new();
    let m = start(&fake, flags.hooks());
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    m.set_pod_status(&pod, with_phase(running(false), PodPhase::Failed));
    quiet(&m);
    assert_eq!(phase_of(&fake, "web"), "Running");
    flags.could_run.store(false, Ordering::SeqCst);
    m.terminate_pod(&pod);
    assert!(wait_until(LONG, || phase_of(&fake, "web") == "Failed"));
    let c = &api_pod(&fake, "web").unwrap().status.container_statuses[0];
    let t = c.state.as_ref().and_then(|s| s.terminated.clone()).unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
}

#[test]
fn a_deleted_pod_goes_only_after_its_containers() {
    // #88: deletionTimestamp + terminal phase + finished + the pod workers' yes →
    // DELETE with grace 0 (and the UID precondition); the cache entry goes with it.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let flags = Flags::new();
    let m = start(&fake, flags.hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    fake.delete("pods", NS, "web", Some(30)).unwrap();
    let deleting = api_pod(&fake, "web").unwrap();
    // Containers still stopping: API phase Running → no DELETE.
    m.set_pod_status(&deleting, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 2));
    quiet(&m);
    assert_eq!(fake.count_verb("delete"), 0);
    // Containers gone, pod finished and Failed on the server, but the pod workers
    // still clean up: no DELETE.
    flags.could_run.store(false, Ordering::SeqCst);
    m.terminate_pod(&deleting);
    assert!(wait_until(LONG, || phase_of(&fake, "web") == "Failed"));
    quiet(&m);
    assert_eq!(fake.count_verb("delete"), 0);
    assert!(api_pod(&fake, "web").is_some());
    // Done: the next reconcile deletes it.
    flags.may_delete.store(true, Ordering::SeqCst);
    assert!(wait_until(LONG, || api_pod(&fake, "web").is_none()));
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.verb == "delete")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].status, 200);
    assert_delete_options(&deletes[0], pod.uid());
    assert!(wait_until(LONG, || m.get_pod_status(pod.uid()).is_none()));
}

/// #88: the status manager's DELETE is sent with grace 0 and the UID precondition,
/// in the body (DeleteOptions), as upstream's `kubeClient.Delete(ctx, name,
/// metav1.NewDeleteOptions(0) + Preconditions{UID})`.
fn assert_delete_options(delete: &support::fake_api::RequestRecord, uid: &str) {
    let body = delete.body_json().unwrap_or(Value::Null);
    assert_eq!(body["kind"], "DeleteOptions", "{body:#}");
    assert_eq!(body["gracePeriodSeconds"], 0, "{body:#}");
    assert_eq!(body["preconditions"]["uid"], uid, "{body:#}");
    assert!(
        !delete.query.contains("gracePeriodSeconds"),
        "grace only in the body: {}",
        delete.query
    );
}

/// Brings `name` to where the manager deletes it: deletionTimestamp (grace 30), the
/// containers stopped, Failed on the server, the pod finished. The pod workers'
/// answer (`may_delete`) is left to the caller.
fn terminate_deleted(fake: &FakeApi, m: &Manager, flags: &Flags, name: &str) -> Arc<Pod> {
    fake.delete("pods", NS, name, Some(30)).unwrap();
    let deleting = api_pod(fake, name).unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    flags.could_run.store(false, Ordering::SeqCst);
    m.set_pod_status(&deleting, running(false));
    m.terminate_pod(&deleting);
    assert!(wait_until(LONG, || phase_of(fake, name) == "Failed"));
    deleting
}

#[test]
fn a_pod_recreated_before_the_delete_survives_it() {
    // #88 against a real race: the manager reads the terminated pod (GET), then,
    // before its DELETE arrives, the pod is deleted and recreated under the same
    // name. The DELETE carries grace 0 and the old UID: the server refuses it (409,
    // precondition failed) and the new pod stays. The manager's retry reads the new
    // pod, sees another UID, and drops the old status without a second DELETE.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let flags = Flags::new();
    let m = start(&fake, flags.hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    terminate_deleted(&fake, &m, &flags, "web");
    quiet(&m);
    assert_eq!(fake.count_verb("delete"), 0);

    let patched = patches(&fake, "web");
    let held = fake.pause_next("delete", &paths::pod(NS, "web"));
    flags.may_delete.store(true, Ordering::SeqCst);
    assert!(held.wait(LONG), "the manager never sent its DELETE");
    fake.remove("pods", NS, "web");
    let recreated = create_pod(&fake, "web");
    assert_ne!(recreated.uid(), pod.uid());
    held.release();

    assert!(wait_until(LONG, || m.get_pod_status(pod.uid()).is_none()));
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.verb == "delete")
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(deletes[0].status, 409);
    assert_delete_options(&deletes[0], pod.uid());
    let survivor = api_pod(&fake, "web").expect("the recreated pod was deleted");
    assert_eq!(survivor.uid(), recreated.uid());
    assert_eq!(phase_of(&fake, "web"), "Pending");
    quiet(&m);
    assert_eq!(fake.count_verb("delete"), 1);
    // Nor is the old status sent to the new pod.
    assert_eq!(patches(&fake, "web"), patched);
}

#[test]
fn succeeded_goes_out_not_ready_through_the_manager() {
    // #82 end to end: the kubelet's Succeeded status still says Ready True (its
    // probes have not caught up); the server gets Ready and ContainersReady False
    // with reason PodCompleted.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "job");
    let flags = Flags::new();
    let m = start(&fake, flags.hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || condition_of(&fake, "job", POD_READY)
        .as_deref()
        == Some("True")));
    flags.could_run.store(false, Ordering::SeqCst);
    m.set_pod_status(&pod, with_phase(running(true), PodPhase::Succeeded));
    assert!(wait_until(LONG, || phase_of(&fake, "job") == "Succeeded"));
    let api = api_pod(&fake, "job").unwrap();
    for t in [POD_READY, POD_CONTAINERS_READY] {
        let c = api.status.condition(t).cloned().unwrap_or_default();
        assert_eq!(
            (c.status.to_string().as_str(), c.reason.as_deref()),
            ("False", Some("PodCompleted")),
            "{t}: {:#}",
            api_json(&fake, "job")
        );
    }
}

#[test]
fn disruption_target_waits_for_the_terminal_transition_through_the_manager() {
    // #83 end to end: a DisruptionTarget condition (eviction) and phase Failed are
    // held back while containers could run; both land together once they cannot.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let flags = Flags::new();
    let m = start(&fake, flags.hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    let mut evicted = with_phase(running(false), PodPhase::Failed);
    evicted.reason = Some("Evicted".into());
    evicted.conditions.push(PodCondition {
        type_: POD_DISRUPTION_TARGET.into(),
        status: ConditionStatus::True,
        reason: Some("TerminationByKubelet".into()),
        ..Default::default()
    });
    m.set_pod_status(&pod, evicted.clone());
    // Ready goes out False at once; the phase and DisruptionTarget do not.
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("False")));
    quiet(&m);
    assert_eq!(phase_of(&fake, "web"), "Running");
    assert_eq!(condition_of(&fake, "web", POD_DISRUPTION_TARGET), None);
    flags.could_run.store(false, Ordering::SeqCst);
    m.terminate_pod(&pod);
    assert!(wait_until(LONG, || phase_of(&fake, "web") == "Failed"));
    let api = api_pod(&fake, "web").unwrap();
    let target = api.status.condition(POD_DISRUPTION_TARGET).cloned();
    let target = target.unwrap_or_default();
    assert_eq!(
        (target.status.to_string().as_str(), target.reason.as_deref()),
        ("True", Some("TerminationByKubelet")),
        "{:#}",
        api_json(&fake, "web")
    );
    assert!(target.last_transition_time.is_some());
    assert_eq!(api.status.reason.as_deref(), Some("Evicted"));
}

#[test]
fn the_delete_carries_the_uid_precondition() {
    // A pod deleted and recreated under the same name between the kubelet's GET and
    // its DELETE is not deleted: simulated by deleting through the same path with a
    // stale UID, as the manager does.
    let fake = FakeApi::start();
    create_pod(&fake, "web");
    let opts = litelet::api::DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some("not-the-uid".into()),
        ..Default::default()
    };
    let err = fake
        .client()
        .delete(&paths::pod(NS, "web"), &opts)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(api_pod(&fake, "web").is_some());
}

fn static_pod(name: &str, hash: &str) -> Arc<Pod> {
    let mut p = pods::meta(NS, name, hash);
    let ann = &mut p.metadata.annotations;
    ann.insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
    ann.insert(CONFIG_HASH_ANNOTATION_KEY.into(), hash.into());
    p.spec.containers = vec![litelet::api::pod::Container {
        name: "main".into(),
        image: Some("busybox".into()),
        ..Default::default()
    }];
    Arc::new(p)
}

#[test]
fn static_pods_report_through_their_mirror_pod() {
    // #90: no mirror pod → nothing sent (status kept); once the mirror appears the
    // status goes to it. #88: a mirror pod is never deleted by the status manager.
    let fake = FakeApi::start();
    let flags = Flags::new();
    flags.may_delete.store(true, Ordering::SeqCst);
    flags.could_run.store(false, Ordering::SeqCst);
    let m = start(&fake, flags.hooks());
    let sp = static_pod("etcd-node-1", "hash1");
    m.set_pod_status(&sp, running(true));
    assert!(wait_until(LONG, || gets(&fake, "etcd-node-1") >= 2));
    assert_eq!(fake.count_verb("patch"), 0);
    assert!(m.get_pod_status("hash1").is_some());
    // A pod under that name that is not its mirror is left alone.
    let mut other = support::fake_api::pod_json(NS, "etcd-node-1", NODE);
    fake.create("pods", NS, other.clone());
    let g = gets(&fake, "etcd-node-1");
    assert!(wait_until(LONG, || gets(&fake, "etcd-node-1") >= g + 2));
    assert_eq!(fake.count_verb("patch"), 0);
    fake.remove("pods", NS, "etcd-node-1");
    other["metadata"]["annotations"] = json!({ CONFIG_MIRROR_ANNOTATION_KEY: "hash1" });
    fake.create("pods", NS, other);
    assert!(wait_until(LONG, || phase_of(&fake, "etcd-node-1") == "Running"));
    assert_eq!(patches(&fake, "etcd-node-1"), 1);
    // The mirror pod is being deleted and the static pod has terminated: its status
    // still goes to the mirror, which is never deleted from here.
    fake.delete("pods", NS, "etcd-node-1", Some(30)).unwrap();
    m.terminate_pod(&sp);
    // The delete moved the mirror's resourceVersion: the patch based on our last
    // write gets a 409 and is made again from a fresh read.
    assert!(wait_until(LONG, || {
        let c = api_pod(&fake, "etcd-node-1").map(|p| p.status.container_statuses.clone());
        c.is_some_and(|c| {
            c.iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
        })
    }));
    quiet(&m);
    assert_eq!(fake.count_verb("delete"), 0);
    assert!(api_pod(&fake, "etcd-node-1").is_some());
}

#[test]
fn failed_patches_are_retried_with_backoff() {
    // #87: 500s exhaust the client's own retries (5 tries per attempt); the manager
    // records nothing and retries the pod after a delay until the PATCH lands.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(Fail::status(500).times(10).verb("patch"));
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    let patch_codes = || -> Vec<u16> {
        let requests = fake.requests().into_iter();
        requests
            .filter(|r| r.verb == "patch")
            .map(|r| r.status)
            .collect()
    };
    // The fake logs a request after it changed the pod: wait for the log too.
    assert!(wait_until(LONG, || patch_codes().last() == Some(&200)));
    assert_eq!(phase_of(&fake, "web"), "Running");
    let codes = patch_codes();
    assert_eq!(codes.iter().filter(|c| **c == 500).count(), 10);
    // Three manager attempts, each starting with a fresh GET.
    assert_eq!(gets(&fake, "web"), 3);
}

#[test]
fn a_conflict_is_retried_from_a_fresh_read() {
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.conflict_next_write(&status_path("web"));
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || phase_of(&fake, "web") == "Running"));
    assert_eq!(gets(&fake, "web"), 2);
    assert_eq!(patches(&fake, "web"), 2);
}

#[test]
fn missing_and_recreated_pods() {
    // #86: GET 404 → nothing sent, status kept.
    let fake = FakeApi::start();
    let m = start(&fake, Flags::new().hooks());
    let mut ghost = create_pod(&fake, "web");
    fake.remove("pods", NS, "web");
    Arc::make_mut(&mut ghost).status = PodStatus::default();
    m.set_pod_status(&ghost, running(true));
    assert!(wait_until(LONG, || gets(&fake, "web") >= 2));
    assert_eq!(fake.count_verb("patch"), 0);
    assert!(m.get_pod_status(ghost.uid()).is_some());
    // #85: a new pod under the name (another UID) → the old status is dropped, and
    // the new pod's status is untouched.
    create_pod(&fake, "web");
    assert!(wait_until(LONG, || m.get_pod_status(ghost.uid()).is_none()));
    assert_eq!(fake.count_verb("patch"), 0);
    assert_eq!(phase_of(&fake, "web"), "Pending");
}

#[test]
fn wake_ups_coalesce_and_only_the_latest_is_sent() {
    // #94: while the thread is busy with the first sync, 20 more versions arrive;
    // they leave one pending wake-up and only the newest goes out.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    fake.set_delay(Duration::from_millis(150));
    for i in 0..21 {
        let mut s = running(true);
        s.message = Some(format!("v{i}"));
        m.set_pod_status(&pod, s);
    }
    assert!(wait_until(LONG, || api_json(&fake, "web")["status"]
        ["message"]
        == "v20"));
    assert!(
        patches(&fake, "web") <= 2,
        "{} patches",
        patches(&fake, "web")
    );
    fake.clear_faults();
}

#[test]
fn reconcile_repairs_what_others_changed() {
    // #89, with the pod source's copy as the hook: a kubelet-owned field edited by
    // someone else is patched back on the next reconcile; a foreign condition is not.
    let fake = Arc::new(FakeApi::start());
    let pod = create_pod(&fake, "web");
    let f = fake.clone();
    let lookup: PodLookup = Arc::new(move |_| api_pod(&f, "web").map(Arc::unwrap_or_clone));
    let m = start(&fake, Flags::new().hooks().with_api_pod(lookup));
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    fake.modify("pods", NS, "web", |p| {
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "example.com/gate", "status": "True"}));
    });
    quiet(&m);
    assert_eq!(patches(&fake, "web"), 1);
    fake.modify("pods", NS, "web", |p| {
        for c in p["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == "Ready" {
                c["status"] = "False".into();
            }
        }
    });
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    assert_eq!(patches(&fake, "web"), 2);
    assert_eq!(
        condition_of(&fake, "web", "example.com/gate").as_deref(),
        Some("True")
    );
}

#[test]
fn probe_results_reach_the_server() {
    // #91 / #92 through the manager: readiness before any status is ignored; after
    // it, Ready and ContainersReady follow.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_container_readiness(pod.uid(), "containerd://c-main", true);
    assert!(m.get_pod_status(pod.uid()).is_none());
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    m.set_container_readiness(pod.uid(), "containerd://c-main", true);
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    assert_eq!(
        condition_of(&fake, "web", POD_CONTAINERS_READY).as_deref(),
        Some("True")
    );
    assert_eq!(
        api_json(&fake, "web")["status"]["containerStatuses"][0]["ready"],
        true
    );
}

#[test]
fn remove_orphaned_statuses_stops_syncing() {
    // #95 (status half).
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    m.remove_orphaned_statuses(&Default::default());
    assert!(m.get_pod_status(pod.uid()).is_none());
}

fn median_and_worst(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

/// When each pod's status PATCH reached the fake server.
fn patch_times(fake: &FakeApi, names: &[String]) -> Option<Vec<Instant>> {
    let reqs = fake.requests();
    names
        .iter()
        .map(|n| {
            let path = status_path(n);
            reqs.iter()
                .find(|r| r.verb == "patch" && r.path == path)
                .map(|r| r.at)
        })
        .collect()
}

#[test]
fn latency_from_set_pod_status_to_patch() {
    // Prints, asserts nothing about time: how long from set_pod_status until the
    // fake API server handles the PATCH, over 100 pods. Each scenario gets a fresh
    // server and manager. Each pod costs a GET and a PATCH, so a burst of 100 pods
    // is 200 requests: with the client's default limit (50 qps, burst 100) the last
    // ones wait for tokens; the third scenario shows the manager without that limit.
    for (label, burst, limited) in [
        ("one at a time", false, true),
        ("burst of 100, client limit 50 qps / burst 100", true, true),
        ("burst of 100, no client limit", true, false),
    ] {
        let fake = FakeApi::start();
        let mut config = fake.client_config();
        if !limited {
            config.qps = 0.0;
        }
        let client = litelet::api::ApiClient::new(&config).unwrap();
        let (shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
        let (m, handle) = StatusManager::spawn(
            client,
            Flags::new().hooks(),
            Options::default(),
            shutdown_rx,
        )
        .unwrap();
        let names: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
        let pods: Vec<Arc<Pod>> = names.iter().map(|n| create_pod(&fake, n)).collect();
        let mut set_at = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            set_at.push(Instant::now());
            m.set_pod_status(pod, running(true));
            if !burst {
                let path = status_path(&names[i]);
                assert!(wait_until(LONG, || fake.count("patch", &path) == 1));
            }
        }
        assert!(wait_until(LONG, || patch_times(&fake, &names).is_some()));
        let times = patch_times(&fake, &names).unwrap();
        let lat: Vec<Duration> = times
            .iter()
            .zip(&set_at)
            .map(|(p, s)| p.duration_since(*s))
            .collect();
        let (median, worst) = median_and_worst(lat);
        println!(
            "status latency set_pod_status → PATCH at the fake API, {label}: median {median:?}, worst {worst:?}"
        );
        drop(shutdown);
        handle.join().unwrap();
    }
}

#[test]
fn a_new_status_is_patched_on_our_last_write_and_a_foreign_write_costs_a_reread() {
    // litelet, not upstream: the PATCH response is the base of the next patch, sent
    // with its resourceVersion, so a pod's later statuses cost one request each; when
    // someone else wrote the pod meanwhile, the 409 leads to a GET and a fresh patch,
    // and the other writer's condition survives.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    assert_eq!(gets(&fake, "web"), 1);

    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    assert_eq!((gets(&fake, "web"), patches(&fake, "web")), (1, 2));

    fake.modify("pods", NS, "web", |p| {
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "example.com/gate", "status": "True"}));
    });
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("False")));
    assert_eq!((conflicts(&fake), gets(&fake, "web")), (1, 2));
    assert_eq!(
        condition_of(&fake, "web", "example.com/gate").as_deref(),
        Some("True")
    );
}

/// CPU ticks used so far by this process's threads named `name`.
fn thread_ticks(name: &str) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: utime and stime are the 12th and 13th.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        total += field(11) + field(12);
    }
    total
}

#[test]
fn forbidden_on_get_forgets_the_pod_without_retrying() {
    // Issue 16: once a pod is deleted (its namespace too), the Node authorizer
    // answers 403 for it; that is the pod being gone, not a failure to retry.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(Fail::status(403).always().verb("get").path("/pods/web"));
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || m.versioned_status(pod.uid()).is_none()));
    let seen = fake.requests().len();
    quiet(&m);
    assert_eq!(gets(&fake, "web"), 1, "one GET, then nothing");
    assert_eq!(patches(&fake, "web"), 0);
    assert_eq!(fake.requests().len(), seen, "no request after the 403");
}

#[test]
fn forbidden_for_a_pod_the_watch_still_shows_is_retried_not_forgotten() {
    // A pod bound a moment ago: the Node authorizer's graph has not caught up and
    // answers 403, while the node's own watch already delivered the pod. Forgetting
    // the status there once lost an admission rejection; it is retried instead.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(Fail::status(403).times(2).verb("get").path("/pods/web"));
    let watched: Arc<AtomicBool> = Arc::new(AtomicBool::new(true));
    let shows = watched.clone();
    let hooks = Flags::new()
        .hooks()
        .with_watch(Arc::new(move |_| shows.load(Ordering::SeqCst)));
    let m = start(&fake, hooks);
    m.set_pod_status(&pod, running(true));
    assert!(
        wait_until(LONG, || patches(&fake, "web") == 1),
        "the status reaches the api once the 403s pass"
    );
    assert!(
        gets(&fake, "web") >= 3,
        "two refused GETs, then one that works"
    );
    assert!(m.versioned_status(pod.uid()).is_some(), "status kept");
}

#[test]
fn forbidden_on_patch_forgets_the_pod_without_retrying() {
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(
        Fail::status(403)
            .always()
            .verb("patch")
            .path("/pods/web/status"),
    );
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || m.versioned_status(pod.uid()).is_none()));
    let seen = fake.requests().len();
    quiet(&m);
    assert_eq!(patches(&fake, "web"), 1, "one PATCH, then nothing");
    assert_eq!(fake.requests().len(), seen, "no request after the 403");
}

#[test]
fn a_pending_retry_of_a_removed_pod_does_not_spin() {
    // Issue 16: a retry left for a pod the cache no longer had was due forever, so
    // the status thread woke at once, again and again, until the next full
    // reconcile (about a core for up to 10 s).
    // It measures every thread named `status` in this process: the in-process agent
    // of the node shutdown test has one too, and takes turns with it.
    let _turn = support::exclusive(support::STATUS_THREADS);
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(Fail::status(500).always().verb("get").path("/pods/web"));
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    let options = Options {
        resync_period: Duration::from_secs(60),
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(40),
    };
    let (m, handle) =
        StatusManager::spawn(fake.client(), Flags::new().hooks(), options, shutdown_rx).unwrap();
    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || gets(&fake, "web") >= 1));
    m.remove_orphaned_statuses(&Default::default());
    std::thread::sleep(Duration::from_millis(200)); // the pending retry comes due
    let before = thread_ticks("status");
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_ticks("status") - before;
    drop(shutdown);
    let _ = handle.join();
    // A spinning thread uses ~100 ticks a second; an idle one none.
    assert!(used < 10, "status threads used {used} ticks in 1 s");
}

/// The resourceVersion of an API copy, as a number (the fake's are etcd-like).
fn rv_of(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn conflicts(fake: &FakeApi) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.status == 409)
        .count()
}

#[test]
fn a_status_after_a_resize_is_one_patch_on_the_watched_pod_without_a_conflict() {
    // litelet: an in-place resize changes the spec, so the resourceVersion of our
    // last PATCH response is stale. The pod workers hand over the pod as watched
    // after the resize; its newer resourceVersion is the precondition, so the next
    // status costs one PATCH: no 409, no GET.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    let written = api_pod(&fake, "web").unwrap();

    let resized = decode(fake.modify("pods", NS, "web", |p| {
        p["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "200m"}});
    }));
    assert!(
        rv_of(&resized) > rv_of(&written),
        "a spec change moves the resourceVersion"
    );
    assert_eq!(
        resized.metadata.generation,
        written.metadata.generation.map(|g| g + 1)
    );

    m.set_pod_status(&resized, running(true));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    quiet(&m);
    assert_eq!(conflicts(&fake), 0);
    assert_eq!((gets(&fake, "web"), patches(&fake, "web")), (1, 2));
}

#[test]
fn a_watched_pod_older_than_our_write_leaves_our_write_the_base() {
    // The pod workers may still hold the pod as created while our PATCH response
    // is newer: the written copy stays the base and the next status is one PATCH.
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    let m = start(&fake, Flags::new().hooks());
    m.set_pod_status(&pod, running(false));
    assert!(wait_until(LONG, || patches(&fake, "web") == 1));
    assert!(rv_of(&api_pod(&fake, "web").unwrap()) > rv_of(&pod));

    m.set_pod_status(&pod, running(true));
    assert!(wait_until(LONG, || condition_of(&fake, "web", POD_READY)
        .as_deref()
        == Some("True")));
    quiet(&m);
    assert_eq!(conflicts(&fake), 0);
    assert_eq!((gets(&fake, "web"), patches(&fake, "web")), (1, 2));
}

/// Catching up after an outage: a pod whose sync failed waits out no grown retry
/// back-off. The first answer the API server gives any request of the client (here
/// the test's own GET through a clone) makes every waiting pod go out at once.
#[test]
fn the_api_servers_return_ends_a_long_retry_back_off_at_once() {
    let fake = FakeApi::start();
    let pod = create_pod(&fake, "web");
    fake.inject(Fail::status(503).always().verb("get"));
    let client = fake.client();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let options = Options {
        resync_period: Duration::from_secs(600),
        retry_initial: Duration::from_secs(600),
        retry_max: Duration::from_secs(600),
    };
    let (m, handle) =
        StatusManager::spawn(client.clone(), Flags::new().hooks(), options, shutdown_rx).unwrap();
    let m = Manager {
        m,
        shutdown: Some(shutdown),
        handle: Some(handle),
    };
    m.set_pod_status(&pod, running(true));
    // One sync failed (a GET and the client's 4 retries): the next is 10 minutes away.
    assert!(wait_until(LONG, || gets(&fake, "web") >= 5));
    fake.clear_faults();
    let answer: Result<serde_json::Value, _> = client.get(&format!("/api/v1/namespaces/{NS}"));
    assert!(
        answer.is_ok() || answer.as_ref().is_err_and(|e| e.is_not_found()),
        "{answer:?}"
    );
    assert!(
        wait_until(LONG, || phase_of(&fake, "web") == "Running"),
        "the status waited for its back-off"
    );
}
