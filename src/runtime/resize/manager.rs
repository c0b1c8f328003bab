//! `ResizeManager`: the allocation of every admitted pod, resize admission (upstream
//! `handlePodResourcesResize`) and the two resize conditions of each pod.
//!
//! Threads: the sync loop thread admits new pods (an [`AdmissionBatch`] from
//! [`ResizeManager::admission_batch`]), asks which Deferred resizes to retry
//! ([`ResizeManager::take_retries`]) and prunes forgotten pods
//! ([`ResizeManager::retain`]), all in memory; pod worker threads admit resizes
//! ([`ResizeManager::sync`], which first writes what the sync loop recorded), report
//! how actuation went ([`ResizeManager::observe`]), read the conditions for the status
//! and forget terminated pods; the `gc` thread writes housekeeping's pruning
//! ([`ResizeManager::persist`]). No channels.
//!
//! Locks: `admission` serialises whole admissions (a batch of pod additions, one resize
//! admission) so each sees the other's outcome; `state` guards the data, is held only
//! briefly (and across the checkpoint write, so writes keep their order), and is
//! always taken after `admission`, never before.
//!
//! Invariants: the checkpoint holds the allocation of every admitted pod before a pod
//! worker acts on it (the sync loop records, the worker writes; upstream's allocation
//! manager writes on the sync loop in `AddPod`); a pod's allocation changes only through admission; conditions
//! live only in memory (after a restart `sync` and `observe` rebuild them from the
//! spec, the allocation and the runtime); events are returned, not sent, so callers
//! record them with their own recorder.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{Pod, PodCondition, PodPhase, POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING};
use crate::api::quantity::Quantity;
use crate::cgroups::pod_resources::pod_requests;
use crate::events::EventType;
use crate::runtime::model::PodRuntimeStatus;

use super::admission::{can_resize, DoesNotFit, NodeFit, PendingReason, ResizeRequest, Verdict};
use super::allocation::{allocated_version, ContainerAllocation, PodAllocation};
use super::checkpoint::{Allocations, Checkpoint, CheckpointError};
use super::compute::containers_not_resized;

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
#[derive(Clone)]
pub struct ResizeConfig {
    /// The node's allocatable resources and admission's fit check.
    pub node: Arc<dyn NodeFit>,
}

impl ResizeConfig {
    pub fn new(node: impl NodeFit + 'static) -> ResizeConfig {
        ResizeConfig {
            node: Arc::new(node),
        }
    }
}

/// A node with no limits: every resize fits.
struct Unlimited(BTreeMap<String, Quantity>);

impl NodeFit for Unlimited {
    fn allocatable(&self) -> &BTreeMap<String, Quantity> {
        &self.0
    }
    fn fits(&self, _pod: &Pod, _others: &[&Pod]) -> Result<(), DoesNotFit> {
        Ok(())
    }
}

