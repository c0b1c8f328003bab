//! A small time-bounded cache for review answers (TokenReview, SubjectAccessReview),
//! shared by all connection threads behind one mutex held only for a lookup or an
//! insert. Bounded: when full, expired entries go first, then the oldest one.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The cached value, unless it has expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(_, expires)| *expires > now)
            .map(|(v, _)| v.clone())
    }

    /// Stores `value` for `ttl` from `now`.
    pub fn put(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= self.capacity {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_and_stays_bounded() {
        let cache = TtlCache::new(2);
        let t0 = Instant::now();
        cache.put("a", 1, Duration::from_secs(10), t0);
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(5)), Some(1));
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(10)), None);
        cache.put("b", 2, Duration::from_secs(20), t0);
        cache.put("c", 3, Duration::from_secs(30), t0);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&"a", t0), None, "the oldest entry made room");
        assert_eq!(cache.get(&"c", t0), Some(3));
        cache.put("d", 4, Duration::ZERO, t0);
        assert_eq!(cache.get(&"d", t0), None);
    }
}
