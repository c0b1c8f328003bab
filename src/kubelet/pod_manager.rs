//! The desired pods (upstream pod manager): every pod the sources want on this node,
//! by UID, and the mirror pods of static pods, by full name.
//!
//! Owned by the sync loop thread; nothing else touches it. Pods are the sources'
//! shared versions (`Arc<Pod>`): what goes to the pod workers is the same allocation.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::pod::{Pod, CONFIG_HASH_ANNOTATION_KEY, CONFIG_MIRROR_ANNOTATION_KEY};

#[derive(Default)]
pub struct PodManager {
    pods: HashMap<String, Arc<Pod>>,
    mirrors: HashMap<String, Arc<Pod>>,
}

impl PodManager {
    pub fn new() -> PodManager {
        PodManager::default()
    }

    /// Adds or replaces a pod (a mirror pod goes to the mirror table).
    pub fn upsert(&mut self, pod: Arc<Pod>) {
        if pod.is_mirror() {
            self.mirrors.insert(pod.full_name(), pod);
        } else {
            self.pods.insert(pod.uid().to_owned(), pod);
        }
    }

    pub fn remove(&mut self, pod: &Pod) {
        if pod.is_mirror() {
            let fullname = pod.full_name();
            if self
                .mirrors
                .get(&fullname)
                .is_some_and(|m| m.uid() == pod.uid())
            {
                self.mirrors.remove(&fullname);
            }
        } else {
            self.pods.remove(pod.uid());
        }
    }

    pub fn get(&self, uid: &str) -> Option<&Arc<Pod>> {
        self.pods.get(uid)
    }

    /// All desired pods but mirrors.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods.values()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The mirror pod of a static pod, if the API has one.
    pub fn mirror_of(&self, pod: &Pod) -> Option<&Arc<Pod>> {
        self.mirrors.get(&pod.full_name())
    }

    /// The static pod a mirror pod stands for.
    pub fn static_of(&self, mirror: &Pod) -> Option<&Arc<Pod>> {
        let fullname = mirror.full_name();
        self.pods
            .values()
            .find(|p| p.is_static() && p.full_name() == fullname)
    }

    /// Full names of mirror pods whose static pod is gone, or that mirror an older
    /// version of it.
    pub fn orphaned_mirror_fullnames(&self) -> Vec<String> {
        self.mirrors
            .iter()
            .filter(|(fullname, mirror)| {
                let hash = mirror.metadata.annotation(CONFIG_MIRROR_ANNOTATION_KEY);
                !self.pods.values().any(|p| {
                    p.is_static()
                        && p.full_name() == **fullname
                        && p.metadata.annotation(CONFIG_HASH_ANNOTATION_KEY) == hash
                })
            })
            .map(|(fullname, _)| fullname.clone())
            .collect()
    }

    pub fn mirror_by_fullname(&self, fullname: &str) -> Option<&Arc<Pod>> {
        self.mirrors.get(fullname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::CONFIG_SOURCE_ANNOTATION_KEY;

    fn pod(uid: &str, name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("kube-system".into());
        pod
    }

    #[test]
    fn static_and_mirror_pods_find_each_other() {
        let mut manager = PodManager::new();
        let mut static_pod = pod("s1", "etcd-edge");
        static_pod
            .metadata
            .annotations
            .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), "file".into());
        static_pod
            .metadata
            .annotations
            .insert(CONFIG_HASH_ANNOTATION_KEY.into(), "s1".into());
        let mut mirror = pod("m1", "etcd-edge");
        mirror
            .metadata
            .annotations
            .insert(CONFIG_MIRROR_ANNOTATION_KEY.into(), "s1".into());
        manager.upsert(Arc::new(static_pod.clone()));
        manager.upsert(Arc::new(mirror.clone()));
        assert_eq!(manager.len(), 1, "mirrors are not desired pods");
        assert_eq!(manager.mirror_of(&static_pod).map(|m| m.uid()), Some("m1"));
        assert_eq!(manager.static_of(&mirror).map(|p| p.uid()), Some("s1"));
        assert!(manager.orphaned_mirror_fullnames().is_empty());
        manager.remove(&static_pod);
        assert_eq!(
            manager.orphaned_mirror_fullnames(),
            ["etcd-edge_kube-system"]
        );
    }
}
