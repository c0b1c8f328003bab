//! The API server pod source: the `api-watch` thread lists and watches the pods bound
//! to this node and sends [`PodUpdate`]s to the sync loop.
//!
//! Loop: list `pods?fieldSelector=spec.nodeName=<node>` (the Node authorizer allows
//! nothing wider), send the diff against what was sent before, then watch from the
//! list's resourceVersion with bookmarks and a server-side timeout drawn from 5–10
//! minutes (so many kubelets do not reconnect in step). Every event and bookmark
//! advances the resourceVersion. When a watch ends or breaks, watch again from the last
//! resourceVersion; on 410 Gone, list again and diff against what was sent, so pods
//! deleted while disconnected become `Remove`s and nothing is sent twice. Failures
//! back off exponentially (capped, jittered); the thread only ends on shutdown or when
//! the sync loop has gone away. A pod that does not decode is logged and skipped.
//!
//! Shutdown of a blocked read: the thread owns a client with its own connection pool
//! (`ApiClient::with_own_connections`). A small `api-watch-stop` thread waits on the
//! shutdown channel and then closes that pool's connections, which makes the blocked
//! watch read (or list) return an error at once; it also drops the `stop` channel the
//! watch thread sleeps on, so backoff waits end too. No read timeout is needed, so an
//! idle watch costs no requests.
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
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, Sender, TryRecvError};
use serde_json::Value;

use crate::api::meta::{WatchEvent, WatchEventType};
use crate::api::pod::Pod;
use crate::api::ratelimit::{jitter, random_between, Backoff};
use crate::api::{paths, ApiClient, ApiError, ListOptions, WatchOptions};
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
    let client = client.with_own_connections();
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);

    let stopper_client = client.clone();
    crate::process::spawn_essential("api-watch-stop", 256 * 1024, move || {
        select! {
            recv(shutdown) -> _ => {
                stopper_client.close_connections();
                drop(stop_tx);
            }
            recv(done_rx) -> _ => {}
        }
    })?;

    let field_selector = format!("spec.nodeName={}", options.node_name);
    let checkpoint = match &options.checkpoint {
        Some(spec) => Some(spec.start::<Arc<Pod>>(API_PODS)?),
        None => None,
    };
    let watcher = Watcher {
        checkpoint,
        listed: false,
        restore_tried: false,
        provisional: false,
        client,
        options,
        updates,
        stop: stop_rx,
        sent: SourcePods::new(SOURCE_API),
        api_pods: BTreeMap::new(),
        resource_version: None,
        path: paths::all_pods(),
        field_selector,
    };
    crate::process::spawn_essential("api-watch", 1024 * 1024, move || {
        // Dropped when this thread ends, which releases the stopper.
        let _done = done_tx;
        watcher.run();
    })
}

/// How one watch request ended.
enum WatchEnd {
    /// The server ended the stream (its timeout); `events` were received.
    Closed { events: usize, lasted: Duration },
    /// 410: our resourceVersion is too old.
    Gone,
    /// The request or the stream failed; `events` were received before.
    Failed { err: ApiError, events: usize },
    /// The sync loop is gone: nothing left to do.
    ReceiverGone,
}

struct Watcher {
    client: ApiClient,
    options: Options,
    updates: Sender<PodUpdate>,
    /// Disconnected by the stopper on shutdown; also what backoff sleeps wait on.
    stop: Receiver<()>,
    /// What the sync loop has been told.
    sent: SourcePods,
    /// The API server's current view of our pods, by UID. Once a pod is classified
    /// its entry is the version sent to the sync loop (the same allocation, with the
    /// local annotations), so the source holds one copy of each pod, shared with the
    /// checkpoint writer and everything downstream. (The checkpoint so carries the
    /// local annotations too; a restore sets them anew.)
    api_pods: BTreeMap<String, Arc<Pod>>,
    resource_version: Option<String>,
    path: String,
    field_selector: String,
    /// The checkpoint file (read once) and its writer thread.
    checkpoint: Option<(CheckpointFile, Writer<Arc<Pod>>)>,
    /// A list has succeeded since start-up.
    listed: bool,
    /// The checkpoint was read (once, after the first failed list).
    restore_tried: bool,
    /// What the sync loop has is the checkpoint's, not the API server's.
    provisional: bool,
}

