//! The per-pod cache of configMaps and secrets (upstream's TTL-based configMap and
//! secret managers): the node reads an object on demand, keeps it while some pod
//! references it, and reads it again when its copy is older than the TTL.
//!
//! - The first reference by a pod always reads afresh, so a new pod never starts
//!   with data older than its own creation.
//! - "Not found" is never served from the cache: a pod waiting for a missing object
//!   reads it again at every set-up and starts as soon as it exists.
//! - A failed re-read (transport error, 5xx) keeps serving the last good copy; a
//!   403 (the Node authorizer no longer allows it) or a 404 does not.
//! - Edge autonomy (`docs/autonomy.md`): with a pod data store, every fresh read an
//!   object's pod needs to start (volumes, env; not pull secrets) is kept on the
//!   node (`poddata`), a 404 or 403 drops the copy, and when the API server cannot
//!   be reached and nothing is held in memory (after a reboot or a restart), the
//!   node's copy is served, marked [`ObjectData::kept`]. While the API server stays
//!   unreachable a kept copy is served without trying again (each try costs the
//!   client's retries); the first sync after it answers reads afresh.
//! - No lock is held across a request. Any pod worker thread may call it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::VolumeError;
use crate::api::configmap::{ConfigMap, Secret};
use crate::api::{paths, ApiClient, ApiError};
pub use crate::poddata::ObjectKind;
use crate::poddata::{KeptObject, Store};

/// How long a copy is served before it is read again (upstream's default TTL).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// One object a pod reads, and whether the node keeps a copy of it.
#[derive(Clone, Copy, Debug)]
pub struct ObjectRef<'a> {
    pub kind: ObjectKind,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The pod needs it to start (a volume, env): kept in the pod data store. Pull
    /// secrets are not: images stay on the node.
    pub keep: bool,
}

/// An object's data as volumes and environment variables use it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ObjectData {
    /// Every key with its bytes (configMap `data` and `binaryData`; secret `data`).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Keys usable as environment values (configMap `data` only; secret values as text).
    pub env: BTreeMap<String, String>,
    /// A secret's `type` (pull secrets must be a Docker config type).
    pub secret_type: Option<String>,
    /// The object's UID (pull records name the secret that pulled an image by it).
    pub uid: String,
    /// The resourceVersion it was read at.
    pub resource_version: String,
    /// Served from the node's copy (the API server could not be reached).
    pub kept: bool,
}

// By hand: the data never reaches a log.
impl std::fmt::Debug for ObjectData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectData")
            .field("keys", &self.files.keys().collect::<Vec<_>>())
            .field("resource_version", &self.resource_version)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl ObjectData {
    fn from_kept(kept: KeptObject) -> Self {
        ObjectData {
            files: kept.files,
            env: kept.env,
            secret_type: kept.secret_type,
            uid: kept.uid,
            resource_version: kept.resource_version,
            kept: true,
        }
    }

    fn to_kept(&self, object: &ObjectRef<'_>) -> KeptObject {
        KeptObject {
            kind: object.kind,
            namespace: object.namespace.to_owned(),
            name: object.name.to_owned(),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            secret_type: self.secret_type.clone(),
            files: self.files.clone(),
            env: self.env.clone(),
            pods: Default::default(),
        }
    }
}

/// What a read found: the data, or `None` when the object does not exist.
pub type Lookup = Option<Arc<ObjectData>>;

struct Entry {
    /// The last read and when it happened; `None` until read or after invalidation.
    value: Option<Lookup>,
    read_at: Option<Instant>,
    pods: BTreeSet<String>,
}

type Key = (ObjectKind, String, String);

/// The cache; see the module doc.
pub struct ObjectCache {
    client: Option<ApiClient>,
    ttl: Duration,
    entries: Mutex<BTreeMap<Key, Entry>>,
    /// The node's copies (edge autonomy); `None` with `--checkpoint-secrets=false`.
    store: Option<Arc<Store>>,
}

