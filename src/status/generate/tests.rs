//! Table tests for `generate.rs`: the whole pod status from one input. Every case goes
//! through `check`, which compares the phase and one line per condition
//! (`Type=Status(Reason)@transition-time`).

use super::*;
use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{
    Container, Pod, PodReadinessGate, QosClass, RestartPolicy, POD_CONTAINERS_READY,
    POD_INITIALIZED, POD_READY, POD_READY_TO_START_CONTAINERS, POD_RESIZE_PENDING, POD_SCHEDULED,
};
use crate::runtime::model::{self, PodRuntimeStatus, SandboxStatus};
use crate::runtime::result::{WaitingReason, CRASH_LOOP_BACK_OFF};

const NOW: i64 = 5000;
const SEC: i64 = 1_000_000_000;

fn pod() -> Pod {
    let c = |n: &str| Container {
        name: n.into(),
        image: Some(format!("img-{n}")),
        ..Default::default()
    };
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("prod".into());
    p.metadata.generation = Some(3);
    p.spec.restart_policy = Some(RestartPolicy::Always);
    p.spec.containers = vec![c("a"), c("b")];
    p
}

fn sandbox(state: SandboxState, ip: &str) -> SandboxStatus {
    SandboxStatus {
        id: "sb".into(),
        state,
        ip: ip.into(),
        ..Default::default()
    }
}

fn inst(name: &str, state: model::ContainerState, exit: i32) -> model::ContainerStatus {
    model::ContainerStatus {
        id: format!("{name}1"),
        name: name.into(),
        state,
        created_at: 10 * SEC,
        started_at: 11 * SEC,
        finished_at: if state == model::ContainerState::Exited {
            12 * SEC
        } else {
            0
        },
        exit_code: exit,
        ..Default::default()
    }
}

use model::ContainerState::{Exited, Running};

/// A runtime with a ready sandbox (IP 10.0.0.5) and both containers in `state`.
fn runtime(state: model::ContainerState, exit: i32) -> PodRuntimeStatus {
    PodRuntimeStatus {
        ips: vec!["10.0.0.5".into()],
        sandboxes: vec![sandbox(SandboxState::Ready, "10.0.0.5")],
        containers: vec![inst("a", state, exit), inst("b", state, exit)],
        ..Default::default()
    }
}

fn cond(type_: &str, status: ConditionStatus, ltt: i64) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status,
        last_transition_time: Some(Time::from_unix_seconds(ltt)),
        ..Default::default()
    }
}

fn input<'a>(pod: &'a Pod, rt: &'a PodRuntimeStatus) -> PodStatusInput<'a> {
    let mut i = PodStatusInput::new(pod, rt, "containerd", Time::from_unix_seconds(NOW));
    i.host_ips = vec!["192.168.1.20".into()];
    i.qos_class = Some(QosClass::BestEffort);
    i
}

/// Generates the status and compares its phase and conditions.
fn check(input: &PodStatusInput, phase: PodPhase, conds: &[&str]) -> PodStatus {
    let s = generate_pod_status(input);
    assert_eq!(s.phase, Some(phase));
    let got: Vec<String> = s
        .conditions
        .iter()
        .map(|c| {
            let reason = c
                .reason
                .as_deref()
                .map(|r| format!("({r})"))
                .unwrap_or_default();
            let ltt = c.last_transition_time.map_or(-1, |t| t.unix_seconds());
            format!("{}={}{reason}@{ltt}", c.type_, c.status)
        })
        .collect();
    assert_eq!(got, conds);
    s
}

#[test]
fn new_pod_without_sandbox() {
    // Generation side: no start time yet → now.
    let p = pod();
    let rt = PodRuntimeStatus::default();
    let s = check(
        &input(&p, &rt),
        PodPhase::Pending,
        &[
            "PodReadyToStartContainers=False@5000",
            "Initialized=True@5000",
            "Ready=False(ContainersNotReady)@5000",
            "ContainersReady=False(ContainersNotReady)@5000",
            "PodScheduled=True@5000",
        ],
    );
    let ready = s.condition(POD_READY).cloned().unwrap_or_default();
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [a b]")
    );
    assert_eq!(ready.observed_generation, Some(3));
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(s.start_time, Some(Time::from_unix_seconds(NOW)));
    assert_eq!(s.qos_class, Some(QosClass::BestEffort));
    assert_eq!(s.host_ip.as_deref(), Some("192.168.1.20"));
    assert_eq!((s.pod_ip.as_ref(), s.pod_ips.len()), (None, 0));
    assert_eq!(s.container_statuses.len(), 2);
    assert_eq!((s.reason.as_ref(), s.message.as_ref()), (None, None));
}

