//! How many image pulls run at once (upstream `serializeImagePulls` /
//! `maxParallelImagePulls`): one at a time by default, as upstream; N at a time, or
//! without limit, when pulls are not serialized.
//!
//! [`PullConcurrency::from_settings`] is upstream's defaulting and validation (pure).
//! [`PullLimiter`] is shared by the pod worker threads through the image manager: a
//! pull takes a [`PullSlot`] before its CRI call and gives it back when the call ends
//! (the slot's drop), so the limit holds whatever way the pull ends. A worker waiting
//! for a slot gives up when its sync is cancelled. The lock is never held across a
//! CRI call.

use std::num::NonZeroUsize;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often a pull waiting for a slot checks whether its sync was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// The pulls allowed at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PullConcurrency {
    /// `serializeImagePulls: true` (upstream's default): one pull at a time.
    #[default]
    Serial,
    /// `serializeImagePulls: false`: at most this many (`maxParallelImagePulls`), or
    /// no limit when it is unset.
    Parallel(Option<NonZeroUsize>),
}

/// A combination of the two settings upstream refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PullConcurrencyError {
    #[error("invalid configuration: maxParallelImagePulls {0} must be a positive number")]
    NotPositive(i32),
    #[error(
        "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless \
         SerializeImagePulls (--serialize-image-pulls) is set to false"
    )]
    SerializedButParallel,
}

impl PullConcurrency {
    /// The concurrency from `serializeImagePulls` and `maxParallelImagePulls` as they
    /// were given (`None`: not set), with upstream's defaulting (serialized unless
    /// `maxParallelImagePulls` asks for 2 or more) and validation.
    pub fn from_settings(
        serialize: Option<bool>,
        max_parallel: Option<i32>,
    ) -> Result<PullConcurrency, PullConcurrencyError> {
        if let Some(n) = max_parallel.filter(|&n| n < 1) {
            return Err(PullConcurrencyError::NotPositive(n));
        }
        let serialize = serialize.unwrap_or(max_parallel.is_none_or(|n| n < 2));
        match (serialize, max_parallel) {
            (true, Some(n)) if n > 1 => Err(PullConcurrencyError::SerializedButParallel),
            (true, _) => Ok(PullConcurrency::Serial),
            (false, n) => Ok(PullConcurrency::Parallel(
                n.and_then(|n| usize::try_from(n).ok())
                    .and_then(NonZeroUsize::new),
            )),
        }
    }

    /// The most pulls at once; `None` for no limit.
    pub fn limit(self) -> Option<usize> {
        match self {
            PullConcurrency::Serial => Some(1),
            PullConcurrency::Parallel(n) => n.map(NonZeroUsize::get),
        }
    }

    /// `serializeImagePulls` as `/configz` reports it.
    pub fn serialized(self) -> bool {
        self == PullConcurrency::Serial
    }
}

/// Hands out pull slots up to the limit.
#[derive(Debug)]
pub struct PullLimiter {
    limit: Option<usize>,
    in_flight: Mutex<usize>,
    freed: Condvar,
}

/// One pull's permission to run; dropping it frees the slot.
#[derive(Debug)]
pub struct PullSlot<'a> {
    limiter: &'a PullLimiter,
}

