//! One plugin's answers, kept in memory until they expire (pure: "now" is an
//! argument). Upstream's keys: the answer's `cacheKeyType` decides whether it serves
//! one image (the repository asked about), its registry (the repository's first
//! part, host and port) or every image; a lookup tries the image, then the
//! registry, then the global entry. In service account token mode every key also
//! holds the service account (and, for `cacheType: Token`, the token's hash), so
//! one service account's credentials never serve another's pods.
//!
//! Bounded: expired entries go at a lookup of their key and in a sweep every 15
//! minutes (upstream's purge interval); a full cache drops its expired entries,
//! then the one that expires first.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::wire::CacheKeyType;
use crate::credentialprovider::config::DockerConfig;

/// Upstream's interval between sweeps of expired entries.
const PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// Most entries one plugin keeps.
pub const CAPACITY: usize = 1024;

/// What an answer is for, by its `cacheKeyType`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    Image(String),
    Registry(String),
    Global,
}

impl Base {
    /// What an answer of type `kind` about `repository` serves.
    pub fn of(kind: CacheKeyType, repository: &str) -> Base {
        match kind {
            CacheKeyType::Image => Base::Image(repository.to_owned()),
            CacheKeyType::Registry => Base::Registry(registry_of(repository).to_owned()),
            CacheKeyType::Global => Base::Global,
        }
    }
}

/// The service account part of a key in service account token mode (upstream's
/// serviceAccountCacheKey).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The annotations passed to the plugin.
    pub annotations: BTreeMap<String, String>,
    /// `cacheType: Token`: the SHA-256 of the token (never the token).
    pub token_hash: Option<String>,
}

struct Entry {
    auth: DockerConfig,
    expires: Instant,
}

/// The cache of one plugin; see the module doc.
pub struct Cache {
    entries: HashMap<(Base, Option<AccountKey>), Entry>,
    capacity: usize,
    last_purge: Option<Instant>,
}

/// The registry of a repository: its first part (`reg.io:5000` of
/// `reg.io:5000/team/app`), as upstream's parseRegistry.
pub fn registry_of(repository: &str) -> &str {
    repository.split('/').next().unwrap_or(repository)
}

impl Cache {
    pub fn new(capacity: usize) -> Cache {
        Cache {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            last_purge: None,
        }
    }

    /// The unexpired answer that serves `repository` for `account`, if any.
    pub fn get(
        &mut self,
        repository: &str,
        account: Option<&AccountKey>,
        now: Instant,
    ) -> Option<DockerConfig> {
        self.sweep(now);
        let account = account.cloned();
        let bases = [
            Base::Image(repository.to_owned()),
            Base::Registry(registry_of(repository).to_owned()),
            Base::Global,
        ];
        for base in bases {
            let key = (base, account.clone());
            match self.entries.get(&key) {
                Some(entry) if now > entry.expires => {
                    self.entries.remove(&key);
                }
                Some(entry) => return Some(entry.auth.clone()),
                None => {}
            }
        }
        None
    }

