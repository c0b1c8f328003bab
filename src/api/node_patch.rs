//! Patches of the Node object: its metadata (labels and annotations litelet sets)
//! and its status. Pure JSON shaping over the wire types, so that only `api/` knows
//! the patch shapes; `node/` decides what goes in them (which conditions it owns).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::api::node::{Node, NodeCondition, NodeStatus};
use crate::api::quantity::Quantity;

/// The merge patch that adds or corrects the labels and annotations `wanted` has and
/// `existing` lacks (others' keys stay), and removes the annotations named in `remove`
/// that `existing` has; `None` when nothing differs.
pub fn labels_patch(existing: &Node, wanted: &Node, remove: &[&str]) -> Option<Value> {
    let diff = |have: &BTreeMap<String, String>, want: &BTreeMap<String, String>| {
        want.iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<serde_json::Map<String, Value>>()
    };
    let labels = diff(&existing.metadata.labels, &wanted.metadata.labels);
    let mut annotations = diff(&existing.metadata.annotations, &wanted.metadata.annotations);
    for key in remove {
        if existing.metadata.annotations.contains_key(*key) {
            annotations.insert((*key).to_owned(), Value::Null);
        }
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut meta = serde_json::Map::new();
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Some(json!({ "metadata": meta }))
}

fn resource_map_patch(old: &BTreeMap<String, Quantity>, new: &BTreeMap<String, Quantity>) -> Value {
    let mut m = serde_json::Map::new();
    for (name, q) in new {
        m.insert(name.clone(), Value::String(q.to_string()));
    }
    for name in old.keys().filter(|k| !new.contains_key(*k)) {
        m.insert(name.clone(), Value::Null);
    }
    Value::Object(m)
}

/// The strategic merge patch of `nodes/<name>/status` that sends litelet's fields of
/// `new`: capacity and allocatable by key (null removes a key `old` had), the
/// `owned_conditions` merged by type (other writers' conditions stay), the addresses replaced
/// as a whole (merging by type would break two InternalIPs) and only when they changed
/// (a cloud controller manager may have set them since `old` was read), nodeInfo and endpoints,
/// and `volumesInUse` (a list of names without a merge key: replaced whole). Swap
/// `old` reported and `new` lacks is sent as null, so it is removed.
pub fn status_patch(old: &NodeStatus, new: &NodeStatus, owned_conditions: &[&str]) -> Value {
    let conditions: Vec<&NodeCondition> = new
        .conditions
        .iter()
        .filter(|c| owned_conditions.contains(&c.type_.as_str()))
        .collect();
    let mut info = serde_json::to_value(new.node_info.clone().unwrap_or_default())
        .unwrap_or_else(|_| json!({}));
    // A merge patch keeps what it leaves out: swap the node had and has no more
    // must be nulled, or the stale capacity stays published.
    let swap_in = |s: &NodeStatus| {
        s.node_info
            .as_ref()
            .is_some_and(|i| i.extra.contains_key("swap"))
    };
    let (had_swap, has_swap) = (swap_in(old), swap_in(new));
    if let (true, false, Value::Object(m)) = (had_swap, has_swap, &mut info) {
        m.insert("swap".to_owned(), Value::Null);
    }
    let mut status = json!({
        "capacity": resource_map_patch(&old.capacity, &new.capacity),
        "allocatable": resource_map_patch(&old.allocatable, &new.allocatable),
        "conditions": conditions,
        "daemonEndpoints": new.daemon_endpoints,
        "nodeInfo": info,
        "images": new.images,
        "volumesInUse": new.volumes_in_use,
    });
    if old.addresses != new.addresses {
        let mut addresses = vec![json!({"$patch": "replace"})];
        addresses.extend(new.addresses.iter().map(|a| json!(a)));
        if let Value::Object(m) = &mut status {
            m.insert("addresses".to_owned(), Value::Array(addresses));
        }
    }
    json!({ "status": status })
}
