//! [`PodResize`]: resize's part in a pod worker's sync (`kubelet::syncer`), one method
//! per step — admission before the runtime sync ([`PodResize::admit`]), the status's
//! view ([`PodResize::for_status`]), a fresh look at the runtime after it
//! ([`PodResize::after_runtime_sync`]) and forgetting a terminated pod
//! ([`PodResize::forget`]).
//!
//! Before: [`ResizeManager::sync`] admits (or defers, or refuses) a pending resize and
//! gives the pod to run at its allocated resources; `observe` sets
//! `PodResizeInProgress` from the runtime's current view. After: when the runtime sync
//! carried out a resize (SyncPod step 9, successful or not), the pod's runtime status
//! is read again, stored in the PLEG's cache (the PLEG only re-reads pods whose
//! containers change state, and a resize changes none: without this the next sync
//! would see the old values and undo the status, kubernetes#128993), and handed back
//! so the caller can report the new `resources` and conditions at once instead of at
//! the next periodic sync.
//!
//! Threads: pod workers. No channel; the manager's locks are taken briefly.

use std::sync::Arc;
use std::time::Instant;

use crate::api::meta::Time;
use crate::api::pod::{Pod, PodCondition};
use crate::events::Recorder;
use crate::runtime::cache::PodStatusCache;
use crate::runtime::model::PodRuntimeStatus;
use crate::runtime::result::{SyncAction, SyncOutcome};

use super::checkpoint::CheckpointError;
use super::manager::{Actuation, ResizeEvent, ResizeManager};

/// Resize's steps in a pod worker's sync. Cheap to clone.
#[derive(Clone)]
pub struct PodResize {
    manager: Arc<ResizeManager>,
    /// The PLEG's status cache, refreshed after a resize.
    cache: PodStatusCache,
    recorder: Recorder,
}

impl PodResize {
    pub fn new(manager: Arc<ResizeManager>, cache: PodStatusCache, recorder: Recorder) -> Self {
        PodResize {
            manager,
            cache,
            recorder,
        }
    }

    fn record(&self, pod: &Pod, events: Vec<ResizeEvent>) {
        for e in events {
            self.recorder.pod(pod, e.kind, e.reason, e.message);
        }
    }

    /// Resize admission and the in-progress condition before the runtime sync; returns
    /// the pod to sync (at its allocated resources). Fails only when the allocation
    /// checkpoint cannot be written.
    pub fn admit(
        &self,
        pod: &Arc<Pod>,
        runtime: &PodRuntimeStatus,
    ) -> Result<Arc<Pod>, CheckpointError> {
        let now = Time::now();
        let synced = self.manager.sync(pod, now)?;
        self.record(&synced.pod, synced.events);
        let events = self
            .manager
            .observe(&synced.pod, runtime, Actuation::None, now);
        self.record(&synced.pod, events);
        Ok(synced.pod)
    }

    /// What the pod's status reports: the pod at its allocated resources
    /// (`allocatedResources`) and, while it is `active` (not terminating), its resize
    /// conditions.
    pub fn for_status(&self, pod: &Arc<Pod>, active: bool) -> (Arc<Pod>, Vec<PodCondition>) {
        let allocated = self.manager.allocated_pod(pod);
        let conditions = if active {
            self.manager.conditions(pod.uid())
        } else {
            Vec::new()
        };
        (allocated, conditions)
    }

    /// After the runtime sync: when it resized, the pod's fresh runtime status (read
    /// with `read_status`, also put in the PLEG cache), with the conditions updated;
    /// `None` when nothing was resized or the runtime could not be read (the next sync
    /// catches up). The read is handed in so that resize stays below the runtime
    /// manager, which calls resize's decisions.
    pub fn after_runtime_sync<E: std::fmt::Display>(
        &self,
        pod: &Pod,
        outcome: &SyncOutcome,
        read_status: impl FnOnce() -> Result<PodRuntimeStatus, E>,
    ) -> Option<PodRuntimeStatus> {
        let actuation = actuation(outcome);
        if actuation == Actuation::None {
            return None;
        }
        let taken = Instant::now();
        let fresh = match read_status() {
            Ok(fresh) => fresh,
            Err(e) => {
                log::warn!("pod {}: reading status after resize: {e}", pod.full_name());
                let events =
                    self.manager
                        .observe(pod, &PodRuntimeStatus::default(), actuation, Time::now());
                self.record(pod, events);
                return None;
            }
        };
        self.cache.set(pod.uid(), Ok(fresh.clone()), taken);
        let events = self.manager.observe(pod, &fresh, actuation, Time::now());
        self.record(pod, events);
        Some(fresh)
    }

    /// A terminated pod's resources are free again: Deferred resizes may fit now.
    pub fn forget(&self, pod: &Pod) {
        if let Err(err) = self.manager.remove_pod(pod.uid()) {
            log::warn!("pod {}: {err}", pod.full_name());
        }
    }
}

/// How the runtime sync's resize step went, if it had one.
pub fn actuation(outcome: &SyncOutcome) -> Actuation {
    let step = outcome
        .steps
        .iter()
        .rev()
        .find(|s| s.action == SyncAction::ResizeContainers);
    match step {
        None => Actuation::None,
        Some(s) => match &s.failure {
            None => Actuation::Applied,
            Some(f) => Actuation::Failed(f.message.clone()),
        },
    }
}
