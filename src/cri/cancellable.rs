//! Waiting on a CRI call that the caller may give up on (a pull or a container stop
//! whose pod worker was cancelled).
//!
//! The call is started with grpcio's async stub and driven on the calling thread: a
//! waker built on a condvar wakes the wait when the answer arrives, and `cancelled`
//! is polled every [`POLL`] so the caller's token needs no knowledge of gRPC. On
//! cancellation the gRPC call itself is cancelled (the runtime sees the client go
//! away, as with upstream's context), and the caller gets [`CriError::Cancelled`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use grpcio::ClientUnaryReceiver;

use super::CriError;

/// How often a cancellable wait looks at its token.
pub const POLL: Duration = Duration::from_millis(50);

/// Wakes the waiting thread when the call's future can make progress.
#[derive(Default)]
struct Signal {
    woken: Mutex<bool>,
    changed: Condvar,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.woken.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.changed.notify_all();
    }
}

impl Signal {
    /// Waits until woken or `timeout` passes, then clears the flag.
    fn wait(&self, timeout: Duration) {
        let guard = self.woken.lock().unwrap_or_else(|p| p.into_inner());
        let (mut woken, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |w| !*w)
            .unwrap_or_else(|p| p.into_inner());
        *woken = false;
    }
}

/// Waits for `receiver`'s answer unless `cancelled` turns true first; then the call
/// is cancelled and the answer is [`CriError::Cancelled`].
pub(crate) fn wait<T: Unpin>(
    op: &'static str,
    mut receiver: ClientUnaryReceiver<T>,
    cancelled: &dyn Fn() -> bool,
) -> Result<T, CriError> {
    let started = Instant::now();
    let signal = Arc::new(Signal::default());
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if cancelled() {
            receiver.cancel();
            crate::metrics::cri_call(op, started.elapsed(), false);
            return Err(CriError::Cancelled { op });
        }
        if let Poll::Ready(result) = Pin::new(&mut receiver).poll(&mut cx) {
            crate::metrics::cri_call(op, started.elapsed(), result.is_ok());
            return result.map_err(|err| CriError::from_grpc(op, err));
        }
        signal.wait(POLL);
    }
}
