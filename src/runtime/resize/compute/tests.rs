//! `compute_pod_actions` with in-place resize: the runtime reports each running
//! container's resources as created from one spec, the pod now asks for another.
//! Names say the behaviour (a `bNN_` prefix is a tag kept from the first test plan)
//! or the upstream bug they fix.

use super::*;
use crate::api::pod::{ContainerResizePolicy, RestartPolicy, CONFIG_SOURCE_ANNOTATION_KEY};
use crate::cgroups::pod_resources::tests::{container, sidecar};
use crate::cgroups::Limit;
use crate::runtime::actions::{compute_pod_actions, PodActions, ProbeResults};
use crate::runtime::hash::{container_hash, container_hash_without_resources};
use crate::runtime::model::{ContainerResources, SandboxState, SandboxStatus};

type Res<'a> = (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);

fn id(name: &str) -> String {
    format!("id-{name}")
}

/// A running pod whose containers were created from `before` and whose spec is now
/// `after` (both `(name, requests, limits)`).
fn world(before: &[(&str, Res)], after: &[(&str, Res)]) -> (Pod, PodRuntimeStatus) {
    let mk = |list: &[(&str, Res)]| -> Vec<Container> {
        list.iter()
            .map(|(n, (req, lim))| container(n, req, lim))
            .collect()
    };
    let created = mk(before);
    let mut pod = Pod::default();
    pod.metadata.uid = Some("uid-1".into());
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("default".into());
    pod.spec.restart_policy = Some(RestartPolicy::Always);
    pod.spec.containers = mk(after);
    let status = PodRuntimeStatus {
        uid: "uid-1".into(),
        sandboxes: vec![SandboxStatus {
            id: "sb".into(),
            state: SandboxState::Ready,
            ip: "10.0.0.2".into(),
            ..SandboxStatus::default()
        }],
        containers: created.iter().map(running_from).collect(),
        ..PodRuntimeStatus::default()
    };
    (pod, status)
}

/// The runtime's view of a container created from `c`.
fn running_from(c: &Container) -> ContainerStatus {
    let v = container_values(c);
    ContainerStatus {
        id: id(&c.name),
        name: c.name.clone(),
        state: ContainerState::Running,
        hash: container_hash(c),
        hash_without_resources: container_hash_without_resources(c),
        resources: Some(ContainerResources {
            cpu_shares: Some(v.cpu_shares),
            cpu_quota: v.cpu_quota,
            cpu_period: Some(v.cpu_period),
            memory_limit: v.memory_limit,
        }),
        ..ContainerStatus::default()
    }
}

/// The containers were created with the spec's resize policy too (it never changes):
/// align the runtime's hash without resources with the spec.
fn same_policy(pod: &Pod, status: &mut PodRuntimeStatus) {
    for st in &mut status.containers {
        let spec = pod.spec.containers.iter().chain(&pod.spec.init_containers);
        if let Some(c) = spec.into_iter().find(|c| c.name == st.name) {
            st.hash_without_resources = container_hash_without_resources(c);
        }
    }
}

fn actions(pod: &Pod, status: &PodRuntimeStatus) -> PodActions {
    compute_pod_actions(pod, status, &ProbeResults::default())
}

/// `resource: [names]` of the updates, in order.
fn updates(a: &PodActions) -> Vec<(ResizeResource, Vec<String>)> {
    a.containers_to_update
        .iter()
        .map(|(r, l)| (*r, l.iter().map(|u| u.name.clone()).collect()))
        .collect()
}

fn policy(c: &mut Container, resource: &str, restart: bool) {
    c.resize_policy.push(ContainerResizePolicy {
        resource_name: resource.into(),
        restart_policy: if restart {
            ResizeRestartPolicy::RestartContainer
        } else {
            ResizeRestartPolicy::NotRequired
        },
    });
}

const MEM_256: Res = (&[], &[("memory", "256Mi")]);
const MEM_512: Res = (&[], &[("memory", "512Mi")]);

