//! A cancellation token for one sync operation (the Go context of upstream's workers).
//!
//! Created by the pod workers (which re-export it) and cancelled by UpdatePod when a
//! pod starts terminating or its grace period shrinks. It lives in the runtime layer
//! because the work it stops is here: the runtime manager's sync and kill paths check
//! it between steps, sleep on it ([`Cancel::sleep`]: sleep hooks, sidecar ordering)
//! and hand it to the CRI calls that can take long (pulls, container stops).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Shared between the worker (holder) and UpdatePod (canceller).
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<(AtomicBool, Mutex<()>, Condvar)>,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.inner.0.store(true, Ordering::SeqCst);
        let _guard = self.inner.1.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.2.notify_all();
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.0.load(Ordering::SeqCst)
    }

    /// Sleeps for `duration` unless cancelled first; true when cancelled.
    pub fn sleep(&self, duration: Duration) -> bool {
        let guard = self.inner.1.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_cancelled() {
            return true;
        }
        let _ = self
            .inner
            .2
            .wait_timeout_while(guard, duration, |_| !self.is_cancelled());
        self.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_wakes_a_sleeper() {
        let token = Cancel::new();
        let other = token.clone();
        let sleeper = std::thread::spawn(move || other.sleep(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        token.cancel();
        assert!(sleeper.join().unwrap());
        assert!(
            token.sleep(Duration::from_secs(30)),
            "a cancelled token does not sleep"
        );
    }
}
