//! Carrying out a resize (SyncPod step 9, upstream `doPodResizeAction`): the thin shell
//! around [`plan_resize`]. Reads the pod cgroup (settings and memory usage) and the
//! usage of containers whose memory limit goes down, plans, then performs each step in
//! order: pod cgroup writes through `PodCgroupManager`, container updates through CRI
//! `UpdateContainerResources`. The first failure stops the rest; later syncs plan
//! again from what the kernel and the runtime then report, so a half-applied resize
//! simply continues.
//!
//! Runs on the pod's worker thread, from `RuntimeManager::sync_pod`. No locks held, no
//! channels.

use crate::api::pod::Pod;
use crate::cgroups::{CgroupError, PodCgroupManager};
use crate::cri::{pb, CriError, RuntimeClient};
use crate::runtime::swap::{container_swap, SwapSettings};

use super::compute::{ResizeResource, ResizeUpdates};
use super::plan::{plan_resize, PlanError, PlanInput, PodCgroupView, Step};
use super::values::to_cri;

/// A failed resize, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("reading pod cgroup of pod {pod}: {source}")]
    ReadPodCgroup { pod: String, source: CgroupError },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("writing pod cgroup of pod {pod} ({what}): {source}")]
    WritePodCgroup {
        pod: String,
        what: String,
        source: CgroupError,
    },
    #[error("updating resources of container {name} ({id}): {source}")]
    UpdateContainer {
        name: String,
        id: String,
        source: CriError,
    },
}

/// The steps that were carried out (none: nothing differed).
pub type Applied = Vec<Step>;

fn pod_view(
    cgroups: Option<&PodCgroupManager>,
    pod: &Pod,
) -> Result<Option<PodCgroupView>, ApplyError> {
    let Some(cgroups) = cgroups else {
        return Ok(None);
    };
    let read_error = |source| ApplyError::ReadPodCgroup {
        pod: pod.full_name(),
        source,
    };
    let Some(found) = cgroups.find_pod_of(pod).map_err(read_error)? else {
        log::warn!(
            "pod {} ({}) has no pod cgroup; resizing its containers only",
            pod.full_name(),
            pod.uid()
        );
        return Ok(None);
    };
    let current = cgroups.read_found(&found).map_err(read_error)?;
    let memory_usage = cgroups.memory_usage_found(&found).map_err(read_error)?;
    Ok(Some(PodCgroupView {
        current: cgroups.normalize(&current),
        desired: cgroups.normalize(&cgroups.pod_resources(pod)),
        memory_usage,
    }))
}

/// Plans and performs the resize of `pod` (at its allocated resources) that `updates`
/// (the pod actions' `containers_to_update`) asks for, and brings the pod cgroup to
/// the allocated values. `cgroups` is `None` when litelet does not manage pod
/// cgroups. Each container's swap follows its new memory request and limit
/// (`runtime/swap.rs`), as at creation.
pub fn resize_pod(
    runtime: &RuntimeClient,
    cgroups: Option<&PodCgroupManager>,
    pod: &Pod,
    updates: &ResizeUpdates,
    swap: &SwapSettings,
) -> Result<Applied, ApplyError> {
    let mut input = PlanInput {
        updates: Some(updates),
        pod: pod_view(cgroups, pod)?,
        ..PlanInput::default()
    };
    if let Some(cgroups) = cgroups {
        let lowered = updates
            .get(&ResizeResource::Memory)
            .into_iter()
            .flatten()
            .filter(|u| u.desired.memory_limit < u.current.memory_limit);
        for u in lowered {
            match cgroups.container_memory_usage(pod.uid(), &u.container_id) {
                Ok(Some(usage)) => {
                    input.container_usage.insert(u.container_id.clone(), usage);
                }
                Ok(None) => {}
                Err(e) => log::debug!("memory usage of container {}: {e}", u.name),
            }
        }
    }
    let steps = plan_resize(&input)?;
    for step in &steps {
        match step {
            Step::Pod(resources) => {
                // A pod step exists only with a pod cgroup view, so with a manager.
                let Some(cgroups) = cgroups else { continue };
                cgroups
                    .update_pod_resources(pod.uid(), resources)
                    .map_err(|source| ApplyError::WritePodCgroup {
                        pod: pod.full_name(),
                        what: format!("{resources:?}"),
                        source,
                    })?;
            }
            Step::Container {
                name,
                id,
                values,
                previous,
            } => {
                let mut linux = to_cri(values, previous);
                let spec = pod.spec.containers.iter().find(|c| &c.name == name);
                if let Some(container) = spec {
                    crate::runtime::swap::apply(container_swap(swap, pod, container), &mut linux);
                }
                runtime
                    .update_container_resources(&pb::UpdateContainerResourcesRequest {
                        container_id: id.clone(),
                        linux: protobuf::MessageField::some(linux),
                        ..Default::default()
                    })
                    .map_err(|source| ApplyError::UpdateContainer {
                        name: name.clone(),
                        id: id.clone(),
                        source,
                    })?;
            }
        }
        log::debug!("pod {} resize: {step:?}", pod.full_name());
    }
    if !steps.is_empty() {
        log::info!(
            "pod {} ({}): resized in place ({} writes)",
            pod.full_name(),
            pod.uid(),
            steps.len()
        );
    }
    Ok(steps)
}