impl PullLimiter {
    pub fn new(concurrency: PullConcurrency) -> PullLimiter {
        PullLimiter {
            limit: concurrency.limit(),
            in_flight: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        // A counter: a panic elsewhere cannot leave it half-updated.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot; `None` once `cancelled` says the pull is no longer wanted.
    pub fn acquire(&self, cancelled: &dyn Fn() -> bool) -> Option<PullSlot<'_>> {
        let mut in_flight = self.lock();
        while self.limit.is_some_and(|limit| *in_flight >= limit) {
            if cancelled() {
                return None;
            }
            in_flight = self
                .freed
                .wait_timeout(in_flight, CANCEL_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *in_flight += 1;
        Some(PullSlot { limiter: self })
    }

    /// Pulls holding a slot now.
    pub fn in_flight(&self) -> usize {
        *self.lock()
    }
}

impl Drop for PullSlot<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.limiter.lock();
        *in_flight = in_flight.saturating_sub(1);
        drop(in_flight);
        self.limiter.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn parallel(n: usize) -> PullConcurrency {
        PullConcurrency::Parallel(NonZeroUsize::new(n))
    }

    #[test]
    fn settings_are_defaulted_and_checked_as_upstream() {
        use PullConcurrencyError::*;
        let cases = [
            ((None, None), Ok(PullConcurrency::Serial)),
            ((Some(true), None), Ok(PullConcurrency::Serial)),
            ((Some(true), Some(1)), Ok(PullConcurrency::Serial)),
            ((None, Some(1)), Ok(PullConcurrency::Serial)),
            ((None, Some(5)), Ok(parallel(5))),
            ((Some(false), None), Ok(PullConcurrency::Parallel(None))),
            ((Some(false), Some(1)), Ok(parallel(1))),
            ((Some(false), Some(3)), Ok(parallel(3))),
            ((Some(true), Some(2)), Err(SerializedButParallel)),
            ((None, Some(0)), Err(NotPositive(0))),
            ((Some(false), Some(-2)), Err(NotPositive(-2))),
        ];
        for ((serialize, max), want) in cases {
            assert_eq!(
                PullConcurrency::from_settings(serialize, max),
                want,
                "serializeImagePulls {serialize:?}, maxParallelImagePulls {max:?}"
            );
        }
        assert_eq!(PullConcurrency::Serial.limit(), Some(1));
        assert_eq!(parallel(3).limit(), Some(3));
        assert_eq!(PullConcurrency::Parallel(None).limit(), None);
        assert!(PullConcurrency::default().serialized());
        assert_eq!(
            SerializedButParallel.to_string(),
            "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless \
             SerializeImagePulls (--serialize-image-pulls) is set to false"
        );
    }

    /// Runs `pulls` threads that each hold a slot until released, and returns the
    /// most slots held at once.
    fn most_at_once(concurrency: PullConcurrency, pulls: usize) -> usize {
        let limiter = Arc::new(PullLimiter::new(concurrency));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
        let threads: Vec<_> = (0..pulls)
            .map(|_| {
                let (limiter, running, most) = (limiter.clone(), running.clone(), most.clone());
                let release = release_rx.clone();
                std::thread::spawn(move || {
                    let _slot = limiter.acquire(&|| false).unwrap();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let _ = release.recv();
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Let the pulls in one release at a time, waiting until the limit's worth hold
        // slots, so a limiter that let too many through would show it.
        let limit = concurrency.limit().unwrap_or(pulls);
        for released in 0..pulls {
            let want = limit.min(pulls - released);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while limiter.in_flight() < want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            release_tx.send(()).unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(limiter.in_flight(), 0, "every slot came back");
        most.load(Ordering::SeqCst)
    }

    #[test]
    fn serial_pulls_run_one_at_a_time_and_parallel_ones_up_to_the_limit() {
        assert_eq!(most_at_once(PullConcurrency::Serial, 4), 1);
        assert_eq!(most_at_once(parallel(2), 5), 2);
        assert_eq!(most_at_once(PullConcurrency::Parallel(None), 4), 4);
    }

    #[test]
    fn a_cancelled_pull_stops_waiting_for_a_slot() {
        let limiter = PullLimiter::new(PullConcurrency::Serial);
        let held = limiter.acquire(&|| false).unwrap();
        let cancelled = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                limiter
                    .acquire(&|| cancelled.load(Ordering::SeqCst))
                    .is_none()
            });
            cancelled.store(true, Ordering::SeqCst);
            assert!(waiter.join().unwrap(), "gave up without a slot");
        });
        assert_eq!(limiter.in_flight(), 1);
        drop(held);
        assert!(
            limiter.acquire(&|| true).is_some(),
            "a free slot is taken at once"
        );
    }
}
