//! The final status of a pod whose termination has finished (the status half of
//! upstream `TerminatePod` in `status_manager.go`).
//!
//! Called by the status manager when a pod worker reports SyncTerminatedPod done;
//! pure. The runtime may have lost some containers (garbage collection, a restart, an
//! admin), so every container that has no Terminated state but could have run is
//! reported Terminated 137 `ContainerStatusUnknown`: never describe as successful a pod
//! whose exits are unknown. Non-static pods then get a terminal phase.
//!
//! Quirk fixed on purpose: upstream (`TerminatePod` in `status/status_manager.go`,
//! through `hasPodInitialized(pod)`) decides whether the pod had initialized from the
//! caller's `pod.status` (the possibly stale API copy); here it is decided from the
//! same status that is being finalised.

use crate::api::pod::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodPhase, PodStatus,
};

use super::containers::{CONTAINER_STATUS_UNKNOWN, MSG_LOST_AT_TERMINATION, UNKNOWN_EXIT_CODE};
use super::is_terminal_phase;

fn lost() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: UNKNOWN_EXIT_CODE,
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_owned()),
            message: Some(MSG_LOST_AT_TERMINATION.to_owned()),
            ..Default::default()
        }),
        ..ContainerState::default()
    }
}

fn terminated_exit(state: Option<&ContainerState>) -> Option<i32> {
    state
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
}

fn is_waiting(state: Option<&ContainerState>) -> bool {
    state.is_some_and(|s| s.waiting.is_some())
}

/// True when `status` shows the pod got past its init containers: it has none, a
/// regular container left Waiting (or has a previous termination), or the last init
/// container completed (a sidecar: running and started).
pub fn has_initialized(pod: &Pod, status: &PodStatus) -> bool {
    if pod.spec.init_containers.is_empty() {
        return true;
    }
    let regular_ran = status
        .container_statuses
        .iter()
        .any(|s| terminated_exit(s.last_state.as_ref()).is_some() || !is_waiting(s.state.as_ref()));
    if regular_ran {
        return true;
    }
    let Some(last) = status.init_container_statuses.last() else {
        return false;
    };
    // The last status must be the spec's init container at the same position.
    let index = status.init_container_statuses.len() - 1;
    let Some(spec) = pod
        .spec
        .init_containers
        .get(index)
        .filter(|c| c.name == last.name)
    else {
        return false;
    };
    if spec.is_sidecar() {
        last.state.as_ref().is_some_and(|s| s.running.is_some()) && last.started == Some(true)
    } else {
        terminated_exit(last.last_state.as_ref()) == Some(0)
            || terminated_exit(last.state.as_ref()) == Some(0)
    }
}

/// How many leading init statuses have tried to start: all but the trailing run of
/// Waiting statuses with no previous termination, and at least the first one.
fn attempted_init_count(statuses: &[ContainerStatus]) -> usize {
    let attempted = |s: &ContainerStatus| {
        !is_waiting(s.state.as_ref()) || terminated_exit(s.last_state.as_ref()).is_some()
    };
    match statuses.iter().rposition(attempted) {
        Some(i) => i + 1,
        None => statuses.len().min(1),
    }
}

