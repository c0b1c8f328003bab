//! Per-source bookkeeping of the pods last sent to the sync loop, and the pure
//! classification of a new snapshot into [`PodUpdate`]s.
//!
//! This is upstream's `podStorage.merge` / `checkAndUpdatePod` /
//! `podsDifferSemantically` (pkg/kubelet/config/config.go) for one source:
//! - a UID not sent before → `Add` (and the `kubernetes.io/config.seen` annotation
//!   records when it was first seen);
//! - spec, labels, non-local annotations, deletionTimestamp or
//!   deletionGracePeriodSeconds changed → `Delete` when deletionTimestamp is set,
//!   else `Update`;
//! - only the status changed → `Reconcile`;
//! - a UID missing from the snapshot → `Remove`.
//!
//! Every pod sent carries `kubernetes.io/config.source`. Within a snapshot, a second
//! pod with the same `name_namespace` is dropped with a warning (first wins).
//! Updates come out in upstream's order: Remove, Add, Update, Delete, Reconcile; the
//! first snapshot of a source always yields at least one (maybe empty) `Add` so the
//! sync loop learns that the source is ready.
//!
//! One deliberate difference: upstream keeps its old copy of a pod and patches a few
//! fields into it; here the kept copy is always the newest object from the source
//! (plus the local annotations), so what the sync loop receives carries the current
//! metadata (resourceVersion, owner references). Classification is unchanged.
//!
//! A watch changes one pod at a time: [`SourcePods::apply_one`] classifies just that
//! pod (the API source used to re-diff every pod per event, quadratic in a burst) and
//! falls back to the full snapshot when a duplicate name is involved, so the result
//! is always the one [`SourcePods::apply_snapshot`] would give.
//!
//! Pods are shared (`Arc<Pod>`): the kept copy is the incoming allocation itself
//! when it already carries the local annotations, and what goes to the sync loop is
//! the kept allocation, so a pod version exists once however many holders it has.
//!
//! Pure: no I/O, no clock ("now" is an argument). Owned by one source thread.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::api::meta::Time;
use crate::api::pod::{
    Pod, CONFIG_MIRROR_ANNOTATION_KEY, CONFIG_SEEN_ANNOTATION_KEY, CONFIG_SOURCE_ANNOTATION_KEY,
};
use crate::sources::{PodOperation, PodUpdate};

/// Annotations the kubelet itself puts on pods; they never make a pod "changed".
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SEEN_ANNOTATION_KEY,
];

fn is_local_annotation(key: &str) -> bool {
    LOCAL_ANNOTATIONS.contains(&key)
}

/// The pods one source has sent, by UID, as last sent.
#[derive(Clone, Debug)]
pub struct SourcePods {
    source: &'static str,
    pods: BTreeMap<String, Arc<Pod>>,
    /// UID of the kept pod of each full name (`name_namespace`).
    names: HashMap<String, String>,
    seen_snapshot: bool,
}

/// Pods of one merge, by operation.
#[derive(Default)]
struct Changes {
    adds: Vec<Arc<Pod>>,
    updates: Vec<Arc<Pod>>,
    deletes: Vec<Arc<Pod>>,
    removes: Vec<Arc<Pod>>,
    reconciles: Vec<Arc<Pod>>,
}

impl SourcePods {
    /// Nothing sent yet; `source` is the `config.source` value (`api`, `file`).
    pub fn new(source: &'static str) -> Self {
        Self {
            source,
            pods: BTreeMap::new(),
            names: HashMap::new(),
            seen_snapshot: false,
        }
    }

