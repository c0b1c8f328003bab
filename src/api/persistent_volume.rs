//! core/v1 PersistentVolumeClaim and PersistentVolume: the parts the node reads to
//! resolve a pod's claim to the volume behind it (binding, source, node affinity).
//! litelet never writes these objects back.
//!
//! Wire types only; no I/O. Paths are in [`crate::api::paths`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::affinity::NodeSelector;
use crate::api::meta::ObjectMeta;

/// The parts of a PersistentVolumeClaim the node reads (read only).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PersistentVolumeClaim {
    pub metadata: ObjectMeta,
    pub spec: ClaimSpec,
    pub status: ClaimStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimSpec {
    pub volume_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimStatus {
    pub phase: Option<String>,
}

/// The parts of a PersistentVolume the node reads (read only).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PersistentVolume {
    pub metadata: ObjectMeta,
    pub spec: PvSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PvSpec {
    pub claim_ref: Option<ClaimRef>,
    pub access_modes: Vec<String>,
    pub host_path: Option<HostPathSource>,
    pub local: Option<LocalSource>,
    pub csi: Option<CsiSource>,
    pub node_affinity: Option<VolumeNodeAffinity>,
    pub mount_options: Vec<String>,
    /// `Filesystem` (default) or `Block` (raw block devices: not supported).
    pub volume_mode: Option<String>,
    /// Other sources (nfs, iscsi, ...): their keys name what is unsupported.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct HostPathSource {
    pub path: String,
    #[serde(rename = "type")]
    pub type_: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LocalSource {
    pub path: String,
}

/// A CSI volume source: a PV's `csi`, or (with `driver` and `volume_attributes`
/// only) a pod's inline `csi` volume.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct CsiSource {
    pub driver: String,
    pub volume_handle: String,
    pub read_only: Option<bool>,
    pub fs_type: Option<String>,
    pub volume_attributes: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct VolumeNodeAffinity {
    pub required: Option<NodeSelector>,
}

impl VolumeNodeAffinity {
    /// The same requirement as a pod's `spec.affinity` (so the pod affinity check
    /// can judge it); `None` without a required selector.
    pub fn as_pod_affinity(&self) -> Option<Value> {
        let required = self.required.as_ref()?;
        Some(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required,
        }}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pv_keeps_unknown_sources_by_name_and_affinity_converts() {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv1"},
            "spec": {"nfs": {"server": "s"}, "accessModes": ["ReadWriteOnce"],
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}}
        }))
        .unwrap();
        assert!(pv.spec.extra.contains_key("nfs"));
        let affinity = pv.spec.node_affinity.unwrap().as_pod_affinity().unwrap();
        assert_eq!(
            affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
            "k"
        );
        assert_eq!(VolumeNodeAffinity::default().as_pod_affinity(), None);
    }
}
