//! Carries out housekeeping's slow steps ([`CleanupWork`]) on the `gc` thread:
//! orphaned mirror pod DELETEs (the API client retries, up to 30 s per try in an
//! outage), volume teardown (subPath bind mounts first) and removal of orphaned pod
//! directories (never while anything below one is mounted), removal of orphaned pod
//! cgroups (then the QoS cgroups' CPU shares), and the allocation checkpoint write
//! after housekeeping pruned forgotten pods' allocations. The sync loop only plans them (`housekeeping_plan.rs`).
//!
//! A plan may be seconds old when it runs: every removal asks the pod workers again
//! (a pod admitted since then has a worker before it has a directory or cgroup),
//! and a mirror DELETE carries the mirror's UID as a precondition.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::deps::PodVolumes;
use super::housekeeping_plan::CleanupWork;
use super::mirror::MirrorClient;
use crate::cgroups::manager::PodCgroupManager;
use crate::pod_workers::PodWorkers;
use crate::runtime::resize::ResizeManager;
use crate::runtime::subpath;

/// What the executor needs; built by [`super::Kubelet::cleaner`].
pub struct Cleaner {
    pub(super) workers: PodWorkers,
    pub(super) mirrors: Option<MirrorClient>,
    pub(super) volumes: Arc<dyn PodVolumes>,
    pub(super) cgroups: Option<Arc<PodCgroupManager>>,
    pub(super) root_dir: PathBuf,
    pub(super) resize: Arc<ResizeManager>,
}

/// True when something is mounted at or below `dir` (never delete through a mount),
/// or when that cannot be ruled out. `dir` is resolved first, as the kernel lists
/// mount points by their real path, with octal escapes for blanks and backslashes.
fn has_mounts_below(dir: &Path) -> bool {
    let real = match std::fs::canonicalize(dir) {
        Ok(real) => real,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return true;
    };
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .map(|m| {
            m.replace("\\040", " ")
                .replace("\\011", "\t")
                .replace("\\012", "\n")
                .replace("\\134", "\\")
        })
        .any(|m| Path::new(&m).starts_with(&real))
}

impl Cleaner {
    /// Carries out `work`; failures are logged and retried by a later plan.
    pub fn run(&self, work: &CleanupWork) {
        if let Some(mirrors) = &self.mirrors {
            for mirror in &work.delete_mirrors {
                let deleted = mirrors.delete(&mirror.namespace, &mirror.name, Some(&mirror.uid));
                if let Err(err) = deleted {
                    log::warn!(
                        "housekeeping: deleting orphaned mirror pod {}: {err}",
                        mirror.fullname
                    );
                }
            }
        }
        if work.remove_orphans {
            if let Err(err) = self.resize.persist() {
                log::warn!("housekeeping: writing pruned pod allocations: {err}");
            }
            self.remove_orphaned_pod_dirs(&work.keep);
            self.remove_orphaned_cgroups(&work.keep);
        }
    }

    /// Kept: planned to stay, or known to a pod worker now.
    fn kept(&self, keep: &HashSet<String>, uid: &str) -> bool {
        keep.contains(uid) || self.workers.could_have_running_containers(uid)
    }

    fn remove_orphaned_pod_dirs(&self, keep: &HashSet<String>) {
        let pods_dir = self.root_dir.join("pods");
        let Ok(entries) = std::fs::read_dir(&pods_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if self.kept(keep, &uid) {
                continue;
            }
            let dir = entry.path();
            // A pod deleted while litelet was down may still have tmpfs volumes.
            if let Err(err) = self.volumes.teardown(&uid) {
                log::warn!("housekeeping: tearing down volumes of orphaned pod {uid}: {err}");
            }
            // The subPath bind mounts go with the teardown; while their directory
            // is left (one would not unmount), the pod directory stays too.
            if subpath::pod_has_subpaths(&self.root_dir, &uid) || has_mounts_below(&dir) {
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

    fn remove_orphaned_cgroups(&self, keep: &HashSet<String>) {
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
        let mut removed = false;
        for uid in uids {
            if self.kept(keep, &uid) {
                continue;
            }
            if let Err(err) = cgroups.remove_pod(&uid) {
                log::warn!("housekeeping: removing orphaned pod cgroup {uid}: {err}");
            }
            removed = true;
        }
        if removed {
            // As upstream after removing orphaned pod cgroups; not on every round,
            // as with systemd each write is a D-Bus call.
            self.update_qos_cgroups();
        }
    }

    /// The QoS cgroups' CPU shares from the active pods (upstream `UpdateQOSCgroups`):
    /// a pod no worker may still run stops counting first (the syncer forgets a pod
    /// as it terminates; this catches one that went another way). A failed write is
    /// logged; the next round tries again.
    pub fn update_qos_cgroups(&self) {
        let Some(cgroups) = &self.cgroups else {
            return;
        };
        cgroups.retain_active_pods(|uid| self.workers.could_have_running_containers(uid));
        if let Err(err) = cgroups.update_qos_cgroups() {
            log::warn!("updating the QoS cgroups' CPU shares: {err}");
        }
    }
}
