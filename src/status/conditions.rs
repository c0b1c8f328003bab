//! Kubelet-owned pod conditions and the rules around them (upstream
//! `pkg/kubelet/status/generate.go`, the condition helpers of `status_manager.go` and
//! `pkg/kubelet/types` condition ownership).
//!
//! Generators: `PodReadyToStartContainers` (a usable sandbox exists), `Initialized`
//! (init containers done, sidecars started), `ContainersReady` (every regular container
//! and sidecar ready), `Ready` (ContainersReady plus readiness gates) and
//! `PodScheduled` (always True once the pod is on this node). Each takes the pod, the
//! API container statuses and the phase; none reads a clock. Transition times are
//! carried separately by [`carry_transition_times`] with an explicit `now`.
//!
//! Ownership decides what survives a merge with the API copy: kubelet-owned types are
//! always the kubelet's; `DisruptionTarget` is shared (written by the kubelet or by the
//! API server's eviction); every other type (readiness gates, ...) is foreign and kept
//! from the API.

use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{
    ContainerStatus, Pod, PodCondition, PodPhase, PodStatus, POD_CONTAINERS_READY,
    POD_DISRUPTION_TARGET, POD_INITIALIZED, POD_READY, POD_READY_TO_START_CONTAINERS,
    POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING, POD_SCHEDULED,
};
use crate::runtime::model::PodRuntimeStatus;

use super::phase::{any_regular_container_started, find};

/// Reason: no container status is known at all.
pub const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
/// Reason: the pod succeeded, so its containers are (no longer) ready.
pub const POD_COMPLETED: &str = "PodCompleted";
/// Reason: the pod failed, so its containers are (no longer) ready.
pub const POD_FAILED: &str = "PodFailed";
/// Reason: some container has no status or is not ready.
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
/// Reason: some init container has not completed (or sidecar not started).
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
/// Reason: containers are ready but a readiness gate condition is not True.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// Condition types only the kubelet writes. The resize conditions come from
/// `runtime::resize::ResizeManager` through `PodStatusInput::resize_conditions`.
const KUBELET_OWNED: [&str; 7] = [
    POD_SCHEDULED,
    POD_READY,
    POD_INITIALIZED,
    POD_CONTAINERS_READY,
    POD_READY_TO_START_CONTAINERS,
    POD_RESIZE_PENDING,
    POD_RESIZE_IN_PROGRESS,
];

/// True for condition types the kubelet owns outright.
pub fn is_owned_by_kubelet(type_: &str) -> bool {
    KUBELET_OWNED.contains(&type_)
}

/// True for condition types both the kubelet and others write (DisruptionTarget).
pub fn is_shared_with_kubelet(type_: &str) -> bool {
    type_ == POD_DISRUPTION_TARGET
}

/// Formats names the way the upstream messages do (Go's `%s` of a string slice):
/// `[a b c]`. Clients match on these messages, so the shape is kept.
fn bracketed(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn condition(
    pod: &Pod,
    type_: &str,
    status: ConditionStatus,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status,
        observed_generation: pod.metadata.generation,
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

/// The status named `name` among the init and regular statuses.
fn lookup<'a>(
    init: &'a [ContainerStatus],
    regular: &'a [ContainerStatus],
    name: &str,
) -> Option<&'a ContainerStatus> {
    find(regular, name).or_else(|| find(init, name))
}

/// `Ready` or `ContainersReady` for a pod in a terminal phase: False with reason
/// PodFailed or PodCompleted. `generation` is the observed generation to stamp.
pub fn terminal_phase_condition(
    type_: &str,
    phase: Option<&PodPhase>,
    generation: Option<i64>,
) -> PodCondition {
    let reason = match phase {
        Some(PodPhase::Failed) => Some(POD_FAILED.to_owned()),
        Some(PodPhase::Succeeded) => Some(POD_COMPLETED.to_owned()),
        _ => None,
    };
    PodCondition {
        type_: type_.to_owned(),
        status: ConditionStatus::False,
        observed_generation: generation,
        reason,
        ..PodCondition::default()
    }
}

