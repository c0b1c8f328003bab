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
    /// The pod; None only for runtime-only kills.
    pub pod: Option<Pod>,
    pub mirror_pod: Option<Pod>,
    /// A pod only the runtime knows; valid only with `Kill` and no `pod`.
    pub running_pod: Option<RunningPod>,
    pub kill: Option<KillPodOptions>,
}

impl UpdatePodOptions {
    /// An update of the given type for `pod`.
    pub fn new(update_type: UpdateType, pod: Pod) -> UpdatePodOptions {
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

/// Why a sync function failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncError {
    /// The operation saw its cancellation token and stopped.
    Canceled,
    /// The pod network is not ready (retried after about a second).
    NetworkNotReady(String),
    /// Failed steps that a back-off allows again this far ahead (a failed image pull).
    RetryAfter(String, Duration),
    Other(String),
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Canceled => f.write_str("context canceled"),
            SyncError::NetworkNotReady(msg) => write!(f, "network is not ready: {msg}"),
            SyncError::RetryAfter(msg, _) | SyncError::Other(msg) => f.write_str(msg),
        }
    }
}
