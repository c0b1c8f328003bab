//! Runtime-manager behaviours of `runtime-and-status.md` §13 that only show over CRI:
//! what SyncPod and KillPod call on the fake runtime, in which order, with which
//! arguments, and which events and waiting reasons they leave. Each test is named
//! after its behaviour number (`bNN_...`); the pure decisions behind them are
//! table-tested in `src/runtime/actions/tests.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::containerd::BUSYBOX;
use crate::support::fake_cri::{CallRecord, FakeCri};
use crate::support::pods;
use crate::support::runtime::{self, fake_with_busybox};
use crate::support::wait_until;
use crossbeam_channel::Receiver;
use grpcio::{RpcContext, RpcStatus, RpcStatusCode, ServerBuilder, ServerCredentials, UnarySink};
use litelet::api::meta::Time;
use litelet::api::pod::{
    Container, EphemeralContainer, ExecAction, HttpGetAction, ImagePullPolicy, IntOrString,
    Lifecycle, LifecycleHandler, Pod, Probe, RestartPolicy, SleepAction,
};
use litelet::cri::{self, pb, ConnectOptions, CriError, Endpoint};
use litelet::events::{EventObject, EventRecord, EventType, Recorder};
use litelet::runtime::actions::{ProbeResult, ProbeResults};
use litelet::runtime::cancel::Cancel;
use litelet::runtime::env::EnvContext;
use litelet::runtime::hooks::{CriHookRunner, HookCall, HookError, HookRunner};
use litelet::runtime::manager::RuntimeManager;
use litelet::runtime::model::{ContainerState, PodRuntimeStatus, SandboxState};
use litelet::runtime::result::{SyncAction, SyncOutcome};
use litelet::runtime::sandbox::{sandbox_config, SandboxContext};
use protobuf::MessageField;

/// One runtime manager (with its own crash-loop and image back-off tables) on a fake
/// runtime, recording its events.
struct Harness {
    manager: RuntimeManager,
    events: Receiver<EventRecord>,
    dir: tempfile::TempDir,
}

impl Harness {
    fn new(fake: &FakeCri) -> Harness {
        Harness::with_hooks(fake, |runtime| {
            Arc::new(CriHookRunner::new(runtime.clone()))
        })
    }

    /// A harness whose lifecycle hooks go to the runner `hooks` builds.
    fn with_hooks(
        fake: &FakeCri,
        hooks: impl FnOnce(&cri::RuntimeClient) -> Arc<dyn HookRunner>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, images) = fake.clients(Duration::from_secs(30));
        let (sink, events) = crossbeam_channel::unbounded();
        let hooks = hooks(&runtime);
        let settings = runtime::settings(dir.path());
        let manager = RuntimeManager::new(runtime, images, hooks, Recorder::new(sink), settings);
        Harness {
            manager,
            events,
            dir,
        }
    }

    fn status(&self, pod: &Pod) -> PodRuntimeStatus {
        self.manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status")
    }

    fn sync(&self, pod: &Pod) -> SyncOutcome {
        self.sync_probed(pod, &ProbeResults::default())
    }

    fn sync_probed(&self, pod: &Pod, probes: &ProbeResults) -> SyncOutcome {
        let volumes = BTreeMap::new();
        let env = EnvContext::default();
        let inputs = runtime::inputs(String::new(), &volumes, &env);
        self.manager
            .sync_pod(pod, &self.status(pod), probes, &inputs)
    }

    /// Syncs until `done` holds, like a pod worker woken by the PLEG.
    fn sync_until(&self, pod: &Pod, what: &str, done: impl Fn(&PodRuntimeStatus) -> bool) {
        let ok = wait_until(Duration::from_secs(20), || {
            self.sync(pod);
            std::thread::sleep(Duration::from_millis(30));
            done(&self.status(pod))
        });
        assert!(ok, "never reached: {what}; status: {:#?}", self.status(pod));
    }

    /// Waits (without syncing) until `done` holds.
    fn wait_for(&self, pod: &Pod, what: &str, done: impl Fn(&PodRuntimeStatus) -> bool) {
        let ok = wait_until(Duration::from_secs(10), || done(&self.status(pod)));
        assert!(ok, "never reached: {what}; status: {:#?}", self.status(pod));
    }

    /// The ID of the newest instance of `name`.
    fn id_of(&self, pod: &Pod, name: &str) -> String {
        let status = self.status(pod);
        let newest = status.newest(name);
        newest.map(|c| c.id.clone()).unwrap_or_default()
    }

    fn events(&self) -> Vec<EventRecord> {
        self.events.try_iter().collect()
    }

    fn stop_sandbox(&self, id: &str) {
        self.manager
            .runtime
            .stop_pod_sandbox(&pb::StopPodSandboxRequest {
                pod_sandbox_id: id.to_owned(),
                ..Default::default()
            })
            .expect("stop sandbox");
    }

    /// Creates one more sandbox for `pod` behind the manager's back (as a kubelet
    /// restart mid-creation could leave), with the labels litelet puts on its own.
    fn extra_sandbox(&self, pod: &Pod, attempt: u32) -> String {
        let ctx = SandboxContext {
            pod_logs_dir: self.dir.path().join("logs"),
            cgroup_parent: String::new(),
            dns: Default::default(),
            seccomp_root: self.dir.path().join("seccomp"),
            seccomp_default: false,
            userns: None,
        };
        self.manager
            .runtime
            .run_pod_sandbox(&pb::RunPodSandboxRequest {
                config: MessageField::some(
                    sandbox_config(pod, attempt, &ctx).expect("sandbox config"),
                ),
                ..Default::default()
            })
            .expect("extra sandbox")
            .pod_sandbox_id
    }
}

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sh".into(), "-c".into(), "exec sleep 3600".into()],
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some(RestartPolicy::Always),
        ..container(name)
    }
}

fn exec(command: &[&str]) -> LifecycleHandler {
    LifecycleHandler {
        exec: Some(ExecAction {
            command: command.iter().map(|s| s.to_string()).collect(),
        }),
        ..Default::default()
    }
}

