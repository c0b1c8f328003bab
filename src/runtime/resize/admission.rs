//! Resize admission (upstream `canResizePod`, target API 1.33+): may the node give a
//! running pod the resources its spec now asks for? Pure: the pod as asked, the pod as
//! admitted, the other admitted pods and the node are inputs; the verdict is a value.
//!
//! Called by `ResizeManager::sync` on a pod worker thread, under the admission lock
//! that pod additions (sync loop thread) also take, so the two never admit against a
//! stale view of each other.
//!
//! First match wins:
//! 1. a static pod: Infeasible (its resources change with its manifest);
//! 2. a plain init container's resources changed: Infeasible (it has run to
//!    completion; only sidecars resize);
//! 3. the QoS class would change: Infeasible (the API server refuses such a resize, so
//!    this only guards against a confused or older API server);
//! 4. more CPU or memory than the node's allocatable: Infeasible;
//! 5. does not fit beside the other admitted pods (at their allocated resources):
//!    Deferred, with the admission message; retried when resources free up;
//! 6. otherwise it fits.
//!
//! The node comes in as a [`NodeFit`]: allocatable resources and admission's resource
//! predicate. Pod admission sits above the runtime, so it cannot be called from here;
//! the kubelet implements the trait for admission's `NodeView`.
//!
//! No cgroup driver check: both drivers resize (the systemd driver sets the unit
//! properties, then writes the same cgroupfs files in the same order).

use std::collections::BTreeMap;
use std::fmt;

use crate::api::pod::Pod;
use crate::api::quantity::Quantity;
use crate::cgroups::pod_resources::{cpu_milli, memory_bytes, pod_requests};
use crate::cgroups::qos::{compute_pod_qos, pod_qos, QosClass};

use super::allocation::ContainerAllocation;

/// What resize admission asks of the node.
pub trait NodeFit: Send + Sync {
    /// The node's allocatable resources.
    fn allocatable(&self) -> &BTreeMap<String, Quantity>;
    /// Whether `pod` fits beside `others` (all at their allocated resources).
    fn fits(&self, pod: &Pod, others: &[&Pod]) -> Result<(), DoesNotFit>;
}

/// A pod that does not fit beside the others, with admission's message (the
/// `Deferred` condition's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DoesNotFit {
    pub message: String,
}

/// Why a resize waits (the `PodResizePending` condition's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PendingReason {
    /// Not now, maybe later: it does not fit beside the other pods.
    Deferred,
    /// Never on this node as things are.
    Infeasible,
}

impl PendingReason {
    /// The API's reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::Deferred => "Deferred",
            PendingReason::Infeasible => "Infeasible",
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of resize admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allocate the new resources.
    Fits,
    /// Keep the allocation; report why.
    Pending {
        reason: PendingReason,
        message: String,
    },
}

fn pending(reason: PendingReason, message: impl Into<String>) -> Verdict {
    Verdict::Pending {
        reason,
        message: message.into(),
    }
}

/// What resize admission looks at.
pub struct ResizeRequest<'a> {
    /// The pod as the API asks for it.
    pub desired: &'a Pod,
    /// The same pod at its allocated resources.
    pub allocated: &'a Pod,
    /// Every other admitted pod, at its allocated resources.
    pub others: &'a [&'a Pod],
    pub node: &'a dyn NodeFit,
}

fn qos_name(class: QosClass) -> &'static str {
    match class {
        QosClass::Guaranteed => "Guaranteed",
        QosClass::Burstable => "Burstable",
        QosClass::BestEffort => "BestEffort",
    }
}

/// Decides a resize (see the module documentation for the order of the checks).
pub fn can_resize(request: &ResizeRequest) -> Verdict {
    let (desired, allocated) = (request.desired, request.allocated);
    if desired.is_static() {
        return pending(
            PendingReason::Infeasible,
            "In-place resize of static pods is not supported",
        );
    }
    for (asked, had) in desired
        .spec
        .init_containers
        .iter()
        .zip(&allocated.spec.init_containers)
    {
        if !asked.is_sidecar()
            && !ContainerAllocation::of(asked).same(&ContainerAllocation::of(had))
        {
            return pending(
                PendingReason::Infeasible,
                format!(
                    "In-place resize of init container {:?} is not supported: only sidecars resize",
                    asked.name
                ),
            );
        }
    }
    let (from, to) = (pod_qos(allocated), compute_pod_qos(desired));
    if from != to {
        return pending(
            PendingReason::Infeasible,
            format!(
                "Resize would change the pod's QoS class from {} to {}, which a running pod cannot do",
                qos_name(from),
                qos_name(to)
            ),
        );
    }
    let requests = pod_requests(desired);
    let capacity = |name: &str| request.node.allocatable().get(name).cloned();
    let memory = memory_bytes(&requests);
    if let Some(cap) = capacity("memory").filter(|c| memory > c.value()) {
        return pending(
            PendingReason::Infeasible,
            format!(
                "Node didn't have enough capacity: memory, requested: {memory}, capacity: {}",
                cap.value()
            ),
        );
    }
    let cpu = cpu_milli(&requests);
    if let Some(cap) = capacity("cpu").filter(|c| cpu > c.milli_value()) {
        return pending(
            PendingReason::Infeasible,
            format!(
                "Node didn't have enough capacity: cpu, requested: {}, capacity: {}",
                Quantity::from_milli(cpu, Default::default()),
                cap
            ),
        );
    }
    match request.node.fits(desired, request.others) {
        Ok(()) => Verdict::Fits,
        Err(DoesNotFit { message }) => pending(PendingReason::Deferred, message),
    }
}

#[cfg(test)]
mod tests;