/// True when a copy read at `read_at` may still be served at `now`.
pub fn is_fresh(read_at: Option<Instant>, now: Instant, ttl: Duration) -> bool {
    read_at.is_some_and(|at| now.saturating_duration_since(at) < ttl)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere never leaves the map half-updated: each update is one insert.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ObjectCache {
    pub fn new(client: Option<ApiClient>, ttl: Duration) -> Self {
        Self {
            client,
            ttl,
            entries: Mutex::new(BTreeMap::new()),
            store: None,
        }
    }

    /// The same cache keeping what pods need to start in `store`.
    pub fn with_store(mut self, store: Arc<Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The same cache with another TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The object's data for pod `uid`, read from the API server when the cached
    /// copy is missing, stale, or this pod's first reference.
    pub fn get(
        &self,
        object: &ObjectRef<'_>,
        uid: &str,
        now: Instant,
    ) -> Result<Lookup, VolumeError> {
        let Some(client) = &self.client else {
            return Err(VolumeError::NoApiServer {
                kind: object.kind.as_str(),
                name: object.name.to_owned(),
            });
        };
        let key = (
            object.kind,
            object.namespace.to_owned(),
            object.name.to_owned(),
        );
        let previous = {
            let mut entries = lock(&self.entries);
            let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                value: None,
                read_at: None,
                pods: BTreeSet::new(),
            });
            if entry.pods.insert(uid.to_owned()) {
                entry.read_at = None;
            }
            if is_fresh(entry.read_at, now, self.ttl) {
                if let Some(value) = &entry.value {
                    return Ok(value.clone());
                }
            }
            entry.value.clone()
        };
        let kept_before = previous
            .as_ref()
            .and_then(|v| v.as_ref())
            .filter(|d| d.kept);
        if let Some(data) = kept_before {
            if client.reachability().is_cut_off() {
                return Ok(Some(data.clone()));
            }
        }
        let value = match fetch(client, object.kind, object.namespace, object.name) {
            Ok(value) => value,
            Err(VolumeError::Fetch { source, .. }) if is_transient(&source) => {
                let (kind, ns, name) = (object.kind.as_str(), object.namespace, object.name);
                if let Some(previous) = previous {
                    log::warn!(
                        "re-reading {kind} {ns}/{name} failed, serving the last copy: {source}"
                    );
                    return Ok(previous);
                }
                let Some(kept) = self.kept_copy(object) else {
                    return Err(VolumeError::Fetch {
                        kind,
                        namespace: ns.to_owned(),
                        name: name.to_owned(),
                        source,
                    });
                };
                log::warn!(
                    "reading {kind} {ns}/{name} failed, serving the node's copy \
                     (resourceVersion {}): {source}",
                    kept.resource_version
                );
                let kept = Some(kept);
                if let Some(entry) = lock(&self.entries).get_mut(&key) {
                    entry.value = Some(kept.clone());
                }
                return Ok(kept);
            }
            Err(e) => {
                if matches!(e, VolumeError::Forbidden { .. }) {
                    self.drop_copy(object);
                }
                return Err(e);
            }
        };
        self.keep(object, uid, &value);
        let mut entries = lock(&self.entries);
        // The pod may have been unregistered meanwhile: then the entry is gone.
        if let Some(entry) = entries.get_mut(&key) {
            entry.value = Some(value.clone());
            // "Not found" is not kept fresh: a pod waiting for it sees it at once.
            entry.read_at = value.is_some().then_some(now);
        }
        Ok(value)
    }

    /// The node's copy of `object`, if it keeps one.
    fn kept_copy(&self, object: &ObjectRef<'_>) -> Option<Arc<ObjectData>> {
        let store = self.store.as_ref().filter(|_| object.keep)?;
        match store.object(object.kind, object.namespace, object.name) {
            Ok(kept) => kept.map(|k| Arc::new(ObjectData::from_kept(k))),
            Err(e) => {
                log::warn!("{e}");
                None
            }
        }
    }

    /// Keeps a fresh read for pod `uid` (or drops the copy of what is gone). A
    /// failure to write is logged: it costs autonomy, never the pod.
    fn keep(&self, object: &ObjectRef<'_>, uid: &str, value: &Lookup) {
        let Some(store) = self.store.as_ref().filter(|_| object.keep) else {
            return;
        };
        let kept = match value {
            Some(data) => store.keep_object(&data.to_kept(object), uid),
            None => store.drop_object(object.kind, object.namespace, object.name),
        };
        if let Err(e) = kept {
            log::warn!("{e}");
        }
    }

    fn drop_copy(&self, object: &ObjectRef<'_>) {
        if let Some(store) = &self.store {
            if let Err(e) = store.drop_object(object.kind, object.namespace, object.name) {
                log::warn!("{e}");
            }
        }
    }

    /// Drops pod `uid`'s references; objects no pod references are forgotten.
    pub fn unregister_pod(&self, uid: &str) {
        lock(&self.entries).retain(|_, entry| {
            entry.pods.remove(uid);
            !entry.pods.is_empty()
        });
    }

    /// Objects held (for tests and stats).
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(super) fn is_transient(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::Transport { .. } | ApiError::Status { .. } | ApiError::Decode { .. }
    )
}

