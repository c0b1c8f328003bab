//! The `stats` thread: one [`Collector::collect`] round at start and then every
//! period (10 s, upstream cAdvisor's housekeeping interval; the kubelet has no flag
//! for it), never on the sync loop. Each sample gets its CPU rates from the previous
//! one and is published in a [`StatsStore`]: one small mutex over two `Arc`s (latest
//! and previous), swapped in O(1) and never held across I/O, so readers (the node
//! server's `srv-conn` threads, the eviction manager) take a cheap snapshot.
//!
//! A round reads the node every time, and pods only while someone uses their usage
//! (upstream's cAdvisor reads every container every round, asked or not): the node
//! API's usage paths call [`StatsStore::latest_with_pods`], the eviction manager
//! [`StatsStore::want_pods`] while a pod has local storage limits or a threshold is
//! met. The first such call after a quiet spell wakes the thread for a round at once
//! and a second one [`RATE_GAP`] later, so the answer carries CPU rates; five minutes
//! without a call turn the pods off again. An idle node nobody monitors pays for
//! the node's figures only. The cAdvisor detail works the same way, asked by each
//! `/metrics/cadvisor` scrape ([`StatsStore::want_detail`]).
//!
//! Ends when the shutdown channel disconnects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, select, Receiver, Sender};

use super::collect::{Collector, Wanted};
use super::sample::Sample;
use crate::process::Shutdown;

/// The sampling period when none is configured.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// How long after the last `/metrics/cadvisor` scrape the detail is still sampled,
/// and after the last want of pods' usage the pods are.
pub const DETAIL_PATIENCE: Duration = Duration::from_secs(300);

/// The gap between the first round with pods after a quiet spell and the next one,
/// which gives their CPU rates.
pub const RATE_GAP: Duration = Duration::from_secs(1);

/// The last two samples, shared between the `stats` thread and its readers.
#[derive(Clone)]
pub struct StatsStore {
    /// The window, and the condition readers waiting for pods' usage park on.
    inner: Arc<(Mutex<Window>, Condvar)>,
    /// Unix seconds of the last `/metrics/cadvisor` scrape (0: never).
    detail_asked: Arc<AtomicU64>,
    /// Unix seconds of the last want of pods' usage (0: never).
    pods_asked: Arc<AtomicU64>,
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
            pods_asked: Arc::default(),
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

/// True when `asked` (unix seconds, 0: never) is within [`DETAIL_PATIENCE`].
fn recently(asked: &AtomicU64) -> bool {
    let asked = asked.load(Ordering::Relaxed);
    asked > 0 && unix_now().saturating_sub(asked) < DETAIL_PATIENCE.as_secs()
}

#[derive(Default)]
struct Window {
    latest: Option<Arc<Sample>>,
    previous: Option<Arc<Sample>>,
}

impl Window {
    /// The latest sample read pods, with rates: the one before it read them too
    /// (or there is none to rate against).
    fn has_pods(&self) -> bool {
        let read_pods = |s: &Option<Arc<Sample>>| s.as_ref().map(|s| !s.pods_skipped);
        read_pods(&self.latest) == Some(true) && read_pods(&self.previous) != Some(false)
    }
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
        self.inner.1.notify_all();
        crate::metrics::stats_retained(retained);
    }

    /// A use of pods' usage: keep reading pods for [`DETAIL_PATIENCE`]; when they
    /// were off, read them now rather than at the next period.
    pub fn want_pods(&self) {
        let was = self.pods_wanted();
        self.pods_asked.store(unix_now(), Ordering::Relaxed);
        if !was {
            let _ = self.wake_tx.try_send(());
        }
    }

    /// True while pods' usage was wanted in the last [`DETAIL_PATIENCE`].
    pub fn pods_wanted(&self) -> bool {
        recently(&self.pods_asked)
    }

