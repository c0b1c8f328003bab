//! The runtime's view of a pod: what the CRI says exists, in the shape the decision
//! functions consume (upstream's kubecontainer `PodStatus`, `Status` and `Pod`).
//!
//! Built from CRI list/status calls by `runtime::inspect`, cached per pod by the PLEG,
//! and read by `compute_pod_actions`, status generation and the kill path. Plain data:
//! no I/O, no clock.

use std::collections::BTreeMap;

use crate::cgroups::Limit;

/// A container's state, from the CRI state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

/// A sandbox's state: READY maps to Ready, NOTREADY to NotReady.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SandboxState {
    Ready,
    NotReady,
    #[default]
    Unknown,
}

/// Resources the runtime reports for a container (CRI LinuxContainerResources), kept
/// in the runtime's units: in-place resize compares them exactly with what it would
/// write, and status generation converts them to Kubernetes units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ContainerResources {
    /// `cpu.shares`; `None` when the runtime reports none (0).
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds; unlimited when the runtime reports 0 or -1.
    pub cpu_quota: Limit,
    /// CFS period in microseconds; `None` when the runtime reports none (0).
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes; unlimited when the runtime reports 0 or -1.
    pub memory_limit: Limit,
}

/// One container instance as the runtime reports it. Several instances of the same
/// container name exist after restarts; the newest is what decisions use.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ContainerStatus {
    /// The runtime's container ID.
    pub id: String,
    /// The container name from the pod spec.
    pub name: String,
    pub state: ContainerState,
    /// Unix nanoseconds; 0 when unset.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// The image as the spec named it.
    pub image: String,
    /// The resolved image reference (digest or ID).
    pub image_ref: String,
    /// Hash of the container spec when it was created (from its annotations).
    pub hash: u64,
    /// Hash of the spec with resources zeroed, for in-place resize.
    pub hash_without_resources: u64,
    /// Restart count recorded in the container's annotations.
    pub restart_count: i32,
    /// The runtime's reason (e.g. "OOMKilled", "Error", "Completed").
    pub reason: String,
    /// The runtime's message, or the termination message when read.
    pub message: String,
    pub resources: Option<ContainerResources>,
    /// The log file the runtime writes for this instance.
    pub log_path: String,
    /// Annotations the kubelet set at create time (termination message path, ...).
    pub annotations: BTreeMap<String, String>,
}

/// One sandbox instance of a pod.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SandboxStatus {
    pub id: String,
    pub state: SandboxState,
    /// The sandbox attempt number from its metadata.
    pub attempt: u32,
    pub created_at: i64,
    /// True when the sandbox shares the node's network namespace.
    pub host_network: bool,
    /// The primary IP; empty for host-network sandboxes or before networking is set up.
    pub ip: String,
    /// Further IPs (dual stack).
    pub additional_ips: Vec<String>,
}

/// Everything the runtime knows about one pod (upstream `kubecontainer.PodStatus`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PodRuntimeStatus {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// Pod IPs from the newest sandbox, when it is ready.
    pub ips: Vec<String>,
    /// Newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// All container instances, dead ones included, newest created first.
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest instance of the container named `name`.
    pub fn newest(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// All instances of the container named `name`, newest first.
    pub fn instances<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a ContainerStatus> + 'a {
        self.containers.iter().filter(move |c| c.name == name)
    }

    /// True when some container instance is running.
    pub fn has_running_containers(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.state == ContainerState::Running)
    }

    /// The pod as a set of running things to kill (upstream ConvertPodStatusToRunningPod):
    /// running containers only, every sandbox whatever its state.
    pub fn to_running_pod(&self) -> RunningPod {
        RunningPod {
            uid: self.uid.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            containers: self
                .containers
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .map(|c| RunningContainer {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    state: c.state,
                })
                .collect(),
            sandboxes: self
                .sandboxes
                .iter()
                .map(|s| RunningContainer {
                    id: s.id.clone(),
                    name: String::new(),
                    state: match s.state {
                        SandboxState::Ready => ContainerState::Running,
                        SandboxState::NotReady => ContainerState::Exited,
                        SandboxState::Unknown => ContainerState::Unknown,
                    },
                })
                .collect(),
        }
    }
}

/// A container (or a sandbox, with an empty name) as listed by the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningContainer {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
}

/// A pod as the runtime runs it (upstream `kubecontainer.Pod`): what must be stopped to
/// kill it. Also describes orphans, pods the runtime has but no source wants.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RunningPod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub containers: Vec<RunningContainer>,
    /// Sandboxes, with Running for READY and Exited for NOTREADY.
    pub sandboxes: Vec<RunningContainer>,
}

impl RunningPod {
    /// True when nothing of the pod is left to stop.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.sandboxes.is_empty()
    }

    /// The part of the pod that is running (READY sandboxes, running containers), as
    /// a listing filtered by those states returns it; None when nothing runs.
    pub fn running_part(&self) -> Option<RunningPod> {
        let running = |items: &[RunningContainer]| -> Vec<RunningContainer> {
            items
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .cloned()
                .collect()
        };
        let part = RunningPod {
            uid: self.uid.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            containers: running(&self.containers),
            sandboxes: running(&self.sandboxes),
        };
        (!part.is_empty()).then_some(part)
    }

    /// IDs of all the pod's sandboxes.
    pub fn sandbox_ids(&self) -> impl Iterator<Item = &str> {
        self.sandboxes.iter().map(|s| s.id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, id: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state,
            ..Default::default()
        }
    }

    #[test]
    fn newest_instance_wins_and_running_pod_keeps_only_running() {
        let status = PodRuntimeStatus {
            uid: "u".into(),
            containers: vec![
                container("app", "new", ContainerState::Running),
                container("app", "old", ContainerState::Exited),
                container("init", "i1", ContainerState::Exited),
            ],
            sandboxes: vec![SandboxStatus {
                id: "s1".into(),
                state: SandboxState::NotReady,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(status.newest("app").map(|c| c.id.as_str()), Some("new"));
        assert_eq!(status.instances("app").count(), 2);
        let running = status.to_running_pod();
        assert_eq!(running.containers.len(), 1);
        assert_eq!(running.sandbox_ids().collect::<Vec<_>>(), ["s1"]);
        assert_eq!(running.sandboxes[0].state, ContainerState::Exited);
        assert!(!running.is_empty());
    }

    #[test]
    fn running_part_keeps_what_a_running_state_filter_would_list() {
        let part = |id: &str, state| RunningContainer {
            id: id.into(),
            name: id.into(),
            state,
        };
        let pod = RunningPod {
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![
                part("up", ContainerState::Running),
                part("done", ContainerState::Exited),
                part("new", ContainerState::Created),
            ],
            sandboxes: vec![
                part("old-sandbox", ContainerState::Exited),
                part("sandbox", ContainerState::Running),
            ],
        };
        let running = pod.running_part().expect("something runs");
        assert_eq!((running.uid.as_str(), running.name.as_str()), ("u", "p"));
        let ids =
            |items: &[RunningContainer]| items.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&running.containers), ["up"]);
        assert_eq!(ids(&running.sandboxes), ["sandbox"]);

        let stopped = RunningPod {
            containers: vec![part("done", ContainerState::Exited)],
            sandboxes: vec![part("old-sandbox", ContainerState::Exited)],
            ..pod
        };
        assert_eq!(stopped.running_part(), None);
    }
}