fn fetch(
    client: &ApiClient,
    kind: ObjectKind,
    namespace: &str,
    name: &str,
) -> Result<Lookup, VolumeError> {
    let failed = |source: ApiError| match source {
        ApiError::NotFound { .. } => Ok(None),
        ApiError::Forbidden { message, .. } => Err(VolumeError::Forbidden {
            kind: kind.as_str(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            message,
        }),
        source => Err(VolumeError::Fetch {
            kind: kind.as_str(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        }),
    };
    let decode_failed = |message: String| VolumeError::Decode {
        kind: kind.as_str(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        message,
    };
    let data = match kind {
        ObjectKind::ConfigMap => {
            let cm = match client.get::<ConfigMap>(&paths::config_map(namespace, name)) {
                Ok(cm) => cm,
                Err(e) => return failed(e),
            };
            ObjectData {
                files: cm.decoded().map_err(decode_failed)?,
                env: cm.data,
                secret_type: None,
                uid: cm.metadata.uid.clone().unwrap_or_default(),
                resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
                kept: false,
            }
        }
        ObjectKind::Secret => {
            let secret = match client.get::<Secret>(&paths::secret(namespace, name)) {
                Ok(s) => s,
                Err(e) => return failed(e),
            };
            let files = secret.decoded().map_err(decode_failed)?;
            let env = files
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect();
            ObjectData {
                files,
                env,
                secret_type: secret.type_.clone(),
                uid: secret.metadata.uid.clone().unwrap_or_default(),
                resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
                kept: false,
            }
        }
    };
    Ok(Some(Arc::new(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        assert!(!is_fresh(None, t0, ttl));
        assert!(is_fresh(Some(t0), t0, ttl));
        assert!(is_fresh(Some(t0), t0 + Duration::from_secs(59), ttl));
        assert!(!is_fresh(Some(t0), t0 + ttl, ttl));
        assert!(
            !is_fresh(Some(t0), t0, Duration::ZERO),
            "ttl 0 always re-reads"
        );
    }

    #[test]
    fn standalone_has_no_objects() {
        let cache = ObjectCache::new(None, DEFAULT_TTL);
        let object = ObjectRef {
            kind: ObjectKind::Secret,
            namespace: "ns",
            name: "s",
            keep: true,
        };
        let err = cache.get(&object, "u", Instant::now()).unwrap_err();
        assert!(err.to_string().contains("without an API server"), "{err}");
        assert!(cache.is_empty());
    }
}