/// Pod "web" in "default" with one main container "app", host network, 30 s grace.
fn pod(uid: &str) -> Pod {
    let mut pod = pods::meta("default", "web", uid);
    pod.spec.host_network = Some(true);
    pod.spec.termination_grace_period_seconds = Some(30);
    pod.spec.containers.push(container("app"));
    pod
}

fn running(status: &PodRuntimeStatus, name: &str) -> bool {
    status
        .newest(name)
        .is_some_and(|c| c.state == ContainerState::Running)
}

fn exited(status: &PodRuntimeStatus, name: &str) -> bool {
    status
        .newest(name)
        .is_some_and(|c| c.state == ContainerState::Exited)
}

/// The calls served since `mark` (an earlier `fake.calls().len()`).
fn calls_since(fake: &FakeCri, mark: usize) -> Vec<CallRecord> {
    fake.calls()[mark..].to_vec()
}

/// Targets of the calls of `method`, in order.
fn targets(calls: &[CallRecord], method: &str) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.method == method)
        .map(|c| c.target.clone())
        .collect()
}

/// Index of the first call of `method` (about `target`, when given).
fn position(calls: &[CallRecord], method: &str, target: Option<&str>) -> Option<usize> {
    calls
        .iter()
        .position(|c| c.method == method && target.is_none_or(|t| c.target == t))
}

fn with_reason<'a>(events: &'a [EventRecord], reason: &str) -> Vec<&'a EventRecord> {
    events.iter().filter(|e| e.reason == reason).collect()
}

fn field_path(event: &EventRecord) -> Option<&str> {
    match &event.object {
        EventObject::Pod { field_path, .. } => field_path.as_deref(),
        EventObject::Node { .. } => None,
    }
}

// ---- Sandbox & pod level ----

/// B3 (and B1's "no SandboxChanged event for a new pod"): a NOTREADY sandbox is stopped
/// and replaced by one with the next attempt number, with a SandboxChanged event.
#[test]
fn sandbox_changed_stops_the_old_one_and_runs_the_next_attempt() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let pod = pod("uid-b03");
    let first = h.sync(&pod);
    assert!(first.is_ok(), "{first}");
    assert_eq!(h.status(&pod).sandboxes[0].attempt, 0);
    assert!(
        with_reason(&h.events(), "SandboxChanged").is_empty(),
        "B1: no SandboxChanged event for a new pod"
    );

    for attempt in 1..=3u32 {
        let old = h.status(&pod).sandboxes[0].id.clone();
        h.stop_sandbox(&old);
        let mark = fake.calls().len();
        let outcome = h.sync(&pod);
        // The app died with its sandbox; its first restart is immediate, later ones
        // wait for the crash-loop back-off.
        if attempt == 1 {
            assert!(outcome.is_ok(), "{outcome}");
        } else {
            assert!(outcome.only_backoff(), "{outcome}");
        }
        let calls = calls_since(&fake, mark);
        let stop = position(&calls, "StopPodSandbox", Some(&old)).expect("old sandbox stopped");
        let run = position(&calls, "RunPodSandbox", None).expect("a new sandbox");
        assert!(stop < run, "stop before run: {calls:#?}");
        let status = h.status(&pod);
        assert_eq!(status.sandboxes[0].attempt, attempt, "{status:#?}");
        assert_eq!(status.sandboxes[0].state, SandboxState::Ready);
        assert!(status.sandboxes[1..]
            .iter()
            .all(|s| s.state == SandboxState::NotReady));
        if attempt == 1 {
            assert!(running(&status, "app"), "app started in the new sandbox");
        }
        let events = h.events();
        let changed = with_reason(&events, "SandboxChanged");
        assert_eq!(changed.len(), 1, "{events:#?}");
        assert_eq!(changed[0].kind, EventType::Normal);
        assert_eq!(
            changed[0].message,
            "Pod sandbox changed, it will be killed and re-created."
        );
    }
}

/// B4: two READY sandboxes → both stopped, a new one with the newest attempt + 1.
#[test]
fn two_ready_sandboxes_are_both_stopped_and_replaced() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let pod = pod("uid-b04");
    assert!(h.sync(&pod).is_ok());
    let original = h.status(&pod).sandboxes[0].id.clone();
    let extra = h.extra_sandbox(&pod, 5);
    let before = h.status(&pod);
    assert_eq!(before.sandboxes.len(), 2);
    assert_eq!(
        before.sandboxes[0].id, extra,
        "the extra sandbox is the newest"
    );
    assert!(before
        .sandboxes
        .iter()
        .all(|s| s.state == SandboxState::Ready));

    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    let calls = calls_since(&fake, mark);
    let run = position(&calls, "RunPodSandbox", None).expect("a new sandbox");
    for old in [&original, &extra] {
        let stop = position(&calls, "StopPodSandbox", Some(old)).expect("old sandbox stopped");
        assert!(stop < run, "{calls:#?}");
    }
    let after = h.status(&pod);
    assert_eq!(after.sandboxes.len(), 3);
    assert_eq!(after.sandboxes[0].attempt, 6);
    assert_eq!(after.sandboxes[0].state, SandboxState::Ready);
    assert!(after.sandboxes[1..]
        .iter()
        .all(|s| s.state == SandboxState::NotReady));
    assert!(running(&after, "app"));
    assert_eq!(with_reason(&h.events(), "SandboxChanged").len(), 1);
}

/// B11 (SyncPod side): when the sandbox is recreated, every old init container
/// instance is removed after the kill and before the new sandbox; only init[0] starts.
#[test]
fn sandbox_recreation_purges_old_init_containers() {
    let fake = fake_with_busybox();
    fake.exit_after_start("i0", 0, Duration::from_millis(20));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b11");
    pod.spec.init_containers.push(container("i0"));
    h.sync_until(&pod, "app running", |s| running(s, "app"));
    let old_init = h.id_of(&pod, "i0");
    let old_sandbox = h.status(&pod).sandboxes[0].id.clone();

    h.stop_sandbox(&old_sandbox);
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    let calls = calls_since(&fake, mark);
    let stop = position(&calls, "StopPodSandbox", Some(&old_sandbox)).unwrap();
    let purge = position(&calls, "RemoveContainer", Some(&old_init)).expect("i0 purged");
    let run = position(&calls, "RunPodSandbox", None).unwrap();
    assert!(stop < purge && purge < run, "{calls:#?}");
    assert_eq!(
        targets(&calls, "CreateContainer"),
        ["i0"],
        "quirk 5: only init[0]"
    );
}