/// `ContainersReady`: True when every regular container and every sidecar reports
/// ready. Regular init containers do not count. Empty status lists mean "nothing known".
pub fn containers_ready(
    pod: &Pod,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: &PodPhase,
) -> PodCondition {
    let generation = pod.metadata.generation;
    if init.is_empty() && regular.is_empty() {
        return condition(
            pod,
            POD_CONTAINERS_READY,
            ConditionStatus::False,
            Some(UNKNOWN_CONTAINER_STATUSES),
            None,
        );
    }
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.is_sidecar());
    let (mut unknown, mut unready) = (vec![], vec![]);
    for c in sidecars.chain(&pod.spec.containers) {
        match lookup(init, regular, &c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
        }
    }
    if (*phase == PodPhase::Succeeded && unknown.is_empty()) || *phase == PodPhase::Failed {
        return terminal_phase_condition(POD_CONTAINERS_READY, Some(phase), generation);
    }
    let mut parts = vec![];
    if !unknown.is_empty() {
        parts.push(format!(
            "containers with unknown status: {}",
            bracketed(&unknown)
        ));
    }
    if !unready.is_empty() {
        parts.push(format!(
            "containers with unready status: {}",
            bracketed(&unready)
        ));
    }
    if parts.is_empty() {
        condition(pod, POD_CONTAINERS_READY, ConditionStatus::True, None, None)
    } else {
        condition(
            pod,
            POD_CONTAINERS_READY,
            ConditionStatus::False,
            Some(CONTAINERS_NOT_READY),
            Some(parts.join(", ")),
        )
    }
}

/// `Ready`: ContainersReady, and then every readiness gate's condition (looked up in
/// `conditions`, normally the foreign conditions kept from the API) must be True.
pub fn pod_ready(
    pod: &Pod,
    conditions: &[PodCondition],
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: &PodPhase,
) -> PodCondition {
    let cr = containers_ready(pod, init, regular, phase);
    if cr.status != ConditionStatus::True {
        return PodCondition {
            type_: POD_READY.to_owned(),
            ..cr
        };
    }
    let mut parts = vec![];
    for gate in &pod.spec.readiness_gates {
        let t = &gate.condition_type;
        match conditions.iter().find(|c| &c.type_ == t) {
            None => parts.push(format!(
                "corresponding condition of pod readiness gate {t:?} does not exist."
            )),
            Some(c) if c.status != ConditionStatus::True => parts.push(format!(
                "the status of pod readiness gate {t:?} is not \"True\", but {}",
                c.status
            )),
            Some(_) => {}
        }
    }
    if parts.is_empty() {
        condition(pod, POD_READY, ConditionStatus::True, None, None)
    } else {
        condition(
            pod,
            POD_READY,
            ConditionStatus::False,
            Some(READINESS_GATES_NOT_READY),
            Some(parts.join(", ")),
        )
    }
}