impl Default for ResizeConfig {
    fn default() -> ResizeConfig {
        ResizeConfig::new(Unlimited(BTreeMap::new()))
    }
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
    /// The allocations in memory differ from the checkpoint (the sync loop changed
    /// them, or a write failed): the next [`ResizeManager::persist`] writes them.
    unsaved: bool,
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
            state: Mutex::new(State {
                pods,
                ..State::default()
            }),
            checkpoint,
            config,
        };
        (manager, problem)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes every allocation; a failed write leaves them to the next one.
    fn store(&self, state: &mut State) -> Result<(), CheckpointError> {
        let stored = self.checkpoint.store(&state.allocations());
        state.unsaved = stored.is_err();
        stored
    }

    /// Serialises admissions: held across a batch of pod additions and across one
    /// resize admission.
    fn admission_lock(&self) -> MutexGuard<'_, ()> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sync loop's step in pod additions: the batch holds the admission lock, so
    /// no resize is judged in its middle and each sees the other's outcome.
    pub fn admission_batch(&self) -> AdmissionBatch<'_> {
        AdmissionBatch {
            manager: self,
            _admission: self.admission_lock(),
        }
    }

    /// Writes the allocations if the sync loop changed them since the last write (a
    /// batch of additions, housekeeping's pruning). Pod worker threads call it before
    /// they act on an allocation ([`ResizeManager::sync`]), the `gc` thread after
    /// housekeeping: the sync loop itself never writes the file.
    pub fn persist(&self) -> Result<(), CheckpointError> {
        let mut state = self.state();
        if !state.unsaved {
            return Ok(());
        }
        self.store(&mut state)
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
    #[cfg(test)]
    fn record_admitted(&self, allocated: &Arc<Pod>) -> Result<(), CheckpointError> {
        if self.note_admitted(allocated) {
            self.store_allocations()
        } else {
            Ok(())
        }
    }

    /// Records an admission in memory only; true when the checkpoint must be written
    /// (once for a whole batch of additions: one fsync instead of one per pod). Call
    /// with the admission lock held.
    fn note_admitted(&self, allocated: &Arc<Pod>) -> bool {
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
        state.unsaved = true;
        true
    }

    /// Writes every allocation to the checkpoint. On failure the allocations stay in
    /// memory (the pods run at them) and the next write carries them; a newly admitted
    /// pod's allocation is its spec, which is also what a restart without it assumes.
    #[cfg(test)]
    fn store_allocations(&self) -> Result<(), CheckpointError> {
        let mut state = self.state();
        self.store(&mut state)
    }

    /// Resize admission for a pod about to be synced (upstream
    /// `handlePodResourcesResize`). Returns the pod to run, at its allocated resources:
    /// the new ones when the resize was admitted.
    ///
    /// Only pods whose API phase is Running are judged (and static pods, which are
    /// refused); any other pod keeps its allocation until it runs. A failed checkpoint
    /// write refuses the resize for now (an error for the sync, which retries).
    ///
    /// First, allocations the sync loop recorded since the last write (this pod's
    /// own, when it was just added) reach the checkpoint, so no pod runs on an
    /// allocation that is not on disk. That write failing is logged, and the pod runs
    /// at the allocation in memory, as when the sync loop wrote it itself.
    pub fn sync(&self, pod: &Arc<Pod>, now: Time) -> Result<Synced, CheckpointError> {
        let _admission = self.admission_lock();
        let mut state = self.state();
        if state.unsaved {
            if let Err(err) = self.store(&mut state) {
                log::error!("writing the allocations of admitted pods: {err}");
            }
        }
        let uid = pod.uid().to_owned();
        let mut events = Vec::new();
        let known = state.pods.get(&uid).and_then(|e| e.allocation.clone());
        let Some(current) = known else {
            // Never admitted through an addition (restarted by housekeeping, or the
            // checkpoint was lost): it runs with its spec.
            let entry = state.pods.entry(uid.clone()).or_default();
            entry.allocation = Some(PodAllocation::of(pod));
            entry.pod = Some(Arc::clone(pod));
            self.store(&mut state)?;
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
            node: self.config.node.as_ref(),
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
                if let Err(e) = self.store(&mut state) {
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
            self.store(&mut state)?;
        }
        Ok(())
    }

    /// Forgets every pod not in `keep` (housekeeping on the sync loop, once all
    /// sources are ready). In memory only: [`persist`](Self::persist) writes it.
    pub fn retain(&self, keep: &HashSet<String>) {
        let mut state = self.state();
        let before = state.pods.len();
        state.pods.retain(|uid, _| keep.contains(uid));
        if state.pods.len() != before {
            state.freed = true;
            state.unsaved = true;
        }
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

/// A batch of pod additions, admitted as one against resize admissions (see
/// [`ResizeManager::admission_batch`]). Dropping it ends the batch.
pub struct AdmissionBatch<'a> {
    manager: &'a ResizeManager,
    _admission: MutexGuard<'a, ()>,
}

impl AdmissionBatch<'_> {
    /// The pod at its allocated resources (the pod itself when none is recorded):
    /// admission counts every pod so, the checkpoint being the truth after a restart.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        self.manager.allocated_pod(pod)
    }

    /// Records that `allocated` (a pod at its allocated resources) was admitted. In
    /// memory: the pod's worker writes the checkpoint before it runs the pod.
    pub fn admitted(&self, allocated: &Arc<Pod>) {
        self.manager.note_admitted(allocated);
    }
}

#[cfg(test)]
mod tests;
