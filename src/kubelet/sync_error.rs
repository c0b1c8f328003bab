//! `PodSyncError`: why one of the kubelet's sync functions failed, with each seam's
//! own error wrapped whole (`#[from]`): volumes, pod cgroups, the allocation
//! checkpoint, CRI, and the runtime manager's outcome.
//!
//! The pod workers see it as their [`SyncError`] (which decides the requeue): the
//! classifications they act on keep their variants, the rest travels as a shared
//! error whose `source()` chain still reaches the seam's value.

use std::sync::Arc;
use std::time::Duration;

use super::deps::PodVolumesError;
use crate::cgroups::CgroupError;
use crate::cri::CriError;
use crate::pod_workers::SyncError;
use crate::runtime::resize::CheckpointError;
use crate::runtime::result::SyncOutcome;

/// A failed sync function, by the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum PodSyncError {
    /// The pod worker cancelled the sync (a kill or a shorter grace period).
    #[error("context canceled")]
    Canceled,
    /// The pod network is not ready (retried after about a second).
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    /// Resize admission could not record the pod's allocated resources.
    #[error("cannot record the pod's allocated resources: {0}")]
    Allocation(#[from] CheckpointError),
    /// The pod cgroup could not be created.
    #[error("unable to ensure pod container exists: {0}")]
    PodCgroup(#[source] CgroupError),
    /// The pod cgroup could not be removed.
    #[error("removing pod cgroup: {0}")]
    RemovePodCgroup(#[source] CgroupError),
    /// `<root-dir>/pods/<uid>/{volumes,plugins}` could not be made.
    #[error("error making pod data directories: {0}")]
    PodDirs(#[from] std::io::Error),
    /// Volume setup, teardown or a pull secret failed.
    #[error(transparent)]
    Volumes(#[from] PodVolumesError),
    /// A runtime sync step failed; `retry_in` when a back-off decides the next try.
    #[error("{outcome}")]
    Runtime {
        outcome: SyncOutcome,
        retry_in: Option<Duration>,
    },
    /// Stopping the pod's containers or sandboxes failed.
    #[error("error killing pod: {0}")]
    Kill(SyncOutcome),
    /// Stopping a pod only the runtime knows failed.
    #[error("error killing orphaned pod: {0}")]
    KillOrphan(SyncOutcome),
    /// The runtime could not be asked for the pod's state after the kill.
    #[error("unable to read pod status after kill: {0}")]
    StatusAfterKill(#[from] CriError),
    /// Containers still run after a kill that reported success.
    #[error("detected running containers after a successful KillPod, CRI violation: {0:?}")]
    StillRunning(Vec<String>),
}

impl From<PodSyncError> for SyncError {
    fn from(err: PodSyncError) -> SyncError {
        match err {
            PodSyncError::Canceled => SyncError::Canceled,
            PodSyncError::NetworkNotReady(problem) => SyncError::NetworkNotReady(problem),
            PodSyncError::Runtime {
                outcome,
                retry_in: Some(after),
            } => SyncError::RetryAfter(outcome.to_string(), after),
            other => SyncError::Pod(Arc::new(other)),
        }
    }
}