/// The final status for `pod`, from `base` (the cached status, else the API copy).
pub fn terminated_status(pod: &Pod, base: &PodStatus) -> PodStatus {
    let mut status = base.clone();
    if has_initialized(pod, base) {
        for s in &mut status.container_statuses {
            if terminated_exit(s.state.as_ref()).is_none() {
                s.state = Some(lost());
            }
        }
    }
    let n = attempted_init_count(&status.init_container_statuses);
    for s in status.init_container_statuses.iter_mut().take(n) {
        if terminated_exit(s.state.as_ref()).is_none() {
            s.state = Some(lost());
        }
    }
    // Static pods keep their phase (upstream TODO #116484).
    if !pod.is_static() && !is_terminal_phase(status.phase.as_ref()) {
        status.phase = Some(PodPhase::Failed);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        Container, ContainerStateRunning, ContainerStateWaiting, RestartPolicy,
        CONFIG_SOURCE_ANNOTATION_KEY, SOURCE_FILE,
    };

    #[derive(Clone, Copy)]
    enum S {
        Running,
        Waiting,
        WaitingAfter(i32),
        Exited(i32),
    }

    fn st(name: &str, s: S) -> ContainerStatus {
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
        let (state, last_state) = match s {
            S::Running => (
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
                None,
            ),
            S::Waiting => (waiting, None),
            S::WaitingAfter(code) => (waiting, Some(term(code))),
            S::Exited(code) => (term(code), None),
        };
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            last_state,
            started: Some(matches!(s, S::Running)),
            ..Default::default()
        }
    }

    fn pod(init: &[&str], regular: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: (*n).into(),
            restart_policy: n.starts_with('s').then_some(RestartPolicy::Always),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.spec.init_containers = init.iter().map(c).collect();
        p.spec.containers = regular.iter().map(c).collect();
        p
    }

    /// One-letter summary per container: T137 (made up), T<n> (real exit), R, W.
    fn summary(v: &[ContainerStatus]) -> Vec<String> {
        v.iter()
            .map(|s| {
                let state = s.state.as_ref();
                let made_up = state
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN));
                match (terminated_exit(state), made_up) {
                    (Some(_), true) => format!("{}=lost", s.name),
                    (Some(code), false) => format!("{}=T{code}", s.name),
                    _ if is_waiting(state) => format!("{}=W", s.name),
                    _ => format!("{}=R", s.name),
                }
            })
            .collect()
    }

    fn check(pod: &Pod, base: PodStatus, want_init: &[&str], want: &[&str], phase: PodPhase) {
        let out = terminated_status(pod, &base);
        assert_eq!(summary(&out.init_container_statuses), want_init);
        assert_eq!(summary(&out.container_statuses), want);
        assert_eq!(out.phase, Some(phase));
        // Last states are never touched.
        for (a, b) in out.container_statuses.iter().zip(&base.container_statuses) {
            assert_eq!(a.last_state, b.last_state);
        }
    }

    fn status(
        phase: PodPhase,
        init: Vec<ContainerStatus>,
        regular: Vec<ContainerStatus>,
    ) -> PodStatus {
        PodStatus {
            phase: Some(phase),
            init_container_statuses: init,
            container_statuses: regular,
            ..Default::default()
        }
    }

    #[test]
    fn running_containers_become_lost_and_the_phase_failed() {
        let p = pod(&[], &["a", "b"]);
        let base = status(
            PodPhase::Running,
            vec![],
            vec![st("a", S::Running), st("b", S::Exited(0))],
        );
        check(&p, base, &[], &["a=lost", "b=T0"], PodPhase::Failed);
        // The message and code are upstream's.
        let out = terminated_status(
            &p,
            &status(PodPhase::Running, vec![], vec![st("a", S::Running)]),
        );
        let t = out.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .unwrap_or_default();
        assert_eq!(t.exit_code, 137);
        assert_eq!(t.message.as_deref(), Some(MSG_LOST_AT_TERMINATION));
    }

    #[test]
    fn terminal_phases_and_static_pods_keep_their_phase() {
        let p = pod(&[], &["a"]);
        let done = status(PodPhase::Succeeded, vec![], vec![st("a", S::Exited(0))]);
        check(&p, done, &[], &["a=T0"], PodPhase::Succeeded);
        let mut sp = pod(&[], &["a"]);
        sp.metadata
            .annotations
            .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), SOURCE_FILE.into());
        let running = status(PodPhase::Running, vec![], vec![st("a", S::Running)]);
        check(&sp, running, &[], &["a=lost"], PodPhase::Running);
        // A phase this version does not know is not terminal: Failed.
        let odd = status(PodPhase::from("Hibernating"), vec![], vec![]);
        check(&p, odd, &[], &[], PodPhase::Failed);
    }

    #[test]
    fn init_containers_that_never_finished() {
        // i0 running, i1 waiting, regular waiting, never initialized → only i0
        // is lost; the phase goes Pending → Failed.
        let p = pod(&["i0", "i1"], &["a"]);
        let base = status(
            PodPhase::Pending,
            vec![st("i0", S::Running), st("i1", S::Waiting)],
            vec![st("a", S::Waiting)],
        );
        check(&p, base, &["i0=lost", "i1=W"], &["a=W"], PodPhase::Failed);
        // All init statuses waiting: the first one still counts as attempted.
        let base = status(
            PodPhase::Pending,
            vec![st("i0", S::Waiting), st("i1", S::Waiting)],
            vec![st("a", S::Waiting)],
        );
        check(&p, base, &["i0=lost", "i1=W"], &["a=W"], PodPhase::Failed);
        // A retried init container (waiting after a failure) counts as attempted.
        let base = status(
            PodPhase::Pending,
            vec![st("i0", S::Exited(0)), st("i1", S::WaitingAfter(1))],
            vec![st("a", S::Waiting)],
        );
        check(&p, base, &["i0=T0", "i1=lost"], &["a=W"], PodPhase::Failed);
        // Initialized (last init exited 0): waiting regular containers are lost too.
        let base = status(
            PodPhase::Running,
            vec![st("i0", S::Exited(0)), st("i1", S::Exited(0))],
            vec![st("a", S::Waiting)],
        );
        check(&p, base, &["i0=T0", "i1=T0"], &["a=lost"], PodPhase::Failed);
    }

    #[test]
    fn initialization_is_read_from_the_status_being_finalised() {
        // Upstream's hasPodInitialized quirk, fixed: the API copy (pod.status) says
        // nothing ran, the cached status says the sidecar started → regular containers are finalised.
        let mut p = pod(&["s0"], &["a"]);
        p.status = status(
            PodPhase::Pending,
            vec![st("s0", S::Waiting)],
            vec![st("a", S::Waiting)],
        );
        let cached = status(
            PodPhase::Running,
            vec![st("s0", S::Running)],
            vec![st("a", S::Waiting)],
        );
        assert!(!has_initialized(&p, &p.status));
        assert!(has_initialized(&p, &cached));
        check(&p, cached, &["s0=lost"], &["a=lost"], PodPhase::Failed);
        // A last init status that does not match the spec position: not initialized.
        let mismatched = status(PodPhase::Pending, vec![st("other", S::Exited(0))], vec![]);
        assert!(!has_initialized(&p, &mismatched));
        // A regular container with a previous termination: initialized.
        let restarted = status(PodPhase::Running, vec![], vec![st("a", S::WaitingAfter(1))]);
        assert!(has_initialized(&p, &restarted));
    }
}