/// B13: a sandbox that cannot be created is a CreatePodSandboxError with a Warning
/// event and no container; for a pod being deleted it is neither.
#[test]
fn sandbox_creation_failure_is_reported_unless_the_pod_is_being_deleted() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b13");
    fake.fail_nth(
        "RunPodSandbox",
        1,
        RpcStatusCode::UNKNOWN,
        "cni plugin failed",
    );
    let outcome = h.sync(&pod);
    let failures: Vec<_> = outcome.failures().collect();
    assert_eq!(failures.len(), 1, "{outcome}");
    let (step, failure) = failures[0];
    assert_eq!(step.action, SyncAction::CreatePodSandbox);
    assert_eq!(step.target, "web_default");
    assert_eq!(failure.reason, "CreatePodSandboxError");
    assert!(
        failure
            .message
            .starts_with("Failed to create pod sandbox: ")
            && failure.message.contains("cni plugin failed"),
        "{}",
        failure.message
    );
    let events = h.events();
    let warnings = with_reason(&events, "FailedCreatePodSandBox");
    assert_eq!(warnings.len(), 1, "{events:#?}");
    assert_eq!(warnings[0].kind, EventType::Warning);
    assert_eq!(warnings[0].message, failure.message);
    assert_eq!(fake.count("CreateContainer"), 0);

    // The same failure while the pod is being deleted: silent.
    pod.metadata.deletion_timestamp = Some(Time::now());
    fake.fail_nth(
        "RunPodSandbox",
        1,
        RpcStatusCode::UNKNOWN,
        "cni plugin failed",
    );
    let deleting = h.sync(&pod);
    assert_eq!(fake.count("RunPodSandbox"), 2, "creation was tried");
    assert!(
        deleting.is_ok(),
        "no error for a pod on its way out: {deleting}"
    );
    let events = h.events();
    assert!(
        with_reason(&events, "FailedCreatePodSandBox").is_empty(),
        "no event for a pod on its way out: {events:#?}"
    );
    assert_eq!(fake.count("CreateContainer"), 0);
}

/// A runtime service that only answers Version (everything else is UNIMPLEMENTED, the
/// generated default); `None` answers Version with UNIMPLEMENTED too.
#[derive(Clone)]
struct VersionOnly(Option<pb::VersionResponse>);

impl cri::grpc::RuntimeService for VersionOnly {
    fn version(
        &mut self,
        ctx: RpcContext,
        _: pb::VersionRequest,
        sink: UnarySink<pb::VersionResponse>,
    ) {
        let answer = self.0.clone();
        ctx.spawn(async move {
            let _ = match answer {
                Some(response) => sink.success(response).await,
                None => {
                    let status = RpcStatus::with_message(
                        RpcStatusCode::UNIMPLEMENTED,
                        "unknown service runtime.v1.RuntimeService".into(),
                    );
                    sink.fail(status).await
                }
            };
        });
    }
}

/// Runs `check_version` against a runtime answering Version with `answer`.
fn check_version_against(
    answer: Option<pb::VersionResponse>,
) -> Result<pb::VersionResponse, CriError> {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("version.sock");
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let mut server = ServerBuilder::new(env)
        .register_service(cri::grpc::create_runtime_service(VersionOnly(answer)))
        .build()
        .unwrap();
    server
        .add_listening_port(
            format!("unix:{}", socket.display()),
            ServerCredentials::insecure(),
        )
        .unwrap();
    server.start();
    let endpoint = Endpoint::parse(&format!("unix://{}", socket.display())).unwrap();
    let options = ConnectOptions {
        request_timeout: Duration::from_secs(10),
        pull_timeout: Duration::from_secs(10),
    };
    let (runtime, _) = cri::connect(&endpoint, &options);
    runtime.check_version()
}

fn version(version: &str, api: &str) -> pb::VersionResponse {
    pb::VersionResponse {
        version: version.into(),
        runtime_name: "other".into(),
        runtime_version: "9.9".into(),
        runtime_api_version: api.into(),
        ..Default::default()
    }
}

/// B14: a runtime that does not speak CRI v1 is rejected before litelet uses it.
/// litelet gates on `runtime_api_version` ("v1", what CRI v1 runtimes report) and on
/// runtime.v1 being served at all.
#[test]
fn runtime_without_cri_v1_is_rejected() {
    let ok = check_version_against(Some(version("0.1.0", "v1")));
    assert_eq!(ok.unwrap().runtime_name, "other");

    let old = check_version_against(Some(version("0.1.0", "v1alpha2"))).unwrap_err();
    assert!(matches!(old, CriError::UnsupportedApi { .. }), "{old}");
    assert!(old.to_string().contains("v1alpha2"), "{old}");

    let unserved = check_version_against(None).unwrap_err();
    assert!(
        matches!(unserved, CriError::UnsupportedApi { .. }),
        "{unserved}"
    );
}

/// B14 deviation, pinned: upstream also requires the legacy `version` field to be
/// "0.1.0" (ErrVersionNotSupported for "0.2.0"); litelet's check (src/cri/client.rs)
/// ignores that field and accepts such a runtime. Change this test if that changes.
#[test]
fn quirk_legacy_version_field_is_not_checked() {
    let accepted = check_version_against(Some(version("0.2.0", "v1")));
    assert!(accepted.is_ok(), "{accepted:?}");
}

/// B23 (SyncPod side): the only container fails liveness under Never → the whole pod
/// is killed: StopContainer with the pod's grace (reason Unknown, not the probe's
/// grace), then StopPodSandbox; nothing is created.
#[test]
fn liveness_failure_of_the_only_container_under_never_kills_the_pod() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b23");
    pod.spec.restart_policy = Some(RestartPolicy::Never);
    pod.spec.containers[0].liveness_probe = Some(Probe {
        termination_grace_period_seconds: Some(3),
        ..Default::default()
    });
    assert!(h.sync(&pod).is_ok());
    let app = h.id_of(&pod, "app");
    let sandbox = h.status(&pod).sandboxes[0].id.clone();
    let mut probes = ProbeResults::default();
    probes.liveness.insert(app.clone(), ProbeResult::Failure);

    let mark = fake.calls().len();
    let outcome = h.sync_probed(&pod, &probes);
    assert!(outcome.is_ok(), "{outcome}");
    let calls = calls_since(&fake, mark);
    let stop = position(&calls, "StopContainer", Some(&app)).expect("app stopped");
    assert_eq!(calls[stop].detail, "timeout=30", "the pod's grace period");
    let sandbox_stop = position(&calls, "StopPodSandbox", Some(&sandbox)).expect("pod killed");
    assert!(stop < sandbox_stop);
    assert_eq!(position(&calls, "CreateContainer", None), None);
    assert_eq!(position(&calls, "RunPodSandbox", None), None);
}

