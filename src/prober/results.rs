//! The latest probe result of every probed container (upstream `prober/results`), and
//! the updates sent when one changes.
//!
//! Written only by the `probe-timer` thread; read by any thread through
//! [`ProbeManager`](super::ProbeManager) queries. One mutex, held for map operations
//! only. Invariants:
//! - an entry exists for a container ID exactly while a worker of that kind exists for
//!   it, or after a worker stopped on purpose with a last result (pod deletion);
//! - a new worker's entry starts `Unknown` ("not probed yet"); `Unknown` is never sent;
//! - a [`ProbeUpdate`] is sent only when a stored result changes to Success or
//!   Failure, after the cache holds the new value.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::Sender;

use crate::runtime::actions::{self, ProbeResult};
use crate::status::containers;

use super::ProbeKind;

/// One probe result that changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// The pod's UID.
    pub uid: String,
    /// The runtime's container ID (no `<runtime>://` prefix).
    pub container_id: String,
    pub kind: ProbeKind,
    /// Success or Failure (never Unknown).
    pub result: ProbeResult,
}

/// Results of one container instance, by kind.
#[derive(Clone, Debug, Default)]
struct Entry {
    liveness: Option<ProbeResult>,
    readiness: Option<ProbeResult>,
    startup: Option<ProbeResult>,
}

impl Entry {
    fn slot(&mut self, kind: ProbeKind) -> &mut Option<ProbeResult> {
        match kind {
            ProbeKind::Liveness => &mut self.liveness,
            ProbeKind::Readiness => &mut self.readiness,
            ProbeKind::Startup => &mut self.startup,
        }
    }

    fn get(&self, kind: ProbeKind) -> Option<ProbeResult> {
        match kind {
            ProbeKind::Liveness => self.liveness,
            ProbeKind::Readiness => self.readiness,
            ProbeKind::Startup => self.startup,
        }
    }

    fn is_empty(&self) -> bool {
        self.liveness.is_none() && self.readiness.is_none() && self.startup.is_none()
    }
}

/// Pod UID → container ID → results.
type Map = HashMap<String, BTreeMap<String, Entry>>;

/// The shared cache; cheap to clone.
#[derive(Clone)]
pub struct Results {
    map: Arc<Mutex<Map>>,
    updates: Sender<ProbeUpdate>,
}

impl Results {
    pub fn new(updates: Sender<ProbeUpdate>) -> Results {
        Results {
            map: Arc::default(),
            updates,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // A panic elsewhere cannot leave a map half-updated: every change is one insert
        // or remove, so a poisoned lock is still consistent.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `result`; sends an update when it changed to Success or Failure.
    pub fn set(&self, uid: &str, container_id: &str, kind: ProbeKind, result: ProbeResult) {
        let changed = {
            let mut map = self.lock();
            let entry = map
                .entry(uid.to_owned())
                .or_default()
                .entry(container_id.to_owned())
                .or_default();
            entry.slot(kind).replace(result) != Some(result)
        };
        if changed && result != ProbeResult::Unknown {
            // The receiver gone means litelet is shutting down.
            let _ = self.updates.send(ProbeUpdate {
                uid: uid.to_owned(),
                container_id: container_id.to_owned(),
                kind,
                result,
            });
        }
    }

    /// Forgets the `kind` result of one container.
    pub fn remove(&self, uid: &str, container_id: &str, kind: ProbeKind) {
        let mut map = self.lock();
        let Some(pod) = map.get_mut(uid) else {
            return;
        };
        if let Some(entry) = pod.get_mut(container_id) {
            *entry.slot(kind) = None;
            if entry.is_empty() {
                pod.remove(container_id);
            }
        }
        if pod.is_empty() {
            map.remove(uid);
        }
    }

    /// Forgets everything about a pod.
    pub fn remove_pod(&self, uid: &str) {
        self.lock().remove(uid);
    }

    pub fn get(&self, uid: &str, container_id: &str, kind: ProbeKind) -> Option<ProbeResult> {
        self.lock().get(uid)?.get(container_id)?.get(kind)
    }

    /// Liveness and startup results for `compute_pod_actions`: liveness only once
    /// decided (no entry counts as healthy), startup including Unknown (not started).
    pub fn for_actions(&self, uid: &str) -> actions::ProbeResults {
        let mut out = actions::ProbeResults::default();
        if let Some(pod) = self.lock().get(uid) {
            for (id, entry) in pod {
                if let Some(r) = entry.liveness.filter(|r| *r != ProbeResult::Unknown) {
                    out.liveness.insert(id.clone(), r);
                }
                if let Some(r) = entry.startup {
                    out.startup.insert(id.clone(), r);
                }
            }
        }
        out
    }

    /// Readiness and startup as booleans for status generation (true only on Success).
    pub fn for_status(&self, uid: &str) -> containers::ProbeResults {
        let mut out = containers::ProbeResults::default();
        if let Some(pod) = self.lock().get(uid) {
            for (id, entry) in pod {
                if let Some(r) = entry.readiness {
                    out.readiness.insert(id.clone(), r == ProbeResult::Success);
                }
                if let Some(r) = entry.startup {
                    out.startup.insert(id.clone(), r == ProbeResult::Success);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_only_on_change_and_never_unknown() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let results = Results::new(tx);
        results.set("u", "c1", ProbeKind::Readiness, ProbeResult::Unknown);
        results.set("u", "c1", ProbeKind::Readiness, ProbeResult::Success);
        results.set("u", "c1", ProbeKind::Readiness, ProbeResult::Success);
        results.set("u", "c1", ProbeKind::Readiness, ProbeResult::Failure);
        let got: Vec<ProbeResult> = rx.try_iter().map(|u| u.result).collect();
        assert_eq!(got, [ProbeResult::Success, ProbeResult::Failure]);

        results.set("u", "c1", ProbeKind::Liveness, ProbeResult::Unknown);
        results.set("u", "c1", ProbeKind::Startup, ProbeResult::Unknown);
        let actions = results.for_actions("u");
        assert!(
            actions.liveness.is_empty(),
            "undecided liveness is left out"
        );
        assert_eq!(actions.startup.get("c1"), Some(&ProbeResult::Unknown));
        let status = results.for_status("u");
        assert_eq!(status.readiness.get("c1"), Some(&false));
        assert_eq!(status.startup.get("c1"), Some(&false));

        for kind in ProbeKind::ALL {
            results.remove("u", "c1", kind);
        }
        assert!(results.lock().is_empty());
    }
}