impl Watcher {
    fn run(mut self) {
        let node = self.options.node_name.clone();
        log::info!("api-watch: watching pods of node {node}");
        let mut backoff = Backoff::new(self.options.backoff_initial, self.options.backoff_max);
        'list: loop {
            if self.stopped() {
                break;
            }
            match self.relist() {
                Ok(true) => backoff.reset(),
                Ok(false) => break,
                Err(e) => {
                    if self.stopped() {
                        break;
                    }
                    if !self.listed && !self.restore_tried && !self.restore() {
                        break;
                    }
                    let delay = jitter(backoff.next_delay());
                    log::warn!("api-watch: list pods of node {node}: {e}; retry in {delay:?}");
                    if !self.sleep(delay) {
                        break;
                    }
                    continue;
                }
            }
            loop {
                if self.stopped() {
                    break 'list;
                }
                match self.watch_once() {
                    WatchEnd::ReceiverGone => {
                        log::info!("api-watch: sync loop gone; stopping");
                        break 'list;
                    }
                    WatchEnd::Gone => {
                        log::info!(
                            "api-watch: resourceVersion {} expired; listing again",
                            self.resource_version.as_deref().unwrap_or("")
                        );
                        continue 'list;
                    }
                    WatchEnd::Closed { events, lasted } => {
                        // A server (or proxy) that ends every watch at once must not
                        // make us spin: a short, empty watch counts as a failure.
                        if events > 0 || lasted >= Duration::from_secs(1) {
                            backoff.reset();
                            continue;
                        }
                        let delay = jitter(backoff.next_delay());
                        log::debug!("api-watch: watch ended at once; again in {delay:?}");
                        if !self.sleep(delay) {
                            break 'list;
                        }
                    }
                    WatchEnd::Failed { err, events } => {
                        if self.stopped() {
                            break 'list;
                        }
                        if events > 0 {
                            backoff.reset();
                        }
                        let delay = jitter(backoff.next_delay());
                        log::warn!(
                            "api-watch: watch pods of node {node}: {err}; again in {delay:?}"
                        );
                        if !self.sleep(delay) {
                            break 'list;
                        }
                    }
                }
            }
        }
        log::info!("api-watch: stopped");
    }

    fn stopped(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// Sleeps `d` unless stopped first; false when stopped.
    fn sleep(&self, d: Duration) -> bool {
        matches!(self.stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }

    /// Lists our pods and sends the diff. Ok(false) when the sync loop is gone.
    fn relist(&mut self) -> Result<bool, ApiError> {
        let opts = ListOptions {
            field_selector: Some(self.field_selector.clone()),
            ..ListOptions::default()
        };
        // Items decode one by one so that one bad pod cannot hide the others.
        let list = self.client.list::<Value>(&self.path, &opts)?;
        let mut pods = BTreeMap::new();
        for item in list.items {
            if let Some(pod) = self.decode_pod(item) {
                pods.insert(pod.uid().to_owned(), Arc::new(pod));
            }
        }
        log::debug!(
            "api-watch: listed {} pods at resourceVersion {:?}",
            pods.len(),
            list.metadata.resource_version
        );
        self.api_pods = pods;
        if let Some(watched) = &self.options.watched {
            watched.replace(self.api_pods.keys());
        }
        self.resource_version = list.metadata.resource_version;
        self.listed = true;
        let sent = self.send_changes();
        if let Some((_, writer)) = &self.checkpoint {
            writer.replace(self.api_pods.clone(), self.resource_version.clone());
        }
        if !sent {
            return Ok(false);
        }
        if std::mem::take(&mut self.provisional) {
            log::info!("api-watch: API server answered; the checkpoint's pods are replaced");
            // Even when nothing changed, the sync loop learns the pods are real now.
            return Ok(self.send(vec![PodUpdate {
                pods: Vec::new(),
                op: PodOperation::Add,
                source: SOURCE_API,
                provisional: false,
            }]));
        }
        Ok(true)
    }

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

    fn watch_once(&mut self) -> WatchEnd {
        let (low, high) = self.options.watch_timeout_secs;
        let opts = WatchOptions {
            field_selector: Some(self.field_selector.clone()),
            resource_version: self.resource_version.clone(),
            allow_bookmarks: true,
            timeout_seconds: Some(random_between(low, high)),
            ..WatchOptions::default()
        };
        let started = Instant::now();
        let stream = match self.client.watch(&self.path, &opts) {
            Ok(s) => s,
            Err(e) if e.is_gone() => return WatchEnd::Gone,
            Err(err) => return WatchEnd::Failed { err, events: 0 },
        };
        let mut events = 0;
        for item in stream {
            match item {
                Ok(event) => {
                    events += 1;
                    if !self.handle(event) {
                        return WatchEnd::ReceiverGone;
                    }
                }
                Err(e) if e.is_gone() => return WatchEnd::Gone,
                Err(err) => return WatchEnd::Failed { err, events },
            }
        }
        WatchEnd::Closed {
            events,
            lasted: started.elapsed(),
        }
    }

    /// Applies one watch event; false when the sync loop is gone.
    fn handle(&mut self, event: WatchEvent) -> bool {
        if let Some(rv) = event
            .object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
        {
            self.resource_version = Some(rv.to_owned());
        }
        let uid = match event.type_ {
            WatchEventType::Added | WatchEventType::Modified => {
                let Some(pod) = self.decode_pod(event.object) else {
                    return true;
                };
                let uid = pod.uid().to_owned();
                if let Some(watched) = &self.options.watched {
                    watched.insert(&uid);
                }
                self.api_pods.insert(uid.clone(), Arc::new(pod));
                uid
            }
            WatchEventType::Deleted => {
                let Some(pod) = self.decode_pod(event.object) else {
                    return true;
                };
                if let Some(watched) = &self.options.watched {
                    watched.remove(pod.uid());
                }
                if self.api_pods.remove(pod.uid()).is_none() {
                    return true;
                }
                pod.uid().to_owned()
            }
            WatchEventType::Bookmark => return true,
            other => {
                log::debug!("api-watch: ignoring watch event of type {other}");
                return true;
            }
        };
        let updates = self.sent.apply_one(&self.api_pods, &uid, SystemTime::now());
        self.share_sent(Some(&uid));
        if let Some((_, writer)) = &self.checkpoint {
            let rv = self.resource_version.clone();
            match self.api_pods.get(&uid) {
                Some(pod) => writer.upsert(uid, Arc::clone(pod), rv),
                None => writer.remove(uid, rv),
            }
        }
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

    /// Decodes a pod from the API, or logs why not. Pods without a UID, or bound to
    /// another node (the server's field selector should never let one through), are
    /// skipped too.
    fn decode_pod(&self, object: Value) -> Option<Pod> {
        let name = |o: &Value, field: &str| {
            o.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let (ns, pod_name) = (name(&object, "namespace"), name(&object, "name"));
        let pod: Pod = match serde_json::from_value(object) {
            Ok(p) => p,
            Err(e) => {
                log::warn!("api-watch: pod {ns}/{pod_name}: does not decode, skipped: {e}");
                return None;
            }
        };
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
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::client::ClientConfig;
    use crate::api::pod::CONFIG_SOURCE_ANNOTATION_KEY as SOURCE_ANNOTATION;
    use serde_json::json;

    /// A watcher that is only fed events (its client never connects).
    fn watcher() -> (Watcher, Receiver<PodUpdate>) {
        let (updates, rx) = crossbeam_channel::unbounded();
        let (_, stop) = crossbeam_channel::bounded(0);
        let client = ApiClient::new(&ClientConfig::new("http://127.0.0.1:1")).unwrap();
        let watcher = Watcher {
            client,
            options: Options::new("node-1"),
            updates,
            stop,
            sent: SourcePods::new(SOURCE_API),
            api_pods: BTreeMap::new(),
            resource_version: None,
            path: paths::all_pods(),
            field_selector: "spec.nodeName=node-1".into(),
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

    #[test]
    fn the_api_view_the_kept_copy_and_what_is_sent_are_one_allocation() {
        let (mut w, rx) = watcher();
        assert!(w.handle(event(WatchEventType::Added, "5", "Pending")));
        assert!(w.handle(event(WatchEventType::Modified, "6", "Running")));
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
