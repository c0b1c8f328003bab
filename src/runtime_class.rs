//! RuntimeClass → CRI runtime handler (upstream `pkg/kubelet/runtimeclass`), read on
//! the pod worker threads just before a sandbox is created.
//!
//! Upstream keeps an informer over every RuntimeClass; litelet reads the one a pod
//! names (GET, which the Node authorizer allows) and keeps the answer for
//! [`CACHE_TTL`], so a node that runs no such pod asks nothing and one that does asks
//! at most once a minute per class. A missing class is not cached: the pod's next
//! sandbox attempt (its back-off) asks again, so creating the class later lets the pod
//! start. The cache's lock is never held across the request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::runtime_class::{self, RuntimeClass, GROUP_RESOURCE};
use crate::api::{ApiClient, ApiError};

/// How long a RuntimeClass read stays good. Its handler is immutable; this bounds how
/// long a deleted class keeps working for new sandboxes.
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// Why a pod's runtime handler cannot be known; the sandbox is not created.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeClassError {
    /// The API server has no RuntimeClass of that name (upstream's NotFound text).
    #[error("{GROUP_RESOURCE} {0:?} not found")]
    NotFound(String),
    /// The read failed (network, 403, 5xx).
    #[error("failed to lookup RuntimeClass {name}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: Box<ApiError>,
    },
    /// No API server to ask (standalone); admission refuses such pods first.
    #[error("runtimeClassName {0:?} needs an API server to resolve it; litelet runs without --kubeconfig")]
    Standalone(String),
}

/// Where RuntimeClasses come from: the API server (a trait so tests can count reads).
pub trait RuntimeClassSource: Send + Sync {
    /// The class, or `None` when the API server has none of that name.
    fn get(&self, name: &str) -> Result<Option<RuntimeClass>, ApiError>;
}

impl RuntimeClassSource for ApiClient {
    fn get(&self, name: &str) -> Result<Option<RuntimeClass>, ApiError> {
        match ApiClient::get::<RuntimeClass>(self, &runtime_class::path(name)) {
            Ok(rc) => Ok(Some(rc)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Shared by every pod worker (through the runtime manager).
pub struct RuntimeClasses {
    source: Option<Box<dyn RuntimeClassSource>>,
    cache: Mutex<HashMap<String, (String, Instant)>>,
}

impl RuntimeClasses {
    /// `None`: standalone, only the default (empty) runtime class resolves.
    pub fn new(source: Option<Box<dyn RuntimeClassSource>>) -> RuntimeClasses {
        RuntimeClasses {
            source,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The runtime handler for a pod's `runtimeClassName`: "" (the runtime's
    /// default) for none or an empty name, as upstream.
    pub fn handler(&self, name: Option<&str>, now: Instant) -> Result<String, RuntimeClassError> {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok(String::new());
        };
        let Some(source) = &self.source else {
            return Err(RuntimeClassError::Standalone(name.to_owned()));
        };
        if let Some((handler, at)) = self.lock().get(name) {
            if now.saturating_duration_since(*at) < CACHE_TTL {
                return Ok(handler.clone());
            }
        }
        match source.get(name) {
            Ok(Some(rc)) => {
                self.lock()
                    .insert(name.to_owned(), (rc.handler.clone(), now));
                Ok(rc.handler)
            }
            Ok(None) => {
                self.lock().remove(name);
                Err(RuntimeClassError::NotFound(name.to_owned()))
            }
            Err(source) => Err(RuntimeClassError::Lookup {
                name: name.to_owned(),
                source: Box::new(source),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Fake {
        classes: Mutex<HashMap<String, String>>,
        reads: Arc<AtomicUsize>,
    }

    impl RuntimeClassSource for Fake {
        fn get(&self, name: &str) -> Result<Option<RuntimeClass>, ApiError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self
                .classes
                .lock()
                .unwrap()
                .get(name)
                .map(|handler| RuntimeClass {
                    handler: handler.clone(),
                    ..Default::default()
                }))
        }
    }

    fn classes(pairs: &[(&str, &str)]) -> (RuntimeClasses, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let fake = Fake {
            classes: Mutex::new(
                pairs
                    .iter()
                    .map(|(n, h)| (n.to_string(), h.to_string()))
                    .collect(),
            ),
            reads: reads.clone(),
        };
        (RuntimeClasses::new(Some(Box::new(fake))), reads)
    }

    #[test]
    fn no_runtime_class_is_the_default_handler_without_a_read() {
        let (rc, reads) = classes(&[]);
        let now = Instant::now();
        assert_eq!(rc.handler(None, now).unwrap(), "");
        assert_eq!(rc.handler(Some(""), now).unwrap(), "");
        assert_eq!(reads.load(Ordering::SeqCst), 0);
        let standalone = RuntimeClasses::new(None);
        assert_eq!(standalone.handler(None, now).unwrap(), "");
    }

    #[test]
    fn a_runtime_class_resolves_to_its_handler_and_is_cached_for_the_ttl() {
        let (rc, reads) = classes(&[("sandboxed", "runsc")]);
        let now = Instant::now();
        assert_eq!(rc.handler(Some("sandboxed"), now).unwrap(), "runsc");
        assert_eq!(rc.handler(Some("sandboxed"), now).unwrap(), "runsc");
        assert_eq!(reads.load(Ordering::SeqCst), 1, "second lookup from cache");
        rc.handler(Some("sandboxed"), now + CACHE_TTL).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2, "read again after the TTL");
    }

    #[test]
    fn a_missing_runtime_class_fails_with_upstreams_not_found_and_is_asked_again() {
        let (rc, reads) = classes(&[]);
        let now = Instant::now();
        let err = rc.handler(Some("kata"), now).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"runtimeclasses.node.k8s.io "kata" not found"#
        );
        rc.handler(Some("kata"), now).unwrap_err();
        assert_eq!(reads.load(Ordering::SeqCst), 2, "NotFound is not cached");
    }

    #[test]
    fn standalone_cannot_resolve_a_runtime_class() {
        let err = RuntimeClasses::new(None)
            .handler(Some("kata"), Instant::now())
            .unwrap_err();
        assert!(matches!(err, RuntimeClassError::Standalone(_)), "{err}");
        assert!(err.to_string().contains("--kubeconfig"), "{err}");
    }
}
