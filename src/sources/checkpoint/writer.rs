//! The debounced checkpoint writer: one thread per checkpoint (`ckpt-api-pods`,
//! `ckpt-services`) that keeps its own copy of the items from the changes a source
//! thread sends, and writes the file once a burst of changes has gone quiet.
//!
//! The source thread never waits on the disk: [`Writer`] methods only send on an
//! unbounded channel (a change is one object, so a burst costs what the watch
//! already decoded). The writer applies every change to its copy and writes when no
//! change came for `quiet`, or `max_delay` after the first unwritten change (a
//! steady stream still lands). Nothing is written before the first
//! [`Writer::replace`] (a full list): deltas without a base would drop pods, and a
//! checkpoint restored while cut off must stay as it is until the API answers.
//!
//! The thread ends when every [`Writer`] is dropped (its source thread ended), after
//! writing what is pending. Write failures are logged and retried with the next
//! change; they never reach the source thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::Serialize;

use super::{CheckpointFile, Contents};

/// When a burst of changes is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Write once no change came for this long.
    pub quiet: Duration,
    /// ... or this long after the first unwritten change, whichever is first.
    pub max_delay: Duration,
}

impl Default for Debounce {
    fn default() -> Self {
        Debounce {
            quiet: Duration::from_secs(1),
            max_delay: Duration::from_secs(10),
        }
    }
}

/// When the pending changes are due to be written (pure).
pub fn due(first_change: Instant, last_change: Instant, debounce: Debounce) -> Instant {
    (last_change + debounce.quiet).min(first_change + debounce.max_delay)
}

/// One change to the checkpointed items.
enum Change<V> {
    /// Everything, from a list.
    Replace {
        items: BTreeMap<String, V>,
        resource_version: Option<String>,
    },
    Upsert {
        key: String,
        value: V,
        resource_version: Option<String>,
    },
    Remove {
        key: String,
        resource_version: Option<String>,
    },
}

/// The source thread's handle; cloneable, never blocks.
pub struct Writer<V> {
    tx: Sender<Change<V>>,
    writes: Arc<AtomicU64>,
}

impl<V> Clone for Writer<V> {
    fn clone(&self) -> Self {
        Writer {
            tx: self.tx.clone(),
            writes: self.writes.clone(),
        }
    }
}

impl<V> Writer<V> {
    /// Replaces every item (after a list).
    pub fn replace(&self, items: BTreeMap<String, V>, resource_version: Option<String>) {
        let _ = self.tx.send(Change::Replace {
            items,
            resource_version,
        });
    }

    /// Adds or replaces one item (a watch ADDED or MODIFIED).
    pub fn upsert(&self, key: String, value: V, resource_version: Option<String>) {
        let _ = self.tx.send(Change::Upsert {
            key,
            value,
            resource_version,
        });
    }

    /// Removes one item (a watch DELETED).
    pub fn remove(&self, key: String, resource_version: Option<String>) {
        let _ = self.tx.send(Change::Remove {
            key,
            resource_version,
        });
    }

    /// Files written so far (tests and logs).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

/// Starts the writer thread `thread_name` for `file` of `node`.
pub fn spawn<V: Serialize + Send + 'static>(
    thread_name: &str,
    file: CheckpointFile,
    node: String,
    debounce: Debounce,
) -> std::io::Result<(Writer<V>, JoinHandle<()>)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let writes = Arc::new(AtomicU64::new(0));
    let counter = writes.clone();
    let handle = crate::process::spawn_essential(thread_name, 256 * 1024, move || {
        run(rx, file, node, debounce, counter)
    })?;
    Ok((Writer { tx, writes }, handle))
}