    /// The pods as last sent.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods.values()
    }

    pub fn get(&self, uid: &str) -> Option<&Arc<Pod>> {
        self.pods.get(uid)
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Replaces the source's pod set with `pods` (everything the source has now) and
    /// returns the updates that tell the sync loop what changed.
    pub fn apply_snapshot<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Arc<Pod>>,
        now: SystemTime,
    ) -> Vec<PodUpdate> {
        let first = !self.seen_snapshot;
        self.seen_snapshot = true;
        let mut changes = Changes::default();
        let mut next = BTreeMap::new();
        let mut names = HashSet::new();
        for pod in pods {
            let uid = pod.uid();
            if uid.is_empty() {
                log::warn!(
                    "source {}: pod {}/{} has no uid; ignored",
                    self.source,
                    pod.namespace(),
                    pod.name()
                );
                continue;
            }
            if next.contains_key(uid) {
                continue;
            }
            if !names.insert(pod.full_name()) {
                log::warn!(
                    "source {}: pod {}/{} uid {uid}: duplicate pod name; ignored",
                    self.source,
                    pod.namespace(),
                    pod.name()
                );
                continue;
            }
            let stored = match self.pods.remove(uid) {
                Some(existing) => {
                    let (stored, op) = self.check_and_update(existing, pod);
                    changes.record(op, &stored);
                    stored
                }
                None => {
                    let added = self.first_seen(pod, now);
                    changes.adds.push(added.clone());
                    added
                }
            };
            next.insert(uid.to_owned(), stored);
        }
        changes.removes = std::mem::replace(&mut self.pods, next)
            .into_values()
            .collect();
        self.names = self
            .pods
            .iter()
            .map(|(uid, pod)| (pod.full_name(), uid.clone()))
            .collect();
        changes.into_updates(self.source, first)
    }

    /// Like [`apply_snapshot`](Self::apply_snapshot) over `all` (the source's whole pod
    /// set, keyed by UID) when only the pod `uid` changed since the last call: the
    /// same updates, without visiting the other pods.
    pub fn apply_one(
        &mut self,
        all: &BTreeMap<String, Arc<Pod>>,
        uid: &str,
        now: SystemTime,
    ) -> Vec<PodUpdate> {
        if !self.seen_snapshot || uid.is_empty() {
            return self.apply_snapshot(all.values(), now);
        }
        let mut changes = Changes::default();
        match all.get(uid) {
            None => {
                let Some(gone) = self.pods.remove(uid) else {
                    return Vec::new();
                };
                let name = gone.full_name();
                self.names.remove(&name);
                // A pod of the same name that was dropped as a duplicate now gets in.
                let shadowed = all
                    .values()
                    .any(|p| p.name() == gone.name() && p.namespace() == gone.namespace());
                if shadowed {
                    self.pods.insert(uid.to_owned(), gone);
                    self.names.insert(name, uid.to_owned());
                    return self.apply_snapshot(all.values(), now);
                }
                changes.removes.push(gone);
            }
            Some(pod) => match self.pods.remove(uid) {
                Some(existing) => {
                    let (stored, op) = self.check_and_update(existing, pod);
                    changes.record(op, &stored);
                    self.pods.insert(uid.to_owned(), stored);
                }
                None => {
                    let name = pod.full_name();
                    if self.names.contains_key(&name) {
                        // Which of two same-named pods wins is the snapshot's rule.
                        return self.apply_snapshot(all.values(), now);
                    }
                    let added = self.first_seen(pod, now);
                    changes.adds.push(added.clone());
                    self.pods.insert(uid.to_owned(), added);
                    self.names.insert(name, uid.to_owned());
                }
            },
        }
        changes.into_updates(self.source, false)
    }

    /// Compares the kept copy with the incoming pod: returns the new copy to keep and
    /// what to tell the sync loop (`None`: nothing it cares about changed).
    fn check_and_update(
        &self,
        existing: Arc<Pod>,
        incoming: &Arc<Pod>,
    ) -> (Arc<Pod>, Option<PodOperation>) {
        // Same resourceVersion from the API server: the very same object.
        let rv = incoming.metadata.resource_version.as_deref();
        if rv.is_some_and(|rv| !rv.is_empty())
            && existing.metadata.resource_version.as_deref() == rv
        {
            return (existing, None);
        }
        let op = if pods_differ_semantically(&existing, incoming) {
            if incoming.metadata.deletion_timestamp.is_some() {
                Some(PodOperation::Delete)
            } else {
                Some(PodOperation::Update)
            }
        } else if existing.status != incoming.status {
            Some(PodOperation::Reconcile)
        } else {
            None
        };
        if op.is_none() && existing.metadata == incoming_meta_with_local(&existing, incoming) {
            // Not even metadata moved (a source without resourceVersions): keep as is.
            return (existing, None);
        }
        (self.carry_local_annotations(incoming, &existing), op)
    }

    /// `pod` with the local annotations of `existing` and this source's name: the
    /// same allocation when it already has them (a source that keeps what it sent),
    /// else a new version.
    fn carry_local_annotations(&self, pod: &Arc<Pod>, existing: &Pod) -> Arc<Pod> {
        let wanted = |key: &str| match key {
            CONFIG_SOURCE_ANNOTATION_KEY => Some(self.source),
            _ => existing.metadata.annotations.get(key).map(String::as_str),
        };
        let carried = LOCAL_ANNOTATIONS
            .iter()
            .all(|key| wanted(key).is_none_or(|v| pod.metadata.annotation(key) == Some(v)));
        if carried {
            return Arc::clone(pod);
        }
        let mut stored = Pod::clone(pod);
        let ann = &mut stored.metadata.annotations;
        for key in LOCAL_ANNOTATIONS {
            if let Some(v) = wanted(key) {
                ann.insert(key.to_owned(), v.to_owned());
            }
        }
        Arc::new(stored)
    }

    fn first_seen(&self, pod: &Pod, now: SystemTime) -> Arc<Pod> {
        let mut pod = pod.clone();
        let ann = &mut pod.metadata.annotations;
        ann.insert(
            CONFIG_SOURCE_ANNOTATION_KEY.to_owned(),
            self.source.to_owned(),
        );
        ann.insert(CONFIG_SEEN_ANNOTATION_KEY.to_owned(), seen_timestamp(now));
        Arc::new(pod)
    }
}

