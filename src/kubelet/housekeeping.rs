//! Housekeeping (upstream HandlePodCleanups), every 2 s on the sync loop once all
//! sources have reported. The loop gathers the inputs (desired pods, SyncKnownPods,
//! the PLEG's last relist), asks `housekeeping_plan::plan` what to do, sends the pod
//! workers their updates (restart desired pods no worker knows, finish deleted
//! terminal pods, kill runtime pods nobody wants with 1 s grace), prunes probes,
//! statuses and allocations, and hands the slow steps (orphaned mirror pod DELETEs,
//! volume teardown, pod directory and cgroup removal) to the `gc` thread as a
//! [`GcRequest::Cleanup`], so an API outage or a stuck unmount never stalls the loop.
//!
//! While a source runs from its checkpoint (edge autonomy: cut off since start-up),
//! the orphan steps (runtime pods, pod directories, cgroups, allocations) wait: a
//! checkpoint written a moment before a crash may miss a pod, and the first real
//! list decides.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::gc_loop::GcRequest;
use super::housekeeping_plan::{plan, MirrorRef, PlanInputs};
use super::Kubelet;
use crate::api::pod::Pod;
use crate::cri::CriError;
use crate::pod_workers::{UpdatePodOptions, UpdateType};
use crate::runtime::model::RunningPod;

/// The PLEG's last relist stands in for a runtime listing up to this age (upstream's
/// runtime pod cache allows 3 s): one CRI listing per second then serves both.
const RELIST_MAX_AGE: Duration = Duration::from_secs(2);

impl Kubelet {
    pub(super) fn housekeeping(&mut self) {
        // Borrowed, not cloned: the pods that need an update share the pod manager's.
        let desired: Vec<&Arc<Pod>> = self.pods.pods().collect();
        let working = self
            .workers
            .sync_known_pods(desired.iter().map(|p| Arc::as_ref(p)));
        // Forgotten workers mean finished pods: their dead containers and sandboxes
        // may go now rather than at the next periodic collection.
        if working.len() < self.last_worker_count {
            let _ = self.deaths.try_send(GcRequest::PodsFinished);
        }
        self.last_worker_count = working.len();
        let running = match self.running_pods() {
            Ok(running) => running,
            Err(err) => {
                log::error!("housekeeping: listing runtime pods: {err}");
                return;
            }
        };
        let orphaned_mirrors: Vec<(MirrorRef, bool)> = self
            .pods
            .orphaned_mirror_fullnames()
            .into_iter()
            .filter_map(|fullname| {
                let mirror = self.pods.mirror_by_fullname(&fullname)?;
                let terminating = self
                    .workers
                    .is_pod_for_mirror_pod_terminating_by_fullname(&fullname);
                let mirror = MirrorRef {
                    namespace: mirror.namespace().to_owned(),
                    name: mirror.name().to_owned(),
                    uid: mirror.uid().to_owned(),
                    fullname,
                };
                Some((mirror, terminating))
            })
            .collect();
        let active: Vec<&Pod> = self
            .active_pods(desired.iter().copied())
            .into_iter()
            .map(Arc::as_ref)
            .collect();
        let desired_pods: Vec<&Pod> = desired.iter().map(|p| Arc::as_ref(p)).collect();
        let plan = plan(&PlanInputs {
            desired: &desired_pods,
            active: &active,
            working: &working,
            running: &running,
            orphaned_mirrors: &orphaned_mirrors,
            provisional: !self.provisional_sources.is_empty(),
        });

        self.probes.cleanup_pods(&plan.possibly_running);
        self.status.remove_orphaned_statuses(&plan.desired);
        self.rejected.retain(|uid| plan.desired.contains(uid));
        for &pod in desired
            .iter()
            .filter(|p| plan.start.iter().any(|u| u == p.uid()))
        {
            let mirror = self.pods.mirror_of(pod).cloned();
            self.update(UpdateType::Create, pod.clone(), mirror);
        }
        for &pod in desired
            .iter()
            .filter(|p| plan.finish.iter().any(|u| u == p.uid()))
        {
            self.update(UpdateType::Kill, pod.clone(), None);
        }
        if !plan.cleanup.remove_orphans {
            log::debug!(
                "housekeeping: sources {:?} run from checkpoints; orphans wait",
                self.provisional_sources
            );
        }
        for orphan in plan.kill_runtime {
            log::info!(
                "housekeeping: stopping runtime pod {}/{} ({}) that no source wants",
                orphan.namespace,
                orphan.name,
                orphan.uid
            );
            self.workers
                .update_pod(UpdatePodOptions::kill_runtime_pod(orphan, Some(1)));
        }
        if plan.cleanup.remove_orphans {
            // Forgotten pods' allocations go; the `gc` thread writes the checkpoint.
            self.resize.retain(&plan.cleanup.keep);
            // Device plugins' devices go back once a pod is neither active nor has a
            // worker that may still run it (upstream frees them for the next
            // admission); the checkpoint is written only when one goes.
            if let Some(devices) = &self.devices {
                let keep: std::collections::BTreeSet<String> = active
                    .iter()
                    .map(|p| p.uid().to_owned())
                    .chain(plan.possibly_running.iter().cloned())
                    .collect();
                devices.retain_pods(&keep);
            }
        }
        let cleanup = plan.cleanup;
        if !cleanup.delete_mirrors.is_empty() || cleanup.remove_orphans {
            // Full: the gc thread is still on an earlier plan; the next round sends
            // a fresh one.
            let _ = self.deaths.try_send(GcRequest::Cleanup(cleanup));
        }
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
}