// ---- Init, sidecar and ephemeral containers ----

/// B32 (SyncPod side): a crash-looping init container gets CrashLoopBackOff and the
/// sync ends there: nothing is created, no regular container started.
#[test]
fn init_container_in_back_off_ends_the_sync() {
    let fake = fake_with_busybox();
    fake.exit_after_start("i0", 1, Duration::from_millis(20));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b32");
    pod.spec.init_containers.push(container("i0"));

    assert!(h.sync(&pod).is_ok());
    h.wait_for(&pod, "i0 exited", |s| exited(s, "i0"));
    let restart = h.sync(&pod);
    assert!(restart.is_ok(), "the first restart is immediate: {restart}");
    h.wait_for(&pod, "i0 exited again", |s| {
        exited(s, "i0") && s.newest("i0").is_some_and(|c| c.restart_count == 1)
    });
    h.events();

    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    let errors = outcome.container_errors();
    assert_eq!(errors["i0"].reason, "CrashLoopBackOff", "{outcome}");
    assert_eq!(
        errors["i0"].message,
        "back-off 10s restarting failed container=i0 pod=web_default(uid-b32)"
    );
    assert!(outcome.only_backoff());
    let last = outcome.steps.last().unwrap();
    assert_eq!(
        (last.action, last.target.as_str()),
        (SyncAction::StartContainer, "i0")
    );
    let calls = calls_since(&fake, mark);
    assert_eq!(
        position(&calls, "CreateContainer", None),
        None,
        "{calls:#?}"
    );
    assert_eq!(position(&calls, "StartContainer", None), None);
    assert!(h.status(&pod).newest("app").is_none());
    let events = h.events();
    let backoff = with_reason(&events, "BackOff");
    assert_eq!(backoff.len(), 1, "{events:#?}");
    assert_eq!(backoff[0].kind, EventType::Warning);
    assert_eq!(field_path(backoff[0]), Some("spec.initContainers{i0}"));
}

/// B40, sidecar half: a sidecar that fails to start does not stop the sync; the next
/// init container in the list is still started.
#[test]
fn sidecar_start_failure_continues_with_the_next_init_container() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b40s");
    pod.spec.init_containers.push(sidecar("s0"));
    pod.spec.init_containers.push(sidecar("s1"));
    h.sync_until(&pod, "app running", |s| running(s, "app"));
    for name in ["s0", "s1"] {
        assert!(fake.exit_container(&h.id_of(&pod, name), 0));
    }

    // Both sidecars are restarted in spec order; s0's create fails.
    fake.fail_nth(
        "CreateContainer",
        1,
        RpcStatusCode::UNKNOWN,
        "no space left on device",
    );
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    let errors = outcome.container_errors();
    assert_eq!(errors["s0"].reason, "CreateContainerError", "{outcome}");
    assert!(!errors.contains_key("s1"), "{outcome}");
    let calls = calls_since(&fake, mark);
    assert_eq!(targets(&calls, "CreateContainer"), ["s0", "s1"]);
    assert!(running(&h.status(&pod), "s1"));
}

/// B40, regular half: a regular init container that fails to start ends the sync,
/// even after a sidecar failure earlier in the same list did not.
#[test]
fn regular_init_start_failure_ends_the_sync() {
    let fake = fake_with_busybox();
    fake.exit_after_start("i1", 1, Duration::from_millis(20));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b40r");
    pod.spec.init_containers.push(sidecar("s0"));
    pod.spec.init_containers.push(container("i1"));
    h.sync_until(&pod, "i1 ran", |s| exited(s, "i1"));
    assert!(fake.exit_container(&h.id_of(&pod, "s0"), 0));

    // s0 exited and i1 failed: both restart, [s0, i1]. s0 fails: i1 still starts.
    fake.fail_nth(
        "CreateContainer",
        1,
        RpcStatusCode::UNKNOWN,
        "no space left on device",
    );
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    assert_eq!(
        outcome.container_errors()["s0"].reason,
        "CreateContainerError"
    );
    assert_eq!(
        targets(&calls_since(&fake, mark), "CreateContainer"),
        ["s0", "i1"]
    );
    h.wait_for(&pod, "i1 failed again", |s| {
        exited(s, "i1") && s.newest("i1").is_some_and(|c| c.restart_count == 1)
    });

    // Same list with a fresh back-off table; now i1's create fails: the sync ends
    // with that failure.
    let fresh = Harness::new(&fake);
    fake.fail_nth(
        "CreateContainer",
        2,
        RpcStatusCode::UNKNOWN,
        "no space left on device",
    );
    let mark = fake.calls().len();
    let outcome = fresh.sync(&pod);
    let errors = outcome.container_errors();
    assert_eq!(errors["i1"].reason, "CreateContainerError", "{outcome}");
    assert!(!errors.contains_key("s0"), "{outcome}");
    let last = outcome.steps.last().unwrap();
    assert_eq!(
        (last.action, last.target.as_str()),
        (SyncAction::StartContainer, "i1")
    );
    let calls = calls_since(&fake, mark);
    assert_eq!(targets(&calls, "CreateContainer"), ["s0", "i1"]);
    assert!(fresh.status(&pod).newest("app").is_none());
}

