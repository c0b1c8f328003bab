//! API container statuses built from the runtime's view of a pod (upstream
//! `convertToAPIContainerStatuses` in `kubelet_pods.go`, plus the ready/started half of
//! the prober manager's `UpdatePodStatus`).
//!
//! Called by `generate.rs` once per kind (init, regular, ephemeral); pure. Inputs are
//! the pod spec, every runtime instance of each container (newest first), the previous
//! API statuses, probe results by container ID and the last sync's per-container
//! errors. Rules, in order:
//! 1. Every spec container gets a status: Waiting `ContainerCreating` (or
//!    `PodInitializing` when the pod has init containers). A previous Terminated
//!    status is kept whole; otherwise its restart count and last state carry over.
//! 2. A container that was Running in the previous status but has vanished from the
//!    runtime gets a last state Terminated 137 `ContainerStatusUnknown`.
//! 3. The newest runtime instance gives the state; the second newest gives the last
//!    state. A runtime state `unknown` after a previous Running becomes Terminated 137
//!    `ContainerStatusUnknown`.
//! 4. A container the next sync will (re)start shows the last sync's error as its
//!    Waiting reason (`CrashLoopBackOff`, `ErrImagePull`, ...).
//! 5. `started` and `ready` from the probe results (no probe → started/ready once
//!    running); a regular init container is ready when it exited 0.
//! 6. Regular and init containers report `allocatedResources` (the pod given is the
//!    allocated pod) and, while running, `resources` (see `runtime::resize::report`).
//! 7. Regular and ephemeral statuses are sorted by name, init statuses follow the spec.

use std::collections::BTreeMap;

use crate::api::meta::Time;
use crate::api::pod::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, RestartPolicy,
};
use crate::runtime::model;

use super::input::PodStatusInput;
pub use super::input::ProbeResults;
use super::phase::pod_restart_policy;

/// Waiting reason of a container not created yet.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of containers while init containers run.
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Terminated reason for a container the runtime lost track of.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Exit code reported for a container whose real exit is unknown (as if SIGKILLed).
pub const UNKNOWN_EXIT_CODE: i32 = 137;
/// Message of a Terminated state made up for a container the runtime no longer knows.
pub const MSG_LOST_AT_TERMINATION: &str =
    "The container could not be located when the pod was terminated";
/// Message of a last state made up for a Running container that vanished.
pub const MSG_LOST_WHILE_RUNNING: &str =
    "The container could not be located when the pod was deleted.  The container used to be Running";

/// Which list of the spec a status belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

/// `<runtime>://<id>`, the API form of a container ID.
pub fn api_container_id(runtime_name: &str, id: &str) -> String {
    format!("{runtime_name}://{id}")
}

/// The runtime's ID inside an API container ID (the part after `://`).
pub fn runtime_container_id(api_id: &str) -> &str {
    api_id.split_once("://").map_or(api_id, |(_, id)| id)
}

/// Runtime timestamps are Unix nanoseconds, 0 meaning unset; the API has seconds.
fn time_from_nanos(nanos: i64) -> Option<Time> {
    (nanos != 0).then(|| Time::from_unix_seconds(nanos.div_euclid(1_000_000_000)))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn waiting(reason: Option<&str>, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(str::to_owned),
            message: message.map(str::to_owned),
        }),
        ..ContainerState::default()
    }
}

fn lost(message: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: UNKNOWN_EXIT_CODE,
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_owned()),
            message: Some(message.to_owned()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

fn is_running(s: Option<&ContainerState>) -> bool {
    s.is_some_and(|s| s.running.is_some())
}

fn is_terminated(s: Option<&ContainerState>) -> bool {
    s.is_some_and(|s| s.terminated.is_some())
}

fn is_waiting(s: Option<&ContainerState>) -> bool {
    s.is_some_and(|s| s.waiting.is_some())
}

/// The spec containers of one kind, in spec order.
fn specs<'a>(input: &PodStatusInput<'a>, kind: ContainerKind) -> Vec<&'a Container> {
    let spec = &input.pod.spec;
    match kind {
        ContainerKind::Init => spec.init_containers.iter().collect(),
        ContainerKind::Regular => spec.containers.iter().collect(),
        ContainerKind::Ephemeral => spec
            .ephemeral_containers
            .iter()
            .map(|e| &e.container)
            .collect(),
    }
}