fn run<V: Serialize>(
    rx: Receiver<Change<V>>,
    file: CheckpointFile,
    node: String,
    debounce: Debounce,
    writes: Arc<AtomicU64>,
) {
    let mut state: Option<Contents<V>> = None;
    // First and last unwritten change.
    let mut pending: Option<(Instant, Instant)> = None;
    loop {
        let next = match pending {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some((first, last)) => {
                let wait = due(first, last, debounce).saturating_duration_since(Instant::now());
                rx.recv_timeout(wait)
            }
        };
        match next {
            Ok(change) => {
                if apply(&mut state, change, &node) {
                    let now = Instant::now();
                    pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                write(&file, state.as_ref(), &writes);
                pending = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                if pending.is_some() {
                    write(&file, state.as_ref(), &writes);
                }
                return;
            }
        }
    }
}

/// Applies a change; false when it changes nothing to write (a delta before any
/// full list).
fn apply<V>(state: &mut Option<Contents<V>>, change: Change<V>, node: &str) -> bool {
    match change {
        Change::Replace {
            items,
            resource_version,
        } => {
            *state = Some(Contents {
                node: node.to_owned(),
                resource_version,
                items,
            });
            true
        }
        Change::Upsert {
            key,
            value,
            resource_version,
        } => match state {
            Some(s) => {
                s.items.insert(key, value);
                s.resource_version = resource_version.or(s.resource_version.take());
                true
            }
            None => false,
        },
        Change::Remove {
            key,
            resource_version,
        } => match state {
            Some(s) => {
                s.items.remove(&key);
                s.resource_version = resource_version.or(s.resource_version.take());
                true
            }
            None => false,
        },
    }
}

fn write<V: Serialize>(file: &CheckpointFile, state: Option<&Contents<V>>, writes: &AtomicU64) {
    let Some(contents) = state else { return };
    match file.store(contents) {
        Ok(()) => {
            writes.fetch_add(1, Ordering::Relaxed);
            log::debug!(
                "checkpoint {}: wrote {} items at resourceVersion {:?}",
                file.path().display(),
                contents.items.len(),
                contents.resource_version
            );
        }
        Err(err) => log::warn!("{err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CheckpointFile, API_PODS};
    use super::*;

    fn start(dir: &std::path::Path, debounce: Debounce) -> (Writer<String>, JoinHandle<()>) {
        spawn(
            "ckpt-test",
            CheckpointFile::new(dir, API_PODS),
            "n1".into(),
            debounce,
        )
        .unwrap()
    }

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn due_is_quiet_after_the_last_change_but_never_past_the_max_delay() {
        let d = Debounce {
            quiet: Duration::from_secs(1),
            max_delay: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        assert_eq!(due(t0, t0, d), t0 + Duration::from_secs(1));
        let later = t0 + Duration::from_secs(3);
        assert_eq!(due(t0, later, d), later + Duration::from_secs(1));
        assert_eq!(due(t0, t0 + Duration::from_secs(30), d), t0 + d.max_delay);
    }

    #[test]
    fn a_burst_of_changes_costs_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let debounce = Debounce {
            quiet: Duration::from_millis(300),
            max_delay: Duration::from_secs(60),
        };
        let (writer, handle) = start(dir.path(), debounce);
        writer.replace(BTreeMap::new(), Some("1".into()));
        for i in 0..200 {
            writer.upsert(
                format!("uid-{i}"),
                format!("pod {i}"),
                Some(format!("{}", i + 2)),
            );
        }
        writer.remove("uid-0".into(), Some("300".into()));
        let file = CheckpointFile::new(dir.path(), API_PODS);
        assert!(wait_for(|| writer.writes() == 1));
        // Well past another quiet period: still one write.
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(writer.writes(), 1, "one write per burst");
        let stored = file.load::<String>("n1").unwrap().unwrap();
        assert_eq!(stored.items.len(), 199);
        assert_eq!(stored.resource_version.as_deref(), Some("300"));
        assert!(!stored.items.contains_key("uid-0"));

        // A second burst is a second write.
        writer.upsert("late".into(), "pod late".into(), None);
        assert!(wait_for(|| writer.writes() == 2));
        drop(writer);
        handle.join().unwrap();
    }

    #[test]
    fn deltas_before_the_first_list_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        let old = Contents {
            node: "n1".into(),
            resource_version: Some("7".into()),
            items: BTreeMap::from([("kept".to_owned(), "pod kept".to_owned())]),
        };
        file.store(&old).unwrap();
        let debounce = Debounce {
            quiet: Duration::from_millis(50),
            max_delay: Duration::from_millis(500),
        };
        let (writer, handle) = start(dir.path(), debounce);
        writer.upsert("other".into(), "pod other".into(), None);
        writer.remove("kept".into(), None);
        std::thread::sleep(Duration::from_millis(300));
        drop(writer);
        handle.join().unwrap();
        assert_eq!(file.load::<String>("n1").unwrap(), Some(old));
    }

    #[test]
    fn pending_changes_are_written_when_the_source_ends() {
        let dir = tempfile::tempdir().unwrap();
        let debounce = Debounce {
            quiet: Duration::from_secs(600),
            max_delay: Duration::from_secs(600),
        };
        let (writer, handle) = start(dir.path(), debounce);
        writer.replace(BTreeMap::from([("a".into(), "pod a".into())]), None);
        drop(writer);
        handle.join().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        assert_eq!(file.load::<String>("n1").unwrap().unwrap().items.len(), 1);
    }
}