/// The incoming pod's metadata as it would be kept (local annotations carried over),
/// for the "nothing moved at all" check.
fn incoming_meta_with_local(existing: &Pod, incoming: &Pod) -> crate::api::meta::ObjectMeta {
    let mut meta = incoming.metadata.clone();
    for key in LOCAL_ANNOTATIONS {
        if let Some(v) = existing.metadata.annotations.get(key) {
            meta.annotations.insert(key.to_owned(), v.clone());
        }
    }
    meta
}

impl Changes {
    /// Files a known pod under what its check found (no operation: nothing to send).
    fn record(&mut self, op: Option<PodOperation>, pod: &Arc<Pod>) {
        let list = match op {
            Some(PodOperation::Update) => &mut self.updates,
            Some(PodOperation::Delete) => &mut self.deletes,
            Some(PodOperation::Reconcile) => &mut self.reconciles,
            _ => return,
        };
        list.push(pod.clone());
    }

    fn into_updates(self, source: &'static str, first_snapshot: bool) -> Vec<PodUpdate> {
        let mut out = Vec::new();
        let mut push = |pods: Vec<Arc<Pod>>, op| {
            if !pods.is_empty() {
                out.push(PodUpdate {
                    pods,
                    op,
                    source,
                    provisional: false,
                });
            }
        };
        let quiet = self.adds.is_empty() && self.updates.is_empty() && self.deletes.is_empty();
        push(self.removes, PodOperation::Remove);
        push(self.adds, PodOperation::Add);
        push(self.updates, PodOperation::Update);
        push(self.deletes, PodOperation::Delete);
        if first_snapshot && quiet {
            // The sync loop's "this source is ready" signal.
            out.push(PodUpdate {
                pods: Vec::new(),
                op: PodOperation::Add,
                source,
                provisional: false,
            });
        }
        if !self.reconciles.is_empty() {
            out.push(PodUpdate {
                pods: self.reconciles,
                op: PodOperation::Reconcile,
                source,
                provisional: false,
            });
        }
        out
    }
}

/// True when the change is one the kubelet acts on (anything but status and
/// bookkeeping metadata).
pub fn pods_differ_semantically(existing: &Pod, incoming: &Pod) -> bool {
    let (a, b) = (&existing.metadata, &incoming.metadata);
    existing.spec != incoming.spec
        || a.labels != b.labels
        || a.deletion_timestamp != b.deletion_timestamp
        || a.deletion_grace_period_seconds != b.deletion_grace_period_seconds
        || !annotations_equal_ignoring_local(&a.annotations, &b.annotations)
}

fn annotations_equal_ignoring_local(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> bool {
    let keep = |(k, _): &(&String, &String)| !is_local_annotation(k);
    a.iter().filter(keep).eq(b.iter().filter(keep))
}

/// `now` in RFC 3339 with nanoseconds, trailing zeros trimmed (Go's RFC3339Nano, UTC).
fn seen_timestamp(now: SystemTime) -> String {
    let whole = Time::from_system_time(now).to_string();
    let nanos = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    if nanos == 0 {
        return whole;
    }
    let frac = format!("{nanos:09}");
    let frac = frac.trim_end_matches('0');
    format!("{}.{frac}Z", whole.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests;
