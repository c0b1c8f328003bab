//! Table tests for `containers.rs`: API container statuses from runtime instances,
//! previous statuses, sync errors and probe results. Every case goes through `check`,
//! which compares one summary line per container.

use std::collections::BTreeMap;

use super::*;
use crate::api::pod::{EphemeralContainer, Pod, Probe, RestartPolicy, VolumeMountStatus};
use crate::images::manager::ERR_IMAGE_PULL;
use crate::runtime::model::{self, PodRuntimeStatus};
use crate::runtime::result::{
    WaitingReason, CRASH_LOOP_BACK_OFF, CREATE_CONTAINER_ERROR, RUN_CONTAINER_ERROR,
};
use crate::status::generate::PodStatusInput;

const SEC: i64 = 1_000_000_000;

/// A runtime instance: `created` orders instances (higher is newer).
fn inst(
    name: &str,
    id: &str,
    state: model::ContainerState,
    created: i64,
    exit: i32,
) -> model::ContainerStatus {
    model::ContainerStatus {
        id: id.into(),
        name: name.into(),
        state,
        created_at: created * SEC,
        started_at: if state == model::ContainerState::Created {
            0
        } else {
            (created + 1) * SEC + 250
        },
        finished_at: if state == model::ContainerState::Exited {
            (created + 2) * SEC + 999
        } else {
            0
        },
        exit_code: exit,
        image: format!("img-{name}"),
        image_ref: format!("sha256:{name}"),
        restart_count: 0,
        reason: if state == model::ContainerState::Exited {
            if exit == 0 { "Completed" } else { "Error" }.into()
        } else {
            String::new()
        },
        ..Default::default()
    }
}

use model::ContainerState::{Created, Exited, Running, Unknown};

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(format!("img-{name}")),
        ..Default::default()
    }
}

/// A pod with regular containers `a` and `b`, restart policy Always, no init.
fn pod() -> Pod {
    let mut p = Pod::default();
    p.spec.restart_policy = Some(RestartPolicy::Always);
    p.spec.containers = vec![container("a"), container("b")];
    p
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some(RestartPolicy::Always),
        ..container(name)
    }
}

fn probe() -> Option<Probe> {
    Some(Probe::default())
}

fn api_state_terminated(code: i32, reason: &str, id: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(reason.into()),
            container_id: Some(api_container_id("containerd", id)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running_state() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    }
}

/// A previous API status.
fn prev(name: &str, state: ContainerState, id: &str, restarts: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(state),
        container_id: (!id.is_empty()).then(|| api_container_id("containerd", id)),
        restart_count: restarts,
        ..Default::default()
    }
}

struct Case {
    pod: Pod,
    runtime: Vec<model::ContainerStatus>,
    previous: Vec<ContainerStatus>,
    probes: ProbeResults,
    errors: BTreeMap<String, WaitingReason>,
    terminating: bool,
}

fn case(pod: Pod) -> Case {
    Case {
        pod,
        runtime: vec![],
        previous: vec![],
        probes: ProbeResults::default(),
        errors: BTreeMap::new(),
        terminating: false,
    }
}

impl Case {
    fn rt(mut self, c: model::ContainerStatus) -> Self {
        self.runtime.push(c);
        self
    }
    fn prev(mut self, s: ContainerStatus) -> Self {
        self.previous.push(s);
        self
    }
    fn error(mut self, name: &str, reason: &str) -> Self {
        self.errors.insert(
            name.into(),
            WaitingReason::new(reason, &format!("{reason} for {name}")),
        );
        self
    }
}

fn state_str(s: Option<&ContainerState>) -> String {
    let Some(s) = s else {
        return "-".into();
    };
    if s.running.is_some() {
        "running".into()
    } else if let Some(w) = &s.waiting {
        match &w.reason {
            Some(r) => format!("waiting({r})"),
            None => "waiting".into(),
        }
    } else if let Some(t) = &s.terminated {
        match &t.reason {
            Some(r) => format!("exited({},{r})", t.exit_code),
            None => format!("exited({})", t.exit_code),
        }
    } else {
        "empty".into()
    }
}

/// `name state last=<state> rc=<n>[ ready][ started]`.
fn summary(s: &ContainerStatus) -> String {
    let mut out = format!(
        "{} {} last={} rc={}",
        s.name,
        state_str(s.state.as_ref()),
        state_str(s.last_state.as_ref()),
        s.restart_count
    );
    if s.ready {
        out.push_str(" ready");
    }
    if s.started == Some(true) {
        out.push_str(" started");
    }
    out
}

