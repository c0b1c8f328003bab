//! Housekeeping (upstream HandlePodCleanups), every 2 s on the sync loop once all
//! sources have reported: forget finished workers, restart desired pods no worker
//! knows, finish deleted terminal pods, kill runtime pods nobody wants (1 s grace),
//! delete orphaned mirror pods, remove orphaned pod directories and cgroups.
//!
//! While a source runs from its checkpoint (edge autonomy: cut off since start-up),
//! the orphan steps (runtime pods, pod directories, cgroups, allocations) wait: a
//! checkpoint written a moment before a crash may miss a pod, and the first real
//! list decides.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Kubelet;
use crate::api::pod::Pod;
use crate::cri::CriError;
use crate::pod_workers::{UpdatePodOptions, UpdateType, WorkType};
use crate::runtime::model::RunningPod;

/// The PLEG's last relist stands in for a runtime listing up to this age (upstream's
/// runtime pod cache allows 3 s): one CRI listing per second then serves both.
const RELIST_MAX_AGE: Duration = Duration::from_secs(2);

/// True when something is mounted at or below `dir` (never delete through a mount).
fn has_mounts_below(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return true;
    };
    let prefix = dir.display().to_string();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .any(|m| m == prefix || m.starts_with(&format!("{prefix}/")))
}

impl Kubelet {
    pub(super) fn housekeeping(&mut self) {
        // Borrowed, not cloned: only the pods that need an update are copied.
        let desired: Vec<&Pod> = self.pods.pods().collect();
        let working = self.workers.sync_known_pods(desired.iter().copied());
        // Forgotten workers mean finished pods: their dead containers and sandboxes
        // may go now rather than at the next periodic collection.
        if working.len() < self.last_worker_count {
            let _ = self.deaths.try_send(String::new());
        }
        self.last_worker_count = working.len();
        let possibly_running: HashSet<String> = working
            .iter()
            .filter(|(_, w)| matches!(w.state, WorkType::Sync | WorkType::Terminating))
            .map(|(uid, _)| uid.clone())
            .collect();
        let running = match self.running_pods() {
            Ok(running) => running,
            Err(err) => {
                log::error!("housekeeping: listing runtime pods: {err}");
                return;
            }
        };
        self.probes.cleanup_pods(&possibly_running);
        let mut keep: HashSet<String> = desired.iter().map(|p| p.uid().to_owned()).collect();
        self.status.remove_orphaned_statuses(&keep);

        for fullname in self.pods.orphaned_mirror_fullnames() {
            if self
                .workers
                .is_pod_for_mirror_pod_terminating_by_fullname(&fullname)
            {
                continue;
            }
            if let (Some(mirrors), Some(mirror)) =
                (&self.mirrors, self.pods.mirror_by_fullname(&fullname))
            {
                if let Err(err) = mirrors.delete(mirror.namespace(), mirror.name(), None) {
                    log::warn!("housekeeping: deleting orphaned mirror pod {fullname}: {err}");
                }
            }
        }

        for pod in self.active_pods(desired.iter().copied()) {
            if !working.contains_key(pod.uid()) {
                let mirror = self.pods.mirror_of(pod).cloned();
                self.update(UpdateType::Create, pod.clone(), mirror);
            }
        }
        let running_uids: HashSet<&str> = running.iter().map(|p| p.uid.as_str()).collect();
        for &pod in &desired {
            let terminal = super::api_terminal(pod.status.phase.as_ref());
            if pod.deletion_requested()
                && terminal
                && !working.contains_key(pod.uid())
                && !running_uids.contains(pod.uid())
            {
                self.update(UpdateType::Kill, pod.clone(), None);
            }
        }
        if !self.provisional_sources.is_empty() {
            log::debug!(
                "housekeeping: sources {:?} run from checkpoints; orphans wait",
                self.provisional_sources
            );
            return;
        }
        for orphan in running
            .into_iter()
            .filter(|p| !working.contains_key(&p.uid))
        {
            if desired.iter().any(|p| p.uid() == orphan.uid) {
                continue;
            }
            log::info!(
                "housekeeping: stopping runtime pod {}/{} ({}) that no source wants",
                orphan.namespace,
                orphan.name,
                orphan.uid
            );
            self.workers
                .update_pod(UpdatePodOptions::kill_runtime_pod(orphan, Some(1)));
        }
        keep.extend(possibly_running.iter().cloned());
        if let Err(err) = self.resize.retain(&keep) {
            log::warn!("housekeeping: pruning pod allocations: {err}"); // RESIZE
        }
        self.remove_orphaned_pod_dirs(&keep);
        self.remove_orphaned_cgroups(&possibly_running, &keep);
    }

    /// The runtime's running pods: from the PLEG's last relist when it is fresh, else
    /// from a listing filtered to running sandboxes and containers.
    fn running_pods(&self) -> Result<Vec<RunningPod>, CriError> {
        let relisted = self.last_relist.fresh(Instant::now(), RELIST_MAX_AGE);
        match relisted {
            Some(pods) => Ok(pods.values().filter_map(RunningPod::running_part).collect()),
            None => self.runtime.running_pods(false),
        }
    }

    fn remove_orphaned_pod_dirs(&self, keep: &HashSet<String>) {
        let pods_dir = self.root_dir.join("pods");
        let Ok(entries) = std::fs::read_dir(&pods_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if keep.contains(&uid) || self.workers.could_have_running_containers(&uid) {
                continue;
            }
            let dir = entry.path();
            // A pod deleted while litelet was down may still have tmpfs volumes.
            if let Err(err) = self.volumes.teardown(&uid) {
                log::warn!("housekeeping: tearing down volumes of orphaned pod {uid}: {err}");
            }
            if has_mounts_below(&dir) {
                log::warn!(
                    "housekeeping: orphaned pod dir {} still has mounts; left in place",
                    dir.display()
                );
                continue;
            }
            if let Err(err) = std::fs::remove_dir_all(&dir) {
                log::warn!(
                    "housekeeping: removing orphaned pod dir {}: {err}",
                    dir.display()
                );
            }
        }
    }

    fn remove_orphaned_cgroups(&self, possibly_running: &HashSet<String>, keep: &HashSet<String>) {
        let Some(cgroups) = &self.cgroups else {
            return;
        };
        let uids = match cgroups.list_pod_uids() {
            Ok(uids) => uids,
            Err(err) => {
                log::warn!("housekeeping: listing pod cgroups: {err}");
                return;
            }
        };
        for uid in uids {
            if possibly_running.contains(&uid) || keep.contains(&uid) {
                continue;
            }
            if let Err(err) = cgroups.remove_pod(&uid) {
                log::warn!("housekeeping: removing orphaned pod cgroup {uid}: {err}");
            }
        }
    }
}
