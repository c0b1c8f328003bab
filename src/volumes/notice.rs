//! The events that say a pod's volumes or environment come from the node's copy
//! (edge autonomy, `docs/autonomy.md`): a Warning `FromNodeCopy` about the pod,
//! once per pod and object (or token) in each outage, recorded when the object
//! cache or token manager served a kept copy because the API server could not be
//! reached. Events recorded while cut off wait in the events thread's buffer and
//! reach the API server when it answers.
//!
//! Called on pod worker threads (volume set-up, env lookups); one small mutex over
//! what was told, never held across I/O.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::api::pod::Pod;
use crate::api::reachability::Reachability;
use crate::events::{EventType, Recorder};

/// The event's reason.
pub const FROM_NODE_COPY: &str = "FromNodeCopy";

/// Tells, once per outage, which of a pod's data comes from the node's copy.
#[derive(Default)]
pub struct KeptNotices {
    recorder: Recorder,
    reachability: Option<Reachability>,
    /// (pod UID, what) → the outage (reachability epoch) it was told in.
    told: Mutex<BTreeMap<(String, String), u64>>,
}

impl KeptNotices {
    pub fn new(recorder: Recorder, reachability: Option<Reachability>) -> Self {
        KeptNotices {
            recorder,
            reachability,
            told: Mutex::default(),
        }
    }

    fn told(&self) -> MutexGuard<'_, BTreeMap<(String, String), u64>> {
        // One insert or retain at a time: a panic elsewhere leaves the map whole.
        self.told.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `what` (e.g. `secret edge/db (resourceVersion 12)`) of `pod` was served
    /// from the node's copy: an event, unless already told in this outage.
    pub fn served(&self, pod: &Pod, what: &str) {
        let epoch = self.reachability.as_ref().map_or(0, |r| r.state().epoch);
        let key = (pod.uid().to_owned(), what.to_owned());
        if self.told().insert(key, epoch) == Some(epoch) {
            return;
        }
        self.recorder.pod(
            pod,
            EventType::Warning,
            FROM_NODE_COPY,
            format!("{what} from the node's copy: the API server is unreachable"),
        );
    }

    /// Forgets what was told about pod `uid` (its tear-down).
    pub fn forget_pod(&self, uid: &str) {
        self.told().retain(|(pod, _), _| pod != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::reachability::Outcome;

    #[test]
    fn each_kept_object_of_a_pod_is_told_once_per_outage() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let reachability = Reachability::default();
        let notices = KeptNotices::new(Recorder::new(tx), Some(reachability.clone()));
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("edge".into());
        notices.served(&pod, "secret edge/db (resourceVersion 7)");
        notices.served(&pod, "secret edge/db (resourceVersion 7)");
        notices.served(&pod, "configmap edge/cfg (resourceVersion 8)");
        let events: Vec<_> = rx.try_iter().collect();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].reason, FROM_NODE_COPY);
        assert_eq!(
            events[0].message,
            "secret edge/db (resourceVersion 7) from the node's copy: the API server is unreachable"
        );
        // The next outage tells it again; a forgotten pod too.
        reachability.record(Outcome::Failed);
        reachability.record(Outcome::Answered);
        notices.served(&pod, "secret edge/db (resourceVersion 7)");
        assert_eq!(rx.try_iter().count(), 1);
        notices.forget_pod("u1");
        notices.served(&pod, "secret edge/db (resourceVersion 7)");
        assert_eq!(rx.try_iter().count(), 1);
    }
}
