//! The static pod source: the `static-pods` thread reads the manifests in
//! `--pod-manifest-path` and sends [`PodUpdate`]s (source [`SOURCE_FILE`](crate::sources::SOURCE_FILE)) to the sync
//! loop, the upstream kubelet's file source (`pkg/kubelet/config/file.go`,
//! `file_linux.go`, `common.go`).
//!
//! Pieces, pure first:
//! - `parse`: one file's bytes → its pods (YAML or JSON; a `Pod`, or a `PodList`/`List`
//!   with `items`), or one [`ManifestError`] naming the file and the field;
//! - `validate`: the subset of the API server's pod validation a static pod needs;
//! - `defaults`: the static pod rules (name `<name>-<node>`, UID, annotations,
//!   NoExecute toleration, node name) and the API server's defaults, only where unset;
//! - `uid`: the UID hash;
//! - `dir`: reading the folder (hidden files skipped, name order) and [`Manifests`],
//!   which turns per-file results into one snapshot plus an error report;
//! - `watch`: the thread: inotify + a periodic resync, retrying a missing folder.
//!
//! Every change (and every resync) produces a full snapshot of the folder, which
//! [`SourcePods::apply_snapshot`](crate::sources::merge::SourcePods::apply_snapshot)
//! turns into ADD/UPDATE/REMOVE updates; the first snapshot is always sent, even
//! empty, so the sync loop learns that the source is ready.
//!
//! Invariants:
//! - a bad file (unreadable, bad YAML, wrong kind, invalid field, duplicate pod name)
//!   never stops the thread or the other static pods; it is reported once per change
//!   in the log with its path and field;
//! - a file that turns bad keeps the pods of its last good version while it exists
//!   (an editor's half-written save must not restart a pod); deleting it removes them;
//! - two pods with the same namespace/name: the one from the file first in name order
//!   wins, the other is reported naming both files;
//! - a missing folder is not fatal: the snapshot is empty and the folder is looked for
//!   again with backoff; once it appears, its pods are added.
//!
//! Channels: sends on `updates` (to the sync loop); `shutdown` (a message or its
//! disconnection) ends the thread promptly. State is owned by `static-pods` alone.

mod defaults;
mod dir;
mod document;
mod parse;
mod uid;
mod validate;
mod watch;

/// RFC 1123 name checks, shared with the pod hostname rules (`runtime/hosts.rs`).
pub(crate) use validate::{is_dns_label, is_dns_subdomain};

use std::io;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::fsutil::SharedIoError;
use crate::sources::PodUpdate;

pub use dir::{load, read_manifests, ManifestFile, Manifests};
pub use parse::parse_manifest;
pub use uid::static_pod_uid;

/// Largest manifest file read; bigger ones are reported, not read.
pub const MAX_MANIFEST_BYTES: u64 = 10 * 1024 * 1024;

/// Tunables of the source; [`Options::default`] has the production values.
#[derive(Clone, Debug)]
pub struct Options {
    /// Full re-read even without inotify events (upstream's `fileCheckFrequency`).
    pub resync: Duration,
    /// First wait before looking for a missing folder again; doubles up to `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Quiet time after an inotify event before re-reading, so one save is one read.
    pub debounce: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(20),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(20),
            debounce: Duration::from_millis(100),
        }
    }
}

/// Why a manifest file (or one pod in it) was not accepted. Each variant names the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read (permissions, too big, vanished mid-read).
    #[error("static pod manifest {}: read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: SharedIoError,
    },
    /// Not YAML or JSON at all, or empty.
    #[error("static pod manifest {}: not valid yaml or json: {reason}", path.display())]
    Syntax { path: PathBuf, reason: String },
    /// A field is missing, of the wrong type or not allowed. `field` is a path such as
    /// `spec.containers[0].image` (prefixed with `items[N].` inside a list).
    #[error("static pod manifest {}: {field}: {reason}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// Another manifest (`first`, earlier in name order) already defines this pod.
    #[error(
        "static pod manifest {}: pod {namespace}/{name} is already defined by {}; ignored",
        path.display(),
        first.display()
    )]
    Duplicate {
        path: PathBuf,
        first: PathBuf,
        namespace: String,
        name: String,
    },
}

impl ManifestError {
    /// The manifest file this error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. }
            | Self::Syntax { path, .. }
            | Self::Field { path, .. }
            | Self::Duplicate { path, .. } => path,
        }
    }

    /// The offending field, for [`ManifestError::Field`].
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Starts the `static-pods` thread with production settings.
pub fn spawn(
    dir: PathBuf,
    node_name: String,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    spawn_with(dir, node_name, Options::default(), updates, shutdown)
}

/// Starts the `static-pods` thread (and its small `static-stop` helper, which turns
/// `shutdown` into a wake-up of the thread's `poll`). The handle joins `static-pods`,
/// which ends soon after `shutdown` fires or when `updates` has no receiver.
pub fn spawn_with(
    dir: PathBuf,
    node_name: String,
    options: Options,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    watch::spawn(dir, node_name, options, updates, shutdown)
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
