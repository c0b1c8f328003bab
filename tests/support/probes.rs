//! What the prober tests (`tests/fakes/prober.rs` on the fake CRI, `tests/real_runtime/prober_containerd.rs`
//! on a real containerd) hand the probe manager: fast exec probes and a runtime status
//! whose containers have just started.

use std::time::{SystemTime, UNIX_EPOCH};

use litelet::api::pod::{ExecAction, Pod, Probe, ProbeHandler};
use litelet::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};

/// An exec probe of `command`, every second, with a one-second timeout, failing at
/// the first failure.
pub fn exec(command: &[&str]) -> Option<Probe> {
    Some(Probe {
        handler: ProbeHandler {
            exec: Some(ExecAction {
                command: command.iter().map(|s| (*s).to_owned()).collect(),
            }),
            ..Default::default()
        },
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    })
}

/// The runtime status of `pod` with `running` containers, (name, ID) pairs, started now.
pub fn status(pod: &Pod, running: &[(&str, &str)]) -> PodRuntimeStatus {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    PodRuntimeStatus {
        uid: pod.uid().into(),
        containers: running
            .iter()
            .map(|(name, id)| ContainerStatus {
                id: (*id).into(),
                name: (*name).into(),
                state: ContainerState::Running,
                started_at: now.as_nanos() as i64,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
