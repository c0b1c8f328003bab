//! What to do with each event before it reaches the API server (client-go's
//! `EventCorrelator`, minus the grouping of similar messages).
//!
//! Pure: the caller passes the clock. Used only by the `events` thread.
//!
//! Two steps, in client-go's order:
//! 1. Spam filter: a token bucket per source + involved object (field path, type,
//!    reason and message not included), burst 25, refilled one token per 5 minutes.
//!    An event finding the bucket empty is dropped. A crash-looping pod therefore
//!    sends at most 25 events, then one every 5 minutes, whatever it does.
//! 2. Deduplication: an event identical to one already sent (same source, object with
//!    field path, type, reason and message) becomes a PATCH of the stored event with
//!    count + 1, instead of a new object.
//!
//! Both tables are bounded (4096 entries each); the least recently used entry goes.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Instant, SystemTime};

use crate::api::event::{Event, EventSource, ObjectReference};
use crate::api::meta::Time;
use crate::api::pod::Pod;
use crate::api::ratelimit::TokenBucket;
use crate::events::{EventObject, EventRecord};

/// client-go's defaults.
pub const DEFAULT_SPAM_BURST: u32 = 25;
pub const DEFAULT_SPAM_QPS: f32 = 1.0 / 300.0;
pub const DEFAULT_CACHE_SIZE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorrelatorOptions {
    /// Events a source may send about one object at once.
    pub burst: u32,
    /// Refill rate of that allowance, per second.
    pub qps: f32,
    /// Entries kept in each table.
    pub cache_size: usize,
}

impl Default for CorrelatorOptions {
    fn default() -> Self {
        Self {
            burst: DEFAULT_SPAM_BURST,
            qps: DEFAULT_SPAM_QPS,
            cache_size: DEFAULT_CACHE_SIZE,
        }
    }
}

/// What to send for one event.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// A first occurrence: create this event.
    Create(Event),
    /// A repeat of a stored event: this is the stored event with its new count, last
    /// timestamp and message. PATCH it (see `Event::repeat_patch`); if it has expired
    /// from the server, create it as is.
    Repeat(Event),
    /// Over the rate limit.
    Drop,
}

/// A small least-recently-used map (eviction scans; the tables are small and events
/// rare).
#[derive(Debug)]
struct Lru<K, V> {
    map: HashMap<K, (u64, V)>,
    clock: u64,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            clock: 0,
            cap: cap.max(1),
        }
    }

    fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.clock += 1;
        let clock = self.clock;
        self.map.get_mut(k).map(|(used, v)| {
            *used = clock;
            v
        })
    }

    fn insert(&mut self, k: K, v: V) {
        self.clock += 1;
        self.map.insert(k, (self.clock, v));
        if self.map.len() > self.cap {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
    }

    fn remove(&mut self, k: &K) {
        self.map.remove(k);
    }
}

type Key = Vec<String>;

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

/// Source and involved object, without the field path.
fn spam_key(e: &Event) -> Key {
    let o = &e.involved_object;
    vec![
        opt(&e.source.component),
        opt(&e.source.host),
        opt(&o.kind),
        opt(&o.namespace),
        opt(&o.name),
        opt(&o.uid),
        opt(&o.api_version),
    ]
}

/// Everything that makes two events "the same event".
fn event_key(e: &Event) -> Key {
    let mut k = spam_key(e);
    k.extend([
        opt(&e.involved_object.field_path),
        opt(&e.type_),
        opt(&e.reason),
        opt(&e.message),
    ]);
    k
}

/// The API event for `record`, first occurrence, as `source` reports it at `now`.
pub fn to_event(record: &EventRecord, source: &EventSource, now: SystemTime) -> Event {
    let reference = match &record.object {
        EventObject::Pod {
            namespace,
            name,
            uid,
            field_path,
        } => ObjectReference {
            kind: Some(Pod::KIND.to_owned()),
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            uid: Some(uid.clone()),
            api_version: Some(Pod::API_VERSION.to_owned()),
            field_path: field_path.clone(),
            ..ObjectReference::default()
        },
        EventObject::Node { name } => ObjectReference::for_node(name),
    };
    Event::new(
        reference,
        record.kind.as_str(),
        &record.reason,
        &record.message,
        source.clone(),
        now,
    )
}

/// The correlator's tables.
#[derive(Debug)]
pub struct Correlator {
    options: CorrelatorOptions,
    buckets: Lru<Key, TokenBucket>,
    /// Events the server holds, as last stored.
    stored: Lru<Key, Event>,
}

impl Correlator {
    pub fn new(options: CorrelatorOptions) -> Self {
        Self {
            options,
            buckets: Lru::new(options.cache_size),
            stored: Lru::new(options.cache_size),
        }
    }

    /// Decides what to send for `event` (a first occurrence from [`to_event`]).
    pub fn decide(&mut self, event: Event, now: Instant) -> Decision {
        let key = spam_key(&event);
        let allowed = match self.buckets.get_mut(&key) {
            Some(bucket) => {
                // Take a token only if one is there: try on a copy.
                let mut attempt = bucket.clone();
                let ok = attempt.reserve(now).is_zero();
                if ok {
                    *bucket = attempt;
                }
                ok
            }
            None => {
                let mut bucket = TokenBucket::new(self.options.qps, self.options.burst, now);
                bucket.reserve(now);
                self.buckets.insert(key, bucket);
                true
            }
        };
        if !allowed {
            return Decision::Drop;
        }
        match self.stored.get_mut(&event_key(&event)) {
            Some(stored) => {
                let mut repeat = stored.clone();
                repeat.count = Some(stored.count.unwrap_or(1).saturating_add(1));
                repeat.last_timestamp = event.last_timestamp.or(Some(Time::now()));
                repeat.message = event.message;
                Decision::Repeat(repeat)
            }
            None => Decision::Create(event),
        }
    }

