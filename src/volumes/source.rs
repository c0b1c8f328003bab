//! The API-backed [`ConfigSource`] for container environments (`env.valueFrom`,
//! `envFrom`): the same fetch path and per-pod cache as configMap and secret volumes.
//!
//! Made per pod by `VolumeManager::config_source` on the pod worker's thread; every
//! object it reads is registered for that pod and forgotten at tear-down. The
//! `VolumeManager` itself is also a `ConfigSource` (for callers that have no pod at
//! hand, such as the kubelet's `PodVolumes` seam): its reads are registered under a
//! node-wide owner that every tear-down releases, so nothing outlives its pods for
//! long.

use std::sync::Arc;
use std::time::Instant;

use super::cache::{ObjectCache, ObjectKind};
use super::VolumeManager;
use crate::runtime::env::{ConfigData, ConfigSource, ConfigSourceError};

/// The owner of reads made without a pod (never a pod UID: those are never empty).
pub(crate) const NODE_WIDE: &str = "";

/// Reads configMaps and secrets for one pod's environment.
pub struct PodConfigSource<'a> {
    pub(crate) cache: &'a ObjectCache,
    pub(crate) pod_uid: String,
}

impl PodConfigSource<'_> {
    fn read(&self, kind: ObjectKind, namespace: &str, name: &str) -> ConfigData {
        self.cache
            .get(kind, namespace, name, &self.pod_uid, Instant::now())
            .map(|found| found.map(|data| data.env.clone()))
            .map_err(|e| ConfigSourceError::Lookup(Arc::new(e)))
    }
}

impl ConfigSource for PodConfigSource<'_> {
    fn config_map(&self, namespace: &str, name: &str) -> ConfigData {
        self.read(ObjectKind::ConfigMap, namespace, name)
    }

    fn secret(&self, namespace: &str, name: &str) -> ConfigData {
        self.read(ObjectKind::Secret, namespace, name)
    }
}

impl ConfigSource for VolumeManager {
    fn config_map(&self, namespace: &str, name: &str) -> ConfigData {
        self.node_wide_source().config_map(namespace, name)
    }

    fn secret(&self, namespace: &str, name: &str) -> ConfigData {
        self.node_wide_source().secret(namespace, name)
    }
}
