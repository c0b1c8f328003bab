//! The status manager's per-pod cache of versioned statuses (upstream
//! `podStatuses` and `updateStatusInternal` in `status_manager.go`).
//!
//! Pure: every method takes `now`; no lock, clock or channel. [`StatusManager`] keeps
//! one `StatusCache` behind its mutex and signals the `status` thread whenever a
//! method returns true (a new version was stored).
//!
//! Invariants:
//! - versions of a pod start at 1 and only grow; a status equal (for the kubelet) to
//!   the cached one stores nothing, unless forced (the pod is being deleted, or it
//!   has just terminated);
//! - a status that would bring back a container terminated for good is dropped whole
//!   (kept as upstream's `updateStatusInternal`: it signals a stale caller);
//! - "finished" (TerminatePod ran) is sticky for non-static pods;
//! - statuses are stored normalised, with condition transition times carried over
//!   and the start time never changing once set.
//!
//! [`StatusManager`]: super::manager::StatusManager

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::api::meta::Time;
use crate::api::pod::{ContainerStatus, Pod, PodStatus};

use super::conditions::{carry_transition_times, containers_ready, pod_ready, replace_or_append};
use super::containers::runtime_container_id;
use super::normalize::{is_status_equal_by_kubelet, normalize_status};
use super::terminate::terminated_status;
use super::transition::check_container_state_transition;

/// One pod's newest status as the kubelet wants the API server to see it.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionedStatus {
    /// 1 for the first status of the pod, +1 for each change.
    pub version: u64,
    /// Normalised.
    pub status: PodStatus,
    /// The pod the status was set for, as the API watch delivered it (with its
    /// resourceVersion and API status: the sync may base its patch on it). The
    /// caller's shared version, not a copy.
    pub pod: Arc<Pod>,
    /// TerminatePod ran: no container of the pod will run again.
    pub finished: bool,
}

/// Cached statuses by pod UID.
#[derive(Debug, Default)]
pub struct StatusCache {
    pods: HashMap<String, VersionedStatus>,
}

/// True when `status` has the runtime container `id` (API form `<runtime>://<id>` or
/// the bare ID).
fn has_id(status: &ContainerStatus, id: &str) -> bool {
    status
        .container_id
        .as_deref()
        .is_some_and(|c| c == id || runtime_container_id(c) == id)
}

impl StatusCache {
    pub fn get(&self, uid: &str) -> Option<&VersionedStatus> {
        self.pods.get(uid)
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &VersionedStatus)> {
        self.pods.iter()
    }

    /// A status from a pod worker (upstream `SetPodStatus`): forced when the pod is
    /// being deleted, so the deletion path always gets a fresh sync.
    pub fn set_pod_status(&mut self, pod: &Arc<Pod>, status: PodStatus, now: Time) -> bool {
        let force = pod.deletion_requested();
        self.update(pod, status, force, false, now)
    }

    /// The final status of a pod whose containers are gone (upstream `TerminatePod`).
    pub fn terminate_pod(&mut self, pod: &Arc<Pod>, now: Time) -> bool {
        let base = self.pods.get(pod.uid()).map_or(&pod.status, |c| &c.status);
        let status = terminated_status(pod, base);
        self.update(pod, status, true, true, now)
    }

    /// A readiness probe result. Ignored before the pod's first status and for a
    /// container the status does not list; otherwise the container's `ready` and the
    /// pod's ContainersReady and Ready conditions are updated.
    pub fn set_container_readiness(
        &mut self,
        uid: &str,
        container_id: &str,
        ready: bool,
        now: Time,
    ) -> bool {
        let Some(cached) = self.pods.get(uid) else {
            log::debug!("readiness of container {container_id} of pod {uid} changed before the pod has a status");
            return false;
        };
        let mut status = cached.status.clone();
        let pod = cached.pod.clone();
        let slot = status
            .container_statuses
            .iter_mut()
            .chain(status.init_container_statuses.iter_mut())
            .find(|s| has_id(s, container_id));
        let Some(slot) = slot else {
            log::debug!("pod {uid} has no container {container_id}; readiness ignored");
            return false;
        };
        if slot.ready == ready {
            return false;
        }
        slot.ready = ready;
        let phase = status.phase.clone().unwrap_or_default();
        let init = &status.init_container_statuses;
        let regular = &status.container_statuses;
        let cr = containers_ready(&pod, init, regular, &phase);
        let r = pod_ready(&pod, &status.conditions, init, regular, &phase);
        replace_or_append(&mut status.conditions, cr);
        replace_or_append(&mut status.conditions, r);
        self.update(&pod, status, false, false, now)
    }

    /// A startup probe result: sets the container's `started`. Same guards as
    /// [`Self::set_container_readiness`].
    pub fn set_container_startup(
        &mut self,
        uid: &str,
        container_id: &str,
        started: bool,
        now: Time,
    ) -> bool {
        let Some(cached) = self.pods.get(uid) else {
            return false;
        };
        let mut status = cached.status.clone();
        let pod = cached.pod.clone();
        let slot = status
            .container_statuses
            .iter_mut()
            .chain(status.init_container_statuses.iter_mut())
            .find(|s| has_id(s, container_id));
        let Some(slot) = slot else {
            return false;
        };
        if slot.started == Some(started) {
            return false;
        }
        slot.started = Some(started);
        self.update(&pod, status, false, false, now)
    }

    /// Drops the statuses of pods not in `keep`; returns how many went.
    pub fn remove_orphans(&mut self, keep: &HashSet<String>) -> usize {
        let before = self.pods.len();
        self.pods.retain(|uid, _| keep.contains(uid));
        before - self.pods.len()
    }

    /// Drops one pod's status (its API object is gone or belongs to another pod).
    pub fn remove(&mut self, uid: &str) -> Option<VersionedStatus> {
        self.pods.remove(uid)
    }

    /// Stores `status` as the pod's next version unless it says nothing new; returns
    /// true when a version was stored.
    fn update(
        &mut self,
        pod: &Arc<Pod>,
        mut status: PodStatus,
        force: bool,
        finished: bool,
        now: Time,
    ) -> bool {
        let uid = pod.uid();
        let cached = self.pods.get(uid);
        let old = cached.map_or(&pod.status, |c| &c.status);
        let finished = finished || cached.is_some_and(|c| c.finished && !pod.is_static());
        if let Err(e) = check_container_state_transition(pod, old, &status) {
            log::warn!(
                "status update of pod {}/{} ({uid}) dropped: {e}",
                pod.namespace(),
                pod.name()
            );
            return false;
        }
        carry_transition_times(&mut status, old, now);
        status.start_time = old.start_time.or(status.start_time).or(Some(now));
        normalize_status(pod, &mut status);
        let unchanged =
            cached.is_some_and(|c| !force && is_status_equal_by_kubelet(&c.status, &status));
        if unchanged {
            // Nothing new to send, but hold the caller's (newer) version of the pod:
            // else an old version stays alive for this cache alone.
            if let Some(c) = self.pods.get_mut(uid) {
                if !Arc::ptr_eq(&c.pod, pod) {
                    c.pod = Arc::clone(pod);
                }
            }
            return false;
        }
        let version = cached.map_or(1, |c| c.version + 1);
        self.pods.insert(
            uid.to_owned(),
            VersionedStatus {
                version,
                status,
                pod: Arc::clone(pod),
                finished,
            },
        );
        true
    }
}

#[cfg(test)]
mod tests;
