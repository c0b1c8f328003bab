//! Housekeeping as a pure plan (upstream HandlePodCleanups' decisions): from the
//! desired pods, the pod workers' states and the runtime's running pods, what to
//! start, finish, kill, delete and clean up. No I/O, no clock, no locks: the sync
//! loop (`housekeeping.rs`) gathers the inputs, acts on the cheap parts (worker
//! updates) and hands the slow parts ([`CleanupWork`]: mirror pod DELETEs, volume
//! teardown, pod directory and cgroup removal) to the `gc` thread.

use std::collections::{HashMap, HashSet};

use crate::api::pod::Pod;
use crate::pod_workers::{PodWorkerSync, WorkType};
use crate::runtime::model::RunningPod;

/// An orphaned mirror pod as housekeeping saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorRef {
    pub fullname: String,
    pub namespace: String,
    pub name: String,
    /// The DELETE's precondition: a plan carried out late removes only this object.
    pub uid: String,
}

/// What housekeeping sees, gathered on the sync loop.
pub struct PlanInputs<'a> {
    /// The desired pods (config sources).
    pub desired: &'a [&'a Pod],
    /// Of the desired pods, those that should be running (not terminal, not known
    /// terminated).
    pub active: &'a [&'a Pod],
    /// Every pod worker's state (SyncKnownPods).
    pub working: &'a HashMap<String, PodWorkerSync>,
    /// The runtime's running pods.
    pub running: &'a [RunningPod],
    /// Mirror pods whose static pod is gone, with whether a worker still terminates
    /// a static pod of that full name (then the mirror stays for now).
    pub orphaned_mirrors: &'a [(MirrorRef, bool)],
    /// A source still runs from its checkpoint: orphans wait for its first list.
    pub provisional: bool,
}

/// The slow steps, carried out by the `gc` thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupWork {
    /// Orphaned mirror pods to DELETE (each retried for up to 30 s in an outage).
    pub delete_mirrors: Vec<MirrorRef>,
    /// Remove orphaned pod directories (after volume teardown) and pod cgroups; off
    /// while a source is provisional.
    pub remove_orphans: bool,
    /// UIDs whose directories and cgroups stay (desired or possibly running). The
    /// executor also keeps any UID a pod worker learnt of since the plan was made.
    pub keep: HashSet<String>,
}

/// Housekeeping's decisions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HousekeepingPlan {
    /// Desired active pods no worker knows (restarted with a Create update).
    pub start: Vec<String>,
    /// Deleted terminal pods no worker knows and the runtime does not run (finished
    /// with a Kill update so the status manager can delete them).
    pub finish: Vec<String>,
    /// Runtime pods no source wants and no worker knows (killed with 1 s grace).
    pub kill_runtime: Vec<RunningPod>,
    /// Pods in Sync or Terminating: their probes stay.
    pub possibly_running: HashSet<String>,
    /// UIDs of the desired pods: their statuses stay.
    pub desired: HashSet<String>,
    /// The slow part, for the `gc` thread.
    pub cleanup: CleanupWork,
}

fn terminal(pod: &Pod) -> bool {
    crate::api::pod::is_terminal_phase(pod.status.phase.as_ref())
}

/// Decides one housekeeping round.
pub fn plan(inputs: &PlanInputs<'_>) -> HousekeepingPlan {
    let working = inputs.working;
    let possibly_running: HashSet<String> = working
        .iter()
        .filter(|(_, w)| matches!(w.state, WorkType::Sync | WorkType::Terminating))
        .map(|(uid, _)| uid.clone())
        .collect();
    let desired: HashSet<String> = inputs.desired.iter().map(|p| p.uid().to_owned()).collect();
    let start = inputs
        .active
        .iter()
        .filter(|p| !working.contains_key(p.uid()))
        .map(|p| p.uid().to_owned())
        .collect();
    let running_uids: HashSet<&str> = inputs.running.iter().map(|p| p.uid.as_str()).collect();
    let finish = inputs
        .desired
        .iter()
        .filter(|p| {
            p.deletion_requested()
                && terminal(p)
                && !working.contains_key(p.uid())
                && !running_uids.contains(p.uid())
        })
        .map(|p| p.uid().to_owned())
        .collect();
    let kill_runtime = if inputs.provisional {
        Vec::new()
    } else {
        inputs
            .running
            .iter()
            .filter(|p| !working.contains_key(&p.uid) && !desired.contains(&p.uid))
            .cloned()
            .collect()
    };
    let delete_mirrors = inputs
        .orphaned_mirrors
        .iter()
        .filter(|(_, terminating)| !terminating)
        .map(|(mirror, _)| mirror.clone())
        .collect();
    let keep = desired.union(&possibly_running).cloned().collect();
    HousekeepingPlan {
        start,
        finish,
        kill_runtime,
        possibly_running,
        desired,
        cleanup: CleanupWork {
            delete_mirrors,
            remove_orphans: !inputs.provisional,
            keep,
        },
    }
}

#[cfg(test)]
mod tests;