/// One runtime instance as an API status. `old` is the previous API status of the
/// same container name, if any.
fn convert(
    input: &PodStatusInput,
    kind: ContainerKind,
    spec: &Container,
    c: &model::ContainerStatus,
    old: Option<&ContainerStatus>,
) -> ContainerStatus {
    let id = api_container_id(&input.runtime_name, &c.id);
    let image = if c.image.is_empty() {
        spec.image.clone().unwrap_or_default()
    } else {
        c.image.clone()
    };
    let mut st = ContainerStatus {
        name: c.name.clone(),
        restart_count: c.restart_count,
        image,
        image_id: c.image_ref.clone(),
        container_id: Some(id.clone()),
        // Mounts cannot be learnt from the runtime and never change: keep them.
        volume_mounts: old.map(|o| o.volume_mounts.clone()).unwrap_or_default(),
        ..ContainerStatus::default()
    };
    if c.state == model::ContainerState::Running && kind != ContainerKind::Ephemeral {
        st.resources = crate::runtime::resize::report::actual_resources(spec, c.resources.as_ref());
    }
    let state = match c.state {
        model::ContainerState::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time_from_nanos(c.started_at),
            }),
            ..ContainerState::default()
        },
        model::ContainerState::Created => waiting(None, None),
        model::ContainerState::Exited => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: c.exit_code,
                reason: non_empty(&c.reason),
                message: non_empty(&c.message),
                started_at: time_from_nanos(c.started_at),
                finished_at: time_from_nanos(c.finished_at),
                container_id: Some(id),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        },
        model::ContainerState::Unknown => match old {
            // It ran and is gone: report a (lost) termination rather than Waiting,
            // so a run-once pod is not taken for one that never ran.
            Some(o) if is_running(o.state.as_ref()) => {
                st.restart_count = o.restart_count.saturating_add(1);
                lost(MSG_LOST_AT_TERMINATION)
            }
            _ => waiting(None, None),
        },
    };
    st.state = Some(state);
    st
}

/// The last state to keep when the runtime holds only the newest instance (older ones
/// were garbage-collected): the previous status still knows the last termination.
fn carried_last_state(old: &ContainerStatus, new_id: Option<&str>) -> Option<ContainerState> {
    if old.container_id.as_deref() == new_id {
        return old.last_state.clone();
    }
    if is_terminated(old.state.as_ref()) {
        return old.state.clone();
    }
    if is_waiting(old.state.as_ref()) {
        return old.last_state.clone();
    }
    None
}

/// Whether the next sync would (re)start this container (upstream
/// `ShouldContainerBeRestarted`, with a sidecar's own `Always` policy honoured and
/// ephemeral containers never restarted).
fn will_be_started(input: &PodStatusInput, spec: &Container, kind: ContainerKind) -> bool {
    if input.pod.deletion_requested() || input.terminating {
        return false;
    }
    let Some(newest) = input.runtime.newest(&spec.name) else {
        return true;
    };
    let policy = match kind {
        ContainerKind::Init if spec.is_sidecar() => RestartPolicy::Always,
        ContainerKind::Ephemeral => RestartPolicy::Never,
        _ => pod_restart_policy(input.pod),
    };
    match newest.state {
        model::ContainerState::Running => false,
        model::ContainerState::Unknown => true,
        model::ContainerState::Created => policy != RestartPolicy::Never,
        model::ContainerState::Exited => match policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => newest.exit_code != 0,
            _ => true,
        },
    }
}

/// Sets `started` and `ready` from the probe results.
fn apply_probes(
    input: &PodStatusInput,
    spec: &Container,
    kind: ContainerKind,
    st: &mut ContainerStatus,
) {
    let id = st
        .container_id
        .as_deref()
        .map(runtime_container_id)
        .unwrap_or_default();
    let running = is_running(st.state.as_ref());
    let started = running
        && match input.probes.startup.get(id) {
            Some(ok) => *ok,
            None => spec.startup_probe.is_none(),
        };
    st.started = Some(started);
    st.ready = if kind == ContainerKind::Init && !spec.is_sidecar() {
        st.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    } else {
        started
            && match input.probes.readiness.get(id) {
                Some(true) => true,
                _ => spec.readiness_probe.is_none(),
            }
    };
}

