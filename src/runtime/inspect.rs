//! Reads what the runtime has for a pod, or for all pods, and turns the CRI answers
//! into the `model` types (upstream GetPodStatus and GetPods).
//!
//! Called by the PLEG thread on every relist and by pod workers before a sync; it only
//! reads from the runtime, and (for exited containers) their termination message files
//! and log tails (`termination`). Label keys and annotation parsing live in `labels`.

use std::collections::{BTreeMap, HashMap};

use protobuf::MessageField;

use super::labels;
use super::model::{
    ContainerResources, ContainerState, ContainerStatus, PodRuntimeStatus, RunningContainer,
    RunningPod, SandboxState, SandboxStatus,
};
use super::termination;
use crate::cgroups::Limit;
use crate::cri::{pb, CriError, ListedContainer, ListedSandbox, RuntimeClient};

fn uid_selector(uid: &str) -> HashMap<String, String> {
    HashMap::from([(labels::POD_UID.to_owned(), uid.to_owned())])
}

/// Everything the runtime has for the pod with `uid`: sandboxes and containers, newest
/// first, and the IPs of the newest sandbox when it is ready.
pub fn pod_status(
    runtime: &RuntimeClient,
    uid: &str,
    name: &str,
    namespace: &str,
) -> Result<PodRuntimeStatus, CriError> {
    let listed = runtime.list_pod_sandbox(&pb::ListPodSandboxRequest {
        filter: MessageField::some(pb::PodSandboxFilter {
            label_selector: uid_selector(uid),
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let mut sandbox_ids: Vec<(i64, String)> = listed
        .items
        .into_iter()
        .map(|s| (s.created_at, s.id))
        .collect();
    sandbox_ids.sort_by_key(|s| std::cmp::Reverse(s.0));

    let mut sandboxes = Vec::with_capacity(sandbox_ids.len());
    for (_, id) in &sandbox_ids {
        let response = match runtime.pod_sandbox_status(&pb::PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            ..Default::default()
        }) {
            Ok(response) => response,
            // Removed between list and status: not an error.
            Err(err) if err.is_not_found() => continue,
            Err(err) => return Err(err),
        };
        let Some(status) = response.status.into_option() else {
            return Err(CriError::Other {
                op: "pod_sandbox_status",
                code: 2,
                message: format!("sandbox {id}: the runtime returned no status"),
            });
        };
        sandboxes.push(sandbox_from_cri(&status));
    }
    // IPs come from the newest *listed* sandbox only: when its status is gone
    // (NotFound above), an older sandbox's IPs are not the pod's (upstream idx == 0).
    let newest_listed = sandbox_ids.first().map(|(_, id)| id.as_str());
    let ips = match sandboxes.first() {
        Some(newest)
            if Some(newest.id.as_str()) == newest_listed
                && newest.state == SandboxState::Ready
                && !newest.ip.is_empty() =>
        {
            let mut ips = vec![newest.ip.clone()];
            ips.extend(newest.additional_ips.iter().cloned());
            ips
        }
        _ => Vec::new(),
    };

    let listed = runtime.list_containers(&pb::ListContainersRequest {
        filter: MessageField::some(pb::ContainerFilter {
            label_selector: uid_selector(uid),
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let mut containers = Vec::with_capacity(listed.containers.len());
    for container in listed.containers {
        let response = match runtime.container_status(&pb::ContainerStatusRequest {
            container_id: container.id.clone(),
            ..Default::default()
        }) {
            Ok(response) => response,
            Err(err) if err.is_not_found() => continue,
            Err(err) => return Err(err),
        };
        if let Some(status) = response.status.into_option() {
            let mut converted = container_from_cri(&status);
            // An exited container reports its termination message (upstream reads it
            // in GetPodStatus too).
            let message = termination::message(&status);
            converted.message = termination::append(&converted.message, &message);
            containers.push(converted);
        }
    }
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));

    Ok(PodRuntimeStatus {
        uid: uid.to_owned(),
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        ips,
        sandboxes,
        containers,
    })
}

/// All pods the runtime runs for litelet (upstream GetPods): with `all`, also
/// NOTREADY sandboxes and non-running containers. Newest pod first.
pub fn running_pods(runtime: &RuntimeClient, all: bool) -> Result<Vec<RunningPod>, CriError> {
    let sandbox_filter = (!all).then(|| pb::PodSandboxFilter {
        state: MessageField::some(pb::PodSandboxStateValue {
            state: pb::PodSandboxState::SANDBOX_READY.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let sandboxes = runtime.list_pod_sandbox_lean(&pb::ListPodSandboxRequest {
        filter: sandbox_filter.into(),
        ..Default::default()
    })?;
    let container_filter = (!all).then(|| pb::ContainerFilter {
        state: MessageField::some(pb::ContainerStateValue {
            state: pb::ContainerState::CONTAINER_RUNNING.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let containers = runtime.list_containers_lean(&pb::ListContainersRequest {
        filter: container_filter.into(),
        ..Default::default()
    })?;
    Ok(group_into_pods(sandboxes, containers))
}

/// Groups listed sandboxes and containers by pod UID; things without litelet's labels
/// belong to someone else and are skipped.
fn group_into_pods(
    sandboxes: Vec<ListedSandbox>,
    containers: Vec<ListedContainer>,
) -> Vec<RunningPod> {
    let mut pods: BTreeMap<String, (i64, RunningPod)> = BTreeMap::new();
    for sandbox in sandboxes {
        if sandbox.uid.is_empty() {
            continue;
        }
        let entry = pods.entry(sandbox.uid.clone()).or_insert_with(|| {
            (
                0,
                RunningPod {
                    uid: sandbox.uid,
                    name: sandbox.name,
                    namespace: sandbox.namespace,
                    ..Default::default()
                },
            )
        });
        entry.0 = entry.0.max(sandbox.created_at);
        entry.1.sandboxes.push(RunningContainer {
            id: sandbox.id,
            name: String::new(),
            state: if sandbox.ready {
                ContainerState::Running
            } else {
                ContainerState::Exited
            },
        });
    }
    for container in containers {
        let Some(uid) = container.pod_uid else {
            continue;
        };
        let entry = pods.entry(uid.clone()).or_insert_with(|| {
            (
                0,
                RunningPod {
                    uid,
                    name: container.pod_name.unwrap_or_default(),
                    namespace: container.pod_namespace.unwrap_or_default(),
                    ..Default::default()
                },
            )
        });
        entry.1.containers.push(RunningContainer {
            id: container.id,
            name: container.name,
            state: container_state(container.state),
        });
    }
    let mut list: Vec<(i64, RunningPod)> = pods.into_values().collect();
    list.sort_by_key(|p| std::cmp::Reverse(p.0));
    list.into_iter().map(|(_, pod)| pod).collect()
}

fn container_state(state: pb::ContainerState) -> ContainerState {
    match state {
        pb::ContainerState::CONTAINER_CREATED => ContainerState::Created,
        pb::ContainerState::CONTAINER_RUNNING => ContainerState::Running,
        pb::ContainerState::CONTAINER_EXITED => ContainerState::Exited,
        pb::ContainerState::CONTAINER_UNKNOWN => ContainerState::Unknown,
    }
}

/// A CRI sandbox status in the model's terms.
pub fn sandbox_from_cri(status: &pb::PodSandboxStatus) -> SandboxStatus {
    let state = match status.state.enum_value_or_default() {
        pb::PodSandboxState::SANDBOX_READY => SandboxState::Ready,
        pb::PodSandboxState::SANDBOX_NOTREADY => SandboxState::NotReady,
    };
    let host_network = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network.enum_value_or_default() == pb::NamespaceMode::NODE);
    let network = status.network.as_ref();
    SandboxStatus {
        id: status.id.clone(),
        state,
        attempt: status.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        created_at: status.created_at,
        host_network,
        ip: network.map(|n| n.ip.clone()).unwrap_or_default(),
        additional_ips: network
            .map(|n| n.additional_ips.iter().map(|ip| ip.ip.clone()).collect())
            .unwrap_or_default(),
    }
}

/// A CRI container status in the model's terms, with litelet's annotations decoded.
pub fn container_from_cri(status: &pb::ContainerStatus) -> ContainerStatus {
    let annotations: BTreeMap<String, String> = status
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let info = labels::ContainerAnnotations::parse(&status.annotations);
    ContainerStatus {
        id: status.id.clone(),
        name: status
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
        state: container_state(status.state.enum_value_or_default()),
        created_at: status.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        image: status
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: status.image_ref.clone(),
        hash: info.hash,
        hash_without_resources: info.hash_without_resources,
        restart_count: info.restart_count,
        reason: status.reason.clone(),
        message: status.message.clone(),
        resources: status
            .resources
            .as_ref()
            .and_then(|r| r.linux.as_ref())
            .map(resources_from_cri),
        log_path: status.log_path.clone(),
        annotations,
    }
}

/// CRI Linux resources in the runtime's units, kept exact for in-place resize to
/// compare (zero values mean "not set", a non-positive quota or memory limit means
/// unlimited).
pub fn resources_from_cri(linux: &pb::LinuxContainerResources) -> ContainerResources {
    let limit = |v: i64| match u64::try_from(v) {
        Ok(v) if v > 0 => Limit::Value(v),
        _ => Limit::Unlimited,
    };
    let positive = |v: i64| u64::try_from(v).ok().filter(|v| *v > 0);
    ContainerResources {
        cpu_shares: positive(linux.cpu_shares),
        cpu_quota: limit(linux.cpu_quota),
        cpu_period: positive(linux.cpu_period),
        memory_limit: limit(linux.memory_limit_in_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_round_back_to_kubernetes_units() {
        let linux = pb::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        };
        let r = resources_from_cri(&linux);
        assert_eq!(r.cpu_shares, Some(512));
        assert_eq!(r.cpu_quota, Limit::Value(50_000));
        assert_eq!(r.cpu_period, Some(100_000));
        assert_eq!(r.memory_limit, Limit::Value(64 << 20));
        let none = resources_from_cri(&Default::default());
        assert_eq!(none, ContainerResources::default());
        let removed = resources_from_cri(&pb::LinuxContainerResources {
            cpu_quota: -1,
            memory_limit_in_bytes: -1,
            ..Default::default()
        });
        assert_eq!(removed.cpu_quota, Limit::Unlimited);
        assert_eq!(removed.memory_limit, Limit::Unlimited);
    }

    #[test]
    fn grouping_skips_foreign_things_and_orders_newest_first() {
        let sandbox = |id: &str, uid: &str, created: i64| ListedSandbox {
            id: id.into(),
            created_at: created,
            uid: uid.into(),
            name: format!("pod-{uid}"),
            namespace: "ns".into(),
            ready: true,
        };
        let container = |id: &str, uid: Option<&str>| ListedContainer {
            id: id.into(),
            pod_uid: uid.map(str::to_owned),
            state: pb::ContainerState::CONTAINER_RUNNING,
            ..Default::default()
        };
        let pods = group_into_pods(
            vec![
                sandbox("s-old", "a", 1),
                sandbox("s-new", "b", 5),
                sandbox("s-x", "", 9),
            ],
            vec![
                container("c1", Some("a")),
                container("c2", None),
                container("c3", Some("zzz")),
            ],
        );
        let uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        assert_eq!(uids, ["b", "a", "zzz"]);
        assert_eq!(pods[1].containers[0].id, "c1");
        assert_eq!(pods[1].containers[0].state, ContainerState::Running);
    }
}
