//! The API-backed [`ConfigSource`] for container environments (`env.valueFrom`,
//! `envFrom`): the same fetch path and per-pod cache as configMap and secret volumes.
//!
//! Made per pod by `VolumeManager::config_source` on the pod worker's thread; every
//! object it reads is registered for that pod and forgotten at tear-down.

use std::collections::BTreeMap;
use std::time::Instant;

use super::cache::{ObjectCache, ObjectKind};
use crate::runtime::env::ConfigSource;

/// Reads configMaps and secrets for one pod's environment.
pub struct PodConfigSource<'a> {
    pub(crate) cache: &'a ObjectCache,
    pub(crate) pod_uid: String,
}

impl PodConfigSource<'_> {
    fn read(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        self.cache
            .get(kind, namespace, name, &self.pod_uid, Instant::now())
            .map(|found| found.map(|data| data.env.clone()))
            .map_err(|e| e.to_string())
    }
}

impl ConfigSource for PodConfigSource<'_> {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        self.read(ObjectKind::ConfigMap, namespace, name)
    }

    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        self.read(ObjectKind::Secret, namespace, name)
    }
}
