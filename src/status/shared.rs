//! What the status manager's handles (`manager.rs`) and its `status` thread
//! (`sync.rs`) share: the cache and sent versions behind their mutexes, the hooks
//! into the rest of the kubelet, and the thread's timing. Kept apart so that the
//! thread's file needs nothing from the handles' file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::api::pod::Pod;

use super::cache::StatusCache;

/// How often every cached status is checked against the API server, whatever changed.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10);
/// First delay before a failed sync of a pod is retried; doubles up to the resync period.
pub const RETRY_INITIAL: Duration = Duration::from_millis(500);

/// Answer to a question about a pod, by UID.
pub type PodPredicate = Arc<dyn Fn(&str) -> bool + Send + Sync>;
/// The API server's copy of a pod, by UID (for a static pod: its mirror pod).
pub type PodLookup = Arc<dyn Fn(&str) -> Option<Pod> + Send + Sync>;

/// What the status manager asks the rest of the kubelet.
#[derive(Clone)]
pub struct PodHooks {
    /// Could a container of this pod still be running (or start)? While true a
    /// terminal phase is not sent (upstream `PodCouldHaveRunningContainers`).
    pub could_have_running_containers: PodPredicate,
    /// Has the pod finished terminating, so that its API object may be deleted
    /// (nothing runs, nothing left to clean)? Asked only for pods whose API copy has
    /// a deletionTimestamp and a terminal phase.
    pub may_delete: PodPredicate,
    /// The pod as the API watch last delivered it, if the caller keeps one. The 10 s
    /// reconcile uses it to notice a status someone else changed; without it only
    /// unsent versions, missing pods and pending deletions are looked at.
    pub api_pod: Option<PodLookup>,
    /// Does the node's pod watch still show this pod? A 403 for such a pod means the
    /// Node authorizer has not caught up with a fresh binding yet: retried, not taken
    /// as the pod being gone. Without it every 403 means gone.
    pub watch_shows: Option<PodPredicate>,
}

impl PodHooks {
    pub fn new(could_have_running_containers: PodPredicate, may_delete: PodPredicate) -> Self {
        Self {
            could_have_running_containers,
            may_delete,
            api_pod: None,
            watch_shows: None,
        }
    }

    pub fn with_api_pod(mut self, lookup: PodLookup) -> Self {
        self.api_pod = Some(lookup);
        self
    }

    pub fn with_watch(mut self, shows: PodPredicate) -> Self {
        self.watch_shows = Some(shows);
        self
    }
}

/// Timing of the `status` thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Period of the full reconcile.
    pub resync_period: Duration,
    /// First retry delay after a failed sync of a pod (doubling, jittered).
    pub retry_initial: Duration,
    /// Cap of the retry delay.
    pub retry_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync_period: RESYNC_PERIOD,
            retry_initial: RETRY_INITIAL,
            retry_max: RESYNC_PERIOD,
        }
    }
}

/// State shared by the handles and the `status` thread.
pub(super) struct Shared {
    pub(super) cache: Mutex<StatusCache>,
    /// Wakes the `status` thread; `None` in standalone mode.
    pub(super) wake: Option<Sender<()>>,
    /// The version of each pod's status the API server has (or that had nothing to
    /// go to), written by the `status` thread, read by `StatusManager::wait_sent`.
    /// When both are held, `cache` is taken first.
    pub(super) sent: Mutex<HashMap<String, u64>>,
    /// Full reconcile passes the `status` thread has finished (see
    /// `StatusManager::reconcile_passes`).
    reconcile_passes: AtomicU64,
}

impl Shared {
    /// A fresh cache; `wake` is `None` in standalone mode.
    pub(super) fn new(wake: Option<Sender<()>>) -> Self {
        Self {
            cache: Mutex::new(StatusCache::default()),
            wake,
            sent: Mutex::default(),
            reconcile_passes: AtomicU64::new(0),
        }
    }

    /// The cache. Its methods are pure and short, so a poisoned lock still holds a
    /// consistent map and is used as is.
    pub(super) fn cache(&self) -> MutexGuard<'_, StatusCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The versions the API server has (see `sent`).
    pub(super) fn sent(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more finished full reconcile pass.
    pub(super) fn reconcile_passed(&self) {
        self.reconcile_passes.fetch_add(1, Ordering::Relaxed);
    }

    /// How many full reconcile passes have finished.
    pub(super) fn reconcile_passes(&self) -> u64 {
        self.reconcile_passes.load(Ordering::Relaxed)
    }
}
