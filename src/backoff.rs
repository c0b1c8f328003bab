//! Exponential back-off per key, for crash-looping containers and failing image pulls
//! (client-go `flowcontrol.Backoff` as the kubelet uses it: no jitter).
//!
//! Each key holds a delay and the time of its last update. `next` starts a key at the
//! initial delay, or doubles it up to the maximum; a key whose last update is more than
//! twice the maximum before the event is treated as new again (a container that ran
//! fine for 10 minutes starts over at 10 s). There is no clock inside: every call gets
//! "now" and the event time from the caller, so the sequence is testable to the second.
//!
//! Not synchronised: each owner (the runtime manager for restarts, the image manager
//! for pulls, both shared by the pod workers) keeps it behind its own lock and calls
//! `gc` from time to time.
//!
//! Keys are the owners' strings: `runtime::hash::stable_key` for container restarts
//! (it contains the spec hash, so editing the spec starts a fresh back-off) and
//! `images::manager::image_pull_key` for image pulls.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// First delay after a container crash or a failed image pull.
pub const INITIAL_DELAY: Duration = Duration::from_secs(10);
/// Longest delay (upstream `MaxContainerBackOff`).
pub const MAX_DELAY: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

/// Back-off state for many keys.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    /// The kubelet's values: 10 s doubling up to 300 s.
    fn default() -> Self {
        Self::new(INITIAL_DELAY, MAX_DELAY)
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// The current delay of `key`; zero when it has none.
    pub fn get(&self, key: &str) -> Duration {
        self.entries
            .get(key)
            .map(|e| e.delay)
            .unwrap_or(Duration::ZERO)
    }

    /// Records one more failure of `key` that happened at `event_time`: the first one
    /// (or the first after the entry expired) sets the initial delay, later ones double
    /// it up to the maximum. The entry's update time becomes `now`.
    pub fn next(&mut self, key: &str, event_time: SystemTime, now: SystemTime) {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(event_time, e) => self.max.min(e.delay.saturating_mul(2)),
            _ => self.initial,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                delay,
                last_update: now,
            },
        );
    }

    /// True when less than the current delay has passed between `event_time` and `now`
    /// (crash loops: `event_time` is when the container finished).
    pub fn is_in_backoff_since(&self, key: &str, event_time: SystemTime, now: SystemTime) -> bool {
        match self.entries.get(key) {
            Some(e) if !self.expired(event_time, e) => {
                nanos_between(event_time, now) < as_nanos(e.delay)
            }
            _ => false,
        }
    }

    /// True when `event_time` is less than the current delay after the last update
    /// (image pulls: `event_time` is now, the last update the last failed pull).
    pub fn is_in_backoff_since_update(&self, key: &str, event_time: SystemTime) -> bool {
        self.remaining_since_update(key, event_time).is_some()
    }

    /// How long `key` still waits at `event_time`, counted from its last update (image
    /// pulls); None when it is not in back-off.
    pub fn remaining_since_update(&self, key: &str, event_time: SystemTime) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(event_time, e) {
            return None;
        }
        let left = as_nanos(e.delay) - nanos_between(e.last_update, event_time);
        let left = u64::try_from(left).ok().filter(|n| *n > 0)?;
        Some(Duration::from_nanos(left).min(e.delay))
    }

    /// Forgets `key`.
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops every entry not updated for more than twice the maximum delay.
    pub fn gc(&mut self, now: SystemTime) {
        let limit = as_nanos(self.max) * 2;
        self.entries
            .retain(|_, e| nanos_between(e.last_update, now) <= limit);
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An entry is stale when the event comes more than twice the maximum after its
    /// last update: the thing behaved for long enough to start over.
    fn expired(&self, event_time: SystemTime, entry: &Entry) -> bool {
        nanos_between(entry.last_update, event_time) > as_nanos(self.max) * 2
    }
}

/// Signed nanoseconds from `from` to `to` (negative when `to` is earlier, e.g. after
/// the wall clock was stepped back).
fn nanos_between(from: SystemTime, to: SystemTime) -> i128 {
    match to.duration_since(from) {
        Ok(d) => as_nanos(d),
        Err(e) => -as_nanos(e.duration()),
    }
}

fn as_nanos(d: Duration) -> i128 {
    // A Duration's nanoseconds fit in 128 bits with room to spare.
    i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)
}