/// B41 (CRI side): KillPod stops the main container first, then the sidecars in
/// reverse spec order.
#[test]
fn kill_pod_stops_mains_then_sidecars_in_reverse_order() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b41");
    pod.spec.init_containers.push(sidecar("s0"));
    pod.spec.init_containers.push(sidecar("s1"));
    h.sync_until(&pod, "all running", |s| {
        running(s, "app") && running(s, "s0") && running(s, "s1")
    });
    let ids: BTreeMap<String, &str> = ["app", "s0", "s1"]
        .into_iter()
        .map(|n| (h.id_of(&pod, n), n))
        .collect();

    let mark = fake.calls().len();
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), None);
    assert!(killed.is_ok(), "{killed}");
    let order: Vec<&str> = targets(&calls_since(&fake, mark), "StopContainer")
        .iter()
        .map(|id| ids[id])
        .collect();
    assert_eq!(order, ["app", "s1", "s0"]);
}

/// B42 (SyncPod side): an ephemeral container is started before any init container of
/// the same sync.
#[test]
fn ephemeral_container_starts_before_init_containers() {
    let fake = fake_with_busybox();
    fake.exit_after_start("i0", 1, Duration::from_millis(20));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b42");
    pod.spec.init_containers.push(container("i0"));
    assert!(h.sync(&pod).is_ok());
    h.wait_for(&pod, "i0 failed", |s| exited(s, "i0"));

    pod.spec.ephemeral_containers.push(EphemeralContainer {
        container: container("debug"),
        target_container_name: None,
    });
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    assert_eq!(
        targets(&calls_since(&fake, mark), "CreateContainer"),
        ["debug", "i0"]
    );
    assert!(running(&h.status(&pod), "debug"));
}

/// B57: an init container's older dead instances are pruned (newest dead kept) before
/// anything starts; a failed removal is ignored.
#[test]
fn old_init_container_instances_are_pruned_before_starting() {
    let fake = fake_with_busybox();
    fake.exit_after_start("i0", 1, Duration::from_millis(20));
    let mut pod = pod("uid-b57");
    pod.spec.init_containers.push(container("i0"));
    let dead_instances = |h: &Harness, n: usize| {
        h.wait_for(&pod, "i0 instances dead", |s| {
            let all: Vec<_> = s.instances("i0").collect();
            all.len() == n && all.iter().all(|c| c.state == ContainerState::Exited)
        });
    };

    // Each restart through a fresh manager, so no crash-loop back-off gets in the way.
    let first = Harness::new(&fake);
    assert!(first.sync(&pod).is_ok());
    dead_instances(&first, 1);
    let second = Harness::new(&fake);
    assert!(second.sync(&pod).is_ok());
    dead_instances(&second, 2);
    // The prune in this sync fails: ignored, i0 still starts, three dead instances.
    fake.fail_nth(
        "RemoveContainer",
        1,
        RpcStatusCode::UNKNOWN,
        "device or resource busy",
    );
    let third = Harness::new(&fake);
    let mark = fake.calls().len();
    let outcome = third.sync(&pod);
    assert!(outcome.is_ok(), "prune errors are ignored: {outcome}");
    assert_eq!(
        targets(&calls_since(&fake, mark), "RemoveContainer").len(),
        1
    );
    dead_instances(&third, 3);

    let fourth = Harness::new(&fake);
    let dead: Vec<String> = fourth
        .status(&pod)
        .instances("i0")
        .map(|c| c.id.clone())
        .collect();
    let mark = fake.calls().len();
    let outcome = fourth.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    let calls = calls_since(&fake, mark);
    let removed = targets(&calls, "RemoveContainer");
    assert_eq!(removed, [dead[1].clone(), dead[2].clone()], "{calls:#?}");
    let create = position(&calls, "CreateContainer", Some("i0")).unwrap();
    assert!(
        position(&calls, "RemoveContainer", Some(&dead[2])).unwrap() < create,
        "pruned before starting"
    );
    let left: Vec<String> = fourth
        .status(&pod)
        .instances("i0")
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(left.len(), 2);
    assert_eq!(left[1], dead[0], "the newest dead instance is kept");
}

// ---- Back-off and images ----

/// B44 (and B47 at SyncPod level): a regular container's second crash within the
/// window gets CrashLoopBackOff with upstream's message and a Warning BackOff event;
/// a new spec (new hash) starts at once.
#[test]
fn crash_loop_back_off_message_and_event() {
    let fake = fake_with_busybox();
    fake.exit_after_start("app", 1, Duration::from_millis(20));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b44");
    assert!(h.sync(&pod).is_ok());
    h.wait_for(&pod, "app crashed", |s| exited(s, "app"));
    assert!(h.sync(&pod).is_ok(), "first restart is immediate");
    h.wait_for(&pod, "app crashed again", |s| {
        exited(s, "app") && s.newest("app").is_some_and(|c| c.restart_count == 1)
    });
    h.events();

    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    let error = &outcome.container_errors()["app"];
    assert_eq!(error.reason, "CrashLoopBackOff");
    assert_eq!(
        error.message,
        "back-off 10s restarting failed container=app pod=web_default(uid-b44)"
    );
    assert_eq!(
        position(&calls_since(&fake, mark), "CreateContainer", None),
        None
    );
    let events = h.events();
    let backoff = with_reason(&events, "BackOff");
    assert_eq!(backoff.len(), 1, "{events:#?}");
    assert_eq!(backoff[0].kind, EventType::Warning);
    assert_eq!(
        backoff[0].message,
        "Back-off restarting failed container app in pod web_default(uid-b44)"
    );
    assert_eq!(field_path(backoff[0]), Some("spec.containers{app}"));

    // B47: a changed spec has a new back-off key.
    pod.spec.containers[0].command = vec!["sh".into(), "-c".into(), "exit 2".into()];
    let changed = h.sync(&pod);
    assert!(changed.is_ok(), "{changed}");
}

/// B48: an image without a tag is looked up and pulled as `:latest`.
#[test]
fn untagged_image_is_asked_for_as_latest() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b48");
    pod.spec.containers[0].image = Some("busybox".into());
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    let calls = fake.calls();
    assert_eq!(targets(&calls, "ImageStatus"), ["busybox:latest"]);
    assert_eq!(targets(&calls, "PullImage"), ["busybox:latest"]);
}

