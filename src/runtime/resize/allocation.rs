//! Allocated resources: the requests and limits the node admitted for each container
//! of a pod (upstream `allocation/state`). Pure data and functions.
//!
//! The allocation, not the spec, is what litelet runs a pod with: a resize the API
//! accepted but the node has not (Deferred, Infeasible) leaves the allocation, and so
//! the containers, as they are. [`allocated_pod`] gives the pod with its spec resources
//! replaced by the allocation; everything downstream (admission of other pods, the pod
//! cgroup, container creation, `compute_pod_actions`, `allocatedResources` in the
//! status) reads that pod.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::pod::{Container, Pod, ResourceRequirements};
use crate::api::quantity::Quantity;

/// Amounts by resource name.
pub type ResourceList = BTreeMap<String, Quantity>;

/// What one container was admitted with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerAllocation {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceList,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: ResourceList,
}

/// What a pod's containers (regular and init) were admitted with, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodAllocation {
    pub containers: BTreeMap<String, ContainerAllocation>,
}

fn same_amounts(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, q)| b.get(k).is_some_and(|o| o.cmp(q).is_eq()))
}

impl ContainerAllocation {
    /// The container's spec resources (claims are not resources to allocate).
    pub fn of(container: &Container) -> ContainerAllocation {
        let r = container.resources.clone().unwrap_or_default();
        ContainerAllocation {
            requests: r.requests,
            limits: r.limits,
        }
    }

    /// Equal amounts, whatever their spelling (`0.5` and `500m`).
    pub fn same(&self, other: &ContainerAllocation) -> bool {
        same_amounts(&self.requests, &other.requests) && same_amounts(&self.limits, &other.limits)
    }
}

impl PodAllocation {
    /// The pod's spec resources, as allocated when it is admitted.
    pub fn of(pod: &Pod) -> PodAllocation {
        let containers = pod
            .spec
            .containers
            .iter()
            .chain(&pod.spec.init_containers)
            .map(|c| (c.name.clone(), ContainerAllocation::of(c)))
            .collect();
        PodAllocation { containers }
    }

    /// Equal amounts for the same containers.
    pub fn same(&self, other: &PodAllocation) -> bool {
        self.containers.len() == other.containers.len()
            && self
                .containers
                .iter()
                .all(|(name, a)| other.containers.get(name).is_some_and(|b| a.same(b)))
    }

    /// Whether the pod's spec asks for something else than this allocation: a resize
    /// to admit (or to refuse).
    pub fn differs_from(&self, pod: &Pod) -> bool {
        !self.same(&PodAllocation::of(pod))
    }
}

/// [`allocated_pod`] for a shared pod: the same allocation when every container
/// already runs at its allocation (every pod not being resized), a new version only
/// when something differs.
pub fn allocated_version(pod: &Arc<Pod>, allocation: &PodAllocation) -> Arc<Pod> {
    let containers = pod.spec.containers.iter().chain(&pod.spec.init_containers);
    let unchanged = containers.into_iter().all(|c| {
        allocation
            .containers
            .get(&c.name)
            .is_none_or(|alloc| ContainerAllocation::of(c).same(alloc))
    });
    if unchanged {
        Arc::clone(pod)
    } else {
        Arc::new(allocated_pod(pod, allocation))
    }
}

/// `pod` with each container's requests and limits replaced by the allocation (claims
/// kept); containers the allocation does not know keep their spec. A container whose
/// allocation equals its spec is left untouched, so its spec hash does not move.
pub fn allocated_pod(pod: &Pod, allocation: &PodAllocation) -> Pod {
    let mut out = pod.clone();
    let containers = out
        .spec
        .containers
        .iter_mut()
        .chain(out.spec.init_containers.iter_mut());
    for c in containers {
        let Some(alloc) = allocation.containers.get(&c.name) else {
            continue;
        };
        if ContainerAllocation::of(c).same(alloc) {
            continue;
        }
        let claims = c
            .resources
            .as_ref()
            .map(|r| r.claims.clone())
            .unwrap_or_default();
        let empty = alloc.requests.is_empty() && alloc.limits.is_empty() && claims.is_empty();
        c.resources = (!empty).then(|| ResourceRequirements {
            limits: alloc.limits.clone(),
            requests: alloc.requests.clone(),
            claims,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::{container, pod};

    #[test]
    fn spelling_does_not_make_a_resize() {
        let a = pod(
            vec![container("a", &[("cpu", "0.5")], &[("memory", "1Gi")])],
            vec![],
        );
        let b = pod(
            vec![container("a", &[("cpu", "500m")], &[("memory", "1024Mi")])],
            vec![],
        );
        assert!(!PodAllocation::of(&a).differs_from(&b));
        let c = pod(
            vec![container("a", &[("cpu", "600m")], &[("memory", "1Gi")])],
            vec![],
        );
        assert!(PodAllocation::of(&a).differs_from(&c));
    }

    #[test]
    fn allocated_pod_runs_the_admitted_resources() {
        let admitted = pod(
            vec![
                container("a", &[("cpu", "100m")], &[("memory", "64Mi")]),
                container("b", &[("cpu", "100m")], &[]),
            ],
            vec![],
        );
        let allocation = PodAllocation::of(&admitted);
        let mut resized = admitted.clone();
        resized.spec.containers[0] = container("a", &[("cpu", "200m")], &[("memory", "128Mi")]);
        let view = allocated_pod(&resized, &allocation);
        assert_eq!(view.spec.containers, admitted.spec.containers);
        // Everything else is the new pod's.
        resized.metadata.generation = Some(2);
        assert_eq!(
            allocated_pod(&resized, &allocation).metadata.generation,
            Some(2)
        );
        // A container without any resources stays without.
        let none = pod(vec![container("a", &[], &[])], vec![]);
        let view = allocated_pod(&resized, &PodAllocation::of(&none));
        assert_eq!(view.spec.containers[0].resources, None);
    }
}