#[test]
fn memory_up_in_place() {
    let (pod, status) = world(&[("c", MEM_256)], &[("c", MEM_512)]);
    let a = actions(&pod, &status);
    assert_eq!(
        updates(&a),
        vec![(ResizeResource::Memory, vec!["c".into()])]
    );
    let u = &a.containers_to_update[&ResizeResource::Memory][0];
    assert_eq!(u.desired.memory_limit, Limit::Value(512 << 20));
    assert_eq!(u.current.memory_limit, Limit::Value(256 << 20));
    assert!(a.containers_to_kill.is_empty() && a.containers_to_start.is_empty());
    assert!(!a.kill_pod && !a.update_pod_resources);
}

#[test]
fn memory_down_in_place() {
    let (pod, status) = world(&[("c", MEM_512)], &[("c", MEM_256)]);
    let a = actions(&pod, &status);
    assert_eq!(
        updates(&a),
        vec![(ResizeResource::Memory, vec!["c".into()])]
    );
}

#[test]
fn restart_policy_restarts_instead_of_updating() {
    let one: Res = (&[("cpu", "1")], &[("cpu", "1")]);
    let two: Res = (&[("cpu", "2")], &[("cpu", "2")]);
    let (mut pod, mut status) = world(&[("c", one)], &[("c", two)]);
    policy(&mut pod.spec.containers[0], "cpu", true);
    same_policy(&pod, &mut status);
    let a = actions(&pod, &status);
    assert!(a.containers_to_update.is_empty());
    assert_eq!(a.containers_to_start, vec![0]);
    assert_eq!(
        a.containers_to_kill[&id("c")].message,
        "Container c resize requires restart"
    );
    assert!(a.update_pod_resources && !a.kill_pod);
    // Only the memory policy is RestartContainer: a CPU change stays in place.
    let (mut pod, mut status) = world(&[("c", one)], &[("c", two)]);
    policy(&mut pod.spec.containers[0], "memory", true);
    policy(&mut pod.spec.containers[0], "cpu", false);
    same_policy(&pod, &mut status);
    let a = actions(&pod, &status);
    assert_eq!(updates(&a), vec![(ResizeResource::Cpu, vec!["c".into()])]);
    assert!(a.containers_to_kill.is_empty());
}

#[test]
fn decreases_come_first_latest_found_first() {
    let lim = |cpu: &'static str| -> Res {
        match cpu {
            "1" => (&[("cpu", "1")], &[("cpu", "1")]),
            "2" => (&[("cpu", "2")], &[("cpu", "2")]),
            _ => (&[("cpu", "3")], &[("cpu", "3")]),
        }
    };
    let (pod, status) = world(
        &[
            ("a", lim("1")),
            ("b", lim("2")),
            ("c", lim("3")),
            ("d", lim("1")),
        ],
        &[
            ("a", lim("2")),
            ("b", lim("1")),
            ("c", lim("1")),
            ("d", lim("3")),
        ],
    );
    let a = actions(&pod, &status);
    let want: Vec<String> = ["c", "b", "a", "d"].iter().map(|s| s.to_string()).collect();
    assert_eq!(updates(&a), vec![(ResizeResource::Cpu, want)]);
}

#[test]
fn memory_request_alone_needs_nothing() {
    let before: Res = (&[("memory", "100Mi")], &[("memory", "800Mi")]);
    let after: Res = (&[("memory", "400Mi")], &[("memory", "800Mi")]);
    let (pod, status) = world(&[("c", before)], &[("c", after)]);
    assert_eq!(actions(&pod, &status).containers_to_update.len(), 0);
    assert!(containers_not_resized(&pod, &status).is_empty());
}

