//! The API server pod source: the `api-watch` thread lists and watches the pods bound
//! to this node and sends [`PodUpdate`]s to the sync loop.
//!
//! Loop: the shared list+watch loop (`api/reflector.rs`) over
//! `pods?fieldSelector=spec.nodeName=<node>` (the Node authorizer allows nothing
//! wider): after each list, send the diff against what was sent before, so pods
//! deleted while disconnected become `Remove`s and nothing is sent twice; then apply
//! each watch event. The reflector watches from the list's resourceVersion with
//! bookmarks and a server-side timeout drawn from 5–10 minutes, lists again on 410
//! Gone, and backs off exponentially (capped, jittered) on failures; the thread only
//! ends on shutdown or when the sync loop has gone away. A pod that does not decode
//! is logged and skipped.
//!
//! Shutdown of a blocked read: the reflector owns a client with its own connection
//! pool, and a small `api-watch-stop` thread closes that pool's connections on
//! shutdown, which makes the blocked watch read (or list) return an error at once;
//! back-off waits end too. No read timeout is needed, so an idle watch costs no
//! requests.
//!
//! Checkpoint (edge autonomy, `docs/autonomy.md`): with `Options::checkpoint`, every
//! list and pod event also goes to the `ckpt-api-pods` writer thread (debounced,
//! off this thread's path). Until the first list succeeds, nothing is written; when
//! that first list fails, the checkpoint's pods are sent as a provisional snapshot
//! (`PodUpdate::provisional`), and the first list that succeeds later is diffed
//! against them as usual (deleted pods become `Delete`/`Remove`, new ones `Add`),
//! followed by a non-provisional signal so the sync loop knows the API answered. A
//! missing, stale or damaged checkpoint is logged and ignored.
//!
//! Channels: sends on `updates` (to the sync loop); reads `shutdown` (in the stopper).
//! State (the API's view of our pods, and what was sent) is owned by `api-watch` alone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use crate::api::pod::Pod;
use crate::api::reflector::{Config, DecodeError, Event, EventKind, Handler, Reflector};
use crate::api::{paths, ApiClient, ApiError};
use crate::sources::checkpoint::writer::Writer;
use crate::sources::checkpoint::{CheckpointFile, CheckpointSpec, API_PODS};
use crate::sources::merge::SourcePods;
use crate::sources::watched::WatchedPods;
use crate::sources::{PodOperation, PodUpdate, SOURCE_API};

/// Tunables of the source; [`Options::new`] has the production values.
#[derive(Clone, Debug)]
pub struct Options {
    pub node_name: String,
    /// First delay after a failure; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Server-side watch timeout is drawn from this range, in seconds.
    pub watch_timeout_secs: (u64, u64),
    /// Keep a checkpoint of the pods and run them from it when the API server is
    /// unreachable at start-up; `None` turns that off.
    pub checkpoint: Option<CheckpointSpec>,
    /// Where the UIDs the watch shows are published for other threads (the status
    /// thread's reading of a 403); `None` publishes nothing.
    pub watched: Option<WatchedPods>,
}

impl Options {
    pub fn new(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
            watch_timeout_secs: (300, 600),
            checkpoint: None,
            watched: None,
        }
    }
}

/// Starts the `api-watch` thread with production settings.
pub fn spawn(
    client: ApiClient,
    node_name: String,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    spawn_with(client, Options::new(&node_name), updates, shutdown)
}

/// Starts the `api-watch` thread (and its `api-watch-stop` helper) with `options`.
/// The returned handle joins `api-watch`, which ends soon after `shutdown` fires
/// (a message or disconnection) or when `updates` has no receiver.
pub fn spawn_with(
    client: ApiClient,
    options: Options,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let node = &options.node_name;
    let config = Config {
        field_selector: Some(format!("spec.nodeName={node}")),
        backoff_initial: options.backoff_initial,
        backoff_max: options.backoff_max,
        watch_timeout_secs: options.watch_timeout_secs,
        ..Config::new(
            "api-watch",
            format!("pods of node {node}"),
            paths::all_pods(),
        )
    };
    let (reflector, stopper) = Reflector::new(&client, config, shutdown);
    crate::process::spawn_essential("api-watch-stop", 256 * 1024, move || stopper.run())?;

    let checkpoint = match &options.checkpoint {
        Some(spec) => Some(spec.start::<Arc<Pod>>(API_PODS)?),
        None => None,
    };
    let mut watcher = Watcher {
        checkpoint,
        listed: false,
        restore_tried: false,
        provisional: false,
        options,
        updates,
        sent: SourcePods::new(SOURCE_API),
        api_pods: BTreeMap::new(),
    };
    crate::process::spawn_essential("api-watch", 1024 * 1024, move || {
        reflector.run(&mut watcher);
    })
}

