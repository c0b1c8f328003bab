//! The per-pod record of the pod workers (upstream podSyncStatus) and how a consumed
//! update folds into the active one. Guarded by the pod workers' single lock.

use std::time::Instant;

use crossbeam_channel::Sender;

use super::types::{KillPodOptions, StatusFn, UpdatePodOptions, WorkType};
use crate::runtime::cancel::Cancel;

#[derive(Default)]
pub(super) struct PodSyncStatus {
    pub cancel: Option<Cancel>,
    pub fullname: String,
    /// An update is pending or being worked.
    pub working: bool,
    /// The newest update not yet consumed; a newer one replaces it.
    pub pending: Option<UpdatePodOptions>,
    /// The last consumed update, merged: what downstream components read.
    pub active: Option<UpdatePodOptions>,
    pub started_at: Option<Instant>,
    pub terminating_at: Option<Instant>,
    pub terminated_at: Option<Instant>,
    /// Effective grace once terminating; only shrinks; 0 = not computed.
    pub grace_period: i64,
    pub notify_post_terminating: Vec<Sender<()>>,
    pub status_post_terminating: Vec<StatusFn>,
    /// The worker has seen the termination: no more SyncPod calls.
    pub started_terminating: bool,
    /// Deletion requested, orphaned, or runtime-only.
    pub deleted: bool,
    pub evicted: bool,
    /// SyncTerminatedPod succeeded (or the pod was cleaned up unstarted).
    pub finished: bool,
    /// A Create arrived while the pod was terminating (UID reuse).
    pub restart_requested: bool,
    /// A runtime-pod kill was seen for this UID.
    pub observed_runtime: bool,
}

impl PodSyncStatus {
    pub fn work_type(&self) -> WorkType {
        if self.terminated_at.is_some() {
            WorkType::Terminated
        } else if self.terminating_at.is_some() {
            WorkType::Terminating
        } else {
            WorkType::Sync
        }
    }

    pub fn is_started(&self) -> bool {
        self.started_at.is_some()
    }

    pub fn is_termination_requested(&self) -> bool {
        self.terminating_at.is_some()
    }

    pub fn is_terminated(&self) -> bool {
        self.terminated_at.is_some()
    }

    /// Folds a consumed update into the active one (upstream mergeLastUpdate): keep the
    /// last real pod spec over a runtime-only pod, keep the mirror unless a new one
    /// came, keep only evict and the grace override of kill options.
    pub fn merge_last_update(&mut self, other: UpdatePodOptions) {
        let active = self.active.get_or_insert_with(|| UpdatePodOptions {
            update_type: other.update_type,
            start_time: None,
            pod: None,
            mirror_pod: None,
            running_pod: None,
            kill: None,
        });
        active.update_type = other.update_type;
        if other.running_pod.is_none() || active.pod.is_none() {
            active.pod = other.pod;
        }
        active.running_pod = other.running_pod;
        if other.mirror_pod.is_some() {
            active.mirror_pod = other.mirror_pod;
        }
        if let Some(kill) = other.kill {
            active.kill = Some(KillPodOptions {
                evict: kill.evict,
                grace_override: kill.grace_override,
                ..Default::default()
            });
        }
    }
}