#[test]
fn running_pod_keeps_unchanged_transition_times() {
    // Generation side: unchanged conditions keep their times,
    // a flip takes `now`. Start time is kept once set.
    let p = pod();
    let rt = runtime(Running, 0);
    let previous = PodStatus {
        phase: Some(PodPhase::Pending),
        start_time: Some(Time::from_unix_seconds(100)),
        conditions: vec![
            cond(POD_READY_TO_START_CONTAINERS, ConditionStatus::True, 101),
            cond(POD_INITIALIZED, ConditionStatus::True, 102),
            cond(POD_READY, ConditionStatus::False, 103),
            cond(POD_CONTAINERS_READY, ConditionStatus::False, 104),
            cond(POD_SCHEDULED, ConditionStatus::True, 105),
        ],
        ..Default::default()
    };
    let mut i = input(&p, &rt);
    i.previous = Some(&previous);
    i.host_ips = vec!["fd00::1".into(), "192.168.1.20".into()];
    let s = check(
        &i,
        PodPhase::Running,
        &[
            "PodReadyToStartContainers=True@101",
            "Initialized=True@102",
            "Ready=True@5000",
            "ContainersReady=True@5000",
            "PodScheduled=True@105",
        ],
    );
    assert_eq!(s.start_time, Some(Time::from_unix_seconds(100)));
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.5"));
    let hosts: Vec<&str> = s.host_ips.iter().map(|h| h.ip.as_str()).collect();
    assert_eq!(hosts, ["fd00::1", "192.168.1.20"]);
    let cid = s.container_statuses[0].container_id.as_deref();
    assert_eq!(cid, Some("containerd://a1"));
}

#[test]
fn foreign_conditions_gates_and_disruption_target() {
    // Generation side: a readiness gate whose condition is missing keeps the
    // pod unready; the API's foreign condition is kept, its owned ones replaced.
    let mut p = pod();
    p.spec.readiness_gates = vec![PodReadinessGate {
        condition_type: "example.com/gate".into(),
    }];
    let rt = runtime(Running, 0);
    let check_gate = |p: &Pod, want: &[&str]| {
        let mut i = input(p, &rt);
        i.resize_conditions = vec![cond(POD_RESIZE_PENDING, ConditionStatus::True, 7)];
        check(&i, PodPhase::Running, want)
    };
    let s = check_gate(
        &p,
        &[
            "PodReadyToStartContainers=True@5000",
            "Initialized=True@5000",
            "Ready=False(ReadinessGatesNotReady)@5000",
            "ContainersReady=True@5000",
            "PodScheduled=True@5000",
            "PodResizePending=True@7",
        ],
    );
    let msg = s.condition(POD_READY).and_then(|c| c.message.clone());
    assert_eq!(
        msg.as_deref(),
        Some("corresponding condition of pod readiness gate \"example.com/gate\" does not exist.")
    );
    // The gate condition set by someone else in the API → Ready; the API's stale
    // Ready is not carried over, its DisruptionTarget is (shared), as is the
    // previous (cached) one which wins.
    p.status.conditions = vec![
        cond("example.com/gate", ConditionStatus::True, 1),
        cond(POD_READY, ConditionStatus::False, 2),
        cond(POD_DISRUPTION_TARGET, ConditionStatus::False, 3),
    ];
    check_gate(
        &p,
        &[
            "example.com/gate=True@1",
            "DisruptionTarget=False@3",
            "PodReadyToStartContainers=True@5000",
            "Initialized=True@5000",
            "Ready=True@5000",
            "ContainersReady=True@5000",
            "PodScheduled=True@5000",
            "PodResizePending=True@7",
        ],
    );
    let mut previous = p.status.clone();
    previous.conditions = vec![cond(POD_DISRUPTION_TARGET, ConditionStatus::True, 4)];
    let mut i = input(&p, &rt);
    i.previous = Some(&previous);
    check(
        &i,
        PodPhase::Running,
        &[
            "example.com/gate=True@1",
            "DisruptionTarget=True@4",
            "PodReadyToStartContainers=True@5000",
            "Initialized=True@5000",
            "Ready=True@5000",
            "ContainersReady=True@5000",
            "PodScheduled=True@5000",
        ],
    );
}

