//! A token bucket over the whole PodResources API (upstream's interceptor: every
//! call takes a token, none left refuses it), so a busy agent cannot keep the
//! completion-queue thread it shares with device plugin registration busy.

use std::sync::Mutex;
use std::time::Instant;

/// Upstream's default steady rate (calls per second).
pub const DEFAULT_QPS: f64 = 100.0;
/// Upstream's default burst.
pub const DEFAULT_BURST: f64 = 10.0;

/// Tokens refill at `qps` up to `burst`; starts full.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            qps,
            burst,
            state: Mutex::new((burst, now)),
        }
    }

    /// Takes one token at `now`; false when none is left.
    pub fn allow(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = &mut *state;
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * self.qps).min(self.burst);
        *last = now.max(*last);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_beyond_ten_calls_is_refused_until_tokens_refill_at_the_rate() {
        let start = Instant::now();
        let bucket = TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST, start);
        let allowed = (0..15).filter(|_| bucket.allow(start)).count();
        assert_eq!(allowed, 10);
        // 100 per second: one token every 10 ms.
        assert!(!bucket.allow(start + Duration::from_millis(5)));
        assert!(bucket.allow(start + Duration::from_millis(16)));
        let later = start + Duration::from_secs(10);
        assert_eq!((0..15).filter(|_| bucket.allow(later)).count(), 10);
    }
}