    /// Keeps `auth`, an answer serving `base` (for `account`), until `now + ttl`.
    pub fn insert(
        &mut self,
        base: Base,
        account: Option<AccountKey>,
        auth: DockerConfig,
        ttl: Duration,
        now: Instant,
    ) {
        let key = (base, account);
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, e| now <= e.expires);
            if self.entries.len() >= self.capacity {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone());
                if let Some(soonest) = soonest {
                    self.entries.remove(&soonest);
                }
            }
        }
        let expires = now + ttl;
        self.entries.insert(key, Entry { auth, expires });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops expired entries once per [`PURGE_INTERVAL`].
    fn sweep(&mut self, now: Instant) {
        let due = self
            .last_purge
            .is_none_or(|last| now.saturating_duration_since(last) >= PURGE_INTERVAL);
        if due {
            self.entries.retain(|_, e| now <= e.expires);
            self.last_purge = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentialprovider::config::DockerConfigEntry;

    fn auth(user: &str) -> DockerConfig {
        vec![(
            "reg.io".to_owned(),
            DockerConfigEntry {
                username: user.to_owned(),
                ..Default::default()
            },
        )]
    }

    fn user(found: Option<DockerConfig>) -> Option<String> {
        found.map(|a| a[0].1.username.clone())
    }

    fn account(name: &str, token_hash: Option<&str>) -> AccountKey {
        AccountKey {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            annotations: BTreeMap::new(),
            token_hash: token_hash.map(str::to_owned),
        }
    }

    /// Which repositories an answer of each cacheKeyType serves.
    #[test]
    fn cache_key_types_decide_what_an_answer_serves() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        let cases = [
            (CacheKeyType::Image, "reg.io/team/app", true),
            (CacheKeyType::Image, "reg.io/team/other", false),
            (CacheKeyType::Registry, "reg.io/team/other", true),
            (CacheKeyType::Registry, "reg.io:5000/team/app", false),
            (CacheKeyType::Registry, "mirror.io/team/app", false),
            (CacheKeyType::Global, "mirror.io/anything", true),
        ];
        for (kind, asked, served) in cases {
            let mut cache = Cache::new(CAPACITY);
            cache.insert(
                Base::of(kind, "reg.io/team/app"),
                None,
                auth("u"),
                minute,
                t0,
            );
            assert_eq!(
                cache.get(asked, None, t0).is_some(),
                served,
                "{kind:?} answer for reg.io/team/app, asked {asked}"
            );
        }
        // The most specific entry wins: image before registry before global.
        let mut cache = Cache::new(CAPACITY);
        cache.insert(
            Base::of(CacheKeyType::Global, "a.io/x"),
            None,
            auth("global"),
            minute,
            t0,
        );
        cache.insert(
            Base::of(CacheKeyType::Registry, "a.io/x"),
            None,
            auth("registry"),
            minute,
            t0,
        );
        cache.insert(
            Base::of(CacheKeyType::Image, "a.io/x"),
            None,
            auth("image"),
            minute,
            t0,
        );
        assert_eq!(
            user(cache.get("a.io/x", None, t0)).as_deref(),
            Some("image")
        );
        assert_eq!(
            user(cache.get("a.io/y", None, t0)).as_deref(),
            Some("registry")
        );
        assert_eq!(
            user(cache.get("b.io/y", None, t0)).as_deref(),
            Some("global")
        );
    }

    #[test]
    fn answers_expire_after_their_duration() {
        let t0 = Instant::now();
        let mut cache = Cache::new(CAPACITY);
        cache.insert(
            Base::of(CacheKeyType::Image, "reg.io/app"),
            None,
            auth("u"),
            Duration::from_secs(30),
            t0,
        );
        assert!(cache
            .get("reg.io/app", None, t0 + Duration::from_secs(30))
            .is_some());
        assert!(cache
            .get("reg.io/app", None, t0 + Duration::from_secs(31))
            .is_none());
        assert!(
            cache.is_empty(),
            "an expired entry is dropped when looked up"
        );
    }

    #[test]
    fn service_accounts_and_tokens_do_not_share_answers() {
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut cache = Cache::new(CAPACITY);
        let a = account("a", None);
        cache.insert(
            Base::of(CacheKeyType::Global, "reg.io/app"),
            Some(a.clone()),
            auth("a"),
            hour,
            t0,
        );
        assert_eq!(
            user(cache.get("reg.io/app", Some(&a), t0)).as_deref(),
            Some("a")
        );
        assert!(cache
            .get("reg.io/app", Some(&account("b", None)), t0)
            .is_none());
        assert!(
            cache.get("reg.io/app", None, t0).is_none(),
            "not for pods without one"
        );
        let mut annotated = a.clone();
        annotated.annotations.insert("role".into(), "other".into());
        assert!(cache.get("reg.io/app", Some(&annotated), t0).is_none());
        // cacheType Token: a new token means a new plugin call.
        let t1 = account("a", Some("sha256:1"));
        cache.insert(
            Base::of(CacheKeyType::Image, "reg.io/app"),
            Some(t1.clone()),
            auth("t1"),
            hour,
            t0,
        );
        assert_eq!(
            user(cache.get("reg.io/app", Some(&t1), t0)).as_deref(),
            Some("t1")
        );
        assert!(cache
            .get("reg.io/app", Some(&account("a", Some("sha256:2"))), t0)
            .is_none());
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_soonest_to_expire() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut cache = Cache::new(3);
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/a"),
            None,
            auth("a"),
            s(10),
            t0,
        );
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/b"),
            None,
            auth("b"),
            s(100),
            t0,
        );
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/c"),
            None,
            auth("c"),
            s(50),
            t0,
        );
        // a has expired: it makes room.
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/d"),
            None,
            auth("d"),
            s(100),
            t0 + s(20),
        );
        assert_eq!(cache.len(), 3);
        assert!(cache.get("r.io/c", None, t0 + s(20)).is_some());
        // Nothing expired: c, the soonest to expire, goes.
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/e"),
            None,
            auth("e"),
            s(100),
            t0 + s(20),
        );
        assert_eq!(cache.len(), 3);
        assert!(cache.get("r.io/c", None, t0 + s(20)).is_none());
        for kept in ["r.io/b", "r.io/d", "r.io/e"] {
            assert!(cache.get(kept, None, t0 + s(20)).is_some(), "{kept}");
        }
        // Replacing a key never evicts another.
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/e"),
            None,
            auth("e2"),
            s(100),
            t0 + s(20),
        );
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn the_periodic_sweep_drops_expired_entries_nobody_asks_for() {
        let t0 = Instant::now();
        let mut cache = Cache::new(CAPACITY);
        cache.get("x.io/a", None, t0); // first sweep at t0
        cache.insert(
            Base::of(CacheKeyType::Image, "r.io/a"),
            None,
            auth("a"),
            Duration::from_secs(1),
            t0,
        );
        cache.get("x.io/other", None, t0 + Duration::from_secs(60));
        assert_eq!(cache.len(), 1, "no sweep before the interval");
        cache.get("x.io/other", None, t0 + PURGE_INTERVAL);
        assert!(cache.is_empty());
    }
}
