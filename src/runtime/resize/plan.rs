//! The order of an in-place resize (upstream `doPodResizeAction` and
//! `updatePodContainerResources`): a pure plan of pod cgroup
//! writes and CRI `UpdateContainerResources` calls, which `apply` carries out in order.
//!
//! Rules:
//! - memory first, then CPU;
//! - per resource, a pod cgroup limit that goes up is written before the containers,
//!   one that goes down after them, so no container's limit is ever above its pod's
//!   (the v1 kernel even refuses a child CFS quota above its parent's); containers go
//!   in the order `compute` chose (decreases first);
//! - each container update carries every value: the resource being changed at its
//!   desired value and the other at the value applied last (after a memory update in
//!   the same plan, the new memory), never a stale one;
//! - a pod memory limit below the pod's current usage, or a container memory limit
//!   below that container's usage, stops the plan before anything is written;
//! - the pod cgroup is brought to the allocated values even when no running container
//!   changes (a container restarting for its resize, or restarting on its own, must
//!   start under the new pod limits), and not at all when the pod has no pod cgroup
//!   (cgroups disabled): the containers are still updated (kubernetes#137993 crashed
//!   there);
//! - a pod limit that is not declared by every container (Burstable pods) is no limit:
//!   the pod cgroup keeps or gets "unlimited" and only the containers change (upstream
//!   failed the whole CPU path there, kubernetes#126388, #128977).
//!
//! Pod values are compared after `PodCgroupManager::normalize` (whole pages, v2
//! weights), so a value the kernel rounds is not written again on every sync.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::compute::{ContainerToUpdate, ResizeResource, ResizeUpdates};
use super::values::{cpu_limit_order, ResourceValues};
use crate::cgroups::{CgroupResources, Limit};

/// The pod cgroup as resize sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroupView {
    /// Read back from the kernel (normalised).
    pub current: CgroupResources,
    /// What the allocated pod needs (`resource_config_for_pod`, normalised).
    pub desired: CgroupResources,
    /// Memory in use by the pod, in bytes.
    pub memory_usage: u64,
}

/// Everything a plan is made from.
#[derive(Clone, Debug, Default)]
pub struct PlanInput<'a> {
    /// From `compute_pod_actions`: per resource, the containers to update, in order.
    pub updates: Option<&'a ResizeUpdates>,
    /// The pod cgroup, when the pod has one.
    pub pod: Option<PodCgroupView>,
    /// Memory in use by containers (by runtime ID), where known.
    pub container_usage: BTreeMap<String, u64>,
}

/// One write of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write these (and only these) settings to the pod cgroup.
    Pod(CgroupResources),
    /// `UpdateContainerResources` with these values; `previous` is what the container
    /// had before this step.
    Container {
        name: String,
        id: String,
        values: ResourceValues,
        previous: ResourceValues,
    },
}

/// Why no plan can be carried out now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Lowering the memory limit of `what` below what it uses would get it OOM-killed
    /// (v2) or fail in the kernel (v1).
    #[error("aborting attempt to set {what} memory limit to {limit} bytes, below its current usage of {usage} bytes")]
    MemoryBelowUsage {
        what: String,
        limit: u64,
        usage: u64,
    },
}

fn list(input: &PlanInput, resource: ResizeResource) -> Vec<ContainerToUpdate> {
    input
        .updates
        .and_then(|u| u.get(&resource))
        .cloned()
        .unwrap_or_default()
}

/// (current, desired) of a pod limit; undeclared means unlimited.
fn pod_limit(current: Option<Limit>, desired: Option<Limit>) -> (Limit, Limit) {
    (
        current.unwrap_or(Limit::Unlimited),
        desired.unwrap_or(Limit::Unlimited),
    )
}

/// Pod CPU limit as (quota, period), compared by rate like containers' limits.
fn quota_order(new: (Limit, u64), cur: (Limit, u64)) -> Ordering {
    let as_values = |(quota, period): (Limit, u64)| ResourceValues {
        cpu_shares: 0,
        cpu_quota: quota,
        cpu_period: period,
        memory_limit: Limit::Unlimited,
    };
    cpu_limit_order(&as_values(new), &as_values(cur))
}

