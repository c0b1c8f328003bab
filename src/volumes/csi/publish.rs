//! Publishing a registered driver on the Node (upstream `nodeinfomanager`): the
//! `csi.volume.kubernetes.io/nodeid` annotation, the topology labels, and the
//! driver's entry in the node's `CSINode` object (created, owned by the Node, when
//! missing). Deregistration removes the annotation key and the CSINode entry.
//!
//! Runs on the plugin watcher thread; API calls only, retried on conflicts.

use serde_json::{json, Map, Value};

use crate::api::client::PatchType;
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

fn csi_node_path(node: &str) -> String {
    format!("/apis/storage.k8s.io/v1/csinodes/{node}")
}

const CONFLICT_RETRIES: usize = 5;

/// Publishes `driver` on node `node` (annotation, labels, CSINode entry).
pub fn register(api: &ApiClient, node: &str, driver: &DriverInfo) -> Result<(), ApiError> {
    let node_obj: Value = api.get(&paths::node(node))?;
    let mut ids = node_ids(&node_obj);
    ids.insert(driver.name.clone(), Value::from(driver.node_id.clone()));
    let labels: Map<String, Value> = driver
        .topology
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
        .collect();
    let patch = json!({"metadata": {
        "annotations": {NODE_ID_ANNOTATION: Value::Object(ids).to_string()},
        "labels": labels,
    }});
    let _: Value = api.patch(&paths::node(node), PatchType::Merge, &patch)?;
    let entry = json!({
        "name": driver.name,
        "nodeID": driver.node_id,
        "topologyKeys": driver.topology.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
    });
    let mut entry = entry;
    if driver.max_volumes > 0 {
        entry["allocatable"] = json!({"count": driver.max_volumes});
    }
    update_csi_node(api, node, &node_obj, |drivers| {
        drivers.retain(|d| d["name"] != driver.name.as_str());
        drivers.push(entry.clone());
    })
}

/// Removes driver `name` from node `node`'s annotation and CSINode.
pub fn deregister(api: &ApiClient, node: &str, name: &str) -> Result<(), ApiError> {
    let node_obj: Value = api.get(&paths::node(node))?;
    let mut ids = node_ids(&node_obj);
    if ids.remove(name).is_some() {
        let value = match ids.is_empty() {
            true => Value::Null,
            false => Value::from(Value::Object(ids).to_string()),
        };
        let patch = json!({"metadata": {"annotations": {NODE_ID_ANNOTATION: value}}});
        let _: Value = api.patch(&paths::node(node), PatchType::Merge, &patch)?;
    }
    update_csi_node(api, node, &node_obj, |drivers| {
        drivers.retain(|d| d["name"] != name)
    })
}

/// The annotation's map; a missing or malformed one is empty (it is ours to fix).
fn node_ids(node: &Value) -> Map<String, Value> {
    node["metadata"]["annotations"][NODE_ID_ANNOTATION]
        .as_str()
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok())
        .unwrap_or_default()
}

/// Reads (or creates) the CSINode, applies `change` to its drivers, writes it back;
/// retried on a conflict with a fresh read.
fn update_csi_node(
    api: &ApiClient,
    node: &str,
    node_obj: &Value,
    change: impl Fn(&mut Vec<Value>),
) -> Result<(), ApiError> {
    let path = csi_node_path(node);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut csi_node: Value = match api.get(&path) {
            Ok(obj) => obj,
            Err(e) if e.is_not_found() => {
                let fresh = new_csi_node(node, node_obj);
                match api.create("/apis/storage.k8s.io/v1/csinodes", &fresh) {
                    Ok(obj) => obj,
                    Err(e) if e.is_already_exists() && attempt < CONFLICT_RETRIES => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let mut drivers: Vec<Value> = csi_node["spec"]["drivers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let before = drivers.clone();
        change(&mut drivers);
        if drivers == before {
            return Ok(());
        }
        csi_node["spec"]["drivers"] = Value::Array(drivers);
        match api.replace::<Value>(&path, &csi_node) {
            Ok(_) => return Ok(()),
            Err(e) if e.is_conflict() && attempt < CONFLICT_RETRIES => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A CSINode for `node` with no drivers, owned by the Node (deleted with it).
fn new_csi_node(node: &str, node_obj: &Value) -> Value {
    let mut meta = json!({"name": node});
    if let Some(uid) = node_obj["metadata"]["uid"].as_str() {
        meta["ownerReferences"] = json!([{
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "uid": uid,
        }]);
    }
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": meta,
        "spec": {"drivers": []},
    })
}
