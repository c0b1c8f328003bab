//! Which desired pods are active (upstream filterOutInactivePods), shared by the
//! sync loop's admission and by readers on other threads (the PodResources API)
//! through [`PodsView`].

use std::sync::Arc;

use super::snapshot::PodSnapshot;
use crate::api::pod::{is_terminal_phase, Pod};
use crate::pod_workers::PodWorkers;
use crate::status::manager::StatusManager;

/// Not terminated by its worker, and not in a terminal phase (its own or the one
/// the status manager cached) unless its termination is still under way.
pub fn is_active(pod: &Pod, workers: &PodWorkers, status: &StatusManager) -> bool {
    if workers.is_pod_known_terminated(pod.uid()) {
        return false;
    }
    let terminal = is_terminal_phase(pod.status.phase.as_ref())
        || is_terminal_phase(status.cached_phase(pod.uid()).as_ref());
    !terminal || workers.is_pod_termination_requested(pod.uid())
}

/// The published desired pods with what decides their activity; cheap to clone.
#[derive(Clone)]
pub struct PodsView {
    pub(super) snapshot: PodSnapshot,
    pub(super) workers: PodWorkers,
    pub(super) status: StatusManager,
}

impl crate::podresources::PodSource for PodsView {
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.snapshot.pods().as_ref().clone()
    }

    fn is_active(&self, pod: &Pod) -> bool {
        is_active(pod, &self.workers, &self.status)
    }

    fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.snapshot.find(namespace, name)
    }
}