/// A CRI timestamp (Unix nanoseconds, as in `model`) as a `SystemTime`; negative
/// values clamp to the epoch.
pub fn time_from_unix_nanos(nanos: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// A delay the way Go prints a `time.Duration` of whole seconds, as upstream's
/// CrashLoopBackOff message shows it: `10s`, `2m40s`, `5m0s`, `1h0m0s`.
pub fn format_delay(delay: Duration) -> String {
    let secs = delay.as_secs();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    /// The restart delays a container sees when it crashes right after every start:
    /// the sync loop checks every second and restarts as soon as it is allowed to.
    fn restart_delays(crashes: usize) -> Vec<u64> {
        let mut backoff = Backoff::default();
        let key = "web_default_uid_app_1f";
        let mut now = 0;
        let mut delays = Vec::new();
        for _ in 0..crashes {
            let finished = now;
            while backoff.is_in_backoff_since(key, t(finished), t(now)) {
                now += 1;
            }
            backoff.next(key, t(finished), t(now));
            delays.push(now - finished);
        }
        delays
    }

    #[test]
    fn delay_sequence_doubles_to_the_cap() {
        // Upstream's crash back-off: 10 s doubling up to 5 min; the first restart is
        // immediate, as upstream's (kept on purpose).
        assert_eq!(restart_delays(8), [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn table_of_next_and_in_backoff() {
        // (event second, now second, in back-off before `next`, delay after `next`)
        let steps: &[(u64, u64, bool, u64)] = &[
            (0, 1, false, 10),       // first crash: restart at once, arm 10 s
            (2, 7, true, 10),        // crashed again, 5 s later: still waiting
            (2, 12, false, 20),      // 10 s passed: restart, window 20 s
            (13, 32, true, 20),      // 19 s < 20 s
            (13, 33, false, 40),     // 20 s passed
            (1000, 1000, false, 10), // finished > 600 s after the last update: reset
        ];
        let mut backoff = Backoff::default();
        for &(event, now, waiting, delay) in steps {
            assert_eq!(
                backoff.is_in_backoff_since("k", t(event), t(now)),
                waiting,
                "event {event} now {now}"
            );
            if !waiting {
                backoff.next("k", t(event), t(now));
                assert_eq!(
                    backoff.get("k"),
                    Duration::from_secs(delay),
                    "event {event}"
                );
            }
        }
    }

    #[test]
    fn ten_minutes_of_quiet_resets_the_window() {
        // Exactly 600 s after the last update is not yet expired; 601 s is.
        let mut backoff = Backoff::default();
        backoff.next("k", t(0), t(0));
        backoff.next("k", t(5), t(10));
        assert_eq!(backoff.get("k"), Duration::from_secs(20));
        backoff.next("k", t(610), t(610));
        assert_eq!(backoff.get("k"), Duration::from_secs(40));
        backoff.next("k", t(1211), t(1211));
        assert_eq!(backoff.get("k"), Duration::from_secs(10));
        assert!(!backoff.is_in_backoff_since("k", t(1812), t(1812)));
    }

    #[test]
    fn image_pull_backoff_is_measured_from_the_last_update() {
        // A failed pull arms 10 s; a retry within 10 s is refused.
        let mut backoff = Backoff::default();
        let key = "uid_busybox:latest";
        assert!(!backoff.is_in_backoff_since_update(key, t(0)));
        backoff.next(key, t(0), t(0));
        assert!(backoff.is_in_backoff_since_update(key, t(9)));
        assert!(!backoff.is_in_backoff_since_update(key, t(10)));
        backoff.next(key, t(10), t(10));
        assert!(backoff.is_in_backoff_since_update(key, t(29)));
        assert!(!backoff.is_in_backoff_since_update(key, t(30)));
        assert!(!backoff.is_in_backoff_since_update(key, t(700)));
    }

    #[test]
    fn gc_drops_idle_entries() {
        let mut backoff = Backoff::default();
        backoff.next("old", t(0), t(0));
        backoff.next("new", t(500), t(500));
        backoff.gc(t(600));
        assert_eq!(backoff.len(), 2);
        backoff.gc(t(601));
        assert_eq!(backoff.len(), 1);
        assert_eq!(backoff.get("old"), Duration::ZERO);
        assert_eq!(backoff.get("new"), Duration::from_secs(10));
        backoff.reset("new");
        assert!(backoff.is_empty());
    }

    #[test]
    fn clock_stepped_back_does_not_panic() {
        let mut backoff = Backoff::default();
        backoff.next("k", t(100), t(100));
        // An event "before" the last update and a now before the event.
        assert!(backoff.is_in_backoff_since("k", t(50), t(40)));
        backoff.next("k", t(50), t(40));
        assert_eq!(backoff.get("k"), Duration::from_secs(20));
        backoff.gc(t(0));
        assert_eq!(backoff.len(), 1);
    }

    #[test]
    fn delays_print_like_go() {
        let cases = [(10, "10s"), (160, "2m40s"), (300, "5m0s"), (3600, "1h0m0s")];
        for (secs, want) in cases {
            assert_eq!(format_delay(Duration::from_secs(secs)), want);
        }
        assert_eq!(
            time_from_unix_nanos(1_500_000_000),
            UNIX_EPOCH + Duration::from_millis(1500)
        );
        assert_eq!(time_from_unix_nanos(-5), UNIX_EPOCH);
    }
}
