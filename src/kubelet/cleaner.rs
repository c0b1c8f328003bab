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
//!
//! Upstream scans the pod directories and cgroups every housekeeping round (2 s).
//! Here a scan runs when one can find something: the set of pods to keep changed, the
//! last scan left something behind, or a minute passed ([`scan_due`]); an idle node
//! with 100 pods otherwise lists its cgroup hierarchies 30 times a minute for nothing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// What the last orphan scan kept and found.
    pub(super) last_scan: Mutex<Option<OrphanScan>>,
}

/// The longest an unchanged node goes without a scan for orphans (what appears
/// without a pod going, e.g. a directory another process left).
pub const ORPHAN_RESCAN: Duration = Duration::from_secs(60);

/// One scan for orphaned pod directories and cgroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrphanScan {
    /// The UIDs it kept.
    pub keep: HashSet<String>,
    pub at: Instant,
    /// Nothing was left behind: no removal failed, no orphan waited for its worker.
    pub settled: bool,
}

/// Whether a scan keeping `keep` at `now` can find what the `last` one did not (pure).
pub fn scan_due(last: Option<&OrphanScan>, keep: &HashSet<String>, now: Instant) -> bool {
    match last {
        None => true,
        Some(last) => {
            !last.settled
                || last.keep != *keep
                || now.saturating_duration_since(last.at) >= ORPHAN_RESCAN
        }
    }
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
            self.scan_for_orphans(&work.keep);
        }
    }

    fn scan_for_orphans(&self, keep: &HashSet<String>) {
        let mut last = self.last_scan.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if !scan_due(last.as_ref(), keep, now) {
            return;
        }
        let dirs_settled = self.remove_orphaned_pod_dirs(keep);
        let cgroups_settled = self.remove_orphaned_cgroups(keep);
        *last = Some(OrphanScan {
            keep: keep.clone(),
            at: now,
            settled: dirs_settled && cgroups_settled,
        });
    }

    /// Kept: planned to stay, or known to a pod worker now.
    fn kept(&self, keep: &HashSet<String>, uid: &str) -> bool {
        keep.contains(uid) || self.workers.could_have_running_containers(uid)
    }

    /// Removes orphaned pod directories; true when none was left behind.
    fn remove_orphaned_pod_dirs(&self, keep: &HashSet<String>) -> bool {
        let pods_dir = self.root_dir.join("pods");
        let Ok(entries) = std::fs::read_dir(&pods_dir) else {
            return true;
        };
        let mut left_behind = false;
        for entry in entries.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if self.kept(keep, &uid) {
                // Kept by a worker the plan did not know: it may go once that ends.
                left_behind |= !keep.contains(&uid);
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
                left_behind = true;
                continue;
            }
            if let Err(err) = std::fs::remove_dir_all(&dir) {
                log::warn!(
                    "housekeeping: removing orphaned pod dir {}: {err}",
                    dir.display()
                );
                left_behind = true;
            }
        }
        !left_behind
    }

    /// Removes orphaned pod cgroups; true when none was left behind.
    fn remove_orphaned_cgroups(&self, keep: &HashSet<String>) -> bool {
        let Some(cgroups) = &self.cgroups else {
            return true;
        };
        let uids = match cgroups.list_pod_uids() {
            Ok(uids) => uids,
            Err(err) => {
                log::warn!("housekeeping: listing pod cgroups: {err}");
                return false;
            }
        };
        let mut removed = false;
        let mut left_behind = false;
        for uid in uids {
            if self.kept(keep, &uid) {
                left_behind |= !keep.contains(&uid);
                continue;
            }
            if let Err(err) = cgroups.remove_pod(&uid) {
                log::warn!("housekeeping: removing orphaned pod cgroup {uid}: {err}");
                left_behind = true;
            }
            removed = true;
        }
        if removed {
            // As upstream after removing orphaned pod cgroups; not on every round,
            // as with systemd each write is a D-Bus call.
            self.update_qos_cgroups();
        }
        !left_behind
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

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(uids: &[&str]) -> HashSet<String> {
        uids.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn a_scan_runs_only_when_it_can_find_something_new() {
        let t0 = Instant::now();
        let scan = |uids: &[&str], settled| OrphanScan {
            keep: keep(uids),
            at: t0,
            settled,
        };
        let soon = t0 + Duration::from_secs(2);
        let later = t0 + ORPHAN_RESCAN;
        let cases = [
            ("first scan", None, keep(&["a"]), soon, true),
            (
                "nothing changed",
                Some(scan(&["a"], true)),
                keep(&["a"]),
                soon,
                false,
            ),
            (
                "a pod went",
                Some(scan(&["a", "b"], true)),
                keep(&["a"]),
                soon,
                true,
            ),
            (
                "a pod came",
                Some(scan(&["a"], true)),
                keep(&["a", "b"]),
                soon,
                true,
            ),
            (
                "left something behind",
                Some(scan(&["a"], false)),
                keep(&["a"]),
                soon,
                true,
            ),
            (
                "a minute passed",
                Some(scan(&["a"], true)),
                keep(&["a"]),
                later,
                true,
            ),
        ];
        for (what, last, keep, now, want) in cases {
            assert_eq!(scan_due(last.as_ref(), &keep, now), want, "{what}");
        }
    }
}