/// B49: IfNotPresent with the image present → no pull, Normal Pulled "already present
/// on machine"; Always pulls even then.
#[test]
fn if_not_present_with_the_image_present_does_not_pull() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b49");
    pod.spec.containers[0].image_pull_policy = Some(ImagePullPolicy::IfNotPresent);
    let mut always = container("always");
    always.image_pull_policy = Some(ImagePullPolicy::Always);
    pod.spec.containers.push(always);
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "{outcome}");
    assert_eq!(
        targets(&fake.calls(), "PullImage"),
        [BUSYBOX],
        "only the Always container pulls"
    );
    let events = h.events();
    let pulled: Vec<_> = with_reason(&events, "Pulled")
        .into_iter()
        .filter(|e| field_path(e) == Some("spec.containers{app}"))
        .collect();
    assert_eq!(pulled.len(), 1, "{events:#?}");
    assert_eq!(pulled[0].kind, EventType::Normal);
    assert_eq!(
        pulled[0].message,
        format!("Container image \"{BUSYBOX}\" already present on machine")
    );
    assert!(running(&h.status(&pod), "app"));
}

/// B50: Never with the image absent → ErrImageNeverPull, a Warning event, no pull and
/// no container.
#[test]
fn never_with_the_image_absent_is_err_image_never_pull() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b50");
    let absent = "localhost/litelet/absent:1.0";
    pod.spec.containers[0].image = Some(absent.into());
    pod.spec.containers[0].image_pull_policy = Some(ImagePullPolicy::Never);
    let outcome = h.sync(&pod);
    let error = &outcome.container_errors()["app"];
    assert_eq!(error.reason, "ErrImageNeverPull", "{outcome}");
    let message = format!("Container image \"{absent}\" is not present with pull policy of Never");
    assert_eq!(error.message, message);
    assert_eq!(fake.count("PullImage"), 0);
    assert_eq!(fake.count("CreateContainer"), 0);
    let events = h.events();
    let warning = with_reason(&events, "ErrImageNeverPull");
    assert_eq!(warning.len(), 1, "{events:#?}");
    assert_eq!(warning[0].kind, EventType::Warning);
    assert_eq!(warning[0].message, message);
}

// ---- Hooks and killing ----

/// B52: a failing postStart hook kills the container (message FailedPostStartHook,
/// the pod's grace period) and the start is a PostStartHookError; the Warning event
/// carries no hook output (upstream withholds it: it may hold secrets).
#[test]
fn post_start_failure_kills_the_container() {
    let fake = fake_with_busybox();
    fake.state()
        .exec_results
        .insert("cat /run/secret".into(), (1, "s3cr3t".into()));
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b52");
    pod.spec.containers[0].lifecycle = Some(Lifecycle {
        post_start: Some(exec(&["cat", "/run/secret"])),
        ..Default::default()
    });
    let outcome = h.sync(&pod);
    let error = &outcome.container_errors()["app"];
    assert_eq!(error.reason, "PostStartHookError", "{outcome}");
    assert!(
        error.message.contains("PostStartHook failed"),
        "{}",
        error.message
    );

    let app = h.id_of(&pod, "app");
    let calls = fake.calls();
    let start = position(&calls, "StartContainer", Some(&app)).unwrap();
    let hook = position(&calls, "ExecSync", Some(&app)).unwrap();
    let stop = position(&calls, "StopContainer", Some(&app)).expect("killed");
    assert!(start < hook && hook < stop, "{calls:#?}");
    assert_eq!(calls[stop].detail, "timeout=30");
    assert!(exited(&h.status(&pod), "app"));

    let events = h.events();
    let failed = with_reason(&events, "FailedPostStartHook");
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0].kind, EventType::Warning);
    assert_eq!(failed[0].message, "PostStartHook failed");
    let killing = with_reason(&events, "Killing");
    assert_eq!(killing.len(), 1, "{events:#?}");
    assert_eq!(killing[0].message, "FailedPostStartHook");
    assert!(
        events.iter().all(|e| !e.message.contains("s3cr3t")),
        "{events:#?}"
    );
}

/// B54: the time a preStop hook takes comes off the grace period StopContainer gets;
/// a failing preStop hook is a Warning event and the stop goes on with the full grace.
#[test]
fn pre_stop_time_is_subtracted_from_the_grace_period() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b54");
    pod.spec.termination_grace_period_seconds = Some(10);
    pod.spec.containers[0].lifecycle = Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            sleep: Some(SleepAction { seconds: 3 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut failing = container("failing");
    failing.lifecycle = Some(Lifecycle {
        pre_stop: Some(exec(&["false"])),
        ..Default::default()
    });
    pod.spec.containers.push(failing);
    assert!(h.sync(&pod).is_ok());
    let (app, failing) = (h.id_of(&pod, "app"), h.id_of(&pod, "failing"));
    h.events();

    let mark = fake.calls().len();
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), None);
    assert!(killed.is_ok(), "{killed}");
    let calls = calls_since(&fake, mark);
    let stop_app = position(&calls, "StopContainer", Some(&app)).unwrap();
    assert_eq!(
        calls[stop_app].detail, "timeout=7",
        "10 s minus the 3 s hook"
    );
    let stop_failing = position(&calls, "StopContainer", Some(&failing)).unwrap();
    assert_eq!(calls[stop_failing].detail, "timeout=10");
    let events = h.events();
    let failed = with_reason(&events, "FailedPreStopHook");
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0].kind, EventType::Warning);
    assert_eq!(failed[0].message, "PreStopHook failed");
    assert_eq!(field_path(failed[0]), Some("spec.containers{failing}"));
}

/// Records the pod IP each hook was given; fails the hooks of `failing`.
struct RecordingHooks {
    seen: std::sync::Mutex<Vec<(String, String)>>,
    failing: &'static str,
}

impl HookRunner for RecordingHooks {
    fn run(
        &self,
        call: &HookCall<'_>,
        _timeout: Duration,
        _cancel: &Cancel,
    ) -> Result<(), HookError> {
        let mut seen = self.seen.lock().unwrap();
        seen.push((call.container.name.clone(), call.pod_ip.to_owned()));
        if call.container.name == self.failing {
            return Err(HookError::Http("connection refused".into()));
        }
        Ok(())
    }
}

