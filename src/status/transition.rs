//! Which container state changes a new status may make (upstream
//! `checkContainerStateTransition` in `status_manager.go`).
//!
//! Called by the status manager before it caches a new status; pure. A container that
//! terminated stays terminated unless the restart policy will run it again: `Always`
//! (and sidecars) restart anything, `OnFailure` restarts non-zero exits, `Never`
//! nothing. A status breaking that rule comes from a kubelet bug or a stale read; the
//! caller decides what to do with it (upstream's `updateStatusInternal` in
//! `status/status_manager.go` drops the whole update).

use crate::api::pod::{ContainerStatus, Pod, PodStatus, RestartPolicy};

use super::phase::pod_restart_policy;

/// A new status that would bring a terminated container back to life.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("terminated container {0} attempted illegal transition to non-terminated state")]
    Container(String),
    #[error("terminated init container {0} attempted illegal transition to non-terminated state")]
    InitContainer(String),
    #[error("init container status {0} does not match the pod spec at its position")]
    SpecMismatch(String),
}

fn exit_code(s: &ContainerStatus) -> Option<i32> {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .map(|t| t.exit_code)
}

/// Finds a container terminated in `old` that `new` shows as not terminated.
fn revived<'a>(
    old: &'a ContainerStatus,
    new: &[ContainerStatus],
    policy: &RestartPolicy,
) -> Option<&'a str> {
    let code = exit_code(old)?;
    if code != 0 && *policy == RestartPolicy::OnFailure {
        return None;
    }
    new.iter()
        .any(|n| n.name == old.name && exit_code(n).is_none())
        .then_some(old.name.as_str())
}

/// Checks that `new` does not restart a container of `pod` that `old` shows as
/// terminated for good.
pub fn check_container_state_transition(
    pod: &Pod,
    old: &PodStatus,
    new: &PodStatus,
) -> Result<(), TransitionError> {
    let policy = pod_restart_policy(pod);
    if policy == RestartPolicy::Always {
        return Ok(());
    }
    for o in &old.container_statuses {
        if let Some(name) = revived(o, &new.container_statuses, &policy) {
            return Err(TransitionError::Container(name.to_owned()));
        }
    }
    for (i, o) in old.init_container_statuses.iter().enumerate() {
        let spec = pod.spec.init_containers.get(i).filter(|c| c.name == o.name);
        let Some(spec) = spec else {
            return Err(TransitionError::SpecMismatch(o.name.clone()));
        };
        if spec.is_sidecar() {
            continue;
        }
        if let Some(name) = revived(o, &new.init_container_statuses, &policy) {
            return Err(TransitionError::InitContainer(name.to_owned()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    };

    fn st(name: &str, exit: Option<i32>) -> ContainerStatus {
        let state = match exit {
            Some(code) => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            },
            None => ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            },
        };
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            ..Default::default()
        }
    }

    /// Pod with init `i0`, sidecar `s0` and regular `a` under `policy`; `old` and `new`
    /// give each container's exit code (None = running), in that order.
    fn check(
        policy: RestartPolicy,
        old: [Option<i32>; 3],
        new: [Option<i32>; 3],
    ) -> Result<(), String> {
        let mut pod = Pod::default();
        pod.spec.restart_policy = Some(policy);
        pod.spec.init_containers = vec![
            Container {
                name: "i0".into(),
                ..Default::default()
            },
            Container {
                name: "s0".into(),
                restart_policy: Some(RestartPolicy::Always),
                ..Default::default()
            },
        ];
        pod.spec.containers = vec![Container {
            name: "a".into(),
            ..Default::default()
        }];
        let status = |codes: [Option<i32>; 3]| PodStatus {
            init_container_statuses: vec![st("i0", codes[0]), st("s0", codes[1])],
            container_statuses: vec![st("a", codes[2])],
            ..Default::default()
        };
        check_container_state_transition(&pod, &status(old), &status(new))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn terminated_containers_stay_terminated_unless_restartable() {
        use RestartPolicy::{Always, Never, OnFailure};
        let done = Some(0);
        // a=Terminated(0) then Running under OnFailure → rejected.
        assert_eq!(
            check(OnFailure, [done, None, Some(0)], [done, None, None]),
            Err(
                "terminated container a attempted illegal transition to non-terminated state"
                    .into()
            )
        );
        // With Always → accepted; with OnFailure and Terminated(1) → accepted.
        assert_eq!(
            check(Always, [done, None, Some(0)], [done, None, None]),
            Ok(())
        );
        assert_eq!(
            check(OnFailure, [done, None, Some(1)], [done, None, None]),
            Ok(())
        );
        assert!(check(Never, [done, None, Some(1)], [done, None, None]).is_err());
        // Init containers: same rule; sidecars may always come back.
        assert_eq!(
            check(Never, [Some(0), None, None], [None, None, None]),
            Err(
                "terminated init container i0 attempted illegal transition to non-terminated state"
                    .into()
            )
        );
        assert_eq!(
            check(Never, [done, Some(137), None], [done, None, None]),
            Ok(())
        );
        // Terminated → terminated is fine.
        assert_eq!(
            check(Never, [done, None, Some(1)], [done, None, Some(1)]),
            Ok(())
        );
    }
}