/// The API statuses of every container of `kind` in the pod spec; `previous` is the
/// previous status list of the same kind.
pub fn container_statuses(
    input: &PodStatusInput,
    kind: ContainerKind,
    previous: &[ContainerStatus],
) -> Vec<ContainerStatus> {
    let specs = specs(input, kind);
    let old: BTreeMap<&str, &ContainerStatus> =
        previous.iter().map(|s| (s.name.as_str(), s)).collect();
    let default_reason = if input.pod.spec.init_containers.is_empty() {
        CONTAINER_CREATING
    } else {
        POD_INITIALIZING
    };

    // 1. Defaults, seeded from the previous statuses.
    let mut out: Vec<ContainerStatus> = specs
        .iter()
        .map(|c| {
            let fresh = ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: Some(waiting(Some(default_reason), None)),
                ..ContainerStatus::default()
            };
            match old.get(c.name.as_str()) {
                Some(o) if is_terminated(o.state.as_ref()) => (*o).clone(),
                Some(o) => ContainerStatus {
                    restart_count: o.restart_count,
                    last_state: o.last_state.clone(),
                    ..fresh
                },
                None => fresh,
            }
        })
        .collect();

    // 2. Previously Running, now absent from the runtime: it terminated, code unknown.
    for (c, st) in specs.iter().zip(out.iter_mut()) {
        if input.runtime.newest(&c.name).is_some() {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        let still_default = st
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some(default_reason));
        let has_last_termination = is_terminated(st.last_state.as_ref());
        if !is_running(o.state.as_ref()) || !still_default || has_last_termination {
            continue;
        }
        st.last_state = Some(lost(MSG_LOST_WHILE_RUNNING));
        if !input.pod.deletion_requested() && !input.terminating {
            st.restart_count = st.restart_count.saturating_add(1);
        }
    }

    // 3. The two newest runtime instances of each container: state and last state.
    let mut instances: Vec<&model::ContainerStatus> = input.runtime.containers.iter().collect();
    instances.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let mut seen = vec![0u8; specs.len()];
    for inst in instances {
        let Some(i) = specs.iter().position(|c| c.name == inst.name) else {
            continue;
        };
        let prev = old.get(inst.name.as_str()).copied();
        match seen[i] {
            0 => out[i] = convert(input, kind, specs[i], inst, prev),
            1 => out[i].last_state = convert(input, kind, specs[i], inst, prev).state,
            _ => continue,
        }
        seen[i] += 1;
    }
    for (i, st) in out.iter_mut().enumerate() {
        if seen[i] == 1 && st.last_state.is_none() {
            if let Some(o) = old.get(st.name.as_str()) {
                st.last_state = carried_last_state(o, st.container_id.as_deref());
            }
        }
    }

    // 4. Containers the next sync will start show why the last sync did not.
    for (c, st) in specs.iter().zip(out.iter_mut()) {
        if kind == ContainerKind::Init {
            let done = input
                .runtime
                .newest(&c.name)
                .is_some_and(|n| n.state == model::ContainerState::Exited && n.exit_code == 0);
            if done {
                continue;
            }
        }
        let Some(err) = input.sync_errors.get(&c.name) else {
            continue;
        };
        if !will_be_started(input, c, kind) {
            continue;
        }
        if is_terminated(st.state.as_ref()) {
            st.last_state = st.state.take();
        }
        st.state = Some(waiting(Some(&err.reason), Some(&err.message)));
    }

    // 5. Probe results (the prober does not look at ephemeral containers).
    if kind != ContainerKind::Ephemeral {
        for (c, st) in specs.iter().zip(out.iter_mut()) {
            apply_probes(input, c, kind, st);
        }
    }

    // 6. What the node allocated (in-place resize).
    if kind != ContainerKind::Ephemeral {
        for (c, st) in specs.iter().zip(out.iter_mut()) {
            st.allocated_resources = crate::runtime::resize::report::allocated_resources(c);
        }
    }

    // 7. Deterministic order.
    if kind != ContainerKind::Init {
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

#[cfg(test)]
mod tests;