/// Issue 16 item 2: a preStop httpGet hook without a host goes to the pod's sandbox
/// IP when the pod is killed (termination knows no IP; upstream asks the runtime),
/// for main and sidecar containers alike; a hook with a host is left alone, and a
/// failed hook still ends in StopContainer.
#[test]
fn prestop_http_hook_without_host_gets_the_sandbox_ip_at_kill_time() {
    let fake = fake_with_busybox();
    let hooks = Arc::new(RecordingHooks {
        seen: Default::default(),
        failing: "app",
    });
    let recorder = Arc::clone(&hooks);
    let h = Harness::with_hooks(&fake, move |_| recorder);
    let mut pod = pod("uid-hook-ip");
    pod.spec.host_network = Some(false);
    let http = |host: Option<&str>| Lifecycle {
        pre_stop: Some(LifecycleHandler {
            http_get: Some(HttpGetAction {
                path: Some("/echo?msg=prestop".into()),
                host: host.map(str::to_owned),
                port: IntOrString::Int(8080),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    pod.spec.containers[0].lifecycle = Some(http(None));
    let mut side = sidecar("side");
    side.lifecycle = Some(http(None));
    pod.spec.init_containers.push(side);
    let mut targeted = container("targeted");
    targeted.lifecycle = Some(http(Some("192.0.2.10")));
    pod.spec.containers.push(targeted);
    h.sync_until(&pod, "all three running", |s| {
        running(s, "app") && running(s, "side") && running(s, "targeted")
    });
    let ip = h.status(&pod).ips.first().cloned().unwrap_or_default();
    assert!(!ip.is_empty(), "the fake gives pod networks an IP");
    let app = h.id_of(&pod, "app");

    let mark = fake.calls().len();
    // As sync_terminating_pod does: a RunningPod, no IP.
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), None);
    assert!(killed.is_ok(), "{killed}");
    let mut seen = hooks.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("app".to_owned(), ip.clone()),
            ("side".to_owned(), ip.clone()),
            ("targeted".to_owned(), String::new()),
        ]
    );
    let calls = calls_since(&fake, mark);
    assert!(
        position(&calls, "StopContainer", Some(&app)).is_some(),
        "a failed preStop hook still stops the container"
    );
    let events = h.events();
    assert_eq!(with_reason(&events, "FailedPreStopHook").len(), 1);
}

/// B55: during SyncPod's kills, StopContainer NotFound counts as stopped; any other
/// error is a KillContainerError and the sync ends before creating anything.
#[test]
fn stop_container_errors_during_sync() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b55");
    assert!(h.sync(&pod).is_ok());
    let old = h.id_of(&pod, "app");
    // A new definition: kill app, start it again.
    pod.spec.containers[0].command = vec!["sh".into(), "-c".into(), "exec sleep 7200".into()];

    fake.fail_nth(
        "StopContainer",
        1,
        RpcStatusCode::UNKNOWN,
        "device or resource busy",
    );
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    let failures: Vec<_> = outcome.failures().collect();
    assert_eq!(failures.len(), 1, "{outcome}");
    let (step, failure) = failures[0];
    assert_eq!(
        (step.action, step.target.as_str()),
        (SyncAction::KillContainer, "app")
    );
    assert_eq!(failure.reason, "KillContainerError");
    assert!(failure.message.contains("device or resource busy"));
    let calls = calls_since(&fake, mark);
    assert_eq!(targets(&calls, "StopContainer"), std::slice::from_ref(&old));
    assert_eq!(
        position(&calls, "CreateContainer", None),
        None,
        "{calls:#?}"
    );
    assert_eq!(h.id_of(&pod, "app"), old);

    fake.fail_nth("StopContainer", 1, RpcStatusCode::NOT_FOUND, "not found");
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    assert!(outcome.is_ok(), "NotFound is stopped: {outcome}");
    assert!(outcome
        .steps
        .iter()
        .any(|s| s.action == SyncAction::KillContainer && s.failure.is_none()));
    let calls = calls_since(&fake, mark);
    assert_eq!(targets(&calls, "CreateContainer"), ["app"]);
    assert_ne!(h.id_of(&pod, "app"), old);
}

/// B56: StopPodSandbox NotFound is ignored; another error is a KillPodSandboxError
/// while the other sandboxes are still stopped.
#[test]
fn stop_pod_sandbox_errors_in_kill_pod() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let pod = pod("uid-b56");
    assert!(h.sync(&pod).is_ok());
    let original = h.status(&pod).sandboxes[0].id.clone();
    let extra = h.extra_sandbox(&pod, 1);

    // Sandboxes are stopped newest first: the extra one fails, the original stops.
    fake.fail_nth(
        "StopPodSandbox",
        1,
        RpcStatusCode::UNKNOWN,
        "network teardown failed",
    );
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), None);
    let failures: Vec<_> = killed.failures().collect();
    assert_eq!(failures.len(), 1, "{killed}");
    let (step, failure) = failures[0];
    assert_eq!(
        (step.action, step.target.as_str()),
        (SyncAction::KillPodSandbox, extra.as_str())
    );
    assert_eq!(failure.reason, "KillPodSandboxError");
    let status = h.status(&pod);
    let state = |id: &str| status.sandboxes.iter().find(|s| s.id == id).unwrap().state;
    assert_eq!(state(&original), SandboxState::NotReady, "still stopped");
    assert_eq!(state(&extra), SandboxState::Ready);

    fake.fail_nth("StopPodSandbox", 1, RpcStatusCode::NOT_FOUND, "not found");
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), None);
    assert!(killed.is_ok(), "NotFound is ignored: {killed}");
}

/// A runtime-only pod is killed from a listing that may be a relist old: a container
/// removed since then is already stopped, not a kill error (its spec cannot be
/// restored from a container the runtime no longer has).
#[test]
fn runtime_only_kill_of_a_container_removed_since_the_listing_succeeds() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let pod = pod("uid-gone");
    assert!(h.sync(&pod).is_ok());
    let running = h.status(&pod).to_running_pod();
    let id = running.containers[0].id.clone();
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    runtime
        .remove_container(&pb::RemoveContainerRequest {
            container_id: id.clone(),
            ..Default::default()
        })
        .unwrap();

    let mark = fake.calls().len();
    let killed = h.manager.kill_pod(None, &running, Some(1));
    assert!(killed.is_ok(), "{killed}");
    let calls = calls_since(&fake, mark);
    assert_eq!(targets(&calls, "ContainerStatus"), [id]);
    assert!(targets(&calls, "StopContainer").is_empty(), "{calls:?}");
    assert_eq!(targets(&calls, "StopPodSandbox").len(), 1);
}

