//! The messages and records of the pod workers (upstream pod_workers.go types).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::api::pod::{Pod, PodStatus};
use crate::runtime::model::RunningPod;

/// Why an update was sent; the worker only looks at Create (UID reuse) and Kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateType {
    Sync,
    Update,
    Create,
    Kill,
}

/// What the worker will do with the pod next, from its status at consumption time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkType {
    Sync,
    Terminating,
    Terminated,
}

impl WorkType {
    /// The work's name in metrics.
    pub fn name(self) -> &'static str {
        match self {
            WorkType::Sync => "sync",
            WorkType::Terminating => "terminating",
            WorkType::Terminated => "terminated",
        }
    }
}

/// Edits the generated status at kill time (eviction sets Failed/Evicted, ...).
pub type StatusFn = Arc<dyn Fn(&mut PodStatus) + Send + Sync>;

/// Options of a kill request.
#[derive(Clone, Default)]
pub struct KillPodOptions {
    /// Dropped (closed) when the pod has terminated, or at once when it already has.
    pub completed: Option<Sender<()>>,
    pub evict: bool,
    pub status_fn: Option<StatusFn>,
    /// A grace period that overrides the pod's own.
    pub grace_override: Option<i64>,
}

impl fmt::Debug for KillPodOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KillPodOptions")
            .field("evict", &self.evict)
            .field("grace_override", &self.grace_override)
            .field("completed", &self.completed.is_some())
            .field("status_fn", &self.status_fn.is_some())
            .finish()
    }
}

/// One update for a pod worker (upstream UpdatePodOptions).
#[derive(Clone, Debug)]
pub struct UpdatePodOptions {
    pub update_type: UpdateType,
    /// When the update entered litelet (latency metrics only).
    pub start_time: Option<Instant>,
    /// The pod; None only for runtime-only kills. Shared with the pod manager and
    /// the sources: a pod version is one allocation, never deep-copied per holder.
    pub pod: Option<Arc<Pod>>,
    pub mirror_pod: Option<Arc<Pod>>,
    /// A pod only the runtime knows; valid only with `Kill` and no `pod`.
    pub running_pod: Option<RunningPod>,
    pub kill: Option<KillPodOptions>,
}

impl UpdatePodOptions {
    /// An update of the given type for `pod`.
    pub fn new(update_type: UpdateType, pod: Arc<Pod>) -> UpdatePodOptions {
        UpdatePodOptions {
            update_type,
            start_time: Some(Instant::now()),
            pod: Some(pod),
            mirror_pod: None,
            running_pod: None,
            kill: None,
        }
    }

    /// A kill of a pod only the runtime knows about.
    pub fn kill_runtime_pod(running: RunningPod, grace_override: Option<i64>) -> UpdatePodOptions {
        UpdatePodOptions {
            update_type: UpdateType::Kill,
            start_time: Some(Instant::now()),
            pod: None,
            mirror_pod: None,
            running_pod: Some(running),
            kill: Some(KillPodOptions {
                grace_override,
                ..Default::default()
            }),
        }
    }
}

/// A worker's state as SyncKnownPods reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodWorkerSync {
    pub state: WorkType,
    pub orphan: bool,
    pub has_config: bool,
    pub is_static: bool,
}

/// What a successful `sync_pod` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// The pod reached a terminal phase.
    pub terminal: bool,
    /// A step waits for a back-off that ends this far ahead (an image pull): sync
    /// again then rather than after the resync period.
    pub retry_in: Option<Duration>,
}

impl From<bool> for Synced {
    fn from(terminal: bool) -> Synced {
        Synced {
            terminal,
            retry_in: None,
        }
    }
}

/// A sync function's own error, shared so the worker can keep and log it; its
/// `source()` chain reaches the failing seam's value.
pub type SyncCause = Arc<dyn std::error::Error + Send + Sync>;

/// Why a sync function failed, as the worker needs it to pick the requeue.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SyncError {
    /// The operation saw its cancellation token and stopped.
    #[error("context canceled")]
    Canceled,
    /// The pod network is not ready (retried after about a second).
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    /// Failed steps that a back-off allows again this far ahead (a failed image pull).
    #[error("{0}")]
    RetryAfter(String, Duration),
    /// The sync function failed (the kubelet's `PodSyncError`).
    #[error(transparent)]
    Pod(SyncCause),
    /// The worker itself could not run the sync (no pod, no fresh status).
    #[error("{0}")]
    Other(String),
}
