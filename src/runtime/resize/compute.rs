//! What in-place resize asks of one running container (upstream
//! `computePodResizeAction`), and whether a pod's resize is still in progress. Pure:
//! the allocated container spec and the runtime's view in, a decision out.
//!
//! Called from `runtime::actions` (its resize seam) on the pod worker thread for every
//! running regular container and started sidecar of a pod litelet resizes; it returns
//! its decision and never sees the rest of the pod's actions.
//!
//! Decisions, and where they differ from upstream on purpose:
//! - the current values are the runtime's (CRI `ContainerStatus.resources`); a runtime
//!   that reports none leaves the container alone (an unknown value is never "wrong");
//! - a container without limits is still resized: its CPU request (shares) changes in
//!   place (upstream skipped every container with no limits, kubernetes#126388);
//! - a change of the memory *request* alone needs no write and is never "in progress"
//!   (kubernetes#125559);
//! - values are compared in cgroup units (see `values`), so a resize whose Kubernetes
//!   amounts round to the same setting is done at once (kubernetes#128680, #128769);
//! - restart policy: a change of memory under `memory: RestartContainer`, or of the CPU
//!   limit or request under `cpu: RestartContainer`, restarts the container; no policy
//!   means `NotRequired`;
//! - order within a resource: decreases first, the latest found at the front, then
//!   increases in spec order, so the pod's total never goes up before something else
//!   went down.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::api::pod::{Container, Pod, ResizeRestartPolicy, RESOURCE_CPU, RESOURCE_MEMORY};
use crate::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};

use super::values::{
    container_values, cpu_limit_order, current_values, differ, same_cpu_limit, ResourceValues,
};

/// A resource the in-place resize path changes on a running container. Ordered so
/// that memory comes first: it is applied before CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResizeResource {
    Memory,
    Cpu,
}

/// One running container to resize in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerToUpdate {
    /// Index into `spec.containers`, or into `spec.initContainers` for a sidecar.
    pub index: usize,
    /// True for a restartable init container (sidecar).
    pub sidecar: bool,
    pub name: String,
    pub container_id: String,
    /// What the allocated spec asks for.
    pub desired: ResourceValues,
    /// What the runtime reports the container has now.
    pub current: ResourceValues,
}

/// In-place resizes per resource, in the order to apply them: decreases first (latest
/// found first), then increases (in spec order).
pub type ResizeUpdates = BTreeMap<ResizeResource, Vec<ContainerToUpdate>>;

/// What in-place resize asks of one running container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerResize {
    /// Keep the container running (resized in place, or nothing to do).
    Keep,
    /// The resize needs a restart: kill the container with this message, update the
    /// pod cgroup, start it again.
    Restart { message: String },
}

fn restart_on(container: &Container, resource: &str) -> bool {
    container
        .resize_policy
        .iter()
        .find(|p| p.resource_name == resource)
        .is_some_and(|p| p.restart_policy == ResizeRestartPolicy::RestartContainer)
}

/// The desired and current values of a running container whose runtime reports its
/// resources; `None` otherwise (nothing can be compared).
fn values(container: &Container, st: &ContainerStatus) -> Option<(ResourceValues, ResourceValues)> {
    if st.state != ContainerState::Running {
        return None;
    }
    let reported = st.resources.as_ref()?;
    let desired = container_values(container);
    let current = current_values(reported, &desired);
    Some((desired, current))
}

fn mark(
    updates: &mut ResizeUpdates,
    resource: ResizeResource,
    update: ContainerToUpdate,
    order: Ordering,
) {
    let list = updates.entry(resource).or_default();
    if order == Ordering::Less {
        list.insert(0, update);
    } else {
        list.push(update);
    }
}

/// Upstream `computePodResizeAction` for one running container. `target` is the index into the
/// containers (or, for a sidecar, the init containers) and whether it is a sidecar.
/// An in-place change is queued into `updates`; a change that needs a restart is
/// returned for the caller to queue the kill and the start.
pub fn container_resize(
    container: &Container,
    target: (usize, bool),
    st: &ContainerStatus,
    updates: &mut ResizeUpdates,
) -> ContainerResize {
    let Some((desired, current)) = values(container, st) else {
        return ContainerResize::Keep;
    };
    if !differ(&desired, &current) {
        return ContainerResize::Keep;
    }
    let memory = desired.memory_limit != current.memory_limit;
    let cpu_limit = !same_cpu_limit(&desired, &current);
    let cpu_request = desired.cpu_shares != current.cpu_shares;
    let restart = (memory && restart_on(container, RESOURCE_MEMORY))
        || ((cpu_limit || cpu_request) && restart_on(container, RESOURCE_CPU));
    if restart {
        return ContainerResize::Restart {
            message: format!("Container {} resize requires restart", container.name),
        };
    }
    let update = ContainerToUpdate {
        index: target.0,
        sidecar: target.1,
        name: container.name.clone(),
        container_id: st.id.clone(),
        desired,
        current,
    };
    if memory {
        let order = desired.memory_limit.cmp(&current.memory_limit);
        mark(updates, ResizeResource::Memory, update.clone(), order);
    }
    if cpu_limit {
        mark(
            updates,
            ResizeResource::Cpu,
            update,
            cpu_limit_order(&desired, &current),
        );
    } else if cpu_request {
        let order = desired.cpu_shares.cmp(&current.cpu_shares);
        mark(updates, ResizeResource::Cpu, update, order);
    }
    ContainerResize::Keep
}

/// The containers resize looks at: regular containers and sidecars.
fn resizable_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .containers
        .iter()
        .chain(pod.spec.init_containers.iter().filter(|c| c.is_sidecar()))
}

/// Names of running containers whose runtime values differ from the allocated spec:
/// a resize still being carried out. Empty when the pod matches its allocation.
pub fn containers_not_resized(pod: &Pod, runtime: &PodRuntimeStatus) -> Vec<String> {
    resizable_containers(pod)
        .filter(|c| {
            runtime
                .newest(&c.name)
                .and_then(|st| values(c, st))
                .is_some_and(|(desired, current)| differ(&desired, &current))
        })
        .map(|c| c.name.clone())
        .collect()
}

#[cfg(test)]
mod tests;
