//! The pod phase (Pending, Running, Succeeded, Failed) computed from the API container
//! statuses the kubelet is about to report (upstream `getPhase` in `kubelet_pods.go`).
//!
//! Called by `generate.rs`; pure. Regular init containers gate the pod (pending until
//! they exit 0, failed for good under `Never` when one exits non-zero). Sidecars
//! (restartable init containers) count as running containers but never hold a pod in
//! Running once the regular containers are done. The restart policy then decides what
//! "all stopped" means.

use crate::api::pod::{Container, ContainerStatus, Pod, PodPhase, RestartPolicy};

/// The pod's restart policy with the API default applied: unset means `Always`, and so
/// does a value this version does not know (it can only come from a newer server, whose
/// default is `Always` too).
pub fn pod_restart_policy(pod: &Pod) -> RestartPolicy {
    match &pod.spec.restart_policy {
        Some(RestartPolicy::Never) => RestartPolicy::Never,
        Some(RestartPolicy::OnFailure) => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    }
}

/// The status named `name`, if any.
pub(crate) fn find<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// What one API container status says, reduced to what the phase rules look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Observed {
    /// No status for this container.
    Missing,
    Running {
        started: bool,
    },
    Terminated {
        exit_code: i32,
    },
    /// Waiting; `last_exit` is the exit code of the previous run, if it ran before.
    Waiting {
        last_exit: Option<i32>,
    },
    /// A status with no state at all (should not happen; treated as unknown).
    NoState,
}

fn observe(statuses: &[ContainerStatus], name: &str) -> Observed {
    let Some(status) = find(statuses, name) else {
        return Observed::Missing;
    };
    let Some(state) = &status.state else {
        return Observed::NoState;
    };
    if state.running.is_some() {
        Observed::Running {
            started: status.started == Some(true),
        }
    } else if let Some(t) = &state.terminated {
        Observed::Terminated {
            exit_code: t.exit_code,
        }
    } else if state.waiting.is_some() {
        let last_exit = status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        Observed::Waiting { last_exit }
    } else {
        Observed::NoState
    }
}

/// True when some regular (non-init) container has run: it is running or terminated.
/// Once that is so the pod has been initialized, even if a sidecar restarts later.
pub fn any_regular_container_started(pod: &Pod, statuses: &[ContainerStatus]) -> bool {
    pod.spec.containers.iter().any(|c| {
        find(statuses, &c.name)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    })
}

#[derive(Default, Debug)]
struct Counts {
    pending_init: usize,
    failed_init: usize,
    unknown: usize,
    running: usize,
    waiting: usize,
    stopped: usize,
    succeeded: usize,
}

fn is_regular_init(c: &Container) -> bool {
    !c.is_sidecar()
}