#[test]
fn completion_by_restart_policy() {
    // All exited 0 under Never → Succeeded.
    let mut p = pod();
    p.spec.restart_policy = Some(RestartPolicy::Never);
    let mut rt = runtime(Exited, 0);
    rt.sandboxes = vec![sandbox(SandboxState::NotReady, "")];
    rt.ips.clear();
    let s = check(
        &input(&p, &rt),
        PodPhase::Succeeded,
        &[
            "PodReadyToStartContainers=False@5000",
            "Initialized=True(PodCompleted)@5000",
            "Ready=False(PodCompleted)@5000",
            "ContainersReady=False(PodCompleted)@5000",
            "PodScheduled=True@5000",
        ],
    );
    assert!(s.container_statuses.iter().all(|c| !c.ready));
    // One failure → Failed, reason PodFailed.
    rt.containers[1].exit_code = 1;
    check(
        &input(&p, &rt),
        PodPhase::Failed,
        &[
            "PodReadyToStartContainers=False@5000",
            "Initialized=True@5000",
            "Ready=False(PodFailed)@5000",
            "ContainersReady=False(PodFailed)@5000",
            "PodScheduled=True@5000",
        ],
    );
    // Under Always the same exits are a restart in progress (CrashLoopBackOff)...
    p.spec.restart_policy = Some(RestartPolicy::Always);
    let mut i = input(&p, &rt);
    i.sync_errors.insert(
        "b".into(),
        WaitingReason::new(CRASH_LOOP_BACK_OFF, "back-off"),
    );
    let s = generate_pod_status(&i);
    assert_eq!(s.phase, Some(PodPhase::Running));
    let w = s.container_statuses[1]
        .state
        .as_ref()
        .and_then(|st| st.waiting.clone());
    assert_eq!(
        w.and_then(|w| w.reason).as_deref(),
        Some(CRASH_LOOP_BACK_OFF)
    );
    // ...unless the pod is terminal (SyncTerminatingPod's final status, which is
    // Succeeded or Failed).
    i.pod_is_terminal = true;
    i.terminating = true;
    let s = generate_pod_status(&i);
    assert_eq!(s.phase, Some(PodPhase::Failed));
    let st = s.container_statuses[1].state.as_ref();
    assert!(st.is_some_and(|st| st.terminated.is_some()));
}

#[test]
fn terminal_phases_are_sticky() {
    let p = pod();
    let rt = runtime(Running, 0);
    // The cached status already says Succeeded: a Running computation cannot undo it.
    let previous = PodStatus {
        phase: Some(PodPhase::Succeeded),
        reason: Some("Done".into()),
        ..Default::default()
    };
    let mut i = input(&p, &rt);
    i.previous = Some(&previous);
    let s = generate_pod_status(&i);
    assert_eq!(s.phase, Some(PodPhase::Succeeded));
    assert_eq!(s.reason.as_deref(), Some("Done"));
    // The API says Failed (and the cache does not know): Failed.
    let mut p = pod();
    p.status.phase = Some(PodPhase::Failed);
    p.status.message = Some("api message".into());
    let s = generate_pod_status(&input(&p, &rt));
    assert_eq!(s.phase, Some(PodPhase::Failed));
    assert_eq!(s.message.as_deref(), Some("api message"));
    // Even an eviction cannot turn an API Succeeded into Failed.
    let mut p = pod();
    p.status.phase = Some(PodPhase::Succeeded);
    let mut i = input(&p, &rt);
    i.eviction = Some(Eviction {
        reason: "Evicted".into(),
        message: "low memory".into(),
    });
    assert_eq!(generate_pod_status(&i).phase, Some(PodPhase::Succeeded));
}

#[test]
fn an_evicted_pod_whose_containers_exit_zero_stays_failed() {
    // The eviction manager set Failed/Evicted; the killed container then exited 0, and
    // the terminal status computed from it alone would be Succeeded.
    let p = pod();
    let rt = runtime(Exited, 0);
    let previous = PodStatus {
        phase: Some(PodPhase::Failed),
        reason: Some("Evicted".into()),
        message: Some("The node was low on resource: memory. ".into()),
        ..Default::default()
    };
    let mut i = input(&p, &rt);
    i.previous = Some(&previous);
    i.pod_is_terminal = true;
    let s = generate_pod_status(&i);
    assert_eq!(s.phase, Some(PodPhase::Failed));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        Some("The node was low on resource: memory. ")
    );
}

