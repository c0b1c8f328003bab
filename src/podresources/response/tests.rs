//! Tests of the PodResources answers over fake pod and device sources: devices per
//! container and NUMA node, terminal pods left out, sidecars, Get, allocatable.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::api::pod::{Container, PodPhase, RestartPolicy};

struct Pods(Vec<Arc<Pod>>);

impl PodSource for Pods {
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.0.clone()
    }
    fn is_active(&self, pod: &Pod) -> bool {
        !crate::api::pod::is_terminal_phase(pod.status.phase.as_ref())
    }
    fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.0
            .iter()
            .find(|p| p.namespace() == namespace && p.name() == name)
            .cloned()
    }
}

/// (pod UID, container) → resource → devices; the allocatable list apart.
#[derive(Default)]
struct Devices {
    held: BTreeMap<(String, String), BTreeMap<String, Vec<DeviceInfo>>>,
    healthy: BTreeMap<String, Vec<DeviceInfo>>,
}

impl DeviceSource for Devices {
    fn container_devices(&self, uid: &str, c: &str) -> BTreeMap<String, Vec<DeviceInfo>> {
        self.held
            .get(&(uid.to_owned(), c.to_owned()))
            .cloned()
            .unwrap_or_default()
    }
    fn allocatable_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>> {
        self.healthy.clone()
    }
}

fn device(id: &str, numa: &[i64]) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        numa_nodes: numa.to_vec(),
    }
}

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        ..Default::default()
    }
}

fn pod(name: &str, uid: &str, phase: PodPhase) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(uid.into());
    p.spec.containers = vec![container("app")];
    p.status.phase = Some(phase);
    p
}

fn summary(devices: &[pb::ContainerDevices]) -> Vec<(String, Vec<String>, Vec<i64>)> {
    devices
        .iter()
        .map(|d| {
            let nodes = d.topology.nodes.iter().map(|n| n.ID).collect();
            (d.resource_name.clone(), d.device_ids.clone(), nodes)
        })
        .collect()
}

#[test]
fn list_reports_each_active_pods_containers_with_their_devices_one_entry_per_device() {
    let pods = Pods(vec![Arc::new(pod("gpu", "u1", PodPhase::Running))]);
    let mut devices = Devices::default();
    devices.held.insert(
        ("u1".into(), "app".into()),
        BTreeMap::from([(
            "vendor.com/gpu".into(),
            vec![device("gpu-0", &[]), device("gpu-1", &[0, 1])],
        )]),
    );
    let answer = list(&pods, &devices);
    assert_eq!(answer.pod_resources.len(), 1);
    let p = &answer.pod_resources[0];
    assert_eq!((p.name.as_str(), p.namespace.as_str()), ("gpu", "default"));
    assert_eq!(p.containers.len(), 1);
    let c = &p.containers[0];
    assert_eq!(c.name, "app");
    let gpu = "vendor.com/gpu".to_owned();
    assert_eq!(
        summary(&c.devices),
        vec![
            (gpu.clone(), vec!["gpu-0".into()], vec![]),
            (gpu.clone(), vec!["gpu-1".into()], vec![0]),
            (gpu, vec!["gpu-1".into()], vec![1]),
        ]
    );
    assert!(
        c.devices[0].topology.is_none(),
        "no topology given, none sent"
    );
    assert!(c.cpu_ids.is_empty() && c.memory.is_empty() && c.dynamic_resources.is_empty());
}

#[test]
fn list_leaves_out_pods_in_a_terminal_phase() {
    let pods = Pods(vec![
        Arc::new(pod("done", "u1", PodPhase::Succeeded)),
        Arc::new(pod("failed", "u2", PodPhase::Failed)),
        Arc::new(pod("pending", "u3", PodPhase::Pending)),
    ]);
    let answer = list(&pods, &Devices::default());
    let names: Vec<&str> = answer
        .pod_resources
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, vec!["pending"]);
}

#[test]
fn sidecars_come_first_and_plain_init_containers_are_left_out() {
    let mut p = pod("side", "u1", PodPhase::Running);
    let mut sidecar = container("proxy");
    sidecar.restart_policy = Some(RestartPolicy::Always);
    p.spec.init_containers = vec![container("setup"), sidecar];
    let pods = Pods(vec![Arc::new(p)]);
    let mut devices = Devices::default();
    devices.held.insert(
        ("u1".into(), "proxy".into()),
        BTreeMap::from([("vendor.com/nic".into(), vec![device("vf-3", &[])])]),
    );
    let answer = list(&pods, &devices);
    let containers = &answer.pod_resources[0].containers;
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["proxy", "app"]);
    assert_eq!(containers[0].devices[0].device_ids, vec!["vf-3".to_owned()]);
    assert!(containers[1].devices.is_empty());
}

#[test]
fn get_answers_one_pod_whatever_its_phase_and_names_an_unknown_one() {
    let pods = Pods(vec![
        Arc::new(pod("a", "u1", PodPhase::Running)),
        Arc::new(pod("b", "u2", PodPhase::Succeeded)),
    ]);
    let req = |name: &str, ns: &str| pb::GetPodResourcesRequest {
        pod_name: name.into(),
        pod_namespace: ns.into(),
        ..Default::default()
    };
    let answer = get(&pods, &Devices::default(), &req("b", "default")).unwrap();
    assert_eq!(answer.pod_resources.name, "b");
    assert_eq!(answer.pod_resources.containers[0].name, "app");
    let err = get(&pods, &Devices::default(), &req("a", "other")).unwrap_err();
    assert_eq!(err.to_string(), "pod a in namespace other not found");
}

#[test]
fn allocatable_lists_every_healthy_device_with_its_numa_node_and_no_cpus() {
    let devices = Devices {
        healthy: BTreeMap::from([
            ("vendor.com/gpu".into(), vec![device("gpu-0", &[1])]),
            ("vendor.com/fpga".into(), vec![device("f0", &[])]),
        ]),
        ..Default::default()
    };
    let answer = allocatable(&devices);
    assert_eq!(
        summary(&answer.devices),
        vec![
            ("vendor.com/fpga".into(), vec!["f0".into()], vec![]),
            ("vendor.com/gpu".into(), vec!["gpu-0".into()], vec![1]),
        ]
    );
    assert!(answer.cpu_ids.is_empty() && answer.memory.is_empty());
}