/// The phase of `pod` given its init and regular container statuses.
///
/// `pod_is_terminal` is set once the kubelet has decided the pod will not run again
/// (termination finished): then a non-static pod whose containers all stopped is
/// Succeeded or Failed whatever its restart policy. Static pods keep the restart-policy
/// answer, as upstream does.
pub fn pod_phase(
    pod: &Pod,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    pod_is_terminal: bool,
) -> PodPhase {
    let spec = &pod.spec;
    let mut n = Counts::default();

    for c in spec.init_containers.iter().filter(|c| is_regular_init(c)) {
        match observe(init_statuses, &c.name) {
            Observed::Terminated { exit_code } if exit_code != 0 => n.failed_init += 1,
            Observed::Terminated { .. } => {}
            Observed::Waiting {
                last_exit: Some(code),
            } => {
                if code != 0 {
                    n.failed_init += 1;
                }
            }
            Observed::Missing
            | Observed::Running { .. }
            | Observed::Waiting { last_exit: None }
            | Observed::NoState => n.pending_init += 1,
        }
    }

    for c in spec.init_containers.iter().filter(|c| c.is_sidecar()) {
        match observe(init_statuses, &c.name) {
            Observed::Missing => n.unknown += 1,
            Observed::Running { started } => {
                if !started {
                    n.pending_init += 1;
                }
                n.running += 1;
            }
            // A sidecar that stopped (or is restarting after a stop) does not count.
            Observed::Terminated { .. } | Observed::Waiting { last_exit: Some(_) } => {}
            Observed::Waiting { last_exit: None } => {
                n.pending_init += 1;
                n.waiting += 1;
            }
            Observed::NoState => {
                n.pending_init += 1;
                n.unknown += 1;
            }
        }
    }

    for c in &spec.containers {
        match observe(statuses, &c.name) {
            Observed::Missing | Observed::NoState => n.unknown += 1,
            Observed::Running { .. } => n.running += 1,
            Observed::Terminated { exit_code } => {
                n.stopped += 1;
                if exit_code == 0 {
                    n.succeeded += 1;
                }
            }
            Observed::Waiting { last_exit: Some(_) } => n.stopped += 1,
            Observed::Waiting { last_exit: None } => n.waiting += 1,
        }
    }

    let policy = pod_restart_policy(pod);
    if n.failed_init > 0 && policy == RestartPolicy::Never {
        return PodPhase::Failed;
    }
    let initializing = n.pending_init > 0 && !any_regular_container_started(pod, statuses);
    if initializing || n.waiting > 0 {
        return PodPhase::Pending;
    }
    if n.running > 0 && n.unknown == 0 {
        return PodPhase::Running;
    }
    if n.running == 0 && n.stopped > 0 && n.unknown == 0 {
        let all_succeeded = n.stopped == n.succeeded;
        if pod_is_terminal && !pod.is_static() {
            return if all_succeeded {
                PodPhase::Succeeded
            } else {
                PodPhase::Failed
            };
        }
        return match policy {
            RestartPolicy::Always => PodPhase::Running,
            _ if all_succeeded => PodPhase::Succeeded,
            RestartPolicy::Never => PodPhase::Failed,
            // OnFailure with a failure: the failed containers are being restarted.
            _ => PodPhase::Running,
        };
    }
    PodPhase::Pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        CONFIG_SOURCE_ANNOTATION_KEY, SOURCE_FILE,
    };

    /// A compact description of one container status for the table.
    #[derive(Clone, Copy)]
    enum S {
        Running,
        /// Running but its startup probe has not passed.
        RunningNotStarted,
        Exited(i32),
        Waiting,
        /// Waiting after a previous run that exited with this code.
        WaitingAfter(i32),
        /// A status with no state set.
        Empty,
    }

    fn status(name: &str, s: S) -> ContainerStatus {
        let mut cs = ContainerStatus {
            name: name.into(),
            ..Default::default()
        };
        let term = |code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        };
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        };
        match s {
            S::Running | S::RunningNotStarted => {
                cs.state = Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                });
                cs.started = Some(matches!(s, S::Running));
            }
            S::Exited(code) => cs.state = Some(term(code)),
            S::Waiting => cs.state = Some(waiting),
            S::WaitingAfter(code) => {
                cs.state = Some(waiting);
                cs.last_state = Some(term(code));
            }
            S::Empty => cs.state = Some(ContainerState::default()),
        }
        cs
    }

    /// A pod with init containers `i*` (regular), `s*` (sidecars) and regular `c*`;
    /// a `-` entry in a status list means "no status for that container".
    struct Case {
        policy: Option<RestartPolicy>,
        init: &'static [&'static str],
        regular: &'static [&'static str],
        statuses: Vec<(&'static str, S)>,
        terminal: bool,
        static_pod: bool,
    }

    fn case(policy: RestartPolicy, regular: &'static [&'static str]) -> Case {
        Case {
            policy: Some(policy),
            init: &[],
            regular,
            statuses: vec![],
            terminal: false,
            static_pod: false,
        }
    }

    impl Case {
        fn init(mut self, init: &'static [&'static str]) -> Self {
            self.init = init;
            self
        }
        fn with(mut self, name: &'static str, s: S) -> Self {
            self.statuses.push((name, s));
            self
        }
        fn terminal(mut self) -> Self {
            self.terminal = true;
            self
        }
        fn static_pod(mut self) -> Self {
            self.static_pod = true;
            self
        }
    }

    fn check(c: Case, want: PodPhase) {
        let mut pod = Pod::default();
        pod.spec.restart_policy = c.policy.clone();
        if c.static_pod {
            pod.metadata
                .annotations
                .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
        }
        for name in c.init {
            pod.spec.init_containers.push(Container {
                name: (*name).into(),
                restart_policy: name.starts_with('s').then_some(RestartPolicy::Always),
                ..Default::default()
            });
        }
        for name in c.regular {
            pod.spec.containers.push(Container {
                name: (*name).into(),
                ..Default::default()
            });
        }
        let (mut init, mut regular) = (vec![], vec![]);
        for (name, s) in &c.statuses {
            let target = if c.init.contains(name) {
                &mut init
            } else {
                &mut regular
            };
            target.push(status(name, *s));
        }
        assert_eq!(pod_phase(&pod, &init, &regular, c.terminal), want);
    }

    use RestartPolicy::{Always, Never, OnFailure};

    #[test]
    fn regular_containers_by_restart_policy() {
        let ab: &[&str] = &["a", "b"];
        // Nothing reported yet: unknown containers keep the pod Pending.
        check(case(Always, ab), PodPhase::Pending);
        check(case(Always, ab).with("a", S::Running), PodPhase::Pending);
        check(
            case(Always, ab).with("a", S::Running).with("b", S::Running),
            PodPhase::Running,
        );
        // One waiting (never ran) container keeps the pod Pending.
        check(
            case(Always, ab).with("a", S::Running).with("b", S::Waiting),
            PodPhase::Pending,
        );
        // Running plus a stopped one is Running under any policy.
        for p in [Always, OnFailure, Never] {
            check(
                case(p, ab).with("a", S::Running).with("b", S::Exited(1)),
                PodPhase::Running,
            );
        }
        // All stopped (both exited under Never → Succeeded / Failed).
        let both = |p, x, y| case(p, ab).with("a", S::Exited(x)).with("b", S::Exited(y));
        check(both(Never, 0, 0), PodPhase::Succeeded);
        check(both(Never, 0, 1), PodPhase::Failed);
        check(both(OnFailure, 0, 0), PodPhase::Succeeded);
        check(both(OnFailure, 0, 2), PodPhase::Running);
        check(both(Always, 0, 0), PodPhase::Running);
        check(both(Always, 1, 1), PodPhase::Running);
        // Waiting after a crash counts as stopped, not as waiting.
        check(
            case(Always, ab)
                .with("a", S::WaitingAfter(1))
                .with("b", S::Running),
            PodPhase::Running,
        );
        check(
            case(OnFailure, ab)
                .with("a", S::WaitingAfter(1))
                .with("b", S::Exited(0)),
            PodPhase::Running,
        );
        // An unset or unknown policy behaves as Always (the API default).
        let mut unset = both(Always, 0, 0);
        unset.policy = None;
        check(unset, PodPhase::Running);
        let mut odd = both(Always, 0, 0);
        odd.policy = Some(RestartPolicy::from("Sometimes"));
        check(odd, PodPhase::Running);
    }

    #[test]
    fn unknown_states() {
        let ab: &[&str] = &["a", "b"];
        // A status without a state counts as unknown: the pod cannot be Running.
        check(
            case(Always, ab).with("a", S::Running).with("b", S::Empty),
            PodPhase::Pending,
        );
        // Missing status + stopped: not all known, so not terminal either.
        check(case(Never, ab).with("a", S::Exited(0)), PodPhase::Pending);
        // A pod with no containers at all has nothing to run: Pending.
        check(case(Never, &[]), PodPhase::Pending);
    }

    #[test]
    fn terminal_pods_ignore_the_restart_policy() {
        let ab: &[&str] = &["a", "b"];
        let both = |x, y| {
            case(Always, ab)
                .with("a", S::Exited(x))
                .with("b", S::Exited(y))
                .terminal()
        };
        check(both(0, 0), PodPhase::Succeeded);
        check(both(0, 137), PodPhase::Failed);
        // Static pods keep the restart-policy answer (upstream TODO #116484).
        check(both(0, 0).static_pod(), PodPhase::Running);
        // Still running containers win over "terminal".
        check(
            case(Always, ab)
                .with("a", S::Running)
                .with("b", S::Exited(0))
                .terminal(),
            PodPhase::Running,
        );
    }

    #[test]
    fn regular_init_containers() {
        let i: &[&str] = &["i0", "i1"];
        let a: &[&str] = &["a"];
        // No statuses → Pending.
        check(case(Always, a).init(i), PodPhase::Pending);
        // i0 done, i1 running → still initializing.
        check(
            case(Always, a)
                .init(i)
                .with("i0", S::Exited(0))
                .with("i1", S::Running)
                .with("a", S::Waiting),
            PodPhase::Pending,
        );
        // All init done, a running → Running.
        check(
            case(Always, a)
                .init(i)
                .with("i0", S::Exited(0))
                .with("i1", S::Exited(0))
                .with("a", S::Running),
            PodPhase::Running,
        );
        // i0 failed under Never → Failed at once.
        check(
            case(Never, a)
                .init(i)
                .with("i0", S::Exited(1))
                .with("a", S::Waiting),
            PodPhase::Failed,
        );
        check(
            case(Never, a)
                .init(i)
                .with("i0", S::WaitingAfter(1))
                .with("a", S::Waiting),
            PodPhase::Failed,
        );
        // Under OnFailure / Always a failed init is retried: Pending.
        for p in [OnFailure, Always] {
            check(
                case(p, a)
                    .init(i)
                    .with("i0", S::WaitingAfter(1))
                    .with("a", S::Waiting),
                PodPhase::Pending,
            );
        }
        // An init container's status with no state keeps the pod initializing.
        check(
            case(Always, a)
                .init(i)
                .with("i0", S::Empty)
                .with("i1", S::Exited(0))
                .with("a", S::Running),
            PodPhase::Running,
        );
    }

    #[test]
    fn sidecars() {
        let s: &[&str] = &["s0"];
        let a: &[&str] = &["a"];
        // Sidecar not yet started (startup probe pending) → initializing.
        check(
            case(Always, a)
                .init(s)
                .with("s0", S::RunningNotStarted)
                .with("a", S::Waiting),
            PodPhase::Pending,
        );
        check(
            case(Always, a)
                .init(s)
                .with("s0", S::Running)
                .with("a", S::Running),
            PodPhase::Running,
        );
        // Sidecar missing → unknown → not Running.
        check(
            case(Always, a).init(s).with("a", S::Running),
            PodPhase::Pending,
        );
        // Main container done under Never while the sidecar still runs: the pod
        // is Running until the kill path stops the sidecar...
        check(
            case(Never, a)
                .init(s)
                .with("s0", S::Running)
                .with("a", S::Exited(0)),
            PodPhase::Running,
        );
        // ...then the stopped sidecar (any exit code) is ignored: Succeeded.
        check(
            case(Never, a)
                .init(s)
                .with("s0", S::Exited(137))
                .with("a", S::Exited(0)),
            PodPhase::Succeeded,
        );
        check(
            case(OnFailure, a)
                .init(s)
                .with("s0", S::WaitingAfter(1))
                .with("a", S::Exited(0)),
            PodPhase::Succeeded,
        );
        // After initialization a restarting sidecar does not send the pod back
        // to Pending (a regular container has started).
        check(
            case(Always, a)
                .init(s)
                .with("s0", S::RunningNotStarted)
                .with("a", S::Running),
            PodPhase::Running,
        );
        // A sidecar that never ran and waits keeps the pod Pending.
        check(
            case(Always, a)
                .init(s)
                .with("s0", S::Waiting)
                .with("a", S::Running),
            PodPhase::Pending,
        );
        // Terminal pod with a sidecar killed at the end: the sidecar's exit code is
        // not a failure.
        check(
            case(Always, a)
                .init(s)
                .with("s0", S::Exited(143))
                .with("a", S::Exited(0))
                .terminal(),
            PodPhase::Succeeded,
        );
    }
}
