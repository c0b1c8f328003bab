//! Waiting on a future or a stream from a plain thread, without an async runtime.
//!
//! grpcio hands back its server-streaming responses (a device plugin's
//! `ListAndWatch`) and a few server calls as futures. Their completion is driven by
//! grpcio's own completion-queue threads, so all a caller needs is to poll, park
//! until grpcio wakes it, and poll again: the thread that asked is the one that
//! waits, as everywhere else in litelet.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use futures_core::Stream;

/// Wakes the thread that is waiting by unparking it.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn current_thread_waker() -> Waker {
    Waker::from(Arc::new(Unpark(thread::current())))
}

/// Runs `future` to completion on the calling thread.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = current_thread_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            // A wake-up may be spurious or come early: polling again is always safe.
            Poll::Pending => thread::park(),
        }
    }
}

/// The items of `stream`, each waited for on the calling thread; dropping the
/// iterator drops the stream (for a gRPC call, that cancels it).
pub fn iter_stream<S: Stream>(stream: S) -> StreamIter<S> {
    StreamIter {
        stream: Box::pin(stream),
        waker: current_thread_waker(),
    }
}

/// See [`iter_stream`]. Use it on the thread that made it: that thread is the one
/// woken.
pub struct StreamIter<S> {
    stream: Pin<Box<S>>,
    waker: Waker,
}

impl<S: Stream> StreamIter<S> {
    /// The next item if one comes within `limit` (`Poll::Pending` if not), so a
    /// reader can look up from a quiet stream now and then (to notice shutdown).
    pub fn next_within(&mut self, limit: Duration) -> Poll<Option<S::Item>> {
        let deadline = Instant::now() + limit;
        let mut cx = Context::from_waker(&self.waker);
        loop {
            if let Poll::Ready(item) = self.stream.as_mut().poll_next(&mut cx) {
                return Poll::Ready(item);
            }
            let now = Instant::now();
            if now >= deadline {
                return Poll::Pending;
            }
            thread::park_timeout(deadline - now);
        }
    }
}

impl<S: Stream> Iterator for StreamIter<S> {
    type Item = S::Item;

    fn next(&mut self) -> Option<S::Item> {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            match self.stream.as_mut().poll_next(&mut cx) {
                Poll::Ready(item) => return item,
                Poll::Pending => thread::park(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A stream fed from another thread, which wakes the reader as a gRPC
    /// completion queue would.
    #[derive(Default)]
    struct Shared {
        items: Vec<u32>,
        done: bool,
        waker: Option<Waker>,
    }

    struct Fed(Arc<Mutex<Shared>>);

    impl Stream for Fed {
        type Item = u32;
        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
            let mut s = self.0.lock().unwrap();
            if !s.items.is_empty() {
                return Poll::Ready(Some(s.items.remove(0)));
            }
            if s.done {
                return Poll::Ready(None);
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn a_stream_fed_by_another_thread_yields_every_item_then_ends() {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let feeder = {
            let shared = shared.clone();
            thread::spawn(move || {
                for i in 0..5 {
                    thread::sleep(Duration::from_millis(5));
                    let mut s = shared.lock().unwrap();
                    s.items.push(i);
                    s.done = i == 4;
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            })
        };
        let got: Vec<u32> = iter_stream(Fed(shared)).collect();
        feeder.join().unwrap();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn next_within_gives_up_on_a_quiet_stream_and_still_gets_a_later_item() {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut items = iter_stream(Fed(shared.clone()));
        assert!(items.next_within(Duration::from_millis(20)).is_pending());
        let feeder = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            let mut s = shared.lock().unwrap();
            s.items.push(7);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
        assert_eq!(
            items.next_within(Duration::from_secs(30)),
            Poll::Ready(Some(7))
        );
        feeder.join().unwrap();
    }

    #[test]
    fn block_on_returns_a_ready_futures_value() {
        assert_eq!(block_on(async { 7 }), 7);
    }
}