/// Builds the statuses of `kind` for the case and compares their summaries.
fn check(c: &Case, kind: ContainerKind, want: &[&str]) -> Vec<ContainerStatus> {
    let runtime = PodRuntimeStatus {
        containers: c.runtime.clone(),
        ..Default::default()
    };
    let mut input = PodStatusInput::new(&c.pod, &runtime, "containerd", Time::from_unix_seconds(0));
    input.probes = c.probes.clone();
    input.sync_errors = c.errors.clone();
    input.terminating = c.terminating;
    let got = container_statuses(&input, kind, &c.previous);
    let lines: Vec<String> = got.iter().map(summary).collect();
    assert_eq!(lines, want);
    got
}

use ContainerKind::{Ephemeral, Init, Regular};

#[test]
fn new_pod_waits_in_container_creating_or_pod_initializing() {
    let got = check(
        &case(pod()),
        Regular,
        &[
            "a waiting(ContainerCreating) last=- rc=0",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    assert_eq!(got[0].image, "img-a");
    assert_eq!(
        (got[0].container_id.as_ref(), got[0].started),
        (None, Some(false))
    );

    let mut p = pod();
    p.spec.init_containers = vec![container("i0")];
    let c = case(p);
    check(&c, Init, &["i0 waiting(PodInitializing) last=- rc=0"]);
    check(
        &c,
        Regular,
        &[
            "a waiting(PodInitializing) last=- rc=0",
            "b waiting(PodInitializing) last=- rc=0",
        ],
    );
}

#[test]
fn runtime_states_map_to_api_states() {
    let mut a = inst("a", "a1", Running, 10, 0);
    a.restart_count = 2;
    let c = case(pod()).rt(a).rt(inst("b", "b1", Exited, 5, 1));
    let got = check(
        &c,
        Regular,
        &[
            "a running last=- rc=2 ready started",
            "b exited(1,Error) last=- rc=0",
        ],
    );
    assert_eq!(got[0].container_id.as_deref(), Some("containerd://a1"));
    assert_eq!(
        (got[0].image.as_str(), got[0].image_id.as_str()),
        ("img-a", "sha256:a")
    );
    // Nanosecond runtime times become whole seconds.
    let started = got[0].state.as_ref().and_then(|s| s.running.clone());
    assert_eq!(
        started.and_then(|r| r.started_at),
        Some(Time::from_unix_seconds(11))
    );
    let t = got[1]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap_or_default();
    assert_eq!(t.container_id.as_deref(), Some("containerd://b1"));
    assert_eq!(t.started_at, Some(Time::from_unix_seconds(6)));
    assert_eq!(t.finished_at, Some(Time::from_unix_seconds(7)));
    assert_eq!(t.message, None);

    // Created (never started) and unknown without history: plain Waiting, no reason.
    let c = case(pod())
        .rt(inst("a", "a1", Created, 10, 0))
        .rt(inst("b", "b1", Unknown, 10, 0));
    let got = check(
        &c,
        Regular,
        &["a waiting last=- rc=0", "b waiting last=- rc=0"],
    );
    let started = got[0].state.as_ref().and_then(|s| s.running.as_ref());
    assert!(started.is_none());
}

#[test]
fn unknown_state_after_running_is_a_lost_termination() {
    let c =
        case(pod())
            .rt(inst("a", "a1", Unknown, 10, 0))
            .prev(prev("a", running_state(), "a1", 4));
    let got = check(
        &c,
        Regular,
        &[
            "a exited(137,ContainerStatusUnknown) last=- rc=5",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    let t = got[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap_or_default();
    assert_eq!(t.message.as_deref(), Some(MSG_LOST_AT_TERMINATION));
}

#[test]
fn second_newest_instance_is_the_last_state() {
    // Given out of order on purpose: the converter sorts by creation time.
    let c = case(pod())
        .rt(inst("a", "a0", Exited, 1, 2))
        .rt(inst("a", "a2", Running, 30, 0))
        .rt(inst("a", "a1", Exited, 20, 1))
        .rt(inst("b", "b1", Running, 5, 0));
    let got = check(
        &c,
        Regular,
        &[
            "a running last=exited(1,Error) rc=0 ready started",
            "b running last=- rc=0 ready started",
        ],
    );
    let last = got[0]
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone());
    assert_eq!(
        last.and_then(|t| t.container_id).as_deref(),
        Some("containerd://a1")
    );
}

#[test]
fn last_state_is_carried_from_the_previous_status() {
    // Older instances were garbage-collected; the previous status still knows.
    let only_a2 = || {
        case(pod())
            .rt(inst("a", "a2", Running, 30, 0))
            .rt(inst("b", "b1", Running, 5, 0))
    };
    // Same instance as before: its last state carries over.
    let mut same = prev("a", running_state(), "a2", 1);
    same.last_state = Some(api_state_terminated(1, "Error", "a1"));
    check(
        &only_a2().prev(same),
        Regular,
        &[
            "a running last=exited(1,Error) rc=0 ready started",
            "b running last=- rc=0 ready started",
        ],
    );
    // The previous instance had terminated: it becomes the last state.
    let ended = prev("a", api_state_terminated(3, "Error", "a1"), "a1", 0);
    check(
        &only_a2().prev(ended),
        Regular,
        &[
            "a running last=exited(3,Error) rc=0 ready started",
            "b running last=- rc=0 ready started",
        ],
    );
    // The previous status was crash-looping (Waiting): its last termination carries.
    let mut looping = prev("a", waiting(Some(CRASH_LOOP_BACK_OFF), None), "a1", 0);
    looping.last_state = Some(api_state_terminated(2, "Error", "a1"));
    check(
        &only_a2().prev(looping),
        Regular,
        &[
            "a running last=exited(2,Error) rc=0 ready started",
            "b running last=- rc=0 ready started",
        ],
    );
    // A previous Running instance that vanished without a trace: nothing to carry.
    check(
        &only_a2().prev(prev("a", running_state(), "a1", 0)),
        Regular,
        &[
            "a running last=- rc=0 ready started",
            "b running last=- rc=0 ready started",
        ],
    );
}

#[test]
fn vanished_containers_keep_their_history() {
    // Running before, now absent from the runtime: last state lost(137), restarted.
    let c = case(pod()).prev(prev("a", running_state(), "a1", 3));
    let got = check(
        &c,
        Regular,
        &[
            "a waiting(ContainerCreating) last=exited(137,ContainerStatusUnknown) rc=4",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    let last = got[0]
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone());
    assert_eq!(
        last.and_then(|t| t.message).as_deref(),
        Some(MSG_LOST_WHILE_RUNNING)
    );
    // Deleted or being terminated: no restart to count.
    let mut deleted = pod();
    deleted.metadata.deletion_timestamp = Some(Time::from_unix_seconds(1));
    let c = case(deleted).prev(prev("a", running_state(), "a1", 3));
    check(
        &c,
        Regular,
        &[
            "a waiting(ContainerCreating) last=exited(137,ContainerStatusUnknown) rc=3",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    // Terminated before: the old status is kept whole.
    let c = case(pod()).prev(prev(
        "a",
        api_state_terminated(0, "Completed", "a1"),
        "a1",
        2,
    ));
    let got = check(
        &c,
        Regular,
        &[
            "a exited(0,Completed) last=- rc=2",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    assert_eq!(got[0].container_id.as_deref(), Some("containerd://a1"));
    // Waiting before, with a last termination: restart count and last state carry.
    let mut w = prev("a", waiting(Some(CRASH_LOOP_BACK_OFF), None), "a1", 6);
    w.last_state = Some(api_state_terminated(1, "Error", "a1"));
    check(
        &case(pod()).prev(w),
        Regular,
        &[
            "a waiting(ContainerCreating) last=exited(1,Error) rc=6",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
}

#[test]
fn sync_errors_become_waiting_reasons() {
    // Crashed under Always: the restart back-off's CrashLoopBackOff becomes the
    // waiting reason, the crash moves to the last state; a failed pull's
    // ErrImagePull likewise.
    let c = case(pod())
        .rt(inst("a", "a1", Exited, 10, 1))
        .error("a", CRASH_LOOP_BACK_OFF)
        .error("b", ERR_IMAGE_PULL);
    let got = check(
        &c,
        Regular,
        &[
            "a waiting(CrashLoopBackOff) last=exited(1,Error) rc=0",
            "b waiting(ErrImagePull) last=- rc=0",
        ],
    );
    let msg = got[1]
        .state
        .as_ref()
        .and_then(|s| s.waiting.clone())
        .and_then(|w| w.message);
    assert_eq!(msg.as_deref(), Some("ErrImagePull for b"));
    // The container id stays that of the instance that crashed.
    assert_eq!(got[0].container_id.as_deref(), Some("containerd://a1"));

    // Never: a stopped container will not start again, its termination shows.
    let mut never = c;
    never.pod.spec.restart_policy = Some(RestartPolicy::Never);
    check(
        &never,
        Regular,
        &[
            "a exited(1,Error) last=- rc=0",
            "b waiting(ErrImagePull) last=- rc=0",
        ],
    );
    // OnFailure: exit 0 is done; exit 2 restarts.
    let mut on_failure = case(pod())
        .rt(inst("a", "a1", Exited, 10, 0))
        .rt(inst("b", "b1", Exited, 10, 2))
        .error("a", CRASH_LOOP_BACK_OFF)
        .error("b", CRASH_LOOP_BACK_OFF);
    on_failure.pod.spec.restart_policy = Some(RestartPolicy::OnFailure);
    check(
        &on_failure,
        Regular,
        &[
            "a exited(0,Completed) last=- rc=0",
            "b waiting(CrashLoopBackOff) last=exited(2,Error) rc=0",
        ],
    );
    // Running containers are not started: a stale error is ignored.
    let c = case(pod())
        .rt(inst("a", "a1", Running, 10, 0))
        .error("a", RUN_CONTAINER_ERROR);
    check(
        &c,
        Regular,
        &[
            "a running last=- rc=0 ready started",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    // Created-but-not-started under Never is not retried.
    let mut created = case(pod())
        .rt(inst("a", "a1", Created, 10, 0))
        .error("a", CREATE_CONTAINER_ERROR);
    created.pod.spec.restart_policy = Some(RestartPolicy::Never);
    check(
        &created,
        Regular,
        &[
            "a waiting last=- rc=0",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    created.pod.spec.restart_policy = Some(RestartPolicy::Always);
    check(
        &created,
        Regular,
        &[
            "a waiting(CreateContainerError) last=- rc=0",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
    // A pod being deleted or terminated starts nothing: no reasons shown.
    let mut stopping = case(pod())
        .rt(inst("a", "a1", Exited, 10, 1))
        .error("a", CRASH_LOOP_BACK_OFF);
    stopping.terminating = true;
    check(
        &stopping,
        Regular,
        &[
            "a exited(1,Error) last=- rc=0",
            "b waiting(ContainerCreating) last=- rc=0",
        ],
    );
}

#[test]
fn init_containers_and_sidecars() {
    let mut p = pod();
    p.spec.restart_policy = Some(RestartPolicy::Never);
    p.spec.init_containers = vec![container("i0"), sidecar("s0"), container("i1")];
    // i0 done (a stale error is ignored), the sidecar crashed and restarts even though
    // the pod's policy is Never, i1 failed under Never (no retry).
    let c = case(p)
        .rt(inst("i1", "i1a", Exited, 30, 1))
        .rt(inst("s0", "s0a", Exited, 20, 1))
        .rt(inst("i0", "i0a", Exited, 10, 0))
        .error("i0", CRASH_LOOP_BACK_OFF)
        .error("s0", CRASH_LOOP_BACK_OFF)
        .error("i1", CRASH_LOOP_BACK_OFF);
    // Spec order, not name order; a regular init container is ready once it exited 0.
    check(
        &c,
        Init,
        &[
            "i0 exited(0,Completed) last=- rc=0 ready",
            "s0 waiting(CrashLoopBackOff) last=exited(1,Error) rc=0",
            "i1 exited(1,Error) last=- rc=0",
        ],
    );
    // A running regular init container is started but not ready; a running sidecar
    // is ready like a regular container.
    let mut p = pod();
    p.spec.init_containers = vec![sidecar("s0"), container("i1")];
    let c = case(p)
        .rt(inst("s0", "s0a", Running, 10, 0))
        .rt(inst("i1", "i1a", Running, 20, 0));
    check(
        &c,
        Init,
        &[
            "s0 running last=- rc=0 ready started",
            "i1 running last=- rc=0 started",
        ],
    );
}

#[test]
fn probe_results_set_started_and_ready() {
    let mut p = pod();
    p.spec.containers[0].readiness_probe = probe();
    p.spec.containers[1].startup_probe = probe();
    p.spec.containers[1].readiness_probe = probe();
    let base = || {
        case(p.clone())
            .rt(inst("a", "a1", Running, 10, 0))
            .rt(inst("b", "b1", Running, 10, 0))
    };
    // Not probed yet: readiness pending → not ready; startup pending → not started.
    check(
        &base(),
        Regular,
        &["a running last=- rc=0 started", "b running last=- rc=0"],
    );
    let mut c = base();
    c.probes.readiness.insert("a1".into(), true);
    c.probes.startup.insert("b1".into(), true);
    c.probes.readiness.insert("b1".into(), false);
    check(
        &c,
        Regular,
        &[
            "a running last=- rc=0 ready started",
            "b running last=- rc=0 started",
        ],
    );
    // A startup failure: not started, so never ready whatever readiness says.
    let mut c = base();
    c.probes.startup.insert("b1".into(), false);
    c.probes.readiness.insert("b1".into(), true);
    check(
        &c,
        Regular,
        &["a running last=- rc=0 started", "b running last=- rc=0"],
    );
    // Results for another (older) instance do not count.
    let mut c = base();
    c.probes.readiness.insert("a0".into(), true);
    check(
        &c,
        Regular,
        &["a running last=- rc=0 started", "b running last=- rc=0"],
    );
}

#[test]
fn order_ephemeral_and_mounts() {
    let mut p = Pod::default();
    p.spec.containers = vec![container("z"), container("a"), container("m")];
    p.spec.ephemeral_containers = vec![
        EphemeralContainer {
            container: container("dbg2"),
            ..Default::default()
        },
        EphemeralContainer {
            container: container("dbg1"),
            ..Default::default()
        },
    ];
    let mut old = prev("z", running_state(), "z1", 0);
    old.volume_mounts = vec![VolumeMountStatus {
        name: "data".into(),
        mount_path: "/data".into(),
        ..Default::default()
    }];
    let c = case(p.clone())
        .rt(inst("z", "z1", Running, 10, 0))
        .rt(inst("dbg1", "d1", Running, 10, 0))
        .prev(old.clone());
    let got = check(
        &c,
        Regular,
        &[
            "a waiting(ContainerCreating) last=- rc=0",
            "m waiting(ContainerCreating) last=- rc=0",
            "z running last=- rc=0 ready started",
        ],
    );
    assert_eq!(got[2].volume_mounts, old.volume_mounts);
    // Ephemeral: sorted by name, untouched by probes (no started, never ready).
    let got = check(
        &c,
        Ephemeral,
        &[
            "dbg1 running last=- rc=0",
            "dbg2 waiting(ContainerCreating) last=- rc=0",
        ],
    );
    assert_eq!(got[0].started, None);
    // Ephemeral containers are never restarted, an exited one keeps
    // its state.
    let c = case(p)
        .rt(inst("dbg1", "d1", Exited, 10, 1))
        .error("dbg1", CRASH_LOOP_BACK_OFF);
    check(
        &c,
        Ephemeral,
        &[
            "dbg1 exited(1,Error) last=- rc=0",
            "dbg2 waiting(ContainerCreating) last=- rc=0",
        ],
    );
}

#[test]
fn container_id_forms() {
    assert_eq!(api_container_id("cri-o", "abc"), "cri-o://abc");
    assert_eq!(runtime_container_id("containerd://abc"), "abc");
    assert_eq!(runtime_container_id("abc"), "abc");
    assert_eq!(time_from_nanos(0), None);
    assert_eq!(time_from_nanos(-1), Some(Time::from_unix_seconds(-1)));
}

#[test]
fn allocated_and_actual_resources_are_reported() {
    use crate::api::quantity::Quantity;
    let q = |s: &str| Quantity::parse(s).unwrap();
    let mut p = pod();
    p.spec.containers[0].resources = Some(crate::api::pod::ResourceRequirements {
        requests: [("cpu".to_string(), q("200m"))].into(),
        limits: [("memory".to_string(), q("512Mi"))].into(),
        ..Default::default()
    });
    // `a` runs with the old memory limit (a resize in flight); `b` has no resources.
    let mut a = inst("a", "id-a", Running, 1, 0);
    a.resources = Some(model::ContainerResources {
        cpu_shares: Some(204),
        memory_limit: crate::cgroups::Limit::Value(256 << 20),
        ..Default::default()
    });
    let c = case(p).rt(a).rt(inst("b", "id-b", Exited, 1, 0));
    let got = check(
        &c,
        Regular,
        &[
            "a running last=- rc=0 ready started",
            "b exited(0,Completed) last=- rc=0",
        ],
    );
    assert_eq!(got[0].allocated_resources.get("cpu"), Some(&q("200m")));
    let actual = got[0].resources.as_ref().unwrap();
    assert_eq!(actual.requests.get("cpu"), Some(&q("200m")));
    assert_eq!(actual.limits.get("memory"), Some(&q("256Mi")));
    assert!(got[1].allocated_resources.is_empty());
    assert_eq!(got[1].resources, None);
}