/// `Initialized`: every regular init container completed (reported ready, i.e. exit 0)
/// and every sidecar started. Once a regular container has run the pod stays
/// initialized even while a sidecar restarts.
pub fn initialized(
    pod: &Pod,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: &PodPhase,
) -> PodCondition {
    if init.is_empty() && regular.is_empty() && !pod.spec.init_containers.is_empty() {
        return condition(
            pod,
            POD_INITIALIZED,
            ConditionStatus::False,
            Some(UNKNOWN_CONTAINER_STATUSES),
            None,
        );
    }
    let (mut unknown, mut incomplete) = (vec![], vec![]);
    for c in &pod.spec.init_containers {
        let Some(s) = lookup(init, regular, &c.name) else {
            unknown.push(c.name.as_str());
            continue;
        };
        let done = if c.is_sidecar() {
            s.started == Some(true)
        } else {
            s.ready
        };
        if !done {
            incomplete.push(c.name.as_str());
        }
    }
    if *phase == PodPhase::Succeeded && unknown.is_empty() {
        return condition(
            pod,
            POD_INITIALIZED,
            ConditionStatus::True,
            Some(POD_COMPLETED),
            None,
        );
    }
    if any_regular_container_started(pod, regular) {
        return condition(pod, POD_INITIALIZED, ConditionStatus::True, None, None);
    }
    let mut parts = vec![];
    if !unknown.is_empty() {
        parts.push(format!(
            "containers with unknown status: {}",
            bracketed(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        parts.push(format!(
            "containers with incomplete status: {}",
            bracketed(&incomplete)
        ));
    }
    if parts.is_empty() {
        condition(pod, POD_INITIALIZED, ConditionStatus::True, None, None)
    } else {
        condition(
            pod,
            POD_INITIALIZED,
            ConditionStatus::False,
            Some(CONTAINERS_NOT_INITIALIZED),
            Some(parts.join(", ")),
        )
    }
}

/// `PodReadyToStartContainers`: True when a usable sandbox with networking exists.
pub fn ready_to_start_containers(pod: &Pod, runtime: &PodRuntimeStatus) -> PodCondition {
    // The same rule that decides whether SyncPod recreates the sandbox.
    let ok = !crate::runtime::actions::pod_sandbox_changed(pod, runtime).changed;
    condition(
        pod,
        POD_READY_TO_START_CONTAINERS,
        ConditionStatus::from(ok),
        None,
        None,
    )
}

/// `PodScheduled`: a pod the kubelet runs is scheduled; always True.
pub fn scheduled(pod: &Pod) -> PodCondition {
    condition(pod, POD_SCHEDULED, ConditionStatus::True, None, None)
}

/// Replaces the condition of the same type, or appends it.
pub fn replace_or_append(conditions: &mut Vec<PodCondition>, c: PodCondition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(slot) => *slot = c,
        None => conditions.push(c),
    }
}

/// Sets `c` in `status` (upstream `UpdatePodCondition`): its transition time is `now`
/// unless a condition of that type already has the same status, whose time is kept.
/// Returns true when anything changed.
pub fn update_condition(status: &mut PodStatus, mut c: PodCondition, now: Time) -> bool {
    c.last_transition_time = Some(now);
    let Some(slot) = status.conditions.iter_mut().find(|x| x.type_ == c.type_) else {
        status.conditions.push(c);
        return true;
    };
    if slot.status == c.status {
        c.last_transition_time = slot.last_transition_time;
    }
    let changed = *slot != c;
    *slot = c;
    changed
}

/// Gives `new`'s condition of type `type_` its transition time: the old condition's
/// when the status is unchanged, else `now`.
pub fn carry_transition_time(new: &mut PodStatus, old: &PodStatus, type_: &str, now: Time) {
    let Some(c) = new.conditions.iter_mut().find(|c| c.type_ == type_) else {
        return;
    };
    c.last_transition_time = match old.condition(type_) {
        Some(o) if o.status == c.status => o.last_transition_time,
        _ => Some(now),
    };
}

/// [`carry_transition_time`] for the generated conditions and DisruptionTarget: what
/// the status manager does to each status it is given. Resize conditions come with
/// the times their producer set and are left alone.
pub fn carry_transition_times(new: &mut PodStatus, old: &PodStatus, now: Time) {
    const TIMED: [&str; 6] = [
        POD_CONTAINERS_READY,
        POD_READY,
        POD_INITIALIZED,
        POD_READY_TO_START_CONTAINERS,
        POD_SCHEDULED,
        POD_DISRUPTION_TARGET,
    ];
    for t in TIMED {
        carry_transition_time(new, old, t, now);
    }
}

/// True when the pod has readiness gates and its API `Ready` condition disagrees (in
/// status or message) with what the gates and container statuses now say.
pub fn need_to_reconcile_readiness(pod: &Pod) -> bool {
    if pod.spec.readiness_gates.is_empty() {
        return false;
    }
    let st = &pod.status;
    let phase = st.phase.clone().unwrap_or_default();
    let want = pod_ready(
        pod,
        &st.conditions,
        &st.init_container_statuses,
        &st.container_statuses,
        &phase,
    );
    st.condition(POD_READY)
        .is_some_and(|cur| cur.status != want.status || cur.message != want.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, PodReadinessGate, RestartPolicy,
    };
    use crate::runtime::model::SandboxState;
    use crate::runtime::model::SandboxStatus;

    /// Pod: init `i0`, sidecar `s0`, regular `a`, `b`; generation 4.
    fn pod() -> Pod {
        let c = |name: &str, sidecar: bool| Container {
            name: name.into(),
            restart_policy: sidecar.then_some(RestartPolicy::Always),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.generation = Some(4);
        p.spec.init_containers = vec![c("i0", false), c("s0", true)];
        p.spec.containers = vec![c("a", false), c("b", false)];
        p
    }

    fn running(name: &str, ready: bool, started: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ready,
            started: Some(started),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ready: code == 0,
            started: Some(false),
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

    fn waiting(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Expected (status, reason, message) of a condition.
    type Want<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

    fn check(got: PodCondition, type_: &str, want: Want) {
        assert_eq!(got.type_, type_);
        let got_t = (
            got.status.as_str(),
            got.reason.as_deref(),
            got.message.as_deref(),
        );
        assert_eq!(got_t, want, "{type_}");
        assert_eq!(got.observed_generation, Some(4));
        assert!(got.last_transition_time.is_none() && got.last_probe_time.is_none());
    }

    struct Statuses {
        init: Vec<ContainerStatus>,
        regular: Vec<ContainerStatus>,
    }

    /// All initialized, every container ready.
    fn all_ready() -> Statuses {
        Statuses {
            init: vec![exited("i0", 0), running("s0", true, true)],
            regular: vec![running("a", true, true), running("b", true, true)],
        }
    }

    #[test]
    fn containers_ready_cases() {
        let p = pod();
        let run = PodPhase::Running;
        let cr = |s: &Statuses, ph: &PodPhase| containers_ready(&p, &s.init, &s.regular, ph);
        check(
            cr(&all_ready(), &run),
            POD_CONTAINERS_READY,
            ("True", None, None),
        );

        let empty = Statuses {
            init: vec![],
            regular: vec![],
        };
        check(
            cr(&empty, &PodPhase::Pending),
            POD_CONTAINERS_READY,
            ("False", Some(UNKNOWN_CONTAINER_STATUSES), None),
        );

        // Unknown b, unready sidecar and a; the regular init container is ignored.
        let mut s = all_ready();
        s.init = vec![waiting("i0"), running("s0", false, true)];
        s.regular = vec![running("a", false, true)];
        let msg = "containers with unknown status: [b], containers with unready status: [s0 a]";
        check(
            cr(&s, &run),
            POD_CONTAINERS_READY,
            ("False", Some(CONTAINERS_NOT_READY), Some(msg)),
        );

        // Terminal phases: PodCompleted needs every status known.
        check(
            cr(&all_ready(), &PodPhase::Succeeded),
            POD_CONTAINERS_READY,
            ("False", Some(POD_COMPLETED), None),
        );
        check(
            cr(&s, &PodPhase::Succeeded),
            POD_CONTAINERS_READY,
            ("False", Some(CONTAINERS_NOT_READY), Some(msg)),
        );
        check(
            cr(&s, &PodPhase::Failed),
            POD_CONTAINERS_READY,
            ("False", Some(POD_FAILED), None),
        );
    }

    #[test]
    fn ready_cases_with_readiness_gates() {
        let mut p = pod();
        let run = PodPhase::Running;
        let s = all_ready();
        let ready =
            |p: &Pod, conds: &[PodCondition]| pod_ready(p, conds, &s.init, &s.regular, &run);
        // All containers ready, no gates → Ready True.
        check(ready(&p, &[]), POD_READY, ("True", None, None));

        // Not-ready containers: Ready copies ContainersReady's reason and message.
        let mut bad = all_ready();
        bad.regular[1].ready = false;
        check(
            pod_ready(&p, &[], &bad.init, &bad.regular, &run),
            POD_READY,
            (
                "False",
                Some(CONTAINERS_NOT_READY),
                Some("containers with unready status: [b]"),
            ),
        );
        check(
            pod_ready(&p, &[], &s.init, &s.regular, &PodPhase::Failed),
            POD_READY,
            ("False", Some(POD_FAILED), None),
        );

        // A gate whose condition is missing → ReadinessGatesNotReady.
        for t in ["example.com/gate", "example.com/other"] {
            p.spec.readiness_gates.push(PodReadinessGate {
                condition_type: t.into(),
            });
        }
        let gate = |status: ConditionStatus| PodCondition {
            type_: "example.com/gate".into(),
            status,
            ..Default::default()
        };
        let other_true = PodCondition {
            type_: "example.com/other".into(),
            status: ConditionStatus::True,
            ..Default::default()
        };
        check(
            ready(&p, std::slice::from_ref(&other_true)),
            POD_READY,
            (
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some("corresponding condition of pod readiness gate \"example.com/gate\" does not exist."),
            ),
        );
        check(
            ready(&p, &[gate(ConditionStatus::False)]),
            POD_READY,
            (
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some(
                    "the status of pod readiness gate \"example.com/gate\" is not \"True\", but False, \
                     corresponding condition of pod readiness gate \"example.com/other\" does not exist.",
                ),
            ),
        );
        check(
            ready(&p, &[gate(ConditionStatus::True), other_true]),
            POD_READY,
            ("True", None, None),
        );
    }

    #[test]
    fn initialized_cases() {
        let p = pod();
        let init = |s: &Statuses, ph: &PodPhase| initialized(&p, &s.init, &s.regular, ph);
        let pending = PodPhase::Pending;
        check(
            init(&all_ready(), &PodPhase::Running),
            POD_INITIALIZED,
            ("True", None, None),
        );
        let empty = Statuses {
            init: vec![],
            regular: vec![],
        };
        check(
            init(&empty, &pending),
            POD_INITIALIZED,
            ("False", Some(UNKNOWN_CONTAINER_STATUSES), None),
        );
        // i0 still running, sidecar unknown, regular containers waiting.
        let s = Statuses {
            init: vec![running("i0", false, true)],
            regular: vec![waiting("a"), waiting("b")],
        };
        check(
            init(&s, &pending),
            POD_INITIALIZED,
            (
                "False",
                Some(CONTAINERS_NOT_INITIALIZED),
                Some(
                    "containers with unknown status: [s0], containers with incomplete status: [i0]",
                ),
            ),
        );
        // A failed init container is incomplete.
        let s = Statuses {
            init: vec![exited("i0", 1), running("s0", true, false)],
            regular: vec![waiting("a"), waiting("b")],
        };
        check(
            init(&s, &pending),
            POD_INITIALIZED,
            (
                "False",
                Some(CONTAINERS_NOT_INITIALIZED),
                Some("containers with incomplete status: [i0 s0]"),
            ),
        );
        // A sidecar restarting after the pod initialized: still initialized.
        let mut s = all_ready();
        s.init[1] = running("s0", false, false);
        check(
            init(&s, &PodPhase::Running),
            POD_INITIALIZED,
            ("True", None, None),
        );
        // Succeeded with every init status known → True / PodCompleted.
        check(
            init(&all_ready(), &PodPhase::Succeeded),
            POD_INITIALIZED,
            ("True", Some(POD_COMPLETED), None),
        );
        // A pod without init containers is initialized from the start.
        let mut plain = pod();
        plain.spec.init_containers.clear();
        check(
            initialized(&plain, &[], &[], &pending),
            POD_INITIALIZED,
            ("True", None, None),
        );
    }

    #[test]
    fn ready_to_start_containers_and_scheduled() {
        let mut p = pod();
        let sandbox = |state, ip: &str, host_network| SandboxStatus {
            state,
            ip: ip.into(),
            host_network,
            ..Default::default()
        };
        let rt = |sandboxes| PodRuntimeStatus {
            sandboxes,
            ..Default::default()
        };
        let rtsc = |p: &Pod, r: &PodRuntimeStatus| {
            check(
                ready_to_start_containers(p, r),
                POD_READY_TO_START_CONTAINERS,
                ("False", None, None),
            )
        };
        rtsc(&p, &rt(vec![]));
        rtsc(
            &p,
            &rt(vec![sandbox(SandboxState::NotReady, "10.0.0.2", false)]),
        );
        rtsc(&p, &rt(vec![sandbox(SandboxState::Ready, "", false)]));
        rtsc(
            &p,
            &rt(vec![sandbox(SandboxState::Ready, "10.0.0.2", true)]),
        );
        let two = vec![
            sandbox(SandboxState::Ready, "10.0.0.2", false),
            sandbox(SandboxState::Ready, "10.0.0.3", false),
        ];
        rtsc(&p, &rt(two));
        let ok = rt(vec![
            sandbox(SandboxState::Ready, "10.0.0.2", false),
            sandbox(SandboxState::NotReady, "", false),
        ]);
        check(
            ready_to_start_containers(&p, &ok),
            POD_READY_TO_START_CONTAINERS,
            ("True", None, None),
        );
        // Host network: no IP needed.
        p.spec.host_network = Some(true);
        let host = rt(vec![sandbox(SandboxState::Ready, "", true)]);
        check(
            ready_to_start_containers(&p, &host),
            POD_READY_TO_START_CONTAINERS,
            ("True", None, None),
        );
        check(scheduled(&p), POD_SCHEDULED, ("True", None, None));
    }

    #[test]
    fn ownership() {
        for t in [
            POD_SCHEDULED,
            POD_READY,
            POD_INITIALIZED,
            POD_CONTAINERS_READY,
            POD_READY_TO_START_CONTAINERS,
        ] {
            assert!(is_owned_by_kubelet(t) && !is_shared_with_kubelet(t), "{t}");
        }
        assert!(is_shared_with_kubelet(POD_DISRUPTION_TARGET));
        assert!(!is_owned_by_kubelet(POD_DISRUPTION_TARGET));
        assert!(!is_owned_by_kubelet("example.com/gate"));
        assert!(!is_shared_with_kubelet("example.com/gate"));
    }

    fn cond(type_: &str, status: ConditionStatus, ltt: i64) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status,
            last_transition_time: Some(Time::from_unix_seconds(ltt)),
            ..Default::default()
        }
    }

    #[test]
    fn transition_times() {
        use ConditionStatus::{False, True};
        let now = Time::from_unix_seconds(1000);
        let old = PodStatus {
            conditions: vec![cond(POD_READY, False, 10), cond(POD_INITIALIZED, True, 20)],
            ..Default::default()
        };
        let mut new = PodStatus {
            conditions: vec![
                cond(POD_READY, True, 0),
                cond(POD_INITIALIZED, True, 0),
                cond(POD_SCHEDULED, True, 0),
                cond("example.com/gate", True, 0),
            ],
            ..Default::default()
        };
        carry_transition_times(&mut new, &old, now);
        let ltt = |t: &str| new.condition(t).and_then(|c| c.last_transition_time);
        // Ready flips False→True → now; unchanged Initialized keeps its time.
        assert_eq!(ltt(POD_READY), Some(now));
        assert_eq!(ltt(POD_INITIALIZED), Some(Time::from_unix_seconds(20)));
        assert_eq!(ltt(POD_SCHEDULED), Some(now));
        // Foreign conditions are not touched.
        assert_eq!(ltt("example.com/gate"), Some(Time::from_unix_seconds(0)));

        // update_condition: same status keeps the time, a flip takes now.
        let mut st = old.clone();
        assert!(!update_condition(
            &mut st,
            cond(POD_INITIALIZED, True, 0),
            now
        ));
        assert_eq!(
            st.conditions[1].last_transition_time,
            Some(Time::from_unix_seconds(20))
        );
        assert!(update_condition(&mut st, cond(POD_READY, True, 0), now));
        assert_eq!(st.conditions[0].last_transition_time, Some(now));
        assert!(update_condition(&mut st, cond(POD_SCHEDULED, True, 0), now));
        assert_eq!(st.conditions.len(), 3);

        let mut list = vec![cond(POD_READY, False, 1)];
        replace_or_append(&mut list, cond(POD_READY, True, 2));
        replace_or_append(&mut list, cond(POD_DISRUPTION_TARGET, True, 3));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].status, True);
    }

    #[test]
    fn reconcile_readiness_only_with_gates() {
        let mut p = pod();
        p.status.phase = Some(PodPhase::Running);
        p.status.init_container_statuses = all_ready().init;
        p.status.container_statuses = all_ready().regular;
        p.status.conditions = vec![cond(POD_READY, ConditionStatus::True, 1)];
        assert!(!need_to_reconcile_readiness(&p));
        p.spec.readiness_gates.push(PodReadinessGate {
            condition_type: "example.com/gate".into(),
        });
        assert!(need_to_reconcile_readiness(&p));
        p.status
            .conditions
            .push(cond("example.com/gate", ConditionStatus::True, 1));
        assert!(!need_to_reconcile_readiness(&p));
    }
}
