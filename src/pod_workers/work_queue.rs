//! The work queue: pod UIDs due for a sync at some instant (upstream BasicWorkQueue).
//!
//! Pod workers enqueue after each sync; the sync loop's 1 s tick takes what is due.
//! `enqueue` overwrites, so the last write wins even when it is later.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `d` plus a random fraction of up to `factor × d`: a value in [d, (1+factor)·d).
pub fn jitter(d: Duration, factor: f64) -> Duration {
    d + d.mul_f64(factor * random_fraction())
}

/// A cheap uniform fraction in [0, 1) from the clock and a counter (no crate needed).
fn random_fraction() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let mut x = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ nanos;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Shared by pod workers (writers) and the sync loop (reader).
#[derive(Clone, Default)]
pub struct WorkQueue {
    due: Arc<Mutex<HashMap<String, Instant>>>,
}

impl WorkQueue {
    pub fn new() -> WorkQueue {
        WorkQueue::default()
    }

    /// Schedules `uid` for a sync `delay` from now, replacing any earlier entry.
    pub fn enqueue(&self, uid: &str, delay: Duration) {
        let at = Instant::now() + delay;
        self.due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_owned(), at);
    }

    /// Removes and returns every UID due before `now`.
    pub fn take_due(&self, now: Instant) -> Vec<String> {
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let ready: Vec<String> = due
            .iter()
            .filter(|(_, at)| **at < now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &ready {
            due.remove(uid);
        }
        ready
    }

    /// When `uid` is due, if queued (for tests and metrics).
    pub fn due_at(&self, uid: &str) -> Option<Instant> {
        self.due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let d = jitter(Duration::from_secs(10), 0.5);
            assert!(
                d >= Duration::from_secs(10) && d < Duration::from_secs(15),
                "{d:?}"
            );
        }
    }

    #[test]
    fn enqueue_overwrites_and_take_due_removes() {
        let queue = WorkQueue::new();
        queue.enqueue("a", Duration::ZERO);
        queue.enqueue("b", Duration::from_secs(60));
        queue.enqueue("b", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let mut due = queue.take_due(Instant::now());
        due.sort();
        assert_eq!(due, ["a", "b"]);
        assert!(queue.take_due(Instant::now()).is_empty());
        queue.enqueue("c", Duration::ZERO);
        queue.enqueue("c", Duration::from_secs(60));
        assert!(
            queue.take_due(Instant::now()).is_empty(),
            "the later write wins"
        );
    }
}