    /// Records what the server now stores for an event (the answer to a create or a
    /// patch), so the next identical event counts on from it.
    pub fn stored(&mut self, event: Event) {
        self.stored.insert(event_key(&event), event);
    }

    /// Forgets a stored event (it could not be updated or re-created).
    pub fn forget(&mut self, event: &Event) {
        self.stored.remove(&event_key(event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;
    use std::time::{Duration, UNIX_EPOCH};

    fn record(name: &str, reason: &str, message: &str) -> EventRecord {
        EventRecord {
            object: EventObject::Pod {
                namespace: "prod".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                field_path: Some("spec.containers{app}".into()),
            },
            kind: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn source() -> EventSource {
        EventSource {
            component: Some("kubelet".into()),
            host: Some("edge-1".into()),
        }
    }

    fn event(r: &EventRecord, secs: u64) -> Event {
        to_event(r, &source(), UNIX_EPOCH + Duration::from_secs(secs))
    }

    /// Feeds `n` copies of `r`, "storing" what a server would; returns (creates,
    /// repeats, drops) and the last count.
    fn feed(
        c: &mut Correlator,
        r: &EventRecord,
        n: usize,
        t0: Instant,
    ) -> (usize, usize, usize, i32) {
        let (mut creates, mut repeats, mut drops, mut count) = (0, 0, 0, 0);
        for i in 0..n {
            match c.decide(event(r, 100 + i as u64), t0) {
                Decision::Create(e) => {
                    creates += 1;
                    count = e.count.unwrap_or(0);
                    c.stored(e);
                }
                Decision::Repeat(e) => {
                    repeats += 1;
                    count = e.count.unwrap_or(0);
                    c.stored(e);
                }
                Decision::Drop => drops += 1,
            }
        }
        (creates, repeats, drops, count)
    }

    #[test]
    fn identical_events_are_counted_and_rate_limited() {
        let mut c = Correlator::new(CorrelatorOptions::default());
        let t0 = Instant::now();
        let r = record("web", "BackOff", "back-off 10s restarting failed container");
        assert_eq!(feed(&mut c, &r, 40, t0), (1, 24, 15, 25));
        // Five minutes later one more token.
        let later = t0 + Duration::from_secs(301);
        match c.decide(event(&r, 500), later) {
            Decision::Repeat(e) => {
                assert_eq!(e.count, Some(26));
                assert_eq!(e.last_timestamp.map(|t| t.unix_seconds()), Some(500));
                assert_eq!(e.first_timestamp.map(|t| t.unix_seconds()), Some(100));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.decide(event(&r, 501), later), Decision::Drop);
    }

    #[test]
    fn the_limit_is_per_object_and_dedup_per_message() {
        let mut c = Correlator::new(CorrelatorOptions::default());
        let t0 = Instant::now();
        // Other messages about the same pod share its bucket but are new events.
        let a = record("web", "Started", "one");
        let b = record("web", "Started", "two");
        assert_eq!(feed(&mut c, &a, 20, t0), (1, 19, 0, 20));
        assert_eq!(feed(&mut c, &b, 10, t0), (1, 4, 5, 5));
        // Another pod has its own bucket.
        let other = record("db", "Started", "one");
        assert_eq!(feed(&mut c, &other, 3, t0), (1, 2, 0, 3));
    }

    #[test]
    fn forgotten_events_are_created_again() {
        let mut c = Correlator::new(CorrelatorOptions::default());
        let t0 = Instant::now();
        let r = record("web", "Pulled", "pulled");
        feed(&mut c, &r, 2, t0);
        let Decision::Repeat(e) = c.decide(event(&r, 1), t0) else {
            panic!("expected a repeat");
        };
        c.forget(&e);
        assert!(matches!(c.decide(event(&r, 2), t0), Decision::Create(_)));
    }

    #[test]
    fn tables_are_bounded() {
        let opts = CorrelatorOptions {
            cache_size: 2,
            ..CorrelatorOptions::default()
        };
        let mut c = Correlator::new(opts);
        let t0 = Instant::now();
        for name in ["a", "b", "c"] {
            feed(&mut c, &record(name, "Started", "x"), 1, t0);
        }
        assert_eq!(c.stored.map.len(), 2);
        assert_eq!(c.buckets.map.len(), 2);
        // "a" was evicted: a first occurrence again.
        assert!(matches!(
            c.decide(event(&record("a", "Started", "x"), 1), t0),
            Decision::Create(_)
        ));
    }

    #[test]
    fn node_events_reference_the_node() {
        let r = EventRecord {
            object: EventObject::Node {
                name: "edge-1".into(),
            },
            kind: EventType::Normal,
            reason: "NodeReady".into(),
            message: "ready".into(),
        };
        let e = event(&r, 1);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("edge-1"));
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(e.type_.as_deref(), Some("Normal"));
    }
}
