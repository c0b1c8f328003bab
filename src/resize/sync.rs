//! The resize part of the kubelet's pod sync (`kubelet::syncer`, pod worker threads):
//! admission before the runtime sync, and a fresh look at the runtime after it.
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

use std::sync::Arc;
use std::time::Instant;

use crate::api::meta::Time;
use crate::api::pod::Pod;
use crate::events::Recorder;
use crate::runtime::cache::PodStatusCache;
use crate::runtime::manager::RuntimeManager;
use crate::runtime::model::PodRuntimeStatus;
use crate::runtime::result::{SyncAction, SyncOutcome};

use super::checkpoint::CheckpointError;
use super::manager::{Actuation, ResizeEvent, ResizeManager};

fn record(recorder: &Recorder, pod: &Pod, events: Vec<ResizeEvent>) {
    for e in events {
        recorder.pod(pod, e.kind, e.reason, e.message);
    }
}

/// Resize admission and the in-progress condition before the runtime sync; returns
/// the pod to sync (at its allocated resources). Fails only when the allocation
/// checkpoint cannot be written.
pub fn before_runtime_sync(
    resize: &ResizeManager,
    recorder: &Recorder,
    pod: &Arc<Pod>,
    runtime: &PodRuntimeStatus,
) -> Result<Arc<Pod>, CheckpointError> {
    let now = Time::now();
    let synced = resize.sync(pod, now)?;
    record(recorder, &synced.pod, synced.events);
    let events = resize.observe(&synced.pod, runtime, Actuation::None, now);
    record(recorder, &synced.pod, events);
    Ok(synced.pod)
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

/// After the runtime sync: when it resized, the pod's fresh runtime status (also put
/// in `cache`), with the conditions updated; `None` when nothing was resized or the
/// runtime could not be read (the next sync catches up).
pub fn after_runtime_sync(
    resize: &ResizeManager,
    recorder: &Recorder,
    runtime: &RuntimeManager,
    cache: Option<&PodStatusCache>,
    pod: &Pod,
    outcome: &SyncOutcome,
) -> Option<PodRuntimeStatus> {
    let actuation = actuation(outcome);
    if actuation == Actuation::None {
        return None;
    }
    let taken = Instant::now();
    let fresh = match runtime.pod_status(pod.uid(), pod.name(), pod.namespace()) {
        Ok(fresh) => fresh,
        Err(e) => {
            log::warn!("pod {}: reading status after resize: {e}", pod.full_name());
            let events = resize.observe(pod, &PodRuntimeStatus::default(), actuation, Time::now());
            record(recorder, pod, events);
            return None;
        }
    };
    if let Some(cache) = cache {
        cache.set(pod.uid(), Ok(fresh.clone()), taken);
    }
    let events = resize.observe(pod, &fresh, actuation, Time::now());
    record(recorder, pod, events);
    Some(fresh)
}
