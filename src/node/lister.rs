//! The Node as the API server has it, for admission (upstream's node lister): its
//! labels and taints, kept current by the `node-watch` thread.
//!
//! [`NodeLister`] is a cloneable handle over one small `RwLock`: the `node-watch`
//! thread writes it, the sync loop reads it when it admits pods. Until the first list
//! answers (or while the Node does not exist) it holds nothing, and admission uses the
//! node as litelet registers it (default labels, `--node-labels`, registration
//! taints), as upstream's `getNodeAnyWay` falls back to `initialNode`.
//!
//! The thread lists `nodes?fieldSelector=metadata.name=<node>` (the Node authorizer
//! lets a node read only itself), then watches from the list's resourceVersion; a
//! broken watch is resumed after a jittered, doubling delay, and 410 lists again.
//! An `node-watch-stop` helper closes the thread's connections on shutdown, which
//! ends a blocked read at once. Channels: reads `shutdown` (in the helper) and the
//! helper's `stop` channel (the backoff sleeps).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, TryRecvError};

use crate::api::meta::WatchEventType;
use crate::api::node::{Node, Taint};
use crate::api::ratelimit::{jitter, random_between, Backoff};
use crate::api::{paths, ApiClient, ApiError, ListOptions, WatchOptions};

/// What admission needs of the API server's Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedNode {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl From<&Node> for ListedNode {
    fn from(node: &Node) -> Self {
        ListedNode {
            labels: node.metadata.labels.clone(),
            taints: node.spec.taints.clone(),
        }
    }
}

/// Shared view of this node's API object; `None` until it has been read.
#[derive(Clone, Debug, Default)]
pub struct NodeLister {
    inner: Arc<RwLock<Option<ListedNode>>>,
}

impl NodeLister {
    pub fn new() -> Self {
        Self::default()
    }

    /// The Node as last read, if any.
    pub fn get(&self) -> Option<ListedNode> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the Node (`None`: it was deleted).
    pub fn set(&self, node: Option<&Node>) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = node.map(ListedNode::from);
    }
}

/// Starts `node-watch` (and its `node-watch-stop` helper), which keeps `lister`
/// current until `shutdown` fires.
pub fn spawn(
    client: &ApiClient,
    node_name: &str,
    lister: NodeLister,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let client = client.with_own_connections();
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let stopper = client.clone();
    crate::process::spawn_essential("node-watch-stop", 128 * 1024, move || {
        select! {
            recv(shutdown) -> _ => {
                stopper.close_connections();
                drop(stop_tx);
            }
            recv(done_rx) -> _ => {}
        }
    })?;
    let watcher = Watcher {
        client,
        selector: format!("metadata.name={node_name}"),
        lister,
        stop: stop_rx,
        resource_version: None,
    };
    crate::process::spawn_essential("node-watch", 256 * 1024, move || {
        let _done = done_tx;
        watcher.run();
    })
}

struct Watcher {
    client: ApiClient,
    selector: String,
    lister: NodeLister,
    /// Disconnected on shutdown; the backoff sleeps wait on it.
    stop: Receiver<()>,
    resource_version: Option<String>,
}

impl Watcher {
    fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_millis(800), Duration::from_secs(30));
        let mut listed = false;
        while !self.stopped() {
            let result = if listed {
                self.watch_once()
            } else {
                self.list().map(|()| true)
            };
            match result {
                Ok(progress) => {
                    listed = true;
                    if progress {
                        backoff.reset();
                        continue;
                    }
                }
                Err(e) if e.is_gone() => {
                    listed = false;
                    continue;
                }
                Err(e) => {
                    if self.stopped() {
                        break;
                    }
                    log::warn!("node-watch: {e}");
                }
            }
            // A failure, or a watch that ended at once: never spin.
            if !self.sleep(jitter(backoff.next_delay())) {
                break;
            }
        }
        log::debug!("node-watch: stopped");
    }

    fn stopped(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    fn sleep(&self, d: Duration) -> bool {
        matches!(self.stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }

    fn list(&mut self) -> Result<(), ApiError> {
        let opts = ListOptions {
            field_selector: Some(self.selector.clone()),
            ..ListOptions::default()
        };
        let list = self.client.list::<Node>(&paths::nodes(), &opts)?;
        self.lister.set(list.items.first());
        self.resource_version = list.metadata.resource_version;
        Ok(())
    }

    /// One watch request; Ok(true) when it brought events or lasted a while.
    fn watch_once(&mut self) -> Result<bool, ApiError> {
        let opts = WatchOptions {
            field_selector: Some(self.selector.clone()),
            resource_version: self.resource_version.clone(),
            allow_bookmarks: true,
            timeout_seconds: Some(random_between(300, 600)),
            ..WatchOptions::default()
        };
        let started = Instant::now();
        let mut events = 0;
        for item in self.client.watch(&paths::nodes(), &opts)? {
            let event = item?;
            events += 1;
            if let Some(rv) = event
                .object
                .pointer("/metadata/resourceVersion")
                .and_then(serde_json::Value::as_str)
                .filter(|rv| !rv.is_empty())
            {
                self.resource_version = Some(rv.to_owned());
            }
            match event.type_ {
                WatchEventType::Added | WatchEventType::Modified => match event.decode::<Node>() {
                    Ok(node) => self.lister.set(Some(&node)),
                    Err(e) => log::warn!("node-watch: undecodable Node: {e}"),
                },
                WatchEventType::Deleted => self.lister.set(None),
                _ => {}
            }
        }
        Ok(events > 0 || started.elapsed() >= Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node::TaintEffect;

    #[test]
    fn lister_holds_the_latest_node_and_forgets_a_deleted_one() {
        let lister = NodeLister::new();
        assert_eq!(lister.get(), None);
        let mut node = Node::new("edge-1");
        node.metadata.labels.insert("zone".into(), "a".into());
        node.spec.taints.push(Taint {
            key: "k".into(),
            value: None,
            effect: TaintEffect::NoExecute,
            time_added: None,
        });
        let reader = lister.clone();
        lister.set(Some(&node));
        let seen = reader.get().unwrap_or_default();
        assert_eq!(seen.labels["zone"], "a");
        assert_eq!(seen.taints.len(), 1);
        lister.set(None);
        assert_eq!(reader.get(), None);
    }
}
