//! Client-side rate limit for API requests: a token bucket, like client-go's
//! (`--kube-api-qps`, default 50, and `--kube-api-burst`, default 100).
//!
//! [`TokenBucket`] is the pure decision: given "now" it says how long a request must
//! wait. It never sleeps and reads no clock, so tests drive it with made-up instants.
//! [`RateLimiter`] is the shared shell: all clones of an `ApiClient` (and so every
//! thread that calls the API) share one bucket behind a mutex, which is held only to
//! take a token, never while sleeping or doing I/O.
//!
//! Also here: [`Backoff`], the capped exponential delay used between retries (by the
//! client) and between reconnects (by the API watch source), and [`jitter`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default sustained requests per second (the kubelet's `--kube-api-qps`).
pub const DEFAULT_QPS: f32 = 50.0;
/// Default burst (the kubelet's `--kube-api-burst`).
pub const DEFAULT_BURST: u32 = 100;

/// client-go's QPS for a client configured with 0 (`rest.DefaultQPS`).
pub const CLIENT_GO_DEFAULT_QPS: f32 = 5.0;
/// client-go's burst for a client configured with 0 (`rest.DefaultBurst`).
pub const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// The limit a client-go client really applies for `qps` and `burst` as the kubelet
/// passes them (`--event-qps`/`eventRecordQPS`, `--event-burst`/`eventBurst`): 0
/// means client-go's defaults, 5 per second with a burst of 10, not "no limit"
/// (upstream's flag help says so; its config-file doc still says "no limit").
pub fn client_go_limit(qps: f32, burst: u32) -> (f32, u32) {
    let qps = if qps == 0.0 {
        CLIENT_GO_DEFAULT_QPS
    } else {
        qps
    };
    let burst = if burst == 0 {
        CLIENT_GO_DEFAULT_BURST
    } else {
        burst
    };
    (qps, burst)
}

/// A token bucket that refills at `qps` tokens per second up to `burst` tokens.
///
/// Invariant: a request always gets a token: when the bucket is empty the token is
/// borrowed from the future (the count goes negative), and the caller is told to wait
/// until it would have been refilled. Later callers queue behind the debt, so the
/// long-run rate never exceeds `qps`, whatever the number of threads.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A burst below 1 is taken as 1; `qps` must be positive.
    pub fn new(qps: f32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps).max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token at `now` and returns how long to wait before using it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// Tokens available at the last refill (negative while in debt).
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    fn refill(&mut self, now: Instant) {
        // An instant earlier than the last one (callers race between reading the
        // clock and taking the lock) refills nothing.
        if let Some(elapsed) = now.checked_duration_since(self.last) {
            self.tokens = (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
            self.last = now;
        }
    }
}

/// The bucket shared by all clones of a client. `qps <= 0` disables limiting.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl RateLimiter {
    pub fn new(qps: f32, burst: u32) -> Self {
        let bucket =
            (qps > 0.0).then(|| Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))));
        Self { bucket }
    }

    /// Blocks the calling thread until it may send one request.
    pub fn acquire(&self) {
        let Some(bucket) = &self.bucket else { return };
        let wait = {
            // A panic while holding this lock cannot leave the bucket inconsistent
            // (two float updates), so a poisoned lock is used as is.
            let mut b = bucket.lock().unwrap_or_else(|e| e.into_inner());
            b.reserve(Instant::now())
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// Capped exponential backoff: `initial`, `2 × initial`, ... up to `max`. Pure: it
/// only computes delays; callers sleep (ideally interruptibly) and add [`jitter`].
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial.min(max),
        }
    }

    /// The delay to wait now; the following one doubles, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the initial delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial.min(self.max);
    }
}

/// `d` scaled by a random factor in [0.75, 1.25), so clients that failed together do
/// not retry together. The randomness comes from std's per-process hash seeds: good
/// enough to spread retries, not for anything secret.
pub fn jitter(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(d.as_nanos());
    let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    d.mul_f64(0.75 + unit * 0.5)
}

/// A random whole number in `[low, high]` (for spreading timeouts), same source as [`jitter`].
pub fn random_between(low: u64, high: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    if high <= low {
        return low;
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(low ^ high.rotate_left(17));
    low + h.finish() % (high - low + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_client_gos_defaults_not_no_limit() {
        assert_eq!(client_go_limit(0.0, 0), (5.0, 10));
        assert_eq!(client_go_limit(0.0, 100), (5.0, 100));
        assert_eq!(client_go_limit(50.0, 0), (50.0, 10));
        assert_eq!(client_go_limit(50.0, 100), (50.0, 100));
        let (qps, burst) = client_go_limit(0.0, 0);
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(qps, burst, t0);
        for _ in 0..10 {
            assert_eq!(bucket.reserve(t0), Duration::ZERO);
        }
        assert_eq!(
            bucket.reserve(t0),
            Duration::from_millis(200),
            "then 5 a second"
        );
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn burst_then_paced() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        // Empty: the 4th waits one token's time (100 ms), the 5th two.
        assert_eq!(b.reserve(t0), ms(100));
        assert_eq!(b.reserve(t0), ms(200));
        // 500 ms later the debt of 2 is paid and 3 tokens refilled, capped at burst.
        let t1 = t0 + ms(500);
        assert_eq!(b.reserve(t1), Duration::ZERO);
        assert!((b.tokens() - 2.0).abs() < 1e-9, "{}", b.tokens());
    }

    #[test]
    fn refill_caps_at_burst_and_ignores_time_going_back() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50.0, 100, t0);
        let t1 = t0 + Duration::from_secs(3600);
        assert_eq!(b.reserve(t1), Duration::ZERO);
        assert!((b.tokens() - 99.0).abs() < 1e-9);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert!((b.tokens() - 98.0).abs() < 1e-9);
    }

    #[test]
    fn sustained_rate_matches_qps() {
        // 1000 requests at one instant with qps 50 and burst 100: the last one waits
        // (1000 - 100) / 50 = 18 s.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50.0, 100, t0);
        let mut last = Duration::ZERO;
        for _ in 0..1000 {
            last = b.reserve(t0);
        }
        assert_eq!(last, Duration::from_secs(18));
    }

    #[test]
    fn zero_burst_is_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 0, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
    }

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = Backoff::new(ms(100), ms(350));
        let seq: Vec<_> = (0..4).map(|_| b.next_delay()).collect();
        assert_eq!(seq, [ms(100), ms(200), ms(350), ms(350)]);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
    }

    #[test]
    fn jitter_and_random_stay_in_range() {
        for _ in 0..1000 {
            let j = jitter(ms(1000));
            assert!(j >= ms(750) && j < ms(1250), "{j:?}");
            let r = random_between(300, 600);
            assert!((300..=600).contains(&r), "{r}");
        }
        assert_eq!(random_between(5, 5), 5);
    }

    #[test]
    fn disabled_limiter_never_blocks() {
        let l = RateLimiter::new(0.0, 0);
        for _ in 0..10_000 {
            l.acquire();
        }
    }
}
