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
//! - No lock is held across a request. Any pod worker thread may call it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::VolumeError;
use crate::api::configmap::{ConfigMap, Secret};
use crate::api::{paths, ApiClient, ApiError};

/// How long a copy is served before it is read again (upstream's default TTL).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// The two kinds of object pods read data from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        }
    }
}

/// An object's data as volumes and environment variables use it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectData {
    /// Every key with its bytes (configMap `data` and `binaryData`; secret `data`).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Keys usable as environment values (configMap `data` only; secret values as text).
    pub env: BTreeMap<String, String>,
    /// A secret's `type` (pull secrets must be a Docker config type).
    pub secret_type: Option<String>,
    /// The object's UID (pull records name the secret that pulled an image by it).
    pub uid: String,
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
        }
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
        kind: ObjectKind,
        namespace: &str,
        name: &str,
        uid: &str,
        now: Instant,
    ) -> Result<Lookup, VolumeError> {
        let Some(client) = &self.client else {
            return Err(VolumeError::NoApiServer {
                kind: kind.as_str(),
                name: name.to_owned(),
            });
        };
        let key = (kind, namespace.to_owned(), name.to_owned());
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
        let read = fetch(client, kind, namespace, name);
        let value = match read {
            Ok(value) => value,
            Err(VolumeError::Fetch { source, .. })
                if previous.is_some() && is_transient(&source) =>
            {
                log::warn!(
                    "re-reading {} {namespace}/{name} failed, serving the last copy: {source}",
                    kind.as_str()
                );
                return Ok(previous.flatten());
            }
            Err(e) => return Err(e),
        };
        let mut entries = lock(&self.entries);
        // The pod may have been unregistered meanwhile: then the entry is gone.
        if let Some(entry) = entries.get_mut(&key) {
            entry.value = Some(value.clone());
            // "Not found" is not kept fresh: a pod waiting for it sees it at once.
            entry.read_at = value.is_some().then_some(now);
        }
        Ok(value)
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
        let err = cache
            .get(ObjectKind::Secret, "ns", "s", "u", Instant::now())
            .unwrap_err();
        assert!(err.to_string().contains("without an API server"), "{err}");
        assert!(cache.is_empty());
    }
}