    /// The newest sample once it has pods' usage with rates ([`StatsStore::want_pods`]),
    /// waiting up to `wait` for the `stats` thread to read them; after that, the
    /// newest sample whatever it holds.
    pub fn latest_with_pods(&self, wait: Duration) -> Option<Arc<Sample>> {
        self.want_pods();
        let guard = self.lock();
        let (guard, _) = self
            .inner
            .1
            .wait_timeout_while(guard, wait, |w| !w.has_pods())
            .unwrap_or_else(|e| e.into_inner());
        guard.latest.clone()
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
        recently(&self.detail_asked)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // A reader that panicked cannot leave the window half-written: both fields
        // are replaced whole, so a poisoned lock's data is still good.
        self.inner.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long after a round's start the next one begins: [`RATE_GAP`] when the round
/// was the first to read pods (so their rates follow soon), else the period.
fn next_round_in(store: &StatsStore, period: Duration) -> Duration {
    let w = store.lock();
    let first_with_pods = w.latest.as_ref().is_some_and(|s| !s.pods_skipped)
        && w.previous.as_ref().is_some_and(|s| s.pods_skipped);
    if first_with_pods {
        RATE_GAP.min(period)
    } else {
        period
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
        let wanted = Wanted {
            pods: store.pods_wanted(),
            detail: store.detail_wanted(),
        };
        let sample = collector.collect_with(SystemTime::now(), wanted);
        for e in &sample.errors {
            log::debug!("stats: {e}");
        }
        crate::metrics::stats_round(
            started.elapsed(),
            sample.errors.is_empty(),
            !sample.pods_skipped,
        );
        store.publish(sample);
        let wait = next_round_in(&store, period).saturating_sub(started.elapsed());
        select! {
            recv(shutdown) -> _ => return,
            recv(store.wake_rx) -> _ => {}
            default(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pods_skipped: bool) -> Sample {
        Sample {
            time: SystemTime::now(),
            node: Default::default(),
            pods: Vec::new(),
            claims: Vec::new(),
            errors: Vec::new(),
            pods_skipped,
        }
    }

    #[test]
    fn pods_are_wanted_only_once_asked_and_the_first_ask_wakes_the_thread() {
        let store = StatsStore::new();
        assert!(!store.pods_wanted());
        store.want_pods();
        assert!(store.pods_wanted());
        assert!(store.wake_rx.try_recv().is_ok());
        store.want_pods();
        assert!(
            store.wake_rx.try_recv().is_err(),
            "an ask while pods are read wakes nothing"
        );
    }

    #[test]
    fn a_reader_waits_for_two_rounds_with_pods_so_it_gets_their_rates() {
        let store = StatsStore::new();
        store.publish(sample(true));
        let sampler = store.clone();
        let rounds = std::thread::spawn(move || {
            // As the `stats` thread: woken by the reader, then two rounds with pods.
            sampler
                .wake_rx
                .recv_timeout(Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            sampler.publish(sample(false));
            sampler.publish(sample(false));
            Ok::<(), String>(())
        });
        let got = store.latest_with_pods(Duration::from_secs(10));
        assert!(got.is_some_and(|s| !s.pods_skipped));
        let (_, previous) = store.window();
        assert!(previous.is_some_and(|s| !s.pods_skipped));
        assert_eq!(rounds.join().ok(), Some(Ok(())));
    }

    #[test]
    fn a_reader_gets_the_node_alone_when_no_round_reads_pods_in_time() {
        let store = StatsStore::new();
        store.publish(sample(true));
        let got = store.latest_with_pods(Duration::from_millis(50));
        assert!(got.is_some_and(|s| s.pods_skipped));
    }

    #[test]
    fn the_round_after_the_first_to_read_pods_comes_after_the_rate_gap() {
        let store = StatsStore::new();
        let period = Duration::from_secs(10);
        store.publish(sample(true));
        assert_eq!(next_round_in(&store, period), period);
        store.publish(sample(false));
        assert_eq!(next_round_in(&store, period), RATE_GAP);
        store.publish(sample(false));
        assert_eq!(next_round_in(&store, period), period);
    }
}
