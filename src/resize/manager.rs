//! `ResizeManager`: the allocation of every admitted pod, resize admission (upstream
//! `handlePodResourcesResize`) and the two resize conditions of each pod.
//!
//! Threads: the sync loop thread admits new pods ([`ResizeManager::admission_lock`],
//! [`ResizeManager::allocated_pod`], [`ResizeManager::note_admitted`] per pod, then
//! [`ResizeManager::store_allocations`] once per batch), asks which
//! Deferred resizes to retry ([`ResizeManager::take_retries`]) and prunes forgotten
//! pods ([`ResizeManager::retain`]); pod worker threads admit resizes
//! ([`ResizeManager::sync`]), report how actuation went ([`ResizeManager::observe`]),
//! read the conditions for the status and forget terminated pods. No channels.
//!
//! Locks: `admission` serialises whole admissions (a batch of pod additions, one resize
//! admission) so each sees the other's outcome; `state` guards the data, is held only
//! briefly (and across the checkpoint write, so writes keep their order), and is
//! always taken after `admission`, never before.
//!
//! Invariants: the checkpoint holds the allocation of every admitted pod before the
//! caller acts on it; a pod's allocation changes only through admission; conditions
//! live only in memory (after a restart `sync` and `observe` rebuild them from the
//! spec, the allocation and the runtime); events are returned, not sent, so callers
//! record them with their own recorder.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::admission::NodeView;
use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{Pod, PodCondition, PodPhase, POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING};
use crate::cgroups::pod_resources::pod_requests;
use crate::events::EventType;
use crate::runtime::model::PodRuntimeStatus;

use super::admission::{can_resize, PendingReason, ResizeRequest, Verdict};
use super::allocation::{allocated_version, ContainerAllocation, PodAllocation};
use super::checkpoint::{Allocations, Checkpoint, CheckpointError};
use crate::runtime::resize::compute::containers_not_resized;

/// Event reasons (upstream's names).
pub const RESIZE_STARTED: &str = "ResizeStarted";
pub const RESIZE_COMPLETED: &str = "ResizeCompleted";
pub const RESIZE_DEFERRED: &str = "ResizeDeferred";
pub const RESIZE_INFEASIBLE: &str = "ResizeInfeasible";
pub const RESIZE_ERROR: &str = "ResizeError";
/// Applying a container's resources failed while no resize was in progress (the
/// runtime reported other values than the pod asks for): not worded as a resize.
pub const FAILED_UPDATE_RESOURCES: &str = "FailedUpdateResources";
/// The `PodResizeInProgress` reason while the last attempt failed.
pub const REASON_ERROR: &str = "Error";

/// An event for the caller to record on the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResizeEvent {
    pub kind: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// What a resize needs from the node configuration.
#[derive(Clone, Debug, Default)]
pub struct ResizeConfig {
    /// The node's allocatable resources (and what admission checks).
    pub node: NodeView,
}

/// How the last actuation (SyncPod step 9) went, as `observe` is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actuation {
    /// Nothing was attempted in this sync (or it is not known yet).
    None,
    /// Every planned write succeeded.
    Applied,
    /// A write failed, or the plan was refused; the message says why.
    Failed(String),
}

#[derive(Default)]
struct Entry {
    allocation: Option<PodAllocation>,
    /// The latest allocated view of the pod, for other pods' admission.
    pod: Option<Arc<Pod>>,
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
    /// The last actuation error, until an actuation succeeds.
    error: Option<String>,
    /// Generation of the last accepted resize.
    accepted_generation: Option<i64>,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, Entry>,
    /// Resources were given back since the last `take_retries`.
    freed: bool,
}

impl State {
    fn allocations(&self) -> Allocations {
        self.pods
            .iter()
            .filter_map(|(uid, e)| e.allocation.clone().map(|a| (uid.clone(), a)))
            .collect()
    }
}

/// Allocations, resize admission and resize conditions of every pod on the node.
pub struct ResizeManager {
    admission: Mutex<()>,
    state: Mutex<State>,
    checkpoint: Checkpoint,
    config: ResizeConfig,
}

/// The outcome of [`ResizeManager::sync`].
#[derive(Clone, Debug)]
pub struct Synced {
    /// The pod to run: its spec resources are the allocated ones (the synced pod's
    /// own allocation when nothing is resized).
    pub pod: Arc<Pod>,
    /// Events to record.
    pub events: Vec<ResizeEvent>,
}

