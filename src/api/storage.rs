//! storage.k8s.io/v1 objects the node side of CSI reads and writes: `CSIDriver`
//! (what the driver asks of the kubelet), `VolumeAttachment` (whether the attacher
//! attached a volume to this node) and `CSINode` (the drivers registered on this
//! node; litelet writes it back, so unknown fields survive a read-modify-write).
//!
//! Wire types only; no I/O. Paths are in [`crate::api::paths`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, ObjectMeta, OwnerReference};

/// A `CSIDriver` (read only: the fields the kubelet acts on).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CsiDriver {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: CsiDriverSpec,
}

/// `CSIDriver.spec`; `None` where the object leaves a field out (the reader applies
/// upstream's defaults).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CsiDriverSpec {
    pub attach_required: Option<bool>,
    pub pod_info_on_mount: Option<bool>,
    pub fs_group_policy: Option<String>,
    pub requires_republish: Option<bool>,
    #[serde(deserialize_with = "nullable")]
    pub token_requests: Vec<TokenRequest>,
    #[serde(deserialize_with = "nullable")]
    pub volume_lifecycle_modes: Vec<String>,
}

/// One entry of `CSIDriver.spec.tokenRequests`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TokenRequest {
    pub audience: String,
}

/// A `VolumeAttachment` (read only: its status).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct VolumeAttachment {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub status: VolumeAttachmentStatus,
}

/// `VolumeAttachment.status`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeAttachmentStatus {
    pub attached: bool,
    /// Becomes the publish context of NodeStage/NodePublish.
    #[serde(deserialize_with = "nullable")]
    pub attachment_metadata: BTreeMap<String, String>,
}

/// A `CSINode`: one per node, named after it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CsiNode {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: CsiNodeSpec,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `CSINode.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiNodeSpec {
    /// Always sent, empty included: the API server requires the field.
    #[serde(deserialize_with = "nullable")]
    pub drivers: Vec<CsiNodeDriver>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One driver of a `CSINode`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CsiNodeDriver {
    pub name: String,
    #[serde(rename = "nodeID")]
    pub node_id: String,
    /// Always sent (Go writes it without omitempty).
    #[serde(deserialize_with = "nullable")]
    pub topology_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<VolumeNodeResources>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `CSINodeDriver.allocatable`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeNodeResources {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// A JSON merge patch of an object's metadata: each annotation set, or removed
/// with `None`, and each label set (the Node's CSI annotation and topology labels).
pub fn metadata_merge_patch(
    annotations: &[(&str, Option<String>)],
    labels: &BTreeMap<String, String>,
) -> Value {
    let annotations: Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone().map_or(Value::Null, Value::from)))
        .collect();
    let mut meta = Map::new();
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), serde_json::json!(labels));
    }
    serde_json::json!({ "metadata": meta })
}

impl CsiNode {
    pub const API_VERSION: &'static str = "storage.k8s.io/v1";
    pub const KIND: &'static str = "CSINode";

    /// A `CSINode` for `node` with no drivers, owned by the Node (deleted with it)
    /// when its UID is known.
    pub fn for_node(node: &str, node_uid: Option<&str>) -> Self {
        let owner_references = node_uid
            .map(|uid| OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.to_owned(),
                uid: uid.to_owned(),
                ..OwnerReference::default()
            })
            .into_iter()
            .collect();
        CsiNode {
            api_version: Self::API_VERSION.into(),
            kind: Self::KIND.into(),
            metadata: ObjectMeta {
                name: Some(node.to_owned()),
                owner_references,
                ..ObjectMeta::default()
            },
            ..CsiNode::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn csi_driver_leaves_absent_fields_unset() {
        let d: CsiDriver = serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"attachRequired": false, "tokenRequests": [{"audience": "a"}],
                     "volumeLifecycleModes": null}
        }))
        .unwrap();
        assert_eq!(d.spec.attach_required, Some(false));
        assert_eq!(d.spec.pod_info_on_mount, None);
        assert_eq!(d.spec.token_requests[0].audience, "a");
        assert!(d.spec.volume_lifecycle_modes.is_empty());
    }

    #[test]
    fn volume_attachment_status() {
        let va: VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": "csi-1"},
            "spec": {"attacher": "d", "nodeName": "n"},
            "status": {"attached": true, "attachmentMetadata": {"dev": "/dev/x"}}
        }))
        .unwrap();
        assert!(va.status.attached);
        assert_eq!(va.status.attachment_metadata["dev"], "/dev/x");
        let empty: VolumeAttachment = serde_json::from_value(json!({"status": null})).unwrap();
        assert!(!empty.status.attached);
    }

    #[test]
    fn csi_node_keeps_unknown_fields_and_always_sends_drivers() {
        let wire = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "n", "resourceVersion": "7"},
            "spec": {"drivers": [{"name": "d", "nodeID": "n1", "topologyKeys": ["z"],
                                  "allocatable": {"count": 3}, "future": 1}],
                     "other": true},
            "status": {"x": 1}
        });
        let node: CsiNode = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(
            node.spec.drivers[0].allocatable,
            Some(VolumeNodeResources { count: Some(3) })
        );
        assert_eq!(serde_json::to_value(&node).unwrap(), wire);

        let patch = metadata_merge_patch(
            &[("a", Some("1".into())), ("b", None)],
            &BTreeMap::from([("z".to_owned(), "n".to_owned())]),
        );
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"a": "1", "b": null}, "labels": {"z": "n"}}})
        );
        assert_eq!(
            metadata_merge_patch(&[], &BTreeMap::new()),
            json!({"metadata": {}})
        );

        let fresh = serde_json::to_value(CsiNode::for_node("n", Some("u1"))).unwrap();
        assert_eq!(
            fresh,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                   "metadata": {"name": "n", "ownerReferences": [
                       {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u1"}]},
                   "spec": {"drivers": []}})
        );
    }
}
