//! The status manager (upstream `status_manager.go`): the per-pod status cache every
//! pod worker, prober and the sync loop write to, and the `status` thread that sends
//! it to the API server.
//!
//! [`StatusManager`] is a cheap, cloneable handle; any thread calls it. Its cache
//! ([`StatusCache`](super::cache::StatusCache), pure) sits behind one mutex that is
//! held only for in-memory work, never across I/O. Whenever a call stores a new
//! version it wakes the `status` thread through a channel of capacity 1 (a full
//! channel already holds a wake-up, so many changes coalesce into one sync pass).
//! Without an API server ([`StatusManager::standalone`]) the cache works the same and
//! nothing is sent.
//!
//! The `status` thread (`sync.rs`) owns everything about what the API server has: the
//! version last sent for each pod, retry backoffs, pending deletions. It reads the
//! cache through the same mutex and may drop entries of pods whose API object is gone.
//! It counts the full reconcile passes it finishes
//! ([`StatusManager::reconcile_passes`]), so that a test shows nothing is sent by
//! waiting for passes rather than for time.
//!
//! Questions the manager cannot answer itself come through [`PodHooks`], answered by
//! the pod workers: could this pod still have running containers, and may its API
//! object be deleted now.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::api::meta::Time;
use crate::api::pod::{Pod, PodStatus};
use crate::api::ApiClient;

use super::cache::VersionedStatus;
use super::shared::Shared;
pub use super::shared::{Options, PodHooks, PodLookup, PodPredicate, RESYNC_PERIOD, RETRY_INITIAL};
use super::sync;

/// A status manager with its `status` thread not started yet (see
/// [`StatusManager::unstarted`]).
pub struct UnstartedStatusManager {
    shared: Arc<Shared>,
    wake_rx: Receiver<()>,
}

impl UnstartedStatusManager {
    /// A handle sharing the cache the thread will send from.
    pub fn handle(&self) -> StatusManager {
        StatusManager {
            shared: self.shared.clone(),
        }
    }

    /// Starts the `status` thread; it ends when `shutdown` disconnects (after the
    /// request in flight, if any).
    pub fn spawn(
        self,
        client: ApiClient,
        hooks: PodHooks,
        options: Options,
        shutdown: Receiver<()>,
    ) -> std::io::Result<JoinHandle<()>> {
        let UnstartedStatusManager { shared, wake_rx } = self;
        crate::process::spawn_essential("status", 1024 * 1024, move || {
            sync::run(shared, client, hooks, options, wake_rx, shutdown)
        })
    }
}

/// Handle to the status manager. Clones share one cache.
#[derive(Clone)]
pub struct StatusManager {
    shared: Arc<Shared>,
}

impl StatusManager {
    /// A manager without an API server: statuses are cached, never sent.
    pub fn standalone() -> Self {
        Self {
            shared: Arc::new(Shared::new(None)),
        }
    }

    /// Starts the `status` thread sending statuses through `client`; it ends when
    /// `shutdown` disconnects (after the request in flight, if any).
    pub fn spawn(
        client: ApiClient,
        hooks: PodHooks,
        options: Options,
        shutdown: Receiver<()>,
    ) -> std::io::Result<(StatusManager, JoinHandle<()>)> {
        let unstarted = StatusManager::unstarted();
        let manager = unstarted.handle();
        let handle = unstarted.spawn(client, hooks, options, shutdown)?;
        Ok((manager, handle))
    }

