//! The Node as the API server has it (upstream's node lister), kept current by the
//! `node-watch` thread: its labels and taints for admission, the whole object for the
//! `node` thread's next status computation (it sends its status patches without
//! reading the answer back, as upstream takes its base from this lister).
//!
//! [`NodeLister`] is a cloneable handle over one small `RwLock`: the `node-watch`
//! thread writes it, the sync loop reads it when it admits pods. Until the first list
//! answers (or while the Node does not exist) it holds nothing, and admission uses the
//! node as litelet registers it (default labels, `--node-labels`, registration
//! taints), as upstream's `getNodeAnyWay` falls back to `initialNode`.
//!
//! The thread mirrors `nodes?fieldSelector=metadata.name=<node>` (the Node authorizer
//! lets a node read only itself) through the shared list+watch loop
//! (`api/reflector.rs`: watch from the list's resourceVersion, jittered doubling
//! back-off, 410 lists again); its `node-watch-stop` helper closes the thread's
//! connections on shutdown, which ends a blocked read at once. Channels: reads
//! `shutdown` (in the helper). A Node that does not decode is logged and the lister
//! keeps what it had.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use crate::api::node::{Node, Taint};
use crate::api::reflector::{Config, DecodeError, Event, EventKind, Handler, Reflector};
use crate::api::{paths, ApiClient};

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
    inner: Arc<RwLock<Option<Arc<Node>>>>,
}

impl NodeLister {
    pub fn new() -> Self {
        Self::default()
    }

    /// What admission needs of the Node as last read, if any.
    pub fn get(&self) -> Option<ListedNode> {
        self.node().map(|node| ListedNode::from(&*node))
    }

    /// The whole Node as last read, if any.
    pub fn node(&self) -> Option<Arc<Node>> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the Node (`None`: it was deleted).
    pub fn set(&self, node: Option<Node>) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = node.map(Arc::new);
    }
}

/// Starts `node-watch` (and its `node-watch-stop` helper), which keeps `lister`
/// current until `shutdown` fires.
pub(super) fn spawn(
    client: &ApiClient,
    node_name: &str,
    lister: NodeLister,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let config = Config {
        field_selector: Some(format!("metadata.name={node_name}")),
        ..Config::new("node-watch", format!("node {node_name}"), paths::nodes())
    };
    let (reflector, stopper) = Reflector::new(client, config, shutdown);
    crate::process::spawn_essential("node-watch-stop", 128 * 1024, move || stopper.run())?;
    crate::process::spawn_essential("node-watch", 256 * 1024, move || {
        reflector.run(&mut Mirror(lister));
    })
}

/// The lister as the reflector's handler.
struct Mirror(NodeLister);

impl Handler for Mirror {
    type Object = Node;

    fn listed(&mut self, items: Vec<Result<Node, DecodeError>>, _: Option<&str>) -> bool {
        match items.into_iter().next() {
            Some(Ok(node)) => self.0.set(Some(node)),
            Some(Err(e)) => log::warn!("node-watch: undecodable Node: {e}"),
            None => self.0.set(None),
        }
        true
    }

    fn event(&mut self, event: Event<Node>, _: Option<&str>) -> bool {
        match (event.kind, event.object) {
            (EventKind::Deleted, _) => self.0.set(None),
            (_, Ok(node)) => self.0.set(Some(node)),
            (_, Err(e)) => log::warn!("node-watch: undecodable Node: {e}"),
        }
        true
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
        lister.set(Some(node.clone()));
        let seen = reader.get().unwrap_or_default();
        assert_eq!(seen.labels["zone"], "a");
        assert_eq!(seen.taints.len(), 1);
        lister.set(None);
        assert_eq!(reader.get(), None);
    }
}