/// B56 inside SyncPod (with B55's "aborts before any creation"): a failed sandbox stop
/// while killing the pod for a new sandbox ends the sync before RunPodSandbox; the
/// next sync recreates it.
#[test]
fn failed_sandbox_stop_ends_sync_before_a_new_sandbox() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let pod = pod("uid-b56s");
    assert!(h.sync(&pod).is_ok());
    let old = h.status(&pod).sandboxes[0].id.clone();
    h.stop_sandbox(&old);

    fake.fail_nth(
        "StopPodSandbox",
        1,
        RpcStatusCode::UNKNOWN,
        "network teardown failed",
    );
    let mark = fake.calls().len();
    let outcome = h.sync(&pod);
    let failures: Vec<_> = outcome.failures().collect();
    assert_eq!(failures.len(), 1, "{outcome}");
    assert_eq!(failures[0].0.action, SyncAction::KillPodSandbox);
    assert_eq!(failures[0].1.reason, "KillPodSandboxError");
    let calls = calls_since(&fake, mark);
    assert_eq!(position(&calls, "RunPodSandbox", None), None, "{calls:#?}");
    assert_eq!(position(&calls, "CreateContainer", None), None);

    let retry = h.sync(&pod);
    assert!(retry.is_ok(), "{retry}");
    assert_eq!(h.status(&pod).sandboxes[0].attempt, 1);
}

// ---- Pod status ----

/// B62: a sandbox whose status is NotFound (removed after the listing) is skipped;
/// any other error fails GetPodStatus. IPs come only from the newest listed sandbox,
/// so they are empty when that one was skipped.
#[test]
fn pod_status_skips_vanished_sandboxes_and_fails_on_other_errors() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let mut pod = pod("uid-b62");
    pod.spec.host_network = Some(false);
    assert!(h.sync(&pod).is_ok());
    let original = h.status(&pod).sandboxes[0].clone();
    assert!(!original.ip.is_empty(), "{original:?}");
    let extra = h.extra_sandbox(&pod, 1);
    let full = h.status(&pod);
    assert_eq!(full.sandboxes.len(), 2);
    assert_eq!(full.sandboxes[0].id, extra);
    assert_eq!(full.ips, std::slice::from_ref(&full.sandboxes[0].ip));
    assert_ne!(full.ips, std::slice::from_ref(&original.ip));

    // The newest vanishes between list and status: skipped, no IPs from the older one.
    fake.fail_nth("PodSandboxStatus", 1, RpcStatusCode::NOT_FOUND, "not found");
    let skipped = h.status(&pod);
    let ids: Vec<&str> = skipped.sandboxes.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [original.id.as_str()]);
    assert!(skipped.ips.is_empty(), "{skipped:#?}");
    assert!(running(&skipped, "app"), "containers are still listed");

    fake.fail_nth(
        "PodSandboxStatus",
        2,
        RpcStatusCode::UNKNOWN,
        "runtime hiccup",
    );
    let err = h
        .manager
        .pod_status(pod.uid(), pod.name(), pod.namespace())
        .unwrap_err();
    assert!(!err.is_not_found(), "{err}");
    assert!(err.to_string().contains("runtime hiccup"), "{err}");
}

/// `hostUsers: false` (upstream pkg/kubelet/userns): on a runtime whose handler can
/// create user namespaces, the sandbox and each container get the pod's own 65536 host
/// IDs (mapped from 0), distinct per pod and kept in `<root>/pods/<uid>/userns`; on a
/// runtime that cannot, no sandbox is created and the failure carries upstream's
/// message, so the pod never runs in the host's user namespace.
#[test]
fn host_users_false_pods_get_their_own_user_namespace_or_no_sandbox() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake);
    let userns_pod = |uid: &str| {
        let mut p = pod(uid);
        p.spec.host_network = Some(false);
        p.spec.host_users = Some(false);
        p
    };
    let a = userns_pod("uid-userns-a");
    let outcome = h.sync(&a);
    let failures: Vec<_> = outcome.failures().collect();
    assert_eq!(failures.len(), 1, "{outcome}");
    assert_eq!(failures[0].1.reason, "CreatePodSandboxError");
    assert_eq!(
        failures[0].1.message,
        "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
    );
    assert_eq!(
        fake.count("RunPodSandbox"),
        0,
        "no sandbox without user namespaces"
    );

    fake.state().runtime_handlers = vec![pb::RuntimeHandler {
        name: String::new(),
        features: MessageField::some(pb::RuntimeHandlerFeatures {
            user_namespaces: true,
            ..Default::default()
        }),
        ..Default::default()
    }];
    let b = userns_pod("uid-userns-b");
    for p in [&a, &b] {
        h.sync_until(p, "running", |s| running(s, "app"));
    }
    let host_id = |ns: &pb::NamespaceOption| {
        let u = ns.userns_options.as_ref().expect("userns options");
        assert_eq!(u.mode.enum_value_or_default(), pb::NamespaceMode::POD);
        assert_eq!(u.uids, u.gids);
        assert_eq!((u.uids[0].container_id, u.uids[0].length), (0, 65536));
        u.uids[0].host_id
    };
    let state = fake.state();
    for (uid, want) in [("uid-userns-a", 65536), ("uid-userns-b", 131072)] {
        let sandbox = state
            .sandbox_configs()
            .into_iter()
            .find(|c| c.metadata.uid == uid)
            .expect("sandbox");
        assert_eq!(
            host_id(&sandbox.linux.security_context.namespace_options),
            want,
            "{uid}"
        );
        let container = state
            .container_configs()
            .into_iter()
            .find(|c| c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid))
            .expect("container");
        assert_eq!(
            host_id(&container.linux.security_context.namespace_options),
            want,
            "{uid}: the container joins the pod's user namespace"
        );
        assert!(h
            .dir
            .path()
            .join("root/pods")
            .join(uid)
            .join("userns")
            .is_file());
    }
}
