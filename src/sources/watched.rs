//! The UIDs of the pods the API server's pod watch currently shows for this node,
//! shared read-only with other threads.
//!
//! Writer: the `api-watch` thread, which updates the set before it sends the sync
//! loop the matching update, so no reader learns of a pod before the set holds it.
//! Readers: the `status` thread, which must tell a 403 of the Node authorizer for a
//! pod that is gone (forget it) from one for a pod the authorizer has not caught up
//! with yet (a pod bound a moment ago: retry). The lock is held only to look up or
//! to change the set, never across I/O.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// A shared set of pod UIDs; clones share it.
#[derive(Clone, Debug, Default)]
pub struct WatchedPods {
    uids: Arc<RwLock<HashSet<String>>>,
}

impl WatchedPods {
    pub fn new() -> WatchedPods {
        WatchedPods::default()
    }

    /// True when the watch's last word on `uid` is that the pod exists.
    pub fn shows(&self, uid: &str) -> bool {
        self.uids
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(uid)
    }

    pub(crate) fn insert(&self, uid: &str) {
        let mut uids = self.uids.write().unwrap_or_else(|p| p.into_inner());
        if !uids.contains(uid) {
            uids.insert(uid.to_owned());
        }
    }

    pub(crate) fn remove(&self, uid: &str) {
        self.uids
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    /// Replaces the whole set (after a list).
    pub(crate) fn replace<'a>(&self, uids: impl Iterator<Item = &'a String>) {
        let fresh: HashSet<String> = uids.cloned().collect();
        *self.uids.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_set_that_a_list_replaces() {
        let watched = WatchedPods::new();
        let reader = watched.clone();
        watched.insert("a");
        watched.insert("b");
        assert!(reader.shows("a") && reader.shows("b"));
        watched.remove("a");
        assert!(!reader.shows("a"));
        let listed = ["c".to_owned()];
        watched.replace(listed.iter());
        assert!(!reader.shows("b"));
        assert!(reader.shows("c"));
    }
}