/// Builds the ordered writes of one resize.
pub fn plan_resize(input: &PlanInput) -> Result<Vec<Step>, PlanError> {
    let memory = list(input, ResizeResource::Memory);
    let cpu = list(input, ResizeResource::Cpu);
    let mut applied: BTreeMap<String, ResourceValues> = BTreeMap::new();
    for u in memory.iter().chain(&cpu) {
        applied.entry(u.container_id.clone()).or_insert(u.current);
    }
    let mut steps = Vec::new();
    let mut container_step =
        |u: &ContainerToUpdate, resource: ResizeResource, steps: &mut Vec<Step>| {
            let previous = applied.get(&u.container_id).copied().unwrap_or(u.current);
            let mut values = previous;
            match resource {
                ResizeResource::Memory => values.memory_limit = u.desired.memory_limit,
                ResizeResource::Cpu => {
                    values.cpu_shares = u.desired.cpu_shares;
                    values.cpu_quota = u.desired.cpu_quota;
                    values.cpu_period = u.desired.cpu_period;
                }
            }
            applied.insert(u.container_id.clone(), values);
            steps.push(Step::Container {
                name: u.name.clone(),
                id: u.container_id.clone(),
                values,
                previous,
            });
        };

    // Memory.
    let pod_memory = input
        .pod
        .as_ref()
        .map(|p| pod_limit(p.current.memory_limit, p.desired.memory_limit))
        .filter(|(cur, new)| cur != new);
    if let (Some(pod), Some((cur, Limit::Value(new)))) = (&input.pod, pod_memory) {
        if Limit::Value(new) < cur && pod.memory_usage >= new {
            return Err(PlanError::MemoryBelowUsage {
                what: "pod".into(),
                limit: new,
                usage: pod.memory_usage,
            });
        }
    }
    for u in &memory {
        if let (Limit::Value(new), Some(usage)) = (
            u.desired.memory_limit,
            input.container_usage.get(&u.container_id),
        ) {
            if u.desired.memory_limit < u.current.memory_limit && *usage >= new {
                return Err(PlanError::MemoryBelowUsage {
                    what: format!("container {}", u.name),
                    limit: new,
                    usage: *usage,
                });
            }
        }
    }
    let memory_write = |limit: Limit| {
        Step::Pod(CgroupResources {
            memory_limit: Some(limit),
            ..Default::default()
        })
    };
    if let Some((_, new)) = pod_memory.filter(|(cur, new)| new > cur) {
        steps.push(memory_write(new));
    }
    for u in &memory {
        container_step(u, ResizeResource::Memory, &mut steps);
    }
    if let Some((_, new)) = pod_memory.filter(|(cur, new)| new < cur) {
        steps.push(memory_write(new));
    }

    // CPU: the quota (with its period) and the shares, each raised before and lowered
    // after the containers.
    let mut raise = CgroupResources::default();
    let mut lower = CgroupResources::default();
    if let Some(pod) = &input.pod {
        let (cur_quota, new_quota) = pod_limit(pod.current.cpu_quota, pod.desired.cpu_quota);
        let cur_period = pod.current.cpu_period.unwrap_or(0);
        let new_period = pod.desired.cpu_period.unwrap_or(cur_period);
        let quota_same = match (cur_quota, new_quota) {
            (Limit::Unlimited, Limit::Unlimited) => true,
            (a, b) => a == b && cur_period == new_period,
        };
        if !quota_same {
            let target = if quota_order((new_quota, new_period), (cur_quota, cur_period))
                == Ordering::Less
            {
                &mut lower
            } else {
                &mut raise
            };
            target.cpu_quota = Some(new_quota);
            target.cpu_period = Some(new_period);
        }
        if let (Some(cur), Some(new)) = (pod.current.cpu_shares, pod.desired.cpu_shares) {
            match new.cmp(&cur) {
                Ordering::Greater => raise.cpu_shares = Some(new),
                Ordering::Less => lower.cpu_shares = Some(new),
                Ordering::Equal => {}
            }
        }
    }
    if !raise.is_empty() {
        steps.push(Step::Pod(raise));
    }
    for u in &cpu {
        container_step(u, ResizeResource::Cpu, &mut steps);
    }
    if !lower.is_empty() {
        steps.push(Step::Pod(lower));
    }
    Ok(steps)
}

#[cfg(test)]
mod tests;
