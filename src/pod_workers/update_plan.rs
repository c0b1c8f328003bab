//! What [`PodWorkers::update_pod`](super::PodWorkers::update_pod) does with one
//! update, as a pure plan (upstream UpdatePod's decisions): restart a UID being
//! terminated, ignore a finished pod, start terminating, and keep or drop the kill
//! options. No lock, no clock, no channel: `update_pod` gathers the inputs under its
//! lock and carries the plan out.

use crate::api::pod::Pod;

use super::UpdateType;

/// The pod's record as the update finds it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RecordView {
    /// The record was created by this very update.
    pub first_time: bool,
    pub termination_requested: bool,
    pub terminated: bool,
    pub finished: bool,
}

/// The update as the plan reads it.
#[derive(Clone, Copy, Debug)]
pub(super) struct UpdateView<'a> {
    pub update_type: UpdateType,
    /// A pod only the runtime knows (always a kill).
    pub runtime_pod: bool,
    /// The pod the update is about: its own, the known spec a runtime pod folds
    /// into, or a stand-in for a runtime-only pod.
    pub pod: Option<&'a Pod>,
    /// The kill options ask for an eviction.
    pub evict: bool,
}

/// The record starts terminating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Termination {
    /// The pod was deleted (or only the runtime knows it).
    pub deleted: bool,
    /// Set when a kill (not a deletion) ends a pod that is not terminal yet.
    pub evicted: Option<bool>,
}

/// What happens to the update's kill options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KillStep {
    /// The pod already terminated and only the runtime knows it: drop the update.
    DropUpdate,
    /// Drop the kill options (closing the caller's completion channel at once).
    Discard,
    /// Termination is under way: fold the kill options into the record.
    Merge,
}

/// The decision for one update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UpdatePlan {
    /// A create for a UID still terminating: the worker restarts the pod afterwards.
    RequestRestart,
    /// A finished pod ignores updates (dropping the options releases a kill waiter).
    Ignore,
    /// Record the update as the pending one.
    Accept {
        terminate: Option<Termination>,
        kill: KillStep,
    },
}

fn is_terminal_phase(pod: &Pod) -> bool {
    crate::api::pod::is_terminal_phase(pod.status.phase.as_ref())
}

/// Decides one update.
pub(super) fn plan_update(record: &RecordView, update: &UpdateView<'_>) -> UpdatePlan {
    if !record.first_time
        && record.termination_requested
        && update.update_type == UpdateType::Create
    {
        return UpdatePlan::RequestRestart;
    }
    if record.finished {
        return UpdatePlan::Ignore;
    }
    let terminate = if record.termination_requested {
        None
    } else {
        starts_terminating(update)
    };
    let kill = if record.terminated {
        if update.runtime_pod {
            KillStep::DropUpdate
        } else {
            KillStep::Discard
        }
    } else if record.termination_requested || terminate.is_some() {
        KillStep::Merge
    } else {
        KillStep::Discard
    };
    UpdatePlan::Accept { terminate, kill }
}

/// Whether an update moves a record that is not terminating yet into termination:
/// a deleted pod, a terminal one, or a kill.
fn starts_terminating(update: &UpdateView<'_>) -> Option<Termination> {
    let pod = update.pod;
    let deleted = update.runtime_pod || pod.is_some_and(|p| p.deletion_requested());
    let terminal = pod.is_some_and(is_terminal_phase);
    let killed = update.update_type == UpdateType::Kill;
    if !(deleted || terminal || killed) {
        return None;
    }
    let evicted = (!deleted && killed && !terminal).then_some(update.evict);
    Some(Termination { deleted, evicted })
}

#[cfg(test)]
mod tests;