fn condition(
    type_: &str,
    reason: Option<&str>,
    message: Option<String>,
    generation: Option<i64>,
    old: Option<&PodCondition>,
    now: Time,
) -> PodCondition {
    let same = old.is_some_and(|o| o.reason.as_deref() == reason);
    PodCondition {
        type_: type_.to_owned(),
        status: ConditionStatus::True,
        observed_generation: generation,
        last_probe_time: None,
        last_transition_time: old
            .filter(|_| same)
            .and_then(|o| o.last_transition_time)
            .or(Some(now)),
        reason: reason.map(str::to_owned),
        message,
    }
}

/// `name: requests {..} limits {..}` for each container the resize changes.
fn describe(old: &PodAllocation, new: &PodAllocation) -> String {
    let list = |l: &super::allocation::ResourceList| {
        l.iter()
            .map(|(k, q)| format!("{k}={q}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    new.containers
        .iter()
        .filter(|(name, a)| old.containers.get(*name).is_none_or(|o| !o.same(a)))
        .map(|(name, a): (&String, &ContainerAllocation)| {
            format!(
                "{name}: requests {{{}}} limits {{{}}}",
                list(&a.requests),
                list(&a.limits)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl ResizeManager {
    /// A manager over the checkpoint under `root_dir`. A checkpoint that cannot be read
    /// is reported and left aside: every pod is then admitted at its spec.
    pub fn open(
        root_dir: &std::path::Path,
        config: ResizeConfig,
    ) -> (ResizeManager, Option<CheckpointError>) {
        let checkpoint = Checkpoint::new(root_dir);
        let (loaded, problem) = match checkpoint.load() {
            Ok(pods) => (pods, None),
            Err(e) => (Allocations::new(), Some(e)),
        };
        let pods = loaded
            .into_iter()
            .map(|(uid, allocation)| {
                let entry = Entry {
                    allocation: Some(allocation),
                    ..Entry::default()
                };
                (uid, entry)
            })
            .collect();
        let manager = ResizeManager {
            admission: Mutex::new(()),
            state: Mutex::new(State { pods, freed: false }),
            checkpoint,
            config,
        };
        (manager, problem)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store(&self, state: &State) -> Result<(), CheckpointError> {
        self.checkpoint.store(&state.allocations())
    }

    /// Serialises admissions: hold it across a batch of pod additions.
    pub fn admission_lock(&self) -> MutexGuard<'_, ()> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pod at its allocated resources (the pod itself when none is recorded).
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let state = self.state();
        match state
            .pods
            .get(pod.uid())
            .and_then(|e| e.allocation.as_ref())
        {
            Some(allocation) => allocated_version(pod, allocation),
            None => Arc::clone(pod),
        }
    }

    /// The allocation recorded for `uid`.
    pub fn allocation(&self, uid: &str) -> Option<PodAllocation> {
        let state = self.state();
        state.pods.get(uid).and_then(|e| e.allocation.clone())
    }

    /// Records that `allocated` (a pod at its allocated resources) was admitted: its
    /// allocation is checkpointed if new or changed. Call with the admission lock held.
    pub fn record_admitted(&self, allocated: &Arc<Pod>) -> Result<(), CheckpointError> {
        if self.note_admitted(allocated) {
            self.store_allocations()
        } else {
            Ok(())
        }
    }

    /// Records an admission in memory only; true when the checkpoint must be written
    /// ([`store_allocations`](Self::store_allocations), once for a whole batch of
    /// additions: one fsync instead of one per pod). Call with the admission lock held
    /// until the store, so no pod worker syncs a pod whose allocation is not on disk.
    pub fn note_admitted(&self, allocated: &Arc<Pod>) -> bool {
        let allocation = PodAllocation::of(allocated);
        let mut state = self.state();
        let entry = state.pods.entry(allocated.uid().to_owned()).or_default();
        entry.pod = Some(Arc::clone(allocated));
        if entry
            .allocation
            .as_ref()
            .is_some_and(|a| a.same(&allocation))
        {
            return false;
        }
        entry.allocation = Some(allocation);
        true
    }

    /// Writes every allocation to the checkpoint. On failure the allocations stay in
    /// memory (the pods run at them) and the next write carries them; a newly admitted
    /// pod's allocation is its spec, which is also what a restart without it assumes.
    pub fn store_allocations(&self) -> Result<(), CheckpointError> {
        let state = self.state();
        self.store(&state)
    }

    /// Resize admission for a pod about to be synced (upstream
    /// `handlePodResourcesResize`). Returns the pod to run, at its allocated resources:
    /// the new ones when the resize was admitted.
    ///
    /// Only pods whose API phase is Running are judged (and static pods, which are
    /// refused); any other pod keeps its allocation until it runs. A failed checkpoint
    /// write refuses the resize for now (an error for the sync, which retries).
    pub fn sync(&self, pod: &Arc<Pod>, now: Time) -> Result<Synced, CheckpointError> {
        let _admission = self.admission_lock();
        let mut state = self.state();
        let uid = pod.uid().to_owned();
        let mut events = Vec::new();
        let known = state.pods.get(&uid).and_then(|e| e.allocation.clone());
        let Some(current) = known else {
            // Never admitted through an addition (restarted by housekeeping, or the
            // checkpoint was lost): it runs with its spec.
            let entry = state.pods.entry(uid.clone()).or_default();
            entry.allocation = Some(PodAllocation::of(pod));
            entry.pod = Some(Arc::clone(pod));
            self.store(&state)?;
            return Ok(Synced {
                pod: Arc::clone(pod),
                events,
            });
        };
        let allocated = allocated_version(pod, &current);
        let judge = pod.is_static() || pod.status.phase == Some(PodPhase::Running);
        if !current.differs_from(pod) || !judge {
            let entry = state.pods.entry(uid).or_default();
            if !current.differs_from(pod) {
                entry.pending = None;
            }
            entry.pod = Some(Arc::clone(&allocated));
            return Ok(Synced {
                pod: allocated,
                events,
            });
        }
        let others: Vec<Arc<Pod>> = state
            .pods
            .iter()
            .filter(|(other, _)| **other != uid)
            .filter_map(|(_, e)| e.pod.clone())
            .collect();
        let others: Vec<&Pod> = others.iter().map(|p| p.as_ref()).collect();
        let verdict = can_resize(&ResizeRequest {
            desired: pod,
            allocated: &allocated,
            others: &others,
            node: &self.config.node,
        });
        let generation = pod.metadata.generation;
        match verdict {
            Verdict::Fits => {
                let new = PodAllocation::of(pod);
                let before = pod_requests(&allocated);
                let freed = pod_requests(pod)
                    .iter()
                    .any(|(k, q)| before.get(k).is_some_and(|old| q < old));
                let message = describe(&current, &new);
                let entry = state.pods.entry(uid.clone()).or_default();
                entry.allocation = Some(new);
                if let Err(e) = self.store(&state) {
                    if let Some(entry) = state.pods.get_mut(&uid) {
                        entry.allocation = Some(current);
                    }
                    return Err(e);
                }
                let entry = state.pods.entry(uid).or_default();
                entry.pending = None;
                entry.error = None;
                entry.accepted_generation = generation;
                let old = entry.in_progress.take();
                entry.in_progress = Some(condition(
                    POD_RESIZE_IN_PROGRESS,
                    None,
                    None,
                    generation,
                    old.as_ref(),
                    now,
                ));
                entry.pod = Some(Arc::clone(pod));
                state.freed |= freed;
                events.push(ResizeEvent {
                    kind: EventType::Normal,
                    reason: RESIZE_STARTED,
                    message: format!(
                        "Pod resize started: {message} (generation {})",
                        generation.unwrap_or(0)
                    ),
                });
                Ok(Synced {
                    pod: Arc::clone(pod),
                    events,
                })
            }
            Verdict::Pending { reason, message } => {
                let entry = state.pods.entry(uid).or_default();
                let old = entry.pending.take();
                let unchanged = old.as_ref().is_some_and(|o| {
                    o.reason.as_deref() == Some(reason.as_str())
                        && o.message.as_deref() == Some(message.as_str())
                        && o.observed_generation == generation
                });
                entry.pending = Some(condition(
                    POD_RESIZE_PENDING,
                    Some(reason.as_str()),
                    Some(message.clone()),
                    generation,
                    old.as_ref(),
                    now,
                ));
                entry.pod = Some(Arc::clone(&allocated));
                if !unchanged {
                    events.push(ResizeEvent {
                        kind: EventType::Warning,
                        reason: match reason {
                            PendingReason::Deferred => RESIZE_DEFERRED,
                            PendingReason::Infeasible => RESIZE_INFEASIBLE,
                        },
                        message: format!("Pod resize {reason}: {message}"),
                    });
                }
                Ok(Synced {
                    pod: allocated,
                    events,
                })
            }
        }
    }

    /// Updates `PodResizeInProgress` from the runtime's view of `pod` (at its
    /// allocated resources) and from how the last actuation went: True while a running
    /// container differs from its allocation or the last attempt failed (reason
    /// `Error` with the message), removed once everything matches.
    pub fn observe(
        &self,
        pod: &Pod,
        runtime: &PodRuntimeStatus,
        actuation: Actuation,
        now: Time,
    ) -> Vec<ResizeEvent> {
        let behind = containers_not_resized(pod, runtime);
        let mut state = self.state();
        let Some(entry) = state.pods.get_mut(pod.uid()) else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if let (Actuation::Failed(message), None) = (&actuation, &entry.in_progress) {
            // No resize was accepted: the pod's resources were being put right, so
            // say that, and leave the resize conditions alone.
            return vec![ResizeEvent {
                kind: EventType::Warning,
                reason: FAILED_UPDATE_RESOURCES,
                message: format!("Failed to apply the container resources: {message}"),
            }];
        }
        match actuation {
            Actuation::None => {}
            Actuation::Applied => entry.error = None,
            Actuation::Failed(message) => {
                if entry.error.as_deref() != Some(message.as_str()) {
                    events.push(ResizeEvent {
                        kind: EventType::Warning,
                        reason: RESIZE_ERROR,
                        message: format!("Pod resize failed: {message}"),
                    });
                }
                entry.error = Some(message);
            }
        }
        let generation = entry.accepted_generation.or(pod.metadata.generation);
        if behind.is_empty() && entry.error.is_none() {
            if entry.in_progress.take().is_some() {
                events.push(ResizeEvent {
                    kind: EventType::Normal,
                    reason: RESIZE_COMPLETED,
                    message: format!(
                        "Pod resize completed (generation {})",
                        generation.unwrap_or(0)
                    ),
                });
            }
            return events;
        }
        let reason = entry.error.as_ref().map(|_| REASON_ERROR);
        let message = entry.error.clone();
        let old = entry.in_progress.take();
        entry.in_progress = Some(condition(
            POD_RESIZE_IN_PROGRESS,
            reason,
            message,
            generation,
            old.as_ref(),
            now,
        ));
        events
    }

    /// The pod's resize conditions, for its status.
    pub fn conditions(&self, uid: &str) -> Vec<PodCondition> {
        let state = self.state();
        state
            .pods
            .get(uid)
            .map(|e| {
                e.pending
                    .iter()
                    .chain(e.in_progress.iter())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets a terminated pod: its resources are free again.
    pub fn remove_pod(&self, uid: &str) -> Result<(), CheckpointError> {
        let mut state = self.state();
        let Some(entry) = state.pods.remove(uid) else {
            return Ok(());
        };
        state.freed = true;
        if entry.allocation.is_some() {
            self.store(&state)?;
        }
        Ok(())
    }

    /// Forgets every pod not in `keep` (housekeeping, once all sources are ready).
    pub fn retain(&self, keep: &HashSet<String>) -> Result<(), CheckpointError> {
        let mut state = self.state();
        let before = state.pods.len();
        state.pods.retain(|uid, _| keep.contains(uid));
        if state.pods.len() == before {
            return Ok(());
        }
        state.freed = true;
        self.store(&state)
    }

    /// UIDs of pods whose resize is Deferred, when resources were freed since the last
    /// call (each is then synced so its resize is judged again); empty otherwise.
    pub fn take_retries(&self) -> Vec<String> {
        let mut state = self.state();
        if !std::mem::take(&mut state.freed) {
            return Vec::new();
        }
        let mut uids: Vec<String> = state
            .pods
            .iter()
            .filter(|(_, e)| {
                e.pending
                    .as_ref()
                    .is_some_and(|c| c.reason.as_deref() == Some(PendingReason::Deferred.as_str()))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        uids.sort();
        uids
    }
}

#[cfg(test)]
mod tests;
