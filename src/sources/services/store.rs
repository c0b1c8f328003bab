//! `ServiceStore`: the cluster's Services as the `services` thread last saw them,
//! and whether they have been listed once (upstream's service informer cache and
//! its HasSynced).
//!
//! Written only by the `services` thread (`sources/services.rs`); read by pod
//! workers (through `kubelet::syncer`) when they build a container's environment.
//! One `RwLock`; no I/O happens under it and readers copy out what they need.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::api::service::Service;

/// The namespace whose master services (`kubernetes`) every pod sees.
const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Default)]
struct Inner {
    /// By (namespace, name).
    services: BTreeMap<(String, String), Service>,
    synced: bool,
}

/// A cloneable handle on the store.
#[derive(Clone, Debug, Default)]
pub struct ServiceStore {
    inner: Arc<RwLock<Inner>>,
}

impl ServiceStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a full list has been stored.
    pub fn has_synced(&self) -> bool {
        self.read().synced
    }

    /// Replaces everything with a fresh list and marks the store synced.
    pub fn replace(&self, services: impl IntoIterator<Item = Service>) {
        let services = services.into_iter().map(|s| (key(&s), s)).collect();
        let mut inner = self.write();
        inner.services = services;
        inner.synced = true;
    }

    /// Adds or replaces one service (a watch ADDED or MODIFIED).
    pub fn upsert(&self, service: Service) {
        self.write().services.insert(key(&service), service);
    }

    /// Removes one service (a watch DELETED); true when it was there.
    pub fn remove(&self, namespace: &str, name: &str) -> bool {
        self.write()
            .services
            .remove(&(namespace.to_owned(), name.to_owned()))
            .is_some()
    }

    pub fn len(&self) -> usize {
        self.read().services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One service, if stored.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Service> {
        self.read()
            .services
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Whether the store has synced, and the services a pod in `namespace` may see:
    /// those of `namespace` and of `default` (where the master services live).
    pub fn visible_to(&self, namespace: &str) -> (bool, Vec<Service>) {
        let inner = self.read();
        let mut out = Vec::new();
        let mut namespaces = vec![namespace];
        if namespace != DEFAULT_NAMESPACE {
            namespaces.push(DEFAULT_NAMESPACE);
        }
        for ns in namespaces {
            let from = (ns.to_owned(), String::new());
            out.extend(
                inner
                    .services
                    .range(from..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, s)| s.clone()),
            );
        }
        (inner.synced, out)
    }

    // A poisoned lock only means a panic elsewhere mid-write of a map insert or
    // remove, which leaves the map valid: keep serving it.
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(service: &Service) -> (String, String) {
    (
        service.metadata.namespace.clone(),
        service.metadata.name.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::ServiceMeta;

    fn svc(ns: &str, name: &str) -> Service {
        Service {
            metadata: ServiceMeta {
                name: name.into(),
                namespace: ns.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(list: &[Service]) -> Vec<String> {
        list.iter()
            .map(|s| format!("{}/{}", s.metadata.namespace, s.metadata.name))
            .collect()
    }

    #[test]
    fn synced_only_after_a_full_list() {
        let store = ServiceStore::new();
        store.upsert(svc("a", "x"));
        assert!(!store.has_synced(), "a watch event is not a list");
        store.replace(vec![svc("a", "y")]);
        assert!(store.has_synced());
        assert_eq!(store.len(), 1, "a list replaces what was there");
        assert!(store.get("a", "x").is_none());
    }

    #[test]
    fn a_pod_sees_its_namespace_and_default_only() {
        let store = ServiceStore::new();
        store.replace(vec![
            svc("default", "kubernetes"),
            svc("shop", "web"),
            svc("shop2", "other"),
            svc("sho", "prefix"),
        ]);
        let (synced, seen) = store.visible_to("shop");
        assert!(synced);
        assert_eq!(names(&seen), ["shop/web", "default/kubernetes"]);
        let (_, seen) = store.visible_to("default");
        assert_eq!(names(&seen), ["default/kubernetes"], "default listed once");
        assert!(store.remove("shop", "web"));
        assert!(!store.remove("shop", "web"));
        assert_eq!(names(&store.visible_to("shop").1), ["default/kubernetes"]);
    }
}
