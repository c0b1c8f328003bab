//! The attachable volumes this node uses (upstream volume manager's
//! `GetVolumesInUse` and `MarkVolumesAsReportedInUse`), published by the `node`
//! thread in `status.volumesInUse` so that the attach/detach controller never
//! detaches a volume a pod needs or still has mounted.
//!
//! A CSI volume whose driver needs attaching is added (per pod UID) by the pod
//! worker that sets it up, before it waits, and dropped only once the pod's
//! tear-down unpublished it. A volume is *reported* once the API server holds a
//! node status listing it; until then its first mount waits (upstream
//! `VerifyControllerAttachedVolume`). Records left by an earlier run are read back
//! at start-up, so a restart never drops a mounted volume from the list.
//!
//! Shared by pod workers and the `node` thread behind one small lock, never held
//! across I/O. A change of the set wakes the `node` thread (a bounded(1) channel).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};

#[derive(Default)]
struct State {
    /// Unique volume name → UIDs of the pods that need or have mounted it.
    pods: BTreeMap<String, BTreeSet<String>>,
    /// The names the API server last showed in the node's `volumesInUse`.
    reported: BTreeSet<String>,
}

/// The shared set of attachable volumes in use; clones share it.
#[derive(Clone)]
pub struct VolumesInUse {
    state: Arc<Mutex<State>>,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
}

impl Default for VolumesInUse {
    fn default() -> Self {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        VolumesInUse {
            state: Arc::default(),
            wake_tx,
            wake_rx,
        }
    }
}

impl VolumesInUse {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the maps whole; a panic elsewhere cannot tear them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        // Full means a wake-up is already pending: nothing to add.
        let _ = self.wake_tx.try_send(());
    }

    /// Pod `uid` needs volume `name`.
    pub fn add(&self, name: &str, uid: &str) {
        let new = {
            let mut state = self.lock();
            let pods = state.pods.entry(name.to_owned()).or_default();
            let new = pods.is_empty();
            pods.insert(uid.to_owned());
            new
        };
        if new {
            self.wake();
        }
    }

    /// Pod `uid`'s volumes are all unmounted: it holds none any more.
    pub fn release_pod(&self, uid: &str) {
        let dropped = {
            let mut state = self.lock();
            let before = state.pods.len();
            for pods in state.pods.values_mut() {
                pods.remove(uid);
            }
            state.pods.retain(|_, pods| !pods.is_empty());
            state.pods.len() != before
        };
        if dropped {
            self.wake();
        }
    }

    /// True once the API server has `name` in the node's `volumesInUse`.
    pub fn is_reported(&self, name: &str) -> bool {
        self.lock().reported.contains(name)
    }

    /// The names to publish, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().pods.keys().cloned().collect()
    }

    /// The node's `volumesInUse` as the API server now has it.
    pub fn mark_reported(&self, names: &[String]) {
        self.lock().reported = names.iter().cloned().collect();
    }

    /// Receives a message after the set changed (for the `node` thread).
    pub fn changes(&self) -> Receiver<()> {
        self.wake_rx.clone()
    }
}

impl crate::node::inputs::VolumesInUseSource for VolumesInUse {
    fn volumes_in_use(&self) -> Vec<String> {
        self.names()
    }

    fn mark_reported_in_use(&self, names: &[String]) {
        self.mark_reported(names)
    }

    fn changes(&self) -> Receiver<()> {
        VolumesInUse::changes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_stays_until_every_pod_released_it_and_changes_wake() {
        let v = VolumesInUse::default();
        let wake = v.changes();
        v.add("kubernetes.io/csi/d^b", "pod-2");
        v.add("kubernetes.io/csi/d^a", "pod-1");
        v.add("kubernetes.io/csi/d^a", "pod-2");
        assert_eq!(
            v.names(),
            ["kubernetes.io/csi/d^a", "kubernetes.io/csi/d^b"]
        );
        assert!(wake.try_recv().is_ok());
        assert!(wake.try_recv().is_err(), "one pending wake-up at most");

        assert!(!v.is_reported("kubernetes.io/csi/d^a"));
        v.mark_reported(&v.names());
        assert!(v.is_reported("kubernetes.io/csi/d^a"));

        v.release_pod("pod-2");
        assert_eq!(v.names(), ["kubernetes.io/csi/d^a"]);
        assert!(wake.try_recv().is_ok());
        v.release_pod("pod-3");
        assert!(wake.try_recv().is_err(), "nothing dropped, no wake-up");
        v.release_pod("pod-1");
        assert!(v.names().is_empty());
    }
}
