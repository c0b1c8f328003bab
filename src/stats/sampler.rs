//! The `stats` thread: one [`Collector::collect`] round at start and then every
//! period (10 s, upstream cAdvisor's housekeeping interval; the kubelet has no flag
//! for it), never on the sync loop. Each sample gets its CPU rates from the previous
//! one and is published in a [`StatsStore`]: one small mutex over two `Arc`s (latest
//! and previous), swapped in O(1) and never held across I/O, so readers (the node
//! server's `srv-conn` threads, later the eviction manager) take a cheap snapshot.
//!
//! Ends when the shutdown channel disconnects.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::select;

use super::collect::Collector;
use super::sample::Sample;
use crate::process::Shutdown;

/// The sampling period when none is configured.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// The last two samples, shared between the `stats` thread and its readers.
#[derive(Clone, Default)]
pub struct StatsStore {
    inner: Arc<Mutex<Window>>,
}

#[derive(Default)]
struct Window {
    latest: Option<Arc<Sample>>,
    previous: Option<Arc<Sample>>,
}

impl StatsStore {
    pub fn new() -> StatsStore {
        StatsStore::default()
    }

    /// The newest sample, if any round has finished.
    pub fn latest(&self) -> Option<Arc<Sample>> {
        self.lock().latest.clone()
    }

    /// The newest and the one before it.
    pub fn window(&self) -> (Option<Arc<Sample>>, Option<Arc<Sample>>) {
        let w = self.lock();
        (w.latest.clone(), w.previous.clone())
    }

    /// Adds a sample, filling its rates from the current latest.
    pub fn publish(&self, sample: Sample) {
        let prev = self.latest();
        let sample = match &prev {
            Some(p) => sample.with_rates(p),
            None => sample,
        };
        let mut w = self.lock();
        w.previous = w.latest.take();
        let retained = sample.heap_bytes() + w.previous.as_ref().map_or(0, |p| p.heap_bytes());
        w.latest = Some(Arc::new(sample));
        drop(w);
        crate::metrics::stats_retained(retained);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // A reader that panicked cannot leave the window half-written: both fields
        // are replaced whole, so a poisoned lock's data is still good.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Starts the `stats` thread.
pub fn spawn(
    collector: Collector,
    store: StatsStore,
    period: Duration,
    shutdown: Shutdown,
) -> std::io::Result<JoinHandle<()>> {
    crate::process::spawn_essential("stats", 256 * 1024, move || {
        run(collector, store, period, shutdown)
    })
}

fn run(collector: Collector, store: StatsStore, period: Duration, shutdown: Shutdown) {
    loop {
        let started = Instant::now();
        let sample = collector.collect(SystemTime::now());
        for e in &sample.errors {
            log::debug!("stats: {e}");
        }
        crate::metrics::stats_round(started.elapsed(), sample.errors.is_empty());
        store.publish(sample);
        let wait = period.saturating_sub(started.elapsed());
        select! {
            recv(shutdown) -> _ => return,
            default(wait) => {}
        }
    }
}