#[test]
fn container_without_limits_resizes_its_request() {
    // Upstream kept every container without limits as it was, so its CPU request
    // never changed and the resize stayed in progress for ever.
    let before: Res = (&[("cpu", "200m")], &[]);
    let after: Res = (&[("cpu", "300m")], &[]);
    let (pod, status) = world(&[("c", before)], &[("c", after)]);
    let a = actions(&pod, &status);
    assert_eq!(updates(&a), vec![(ResizeResource::Cpu, vec!["c".into()])]);
    let u = &a.containers_to_update[&ResizeResource::Cpu][0];
    assert_eq!((u.current.cpu_shares, u.desired.cpu_shares), (204, 307));
    assert_eq!(containers_not_resized(&pod, &status), vec!["c".to_string()]);
}

#[test]
fn tiny_cpu_limits_are_one_setting() {
    let before: Res = (&[("cpu", "1m")], &[("cpu", "5m")]);
    let after: Res = (&[("cpu", "2m")], &[("cpu", "9m")]);
    let (pod, status) = world(&[("c", before)], &[("c", after)]);
    assert!(actions(&pod, &status).containers_to_update.is_empty());
    assert!(containers_not_resized(&pod, &status).is_empty());
}

#[test]
fn memory_and_cpu_of_one_container() {
    let before: Res = (&[("cpu", "1")], &[("cpu", "1"), ("memory", "256Mi")]);
    let after: Res = (&[("cpu", "500m")], &[("cpu", "500m"), ("memory", "512Mi")]);
    let (pod, status) = world(&[("c", before)], &[("c", after)]);
    let a = actions(&pod, &status);
    assert_eq!(
        updates(&a),
        vec![
            (ResizeResource::Memory, vec!["c".into()]),
            (ResizeResource::Cpu, vec!["c".into()])
        ]
    );
}

#[test]
fn nothing_without_runtime_values_or_for_stopped_containers() {
    let (pod, mut status) = world(&[("c", MEM_256)], &[("c", MEM_512)]);
    status.containers[0].resources = None;
    assert!(actions(&pod, &status).containers_to_update.is_empty());
    assert!(containers_not_resized(&pod, &status).is_empty());

    // Restarting (exited): it simply starts again with the new resources.
    let (pod, mut status) = world(&[("c", MEM_256)], &[("c", MEM_512)]);
    status.containers[0].state = ContainerState::Exited;
    status.containers[0].exit_code = 1;
    let a = actions(&pod, &status);
    assert!(a.containers_to_update.is_empty());
    assert_eq!(a.containers_to_start, vec![0]);
}

#[test]
fn static_pods_restart_on_a_resources_change() {
    let (mut pod, status) = world(&[("c", MEM_256)], &[("c", MEM_512)]);
    pod.metadata
        .annotations
        .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), "file".into());
    let a = actions(&pod, &status);
    assert!(a.containers_to_update.is_empty());
    assert_eq!(a.containers_to_start, vec![0]);
    assert_eq!(
        a.containers_to_kill[&id("c")].message,
        "Container c definition changed, will be restarted"
    );
}

#[test]
fn sidecars_resize_in_place_or_restart() {
    let (mut pod, mut status) = world(&[("main", MEM_256)], &[("main", MEM_256)]);
    let before = sidecar(container("side", &[], &[("memory", "256Mi")]));
    let mut after = sidecar(container("side", &[], &[("memory", "512Mi")]));
    pod.spec.init_containers = vec![after.clone()];
    status.containers.push(running_from(&before));
    let a = actions(&pod, &status);
    assert_eq!(
        updates(&a),
        vec![(ResizeResource::Memory, vec!["side".into()])]
    );
    let u = &a.containers_to_update[&ResizeResource::Memory][0];
    assert!(u.sidecar && u.index == 0);

    policy(&mut after, "memory", true);
    pod.spec.init_containers = vec![after];
    same_policy(&pod, &mut status);
    let a = actions(&pod, &status);
    assert!(a.containers_to_update.is_empty());
    assert_eq!(a.init_containers_to_start, vec![0]);
    assert!(a.containers_to_kill.contains_key(&id("side")) && a.update_pod_resources);
}