/// The pod source's handling of what the reflector reads.
struct Watcher {
    options: Options,
    updates: Sender<PodUpdate>,
    /// What the sync loop has been told.
    sent: SourcePods,
    /// The API server's current view of our pods, by UID. Once a pod is classified
    /// its entry is the version sent to the sync loop (the same allocation, with the
    /// local annotations), so the source holds one copy of each pod, shared with the
    /// checkpoint writer and everything downstream. (The checkpoint so carries the
    /// local annotations too; a restore sets them anew.)
    api_pods: BTreeMap<String, Arc<Pod>>,
    /// The checkpoint file (read once) and its writer thread.
    checkpoint: Option<(CheckpointFile, Writer<Arc<Pod>>)>,
    /// A list has succeeded since start-up.
    listed: bool,
    /// The checkpoint was read (once, after the first failed list).
    restore_tried: bool,
    /// What the sync loop has is the checkpoint's, not the API server's.
    provisional: bool,
}

impl Handler for Watcher {
    type Object = Pod;

    /// Takes the listed pods as the API's view and sends the diff.
    fn listed(&mut self, items: Vec<Result<Pod, DecodeError>>, rv: Option<&str>) -> bool {
        let mut pods = BTreeMap::new();
        for item in items {
            if let Some(pod) = self.checked(item) {
                pods.insert(pod.uid().to_owned(), Arc::new(pod));
            }
        }
        log::debug!(
            "api-watch: listed {} pods at resourceVersion {rv:?}",
            pods.len()
        );
        self.api_pods = pods;
        if let Some(watched) = &self.options.watched {
            watched.replace(self.api_pods.keys());
        }
        self.listed = true;
        let sent = self.send_changes();
        if let Some((_, writer)) = &self.checkpoint {
            writer.replace(self.api_pods.clone(), rv.map(str::to_owned));
        }
        if !sent {
            return false;
        }
        if std::mem::take(&mut self.provisional) {
            log::info!("api-watch: API server answered; the checkpoint's pods are replaced");
            // Even when nothing changed, the sync loop learns the pods are real now.
            return self.send(vec![PodUpdate {
                pods: Vec::new(),
                op: PodOperation::Add,
                source: SOURCE_API,
                provisional: false,
            }]);
        }
        true
    }

    /// Runs the checkpoint's pods when the first list fails.
    fn list_failed(&mut self, _: &ApiError) -> bool {
        if self.listed || self.restore_tried {
            return true;
        }
        self.restore()
    }

    /// Applies one watch event.
    fn event(&mut self, event: Event<Pod>, rv: Option<&str>) -> bool {
        let Some(pod) = self.checked(event.object) else {
            return true;
        };
        let uid = pod.uid().to_owned();
        match event.kind {
            EventKind::Added | EventKind::Modified => {
                if let Some(watched) = &self.options.watched {
                    watched.insert(&uid);
                }
                self.api_pods.insert(uid.clone(), Arc::new(pod));
            }
            EventKind::Deleted => {
                if let Some(watched) = &self.options.watched {
                    watched.remove(&uid);
                }
                if self.api_pods.remove(&uid).is_none() {
                    return true;
                }
            }
        }
        let updates = self.sent.apply_one(&self.api_pods, &uid, SystemTime::now());
        self.share_sent(Some(&uid));
        if let Some((_, writer)) = &self.checkpoint {
            let rv = rv.map(str::to_owned);
            match self.api_pods.get(&uid) {
                Some(pod) => writer.upsert(uid, Arc::clone(pod), rv),
                None => writer.remove(uid, rv),
            }
        }
        self.send(updates)
    }
}

impl Watcher {
    /// Sends the checkpoint's pods as a provisional snapshot (the first list failed).
    /// False when the sync loop is gone; a missing or bad checkpoint is only logged.
    fn restore(&mut self) -> bool {
        self.restore_tried = true;
        let Some((file, _)) = &self.checkpoint else {
            return true;
        };
        let node = &self.options.node_name;
        let contents = match file.load::<Pod>(node) {
            Ok(Some(contents)) => contents,
            Ok(None) => {
                log::info!(
                    "api-watch: no pod checkpoint at {}; waiting for the API server",
                    file.path().display()
                );
                return true;
            }
            Err(err) => {
                log::error!("api-watch: {err}; waiting for the API server");
                return true;
            }
        };
        let pods: Vec<Arc<Pod>> = contents
            .items
            .into_iter()
            .filter(|(uid, pod)| {
                let ok = pod.uid() == uid && pod.spec.node_name.as_deref() == Some(node.as_str());
                if !ok {
                    log::warn!(
                        "api-watch: checkpoint entry {uid} is not a pod of this node; skipped"
                    );
                }
                ok
            })
            .map(|(_, pod)| Arc::new(pod))
            .collect();
        log::warn!(
            "api-watch: API server unreachable at start-up; running {} pods from the checkpoint (resourceVersion {:?})",
            pods.len(),
            contents.resource_version
        );
        let mut updates = self.sent.apply_snapshot(pods.iter(), SystemTime::now());
        for update in &mut updates {
            update.provisional = true;
        }
        self.provisional = true;
        self.send(updates)
    }

