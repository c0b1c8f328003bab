//! Publishing a registered driver on the Node (upstream `nodeinfomanager`): the
//! `csi.volume.kubernetes.io/nodeid` annotation, the topology labels, and the
//! driver's entry in the node's `CSINode` object (created, owned by the Node, when
//! missing). Deregistration removes the annotation key and the CSINode entry.
//!
//! Runs on the plugin watcher thread; API calls only, retried on conflicts.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::api::client::PatchType;
use crate::api::node::Node;
use crate::api::storage::{metadata_merge_patch, CsiNode, CsiNodeDriver, VolumeNodeResources};
use crate::api::{paths, ApiClient, ApiError};

/// The Node annotation mapping driver names to their node ids (JSON object).
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// What the node publishes for one driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverInfo {
    pub name: String,
    pub node_id: String,
    /// Topology segments from NodeGetInfo (become node labels and topology keys).
    pub topology: Vec<(String, String)>,
    /// NodeGetInfo's max_volumes_per_node (0: no limit, no `allocatable`).
    pub max_volumes: i64,
}

const CONFLICT_RETRIES: usize = 5;

/// Publishes `driver` on node `node` (annotation, labels, CSINode entry).
pub fn register(api: &ApiClient, node: &str, driver: &DriverInfo) -> Result<(), ApiError> {
    let node_obj: Node = api.get(&paths::node(node))?;
    let mut ids = node_ids(&node_obj);
    ids.insert(driver.name.clone(), Value::from(driver.node_id.clone()));
    let labels: BTreeMap<String, String> = driver.topology.iter().cloned().collect();
    let patch = metadata_merge_patch(
        &[(NODE_ID_ANNOTATION, Some(Value::Object(ids).to_string()))],
        &labels,
    );
    let _: Value = api.patch(&paths::node(node), PatchType::Merge, &patch)?;
    let entry = CsiNodeDriver {
        name: driver.name.clone(),
        node_id: driver.node_id.clone(),
        topology_keys: driver.topology.iter().map(|(k, _)| k.clone()).collect(),
        allocatable: (driver.max_volumes > 0).then_some(VolumeNodeResources {
            count: Some(driver.max_volumes),
        }),
        ..CsiNodeDriver::default()
    };
    update_csi_node(api, node, &node_obj, |drivers| {
        drivers.retain(|d| d.name != driver.name);
        drivers.push(entry.clone());
    })
}

/// Removes driver `name` from node `node`'s annotation and CSINode.
pub fn deregister(api: &ApiClient, node: &str, name: &str) -> Result<(), ApiError> {
    let node_obj: Node = api.get(&paths::node(node))?;
    let mut ids = node_ids(&node_obj);
    if ids.remove(name).is_some() {
        let value = (!ids.is_empty()).then(|| Value::Object(ids).to_string());
        let patch = metadata_merge_patch(&[(NODE_ID_ANNOTATION, value)], &BTreeMap::new());
        let _: Value = api.patch(&paths::node(node), PatchType::Merge, &patch)?;
    }
    update_csi_node(api, node, &node_obj, |drivers| {
        drivers.retain(|d| d.name != name)
    })
}

/// The annotation's map; a missing or malformed one is empty (it is ours to fix).
fn node_ids(node: &Node) -> Map<String, Value> {
    node.metadata
        .annotation(NODE_ID_ANNOTATION)
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok())
        .unwrap_or_default()
}

/// Reads (or creates) the CSINode, applies `change` to its drivers, writes it back;
/// retried on a conflict with a fresh read.
fn update_csi_node(
    api: &ApiClient,
    node: &str,
    node_obj: &Node,
    change: impl Fn(&mut Vec<CsiNodeDriver>),
) -> Result<(), ApiError> {
    let path = paths::csi_node(node);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut csi_node: CsiNode = match api.get(&path) {
            Ok(obj) => obj,
            Err(e) if e.is_not_found() => {
                let fresh = CsiNode::for_node(node, node_obj.metadata.uid.as_deref());
                match api.create(&paths::csi_nodes(), &fresh) {
                    Ok(obj) => obj,
                    Err(e) if e.is_already_exists() && attempt < CONFLICT_RETRIES => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let before = csi_node.spec.drivers.clone();
        change(&mut csi_node.spec.drivers);
        if csi_node.spec.drivers == before {
            return Ok(());
        }
        match api.replace::<CsiNode>(&path, &csi_node) {
            Ok(_) => return Ok(()),
            Err(e) if e.is_conflict() && attempt < CONFLICT_RETRIES => continue,
            Err(e) => return Err(e),
        }
    }
}
