//! The API-backed [`ConfigSource`] for container environments (`env.valueFrom`,
//! `envFrom`): the same fetch path, per-pod cache and node's copy as configMap and
//! secret volumes.
//!
//! Made per pod by `VolumeManager::config_source` on the pod worker's thread; every
//! object it reads is registered for that pod (and kept on the node for it: a
//! container restarted after a reboot or a litelet restart while cut off gets the
//! same environment) and forgotten at tear-down. A value served from the node's
//! copy is told by a `FromNodeCopy` event; a lookup the API server could not answer
//! and the node's copy could not stand in for says why
//! ([`VolumeError::Unreachable`]).

use std::sync::Arc;
use std::time::Instant;

use super::cache::{ObjectCache, ObjectKind, ObjectRef};
use super::error::{NoCopy, VolumeError};
use super::notice::KeptNotices;
use crate::api::pod::Pod;
use crate::runtime::env::{ConfigData, ConfigSource, ConfigSourceError};

/// Reads configMaps and secrets for one pod's environment.
pub struct PodConfigSource<'a> {
    pub(crate) cache: &'a ObjectCache,
    pub(crate) notices: &'a KeptNotices,
    pub(crate) pod: &'a Pod,
    /// Why the node's copy cannot stand in when it has none.
    pub(crate) no_copy: NoCopy,
}

impl PodConfigSource<'_> {
    fn read(&self, kind: ObjectKind, namespace: &str, name: &str) -> ConfigData {
        let object = ObjectRef {
            kind,
            namespace,
            name,
            keep: true,
        };
        let found = self
            .cache
            .get(&object, self.pod.uid(), Instant::now())
            .map_err(|e| match super::setup::api_unreachable(&e) {
                true => VolumeError::Unreachable {
                    source: Box::new(e),
                    copy: self.no_copy,
                },
                false => e,
            })
            .map_err(|e| ConfigSourceError::Lookup(Arc::new(e)))?;
        if let Some(data) = found.as_deref().filter(|d| d.kept) {
            let what = super::kept_object(&object, &data.resource_version);
            self.notices.served(self.pod, &what);
        }
        Ok(found.map(|data| data.env.clone()))
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