    /// Points the API view's entries (all, or just `uid`) at the versions sent to the
    /// sync loop where those differ only by the local annotations, so the decoded
    /// copy is dropped and one allocation per pod remains. Later comparisons see the
    /// same resourceVersion and classify as before.
    fn share_sent(&mut self, uid: Option<&str>) {
        let sent = &self.sent;
        let share = |uid: &str, pod: &mut Arc<Pod>| {
            if let Some(kept) = sent.get(uid) {
                let same_version = kept.metadata.resource_version.is_some()
                    && kept.metadata.resource_version == pod.metadata.resource_version;
                if same_version && !Arc::ptr_eq(kept, pod) {
                    *pod = Arc::clone(kept);
                }
            }
        };
        match uid {
            Some(uid) => {
                if let Some(pod) = self.api_pods.get_mut(uid) {
                    share(uid, pod);
                }
            }
            None => {
                for (uid, pod) in self.api_pods.iter_mut() {
                    share(uid, pod);
                }
            }
        }
    }

    /// A decoded pod of this node, or logs why not. Pods without a UID, or bound to
    /// another node (the server's field selector should never let one through), are
    /// skipped too.
    fn checked(&self, decoded: Result<Pod, DecodeError>) -> Option<Pod> {
        let pod = match decoded {
            Ok(p) => p,
            Err(e) => {
                log::warn!(
                    "api-watch: pod {}/{}: does not decode, skipped: {}",
                    e.namespace,
                    e.name,
                    e.source
                );
                return None;
            }
        };
        let (ns, pod_name) = (pod.namespace(), pod.name());
        if pod.uid().is_empty() {
            log::warn!("api-watch: pod {ns}/{pod_name}: no uid, skipped");
            return None;
        }
        if pod.spec.node_name.as_deref() != Some(self.options.node_name.as_str()) {
            log::warn!(
                "api-watch: pod {ns}/{pod_name} uid {}: bound to node {:?}, not ours; skipped",
                pod.uid(),
                pod.spec.node_name
            );
            return None;
        }
        Some(pod)
    }

    /// Diffs the API's view against what was sent and sends the updates. False when
    /// the sync loop is gone.
    fn send_changes(&mut self) -> bool {
        let updates = self
            .sent
            .apply_snapshot(self.api_pods.values(), SystemTime::now());
        self.share_sent(None);
        self.send(updates)
    }

    /// Sends updates to the sync loop; false when it is gone.
    fn send(&mut self, updates: Vec<PodUpdate>) -> bool {
        for update in updates {
            for pod in &update.pods {
                log::debug!(
                    "api-watch: {:?} pod {}/{} uid {}",
                    update.op,
                    pod.namespace(),
                    pod.name(),
                    pod.uid()
                );
            }
            if self.updates.send(update).is_err() {
                log::info!("api-watch: sync loop gone; stopping");
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::meta::{WatchEvent, WatchEventType};
    use crate::api::pod::CONFIG_SOURCE_ANNOTATION_KEY as SOURCE_ANNOTATION;
    use crate::api::reflector::decode_event;
    use serde_json::json;

    /// A watcher that is only fed events (no reflector runs).
    fn watcher() -> (Watcher, Receiver<PodUpdate>) {
        let (updates, rx) = crossbeam_channel::unbounded();
        let watcher = Watcher {
            options: Options::new("node-1"),
            updates,
            sent: SourcePods::new(SOURCE_API),
            api_pods: BTreeMap::new(),
            checkpoint: None,
            listed: true,
            restore_tried: false,
            provisional: false,
        };
        (watcher, rx)
    }

    fn event(type_: WatchEventType, rv: &str, phase: &str) -> WatchEvent {
        let object = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": rv},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": phase},
        });
        WatchEvent { type_, object }
    }

    /// Hands one event to the watcher as the reflector does.
    fn handle(w: &mut Watcher, event: WatchEvent) -> bool {
        let rv = crate::api::reflector::event_resource_version(&event);
        let event = decode_event(event).expect("not a bookmark");
        w.event(event, rv.as_deref())
    }

    #[test]
    fn the_api_view_the_kept_copy_and_what_is_sent_are_one_allocation() {
        let (mut w, rx) = watcher();
        assert!(handle(&mut w, event(WatchEventType::Added, "5", "Pending")));
        assert!(handle(
            &mut w,
            event(WatchEventType::Modified, "6", "Running")
        ));
        let got: Vec<PodUpdate> = rx.try_iter().collect();
        let ops: Vec<PodOperation> = got.iter().map(|u| u.op).collect();
        assert_eq!(ops, [PodOperation::Add, PodOperation::Reconcile]);
        let viewed = &w.api_pods["u1"];
        let kept = w.sent.get("u1").unwrap();
        assert!(
            Arc::ptr_eq(viewed, kept),
            "the API view holds the sent version"
        );
        assert!(Arc::ptr_eq(&got[1].pods[0], kept), "what was sent is kept");
        assert_eq!(
            viewed.metadata.annotation(SOURCE_ANNOTATION),
            Some(SOURCE_API)
        );
        // A relist of the same version changes nothing and keeps the sharing.
        assert!(w.send_changes());
        assert!(rx.try_iter().next().is_none());
        assert!(Arc::ptr_eq(&w.api_pods["u1"], w.sent.get("u1").unwrap()));
    }
}
