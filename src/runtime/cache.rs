//! The runtime-level pod status cache (upstream container/cache.go).
//!
//! The PLEG thread writes a fresh status per pod after each relist and then raises the
//! global timestamp; pod workers read with [`PodStatusCache::get_newer_than`]. When
//! litelet itself changes a pod in the runtime (a sync or kill started, stopped or
//! resized something), the runtime manager marks the pod with
//! [`PodStatusCache::runtime_changed`], and readers of that pod block until the cache
//! holds a status taken after the change, so a worker never decides on a view older
//! than its own last action. A pod nobody changed since its last status is read at
//! once: a worker woken by a watch event (a resize, a new spec) does not wait for the
//! next relist.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::model::PodRuntimeStatus;
use crate::cri::CriError;

#[derive(Clone)]
struct Entry {
    status: Result<Arc<PodRuntimeStatus>, CriError>,
    modified: Instant,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    /// Every pod's entry is at least this new, even pods the runtime does not have.
    global: Option<Instant>,
    /// Pods litelet changed in the runtime, and when: a status taken before that is
    /// stale. Dropped once a newer status is in.
    changed: HashMap<String, Instant>,
}

/// Shared by the PLEG (writer) and the pod workers (readers).
#[derive(Clone, Default)]
pub struct PodStatusCache {
    inner: Arc<(Mutex<Inner>, Condvar)>,
}

/// What a reader gets: the status (or the error inspecting it) and when it was taken.
pub struct CachedStatus {
    pub status: Result<Arc<PodRuntimeStatus>, CriError>,
    pub modified: Instant,
}