    /// A manager for an API server whose `status` thread starts later: its handle can
    /// be given to the pod workers before the hooks (which ask those workers) exist.
    /// Statuses set before the start are cached and sent once it runs.
    pub fn unstarted() -> UnstartedStatusManager {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared::new(Some(wake_tx)));
        UnstartedStatusManager { shared, wake_rx }
    }

    fn changed(&self, changed: bool) {
        if !changed {
            return;
        }
        if let Some(wake) = &self.shared.wake {
            // Full: a wake-up is already pending and will see this change too.
            let _ = wake.try_send(());
        }
    }

    /// Caches `status` as the pod's newest (upstream `SetPodStatus`).
    pub fn set_pod_status(&self, pod: &Arc<Pod>, status: PodStatus) {
        if status.phase == Some(crate::api::pod::PodPhase::Running) {
            crate::metrics::pod_running(pod.uid(), std::time::Instant::now());
        }
        let changed = self.shared.cache().set_pod_status(pod, status, Time::now());
        self.changed(changed);
    }

    /// A readiness probe result for the container with this ID (`<runtime>://<id>`
    /// or bare); ignored before the pod's first status.
    pub fn set_container_readiness(&self, uid: &str, container_id: &str, ready: bool) {
        let changed =
            self.shared
                .cache()
                .set_container_readiness(uid, container_id, ready, Time::now());
        self.changed(changed);
    }

    /// A startup probe result for the container with this ID.
    pub fn set_container_startup(&self, uid: &str, container_id: &str, started: bool) {
        let changed =
            self.shared
                .cache()
                .set_container_startup(uid, container_id, started, Time::now());
        self.changed(changed);
    }

    /// Called once the pod's containers are gone: every container without a known
    /// exit is reported lost, a non-static pod gets a terminal phase, and the pod is
    /// marked finished (its API object may then be deleted).
    pub fn terminate_pod(&self, pod: &Arc<Pod>) {
        let changed = self.shared.cache().terminate_pod(pod, Time::now());
        self.changed(changed);
    }

    /// The pod's cached status.
    pub fn get_pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.shared.cache().get(uid).map(|v| v.status.clone())
    }

    /// The phase of the pod's cached status, without copying the status.
    pub fn cached_phase(&self, uid: &str) -> Option<crate::api::pod::PodPhase> {
        self.shared
            .cache()
            .get(uid)
            .and_then(|v| v.status.phase.clone())
    }

    /// The pod's cached status with its version and finished flag.
    pub fn versioned_status(&self, uid: &str) -> Option<VersionedStatus> {
        self.shared.cache().get(uid).cloned()
    }

    /// Whether the API server has the pod's newest cached status (the `status` thread
    /// dealt with that version). True without an API server and for a pod the cache
    /// no longer has.
    pub fn is_sent(&self, uid: &str) -> bool {
        if self.shared.wake.is_none() {
            return true;
        }
        let Some(version) = self.shared.cache().get(uid).map(|v| v.version) else {
            return true;
        };
        self.shared.sent().get(uid).is_some_and(|&s| s >= version)
    }

    /// Waits until the API server has the newest status of every pod in `uids`, or
    /// until `deadline`; returns the pods still unsent. Wakes the `status` thread
    /// while it waits, so a terminal phase held back until the pod's containers
    /// stopped goes out as soon as it may. For the node shutdown: the statuses must be
    /// out before the machine goes down.
    pub fn wait_sent(&self, uids: &[String], deadline: Instant) -> Vec<String> {
        loop {
            let pending: Vec<String> = uids.iter().filter(|u| !self.is_sent(u)).cloned().collect();
            if pending.is_empty() || Instant::now() >= deadline {
                return pending;
            }
            self.changed(true);
            let left = deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    /// How many full reconcile passes the `status` thread has finished (0 before it
    /// runs, and without an API server). A full pass looks at every cached pod, so
    /// once two more have finished after a change, one of them started after it:
    /// whatever the manager would send for that change is sent by then. Tests wait on
    /// this to show that nothing is sent, instead of sleeping.
    pub fn reconcile_passes(&self) -> u64 {
        self.shared.reconcile_passes()
    }

    /// Forgets the statuses of pods not in `keep` (the pods the kubelet still knows).
    pub fn remove_orphaned_statuses(&self, keep: &HashSet<String>) {
        let n = self.shared.cache().remove_orphans(keep);
        if n > 0 {
            log::debug!("removed {n} orphaned pod statuses");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(uid.into());
        Arc::new(p)
    }

    #[test]
    fn standalone_caches_without_sending() {
        let m = StatusManager::standalone();
        m.set_pod_status(&pod("u1"), PodStatus::default());
        assert_eq!(m.versioned_status("u1").map(|v| v.version), Some(1));
        assert!(m.get_pod_status("u1").is_some());
        m.remove_orphaned_statuses(&HashSet::new());
        assert!(m.get_pod_status("u1").is_none());
        assert_eq!(m.reconcile_passes(), 0, "no status thread, no passes");
    }

    #[test]
    fn a_status_counts_as_sent_once_the_status_thread_recorded_its_version() {
        let unstarted = StatusManager::unstarted();
        let m = unstarted.handle();
        let uids = vec!["u1".to_owned()];
        m.set_pod_status(&pod("u1"), PodStatus::default());
        assert!(!m.is_sent("u1"));
        let deadline = Instant::now() + Duration::from_millis(150);
        assert_eq!(
            m.wait_sent(&uids, deadline),
            uids,
            "nothing sent by the deadline"
        );
        assert!(Instant::now() >= deadline);
        // The wait woke the status thread.
        assert!(unstarted.wake_rx.try_recv().is_ok());
        let version = m.versioned_status("u1").unwrap().version;
        m.shared.sent().insert("u1".into(), version);
        assert!(m.is_sent("u1"));
        assert!(m.wait_sent(&uids, Instant::now()).is_empty());
        // A newer version is not sent yet.
        let newer = PodStatus {
            message: Some("newer".into()),
            ..Default::default()
        };
        m.set_pod_status(&pod("u1"), newer);
        assert!(!m.is_sent("u1"));
        // Without an API server, and for a forgotten pod, there is nothing to wait for.
        assert!(m.is_sent("gone"));
        let standalone = StatusManager::standalone();
        standalone.set_pod_status(&pod("u2"), PodStatus::default());
        assert!(standalone.is_sent("u2"));
    }

    #[test]
    fn many_changes_leave_one_wake_up() {
        // Changes before the thread runs coalesce into one pending wake-up.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let m = StatusManager {
            shared: Arc::new(Shared::new(Some(tx))),
        };
        for i in 0..20 {
            let status = PodStatus {
                message: Some(format!("m{i}")),
                ..Default::default()
            };
            m.set_pod_status(&pod("u1"), status);
        }
        assert_eq!(rx.len(), 1);
        assert_eq!(m.versioned_status("u1").map(|v| v.version), Some(20));
        // An unchanged status does not wake the thread.
        rx.try_recv().unwrap();
        m.set_pod_status(
            &pod("u1"),
            PodStatus {
                message: Some("m19".into()),
                ..Default::default()
            },
        );
        assert!(rx.is_empty());
    }
}
