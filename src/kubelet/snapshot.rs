//! The desired pods as other threads may read them: the sync loop publishes a list
//! of the pod manager's shared pods (no pod is copied) after config changes (once a burst of updates is drained, at least every sync
//! period), and the node server's `/pods` and log/exec lookups read it. Writers: the
//! `sync` thread only. Readers: server connection threads. The lock is held only to
//! swap or clone the list, never across I/O.

use std::sync::{Arc, RwLock};

use crate::api::pod::Pod;

/// A shared, replace-on-write copy of the desired pods (mirror pods excluded).
#[derive(Clone, Default)]
pub struct PodSnapshot {
    pods: Arc<RwLock<Arc<Vec<Arc<Pod>>>>>,
}

impl PodSnapshot {
    pub fn new() -> PodSnapshot {
        PodSnapshot::default()
    }

    /// Replaces the published pods.
    pub fn publish<'a>(&self, pods: impl Iterator<Item = &'a Arc<Pod>>) {
        let mut list: Vec<Arc<Pod>> = pods.cloned().collect();
        list.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        *self.pods.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(list);
    }

    /// The pods as last published, sorted by namespace and name.
    pub fn pods(&self) -> Arc<Vec<Arc<Pod>>> {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The pod named `namespace/name`, if desired.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods()
            .iter()
            .find(|p| p.namespace() == namespace && p.name() == name)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    #[test]
    fn publish_replaces_and_sorts() {
        let snap = PodSnapshot::new();
        snap.publish([pod("b", "x"), pod("a", "y")].iter());
        let names: Vec<String> = snap.pods().iter().map(|p| p.full_name()).collect();
        assert_eq!(names.len(), 2);
        assert_eq!(snap.pods()[0].namespace(), "a");
        assert!(snap.find("b", "x").is_some());
        snap.publish(std::iter::empty());
        assert!(snap.find("b", "x").is_none());
    }
}
