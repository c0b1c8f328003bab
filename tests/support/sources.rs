//! Helpers of the pod-source tests (`tests/fakes/api_source.rs`, `tests/fakes/static_source.rs`,
//! `tests/fakes/services_source.rs`): what the updates a source sent say, and whether its
//! thread ended.

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use litelet::sources::{PodOperation, PodUpdate};

/// Each update's operation and pod names, for assertions and failure messages.
pub fn summary(updates: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
    updates
        .iter()
        .map(|u| (u.op, u.pods.iter().map(|p| p.name().to_owned()).collect()))
        .collect()
}

/// How many times each pod name appeared with `op`.
pub fn count(updates: &[PodUpdate], op: PodOperation) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for u in updates.iter().filter(|u| u.op == op) {
        for p in &u.pods {
            *n.entry(p.name().to_owned()).or_default() += 1;
        }
    }
    n
}

/// Joins `handle` from a helper thread: `Ok(true)` when the thread ended without a
/// panic within `timeout`, an error when it did not end in time.
pub fn join_within<T: Send + 'static>(
    handle: JoinHandle<T>,
    timeout: Duration,
) -> Result<bool, RecvTimeoutError> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(handle.join().is_ok());
    });
    rx.recv_timeout(timeout)
}
