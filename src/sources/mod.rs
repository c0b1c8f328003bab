//! Pod sources: where the pods this node should run come from.
//!
//! Each source (the API server watch, the static manifest folder) runs in its own
//! thread and sends [`PodUpdate`]s on a crossbeam channel to the sync loop. The kinds of
//! update follow the upstream kubelet's config package: a source tracks what it sent
//! before, so the sync loop only sees changes, already classified.
//!
//! `services` is not a pod source: it keeps the cluster's Services in a store that
//! the container environment reads (service variables).

pub mod apiserver;
pub mod checkpoint;
pub mod file;
pub mod merge;
pub mod services;
pub mod watched;

use std::sync::Arc;

use crate::api::pod::Pod;

/// Where a pod came from; also the value of the `kubernetes.io/config.source` annotation.
pub const SOURCE_API: &str = "api";
/// Static pods from `--pod-manifest-path`.
pub const SOURCE_FILE: &str = "file";

/// What happened to the pods of one update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOperation {
    /// Pods this source had not sent before.
    Add,
    /// Pods whose spec or metadata changed.
    Update,
    /// Pods whose deletion was requested (deletionTimestamp set): a graceful delete.
    Delete,
    /// Pods gone from the source: stop them now.
    Remove,
    /// Pods whose status changed in the API but nothing the kubelet acts on.
    Reconcile,
}

/// A batch of pods from one source with one operation.
#[derive(Clone, Debug)]
pub struct PodUpdate {
    /// Each pod version is one shared allocation from the source onwards.
    pub pods: Vec<Arc<Pod>>,
    pub op: PodOperation,
    /// [`SOURCE_API`] or [`SOURCE_FILE`].
    pub source: &'static str,
    /// The pods come from the source's checkpoint, not from the source itself (the
    /// API server has not answered since start-up): run them, but kill nothing the
    /// checkpoint may have missed until a real update arrives.
    pub provisional: bool,
}
