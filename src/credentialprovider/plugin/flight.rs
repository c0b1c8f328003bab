//! One run per key at a time (upstream's singleflight around the plugin exec): when
//! pods ask a plugin about the same image at once, as at boot, the first caller runs
//! the plugin and the others wait for its answer instead of starting their own.
//!
//! Called from pod worker threads. The map of running keys sits behind a short
//! lock, never held while the work runs; a caller whose work panics hands the
//! waiters the `abandoned` value, so no waiter hangs.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Runs with their waiters, by key.
pub struct Flights<K, T> {
    running: Mutex<HashMap<K, Arc<Flight<T>>>>,
}

struct Flight<T> {
    result: Mutex<Option<T>>,
    done: Condvar,
    /// Callers waiting for this run's result.
    waiters: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is one insert, remove or take: a panic leaves it whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Hash + Eq + Clone, T: Clone> Default for Flights<K, T> {
    fn default() -> Self {
        Flights {
            running: Mutex::new(HashMap::new()),
        }
    }
}

/// Publishes the leader's result (or `abandoned` when it unwinds) and ends the
/// flight.
struct Landing<'a, K: Hash + Eq, T> {
    flights: &'a Flights<K, T>,
    key: &'a K,
    flight: &'a Flight<T>,
    abandoned: Option<T>,
}

impl<K: Hash + Eq, T> Drop for Landing<'_, K, T> {
    fn drop(&mut self) {
        lock(&self.flights.running).remove(self.key);
        let mut result = lock(&self.flight.result);
        if result.is_none() {
            *result = self.abandoned.take();
        }
        self.flight.done.notify_all();
    }
}

impl<K: Hash + Eq + Clone, T: Clone> Flights<K, T> {
    /// `work()`'s result, run here or by the caller already running it for `key`.
    pub fn run(&self, key: &K, work: impl FnOnce() -> T, abandoned: T) -> T {
        let (flight, leader) = {
            let mut running = lock(&self.running);
            match running.get(key) {
                Some(flight) => (flight.clone(), false),
                None => {
                    let flight = Arc::new(Flight {
                        result: Mutex::new(None),
                        done: Condvar::new(),
                        waiters: AtomicUsize::new(0),
                    });
                    running.insert(key.clone(), flight.clone());
                    (flight, true)
                }
            }
        };
        if leader {
            let _landing = Landing {
                flights: self,
                key,
                flight: &flight,
                abandoned: Some(abandoned),
            };
            let result = work();
            *lock(&flight.result) = Some(result.clone());
            return result;
        }
        flight.waiters.fetch_add(1, Ordering::SeqCst);
        let mut result = lock(&flight.result);
        loop {
            if let Some(value) = result.as_ref() {
                return value.clone();
            }
            result = flight.done.wait(result).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Keys being run now (for tests).
    pub fn running(&self) -> usize {
        lock(&self.running).len()
    }

    /// Callers waiting for the run of `key` (for tests).
    pub fn waiters(&self, key: &K) -> usize {
        lock(&self.running)
            .get(key)
            .map_or(0, |f| f.waiters.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn concurrent_callers_of_one_key_share_one_run() {
        let flights: Arc<Flights<String, u32>> = Arc::default();
        let key = "reg.io/app".to_owned();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for _ in 0..5 {
            let (flights, runs, key) = (flights.clone(), runs.clone(), key.clone());
            handles.push(std::thread::spawn(move || {
                flights.run(
                    &key,
                    || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // Finish only once the four others wait for this run.
                        let until = Instant::now() + Duration::from_secs(30);
                        while flights.waiters(&key) < 4 && Instant::now() < until {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        42
                    },
                    0,
                )
            }));
        }
        let results: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results, [42; 5]);
        assert_eq!(runs.load(Ordering::SeqCst), 1, "callers ran their own");
        assert_eq!(flights.running(), 0);
        // After the flight, a new call runs again.
        assert_eq!(flights.run(&"reg.io/app".to_owned(), || 7, 0), 7);
    }

    #[test]
    fn waiters_of_a_panicking_run_get_the_abandoned_value() {
        let flights: Arc<Flights<String, i32>> = Arc::default();
        let (entered_tx, entered_rx) = crossbeam_channel::bounded::<()>(1);
        let leader = {
            let flights = flights.clone();
            std::thread::spawn(move || {
                flights.run(
                    &"k".to_owned(),
                    || {
                        entered_tx.send(()).unwrap();
                        std::thread::sleep(Duration::from_millis(200));
                        panic!("plugin code panicked")
                    },
                    -1,
                )
            })
        };
        entered_rx.recv().unwrap();
        let waiter = flights.run(&"k".to_owned(), || 5, -2);
        assert!(leader.join().is_err());
        assert!(waiter == -1 || waiter == 5, "{waiter}");
        assert_eq!(flights.running(), 0);
    }
}