#[test]
fn reason_and_message_follow_the_phase() {
    let mut p = pod();
    p.status.reason = Some("api-reason".into());
    let rt = runtime(Running, 0);
    // Same phase as before: the previous reason stays, the API's fills gaps.
    let previous = PodStatus {
        phase: Some(PodPhase::Running),
        message: Some("prev message".into()),
        ..Default::default()
    };
    let mut i = input(&p, &rt);
    i.previous = Some(&previous);
    let s = generate_pod_status(&i);
    assert_eq!(s.reason.as_deref(), Some("api-reason"));
    assert_eq!(s.message.as_deref(), Some("prev message"));
    // A new phase drops them.
    let pending = PodStatus {
        phase: Some(PodPhase::Pending),
        reason: Some("old".into()),
        ..Default::default()
    };
    i.previous = Some(&pending);
    let s = generate_pod_status(&i);
    assert_eq!((s.reason, s.message), (None, None));
    // An eviction forces Failed with its reason (upstream `active_deadline.go`:
    // activeDeadlineSeconds → Failed / DeadlineExceeded).
    i.eviction = Some(Eviction {
        reason: "DeadlineExceeded".into(),
        message: "Pod was active on the node longer than the specified deadline".into(),
    });
    let s = generate_pod_status(&i);
    assert_eq!(s.phase, Some(PodPhase::Failed));
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
}

#[test]
fn pod_ips() {
    let p = pod();
    // Dual stack, node prefers IPv4: v4 first, then the first v6; junk dropped.
    let mut rt = runtime(Running, 0);
    rt.ips = vec![
        "fd00::5".into(),
        "junk".into(),
        "10.0.0.5".into(),
        "fd00::6".into(),
    ];
    let s = generate_pod_status(&input(&p, &rt));
    let ips: Vec<&str> = s.pod_ips.iter().map(|i| i.ip.as_str()).collect();
    assert_eq!(ips, ["10.0.0.5", "fd00::5"]);
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.5"));
    // Node prefers IPv6.
    let mut i = input(&p, &rt);
    i.host_ips = vec!["fd00::1".into()];
    let s = generate_pod_status(&i);
    assert_eq!(s.pod_ip.as_deref(), Some("fd00::5"));

    // The sandbox is gone: the previous IP stays (kubernetes#125370).
    let mut gone = runtime(Exited, 0);
    gone.ips.clear();
    gone.sandboxes = vec![sandbox(SandboxState::NotReady, "")];
    let previous = PodStatus {
        pod_ip: Some("10.0.0.5".into()),
        pod_ips: vec![IpAddress {
            ip: "10.0.0.5".into(),
        }],
        ..Default::default()
    };
    let mut i = input(&p, &gone);
    i.previous = Some(&previous);
    assert_eq!(generate_pod_status(&i).pod_ip.as_deref(), Some("10.0.0.5"));
    // A ready sandbox without IPs is the truth: nothing kept.
    let mut no_ip = runtime(Running, 0);
    no_ip.ips.clear();
    let mut i = input(&p, &no_ip);
    i.previous = Some(&previous);
    assert_eq!(generate_pod_status(&i).pod_ip, None);

    // Host network: the node's IPs, the second only if of the other family.
    let mut host = pod();
    host.spec.host_network = Some(true);
    let mut hrt = runtime(Running, 0);
    hrt.ips.clear();
    let mut i = input(&host, &hrt);
    i.host_ips = vec!["192.168.1.20".into(), "fd00::20".into()];
    let s = generate_pod_status(&i);
    let ips: Vec<&str> = s.pod_ips.iter().map(|i| i.ip.as_str()).collect();
    assert_eq!(ips, ["192.168.1.20", "fd00::20"]);
    i.host_ips = vec!["192.168.1.20".into(), "192.168.1.21".into()];
    assert_eq!(generate_pod_status(&i).pod_ips.len(), 1);
    // No host IPs given: the previous host IP stays.
    let previous = PodStatus {
        host_ip: Some("192.168.1.9".into()),
        ..Default::default()
    };
    let mut i = input(&p, &rt);
    i.host_ips.clear();
    i.previous = Some(&previous);
    assert_eq!(
        generate_pod_status(&i).host_ip.as_deref(),
        Some("192.168.1.9")
    );
}

#[test]
fn qos_class_and_previous_from_api() {
    // No cached status: the API copy is the previous status (after a restart).
    let mut p = pod();
    p.status.qos_class = Some(QosClass::Guaranteed);
    p.status.start_time = Some(Time::from_unix_seconds(42));
    p.status.container_statuses = vec![ContainerStatusFixture::restarted("a", 7)];
    let rt = PodRuntimeStatus::default();
    let mut i = input(&p, &rt);
    i.qos_class = None;
    let s = generate_pod_status(&i);
    assert_eq!(s.qos_class, Some(QosClass::Guaranteed));
    assert_eq!(s.start_time, Some(Time::from_unix_seconds(42)));
    assert_eq!(s.container_statuses[0].restart_count, 7);
}

/// Builders for API container statuses used as previous statuses.
struct ContainerStatusFixture;

impl ContainerStatusFixture {
    fn restarted(name: &str, restarts: i32) -> crate::api::pod::ContainerStatus {
        crate::api::pod::ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            ..Default::default()
        }
    }
}