impl PodStatusCache {
    pub fn new() -> PodStatusCache {
        PodStatusCache::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores the status of `uid` as seen at `modified` and wakes waiting readers. A
    /// status taken before the stored one is dropped: besides the PLEG, the resize
    /// path stores fresh statuses, and an older relist must not overwrite them.
    pub fn set(&self, uid: &str, status: Result<PodRuntimeStatus, CriError>, modified: Instant) {
        let mut inner = self.lock();
        if inner.pods.get(uid).is_some_and(|e| e.modified > modified) {
            return;
        }
        let entry = Entry {
            status: status.map(Arc::new),
            modified,
        };
        inner.pods.insert(uid.to_owned(), entry);
        if inner.changed.get(uid).is_some_and(|at| *at <= modified) {
            inner.changed.remove(uid);
        }
        self.inner.1.notify_all();
    }

    /// Declares every entry fresh as of `time` (after a full relist).
    pub fn update_time(&self, time: Instant) {
        let mut inner = self.lock();
        inner.global = Some(time);
        inner.changed.retain(|_, at| *at > time);
        self.inner.1.notify_all();
    }

    /// Records that litelet changed pod `uid` in the runtime at `at`: readers wait for
    /// a status taken at or after it.
    pub fn runtime_changed(&self, uid: &str, at: Instant) {
        let mut inner = self.lock();
        let newest = inner.changed.entry(uid.to_owned()).or_insert(at);
        *newest = (*newest).max(at);
    }

    /// Forgets a pod.
    pub fn delete(&self, uid: &str) {
        let mut inner = self.lock();
        inner.pods.remove(uid);
        inner.changed.remove(uid);
    }

    /// The newest status of `uid`, or an empty one when the runtime has nothing for it.
    pub fn get(&self, uid: &str) -> CachedStatus {
        let inner = self.lock();
        Self::read(&inner, uid)
    }

    fn read(inner: &Inner, uid: &str) -> CachedStatus {
        match inner.pods.get(uid) {
            Some(entry) => CachedStatus {
                status: entry.status.clone(),
                modified: entry.modified,
            },
            None => CachedStatus {
                status: Ok(Arc::new(PodRuntimeStatus {
                    uid: uid.to_owned(),
                    ..Default::default()
                })),
                modified: inner.global.unwrap_or_else(Instant::now),
            },
        }
    }

    /// With no `min` any real status will do: the pod's own entry, or any relist
    /// having happened; either way it must be newer than litelet's last change to it.
    fn fresh_enough(inner: &Inner, uid: &str, min: Option<Instant>) -> bool {
        let min = match (min, inner.changed.get(uid).copied()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let newer = |t: Instant| min.is_none_or(|min| t >= min);
        let pod_fresh = inner.pods.get(uid).is_some_and(|e| newer(e.modified));
        let global_fresh = inner.global.is_some_and(newer);
        pod_fresh || global_fresh
    }

    /// Waits until the cache holds a status of `uid` taken at or after `min` (or any
    /// status when `min` is None) and after litelet's last change to the pod, or until
    /// `timeout` passes (then returns what it has, with `None` as the marker).
    pub fn get_newer_than(
        &self,
        uid: &str,
        min: Option<Instant>,
        timeout: Duration,
    ) -> Option<CachedStatus> {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            if Self::fresh_enough(&inner, uid, min) {
                return Some(Self::read(&inner, uid));
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            inner = self
                .inner
                .1
                .wait_timeout(inner, deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(uid: &str, name: &str) -> PodRuntimeStatus {
        PodRuntimeStatus {
            uid: uid.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_older_status_never_replaces_a_newer_one() {
        let cache = PodStatusCache::new();
        let older = Instant::now();
        let newer = older + Duration::from_millis(5);
        cache.set("a", Ok(status("a", "fresh")), newer);
        cache.set("a", Ok(status("a", "stale")), older);
        let got = cache.get("a");
        assert_eq!(got.status.unwrap().name, "fresh");
        assert_eq!(got.modified, newer);
    }

    #[test]
    fn unknown_pod_reads_as_empty_status() {
        let cache = PodStatusCache::new();
        let got = cache.get("nope");
        assert_eq!(got.status.unwrap().uid, "nope");
    }

    #[test]
    fn reader_waits_for_a_newer_status() {
        let cache = PodStatusCache::new();
        let old = Instant::now();
        cache.set("a", Ok(status("a", "first")), old);
        let min = old + Duration::from_millis(1);
        assert!(cache
            .get_newer_than("a", Some(min), Duration::from_millis(10))
            .is_none());

        let writer = cache.clone();
        let handle = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            writer.set(
                "a",
                Ok(status("a", "second")),
                min + Duration::from_millis(5),
            );
        });
        let got = cache
            .get_newer_than("a", Some(min), Duration::from_secs(10))
            .expect("a newer status arrives");
        assert_eq!(got.status.unwrap().name, "second");
        handle.join().unwrap();
    }

    #[test]
    fn a_first_sync_takes_any_relist_but_waits_for_one() {
        let cache = PodStatusCache::new();
        // No relist yet: nothing to decide on.
        assert!(cache
            .get_newer_than("a", None, Duration::from_millis(10))
            .is_none());
        // A relist that happened before the reader arrived is good enough: upstream's
        // first sync reads with a zero time, so a new pod never waits a relist period.
        cache.update_time(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        assert!(cache.get_newer_than("a", None, Duration::ZERO).is_some());
    }

    #[test]
    fn global_timestamp_satisfies_readers_of_absent_pods() {
        let cache = PodStatusCache::new();
        let min = Instant::now();
        cache.update_time(min + Duration::from_millis(1));
        assert!(cache
            .get_newer_than("gone", Some(min), Duration::from_millis(10))
            .is_some());
    }

    #[test]
    fn a_pod_litelet_changed_waits_for_a_status_taken_after_the_change() {
        let cache = PodStatusCache::new();
        let before = Instant::now();
        cache.update_time(before);
        cache.set("a", Ok(status("a", "before")), before);
        // Nothing changed: read at once, no relist needed (a resize from the watch).
        assert!(cache.get_newer_than("a", None, Duration::ZERO).is_some());

        let changed = before + Duration::from_millis(1);
        cache.runtime_changed("a", changed);
        assert!(cache
            .get_newer_than("a", None, Duration::from_millis(10))
            .is_none());
        // Another pod is not held up.
        assert!(cache.get_newer_than("b", None, Duration::ZERO).is_some());
        // The worker's own fresh read after the change (resize) satisfies it, and
        // the mark is gone: the next read does not wait either.
        cache.set("a", Ok(status("a", "after")), changed);
        let got = cache
            .get_newer_than("a", None, Duration::ZERO)
            .expect("fresh");
        assert_eq!(got.status.unwrap().name, "after");
    }

    #[test]
    fn a_relist_after_the_change_satisfies_the_readers_of_a_changed_pod() {
        let cache = PodStatusCache::new();
        let t0 = Instant::now();
        cache.update_time(t0);
        cache.runtime_changed("a", t0 + Duration::from_millis(1));
        assert!(cache.get_newer_than("a", None, Duration::ZERO).is_none());
        // A relist that started before the change does not count; one after does.
        cache.update_time(t0 + Duration::from_micros(500));
        assert!(cache.get_newer_than("a", None, Duration::ZERO).is_none());
        cache.update_time(t0 + Duration::from_millis(2));
        assert!(cache.get_newer_than("a", None, Duration::ZERO).is_some());
    }

    #[test]
    fn errors_are_cached_too() {
        let cache = PodStatusCache::new();
        let err = CriError::Unavailable {
            op: "list_containers",
            message: "down".into(),
        };
        cache.set("a", Err(err.clone()), Instant::now());
        assert_eq!(cache.get("a").status.unwrap_err(), err);
    }
}
