//! The `stats` thread: one [`Collector::collect`] round at start and then every
//! period (10 s, upstream cAdvisor's housekeeping interval; the kubelet has no flag
//! for it), never on the sync loop. Each sample gets its CPU rates from the previous
//! one and is published in a [`StatsStore`]: one small mutex over two `Arc`s (latest
//! and previous), swapped in O(1) and never held across I/O, so readers (the node
//! server's `srv-conn` threads, the eviction manager) take a cheap snapshot.
//!
//! The cAdvisor detail is sampled only while `/metrics/cadvisor` is scraped: the
//! server calls [`StatsStore::want_detail`] on each scrape, which also wakes the
//! thread for a round at once when the detail was off; five minutes without a scrape
//! turn it off again.
//!
//! Ends when the shutdown channel disconnects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, select, Receiver, Sender};

use super::collect::Collector;
use super::sample::Sample;
use crate::process::Shutdown;

/// The sampling period when none is configured.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// How long after the last `/metrics/cadvisor` scrape the detail is still sampled.
pub const DETAIL_PATIENCE: Duration = Duration::from_secs(300);

/// The last two samples, shared between the `stats` thread and its readers.
#[derive(Clone)]
pub struct StatsStore {
    inner: Arc<Mutex<Window>>,
    /// Unix seconds of the last `/metrics/cadvisor` scrape (0: never).
    detail_asked: Arc<AtomicU64>,
    /// Wakes the `stats` thread for a round at once.
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
}

impl Default for StatsStore {
    fn default() -> Self {
        let (wake_tx, wake_rx) = bounded(1);
        StatsStore {
            inner: Arc::default(),
            detail_asked: Arc::default(),
            wake_tx,
            wake_rx,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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

    /// A `/metrics/cadvisor` scrape: keep sampling the detail; when it was off,
    /// sample now rather than at the next period.
    pub fn want_detail(&self) {
        let was = self.detail_wanted();
        self.detail_asked.store(unix_now(), Ordering::Relaxed);
        if !was {
            let _ = self.wake_tx.try_send(());
        }
    }

    /// True while `/metrics/cadvisor` was scraped in the last [`DETAIL_PATIENCE`].
    pub fn detail_wanted(&self) -> bool {
        let asked = self.detail_asked.load(Ordering::Relaxed);
        asked > 0 && unix_now().saturating_sub(asked) < DETAIL_PATIENCE.as_secs()
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
        let sample = collector.collect_with(SystemTime::now(), store.detail_wanted());
        for e in &sample.errors {
            log::debug!("stats: {e}");
        }
        crate::metrics::stats_round(started.elapsed(), sample.errors.is_empty());
        store.publish(sample);
        let wait = period.saturating_sub(started.elapsed());
        select! {
            recv(shutdown) -> _ => return,
            recv(store.wake_rx) -> _ => {}
            default(wait) => {}
        }
    }
}
