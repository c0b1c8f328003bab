//! The answers of the three calls, built from the [`PodSource`] and the
//! [`DeviceSource`] (pure: no lock of ours, no I/O).
//!
//! As upstream v1.36: a pod lists its restartable init containers (sidecars, which
//! keep their devices while the pod runs) first, then its regular containers; plain
//! init containers are left out. Each device is its own `ContainerDevices` entry,
//! one per NUMA node when its plugin gave a topology, without one when it did not.

use std::collections::BTreeMap;

use super::{pb, DeviceSource, PodSource};
use crate::api::pod::{Container, Pod};
use crate::devicemanager::DeviceInfo;

/// `Get` of a pod the kubelet does not know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("pod {name} in namespace {namespace} not found")]
pub struct PodNotFound {
    pub name: String,
    pub namespace: String,
}

/// `List`: every active pod with its containers' devices.
pub fn list(pods: &dyn PodSource, devices: &dyn DeviceSource) -> pb::ListPodResourcesResponse {
    pb::ListPodResourcesResponse {
        pod_resources: pods
            .pods()
            .iter()
            .filter(|pod| pods.is_active(pod))
            .map(|pod| pod_resources(pod, devices))
            .collect(),
        ..Default::default()
    }
}

/// `Get`: one pod by namespace and name.
pub fn get(
    pods: &dyn PodSource,
    devices: &dyn DeviceSource,
    req: &pb::GetPodResourcesRequest,
) -> Result<pb::GetPodResourcesResponse, PodNotFound> {
    let pod = pods
        .find(&req.pod_namespace, &req.pod_name)
        .ok_or_else(|| PodNotFound {
            name: req.pod_name.clone(),
            namespace: req.pod_namespace.clone(),
        })?;
    Ok(pb::GetPodResourcesResponse {
        pod_resources: Some(pod_resources(&pod, devices)).into(),
        ..Default::default()
    })
}

/// `GetAllocatableResources`: every healthy device (no CPUs or memory: litelet has
/// no CPU or memory manager).
pub fn allocatable(devices: &dyn DeviceSource) -> pb::AllocatableResourcesResponse {
    pb::AllocatableResourcesResponse {
        devices: container_devices(devices.allocatable_devices()),
        ..Default::default()
    }
}

/// One pod: its sidecars, then its containers.
pub fn pod_resources(pod: &Pod, devices: &dyn DeviceSource) -> pb::PodResources {
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.is_sidecar());
    pb::PodResources {
        name: pod.name().to_owned(),
        namespace: pod.namespace().to_owned(),
        containers: sidecars
            .chain(pod.spec.containers.iter())
            .map(|c| container_resources(pod, c, devices))
            .collect(),
        ..Default::default()
    }
}

fn container_resources(
    pod: &Pod,
    container: &Container,
    devices: &dyn DeviceSource,
) -> pb::ContainerResources {
    pb::ContainerResources {
        name: container.name.clone(),
        devices: container_devices(devices.container_devices(pod.uid(), &container.name)),
        ..Default::default()
    }
}

/// Upstream's shape: one entry per device and NUMA node.
fn container_devices(by_resource: BTreeMap<String, Vec<DeviceInfo>>) -> Vec<pb::ContainerDevices> {
    let mut out = Vec::new();
    for (resource, devices) in by_resource {
        for device in devices {
            let entry = |topology: Option<pb::TopologyInfo>| pb::ContainerDevices {
                resource_name: resource.clone(),
                device_ids: vec![device.id.clone()],
                topology: topology.into(),
                ..Default::default()
            };
            if device.numa_nodes.is_empty() {
                out.push(entry(None));
                continue;
            }
            for node in &device.numa_nodes {
                out.push(entry(Some(pb::TopologyInfo {
                    nodes: vec![pb::NUMANode {
                        ID: *node,
                        ..Default::default()
                    }],
                    ..Default::default()
                })));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
