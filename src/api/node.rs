//! The core/v1 Node object the kubelet registers and keeps up to date:
//! spec (pod CIDRs, taints), status (capacity, conditions, addresses,
//! system info) and the well-known condition, address and taint names.
//!
//! This module holds wire types only: it models the JSON the API server
//! sends and accepts and performs no I/O. Node, NodeSpec and NodeStatus
//! keep unmodelled fields in an `extra` map so updates do not drop them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, string_enum, ConditionStatus, ObjectMeta, Time};
use crate::api::quantity::Quantity;

/// Node condition types (kept as strings: node problem detectors add more).
pub const NODE_READY: &str = "Ready";
pub const NODE_MEMORY_PRESSURE: &str = "MemoryPressure";
pub const NODE_DISK_PRESSURE: &str = "DiskPressure";
pub const NODE_PID_PRESSURE: &str = "PIDPressure";
pub const NODE_NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// Node address types.
pub const ADDRESS_HOSTNAME: &str = "Hostname";
pub const ADDRESS_INTERNAL_IP: &str = "InternalIP";
pub const ADDRESS_EXTERNAL_IP: &str = "ExternalIP";
pub const ADDRESS_INTERNAL_DNS: &str = "InternalDNS";
pub const ADDRESS_EXTERNAL_DNS: &str = "ExternalDNS";

/// Taint keys the control plane and kubelet put on nodes.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// Well-known node labels the kubelet sets on registration.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";

string_enum! {
    /// Effect of a taint on pods that do not tolerate it.
    pub enum TaintEffect {
        NoSchedule = "NoSchedule",
        PreferNoSchedule = "PreferNoSchedule",
        NoExecute = "NoExecute",
    }
}

/// A worker node as stored by the API server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Node {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub spec: NodeSpec,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub status: NodeStatus,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Node {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "Node";

    /// An empty Node object with apiVersion, kind and name filled in.
    pub fn new(name: &str) -> Self {
        Self {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Self::default()
        }
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    /// The condition of the given type (see the `NODE_*` constants).
    pub fn condition(&self, type_: &str) -> Option<&NodeCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.condition(NODE_READY)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
}

/// Desired state of a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(rename = "podCIDR", skip_serializing_if = "Option::is_none")]
    pub pod_cidr: Option<String>,
    /// One CIDR per IP family; the first equals `pod_cidr`.
    #[serde(
        rename = "podCIDRs",
        deserialize_with = "nullable",
        skip_serializing_if = "is_default"
    )]
    pub pod_cidrs: Vec<String>,
    /// Cloud provider's ID, `<provider>://<id>`.
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Cordoned: no new pods are scheduled here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub taints: Vec<Taint>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Repels pods that do not tolerate it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: TaintEffect,
    /// Only set for `NoExecute` taints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

/// Observed state of a node, reported by the kubelet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeStatus {
    /// Total resources of the node.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Resources available to pods (capacity minus reservations).
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub allocatable: BTreeMap<String, Quantity>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub conditions: Vec<NodeCondition>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub addresses: Vec<NodeAddress>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeSystemInfo>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub images: Vec<ContainerImage>,
    /// Attachable volumes currently mounted (unique volume names).
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub volumes_in_use: Vec<String>,
    /// volumesAttached, runtimeHandlers, features, config, ... kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeCondition {
    /// See the `NODE_*` condition type constants.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    /// Last time the kubelet confirmed this condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeAddress {
    /// See the `ADDRESS_*` constants.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeDaemonEndpoints {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_endpoint: Option<DaemonEndpoint>,
}

/// A port a node daemon listens on. The JSON key really is `Port`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonEndpoint {
    #[serde(rename = "Port")]
    pub port: i32,
}

/// Facts about the node's machine and software. All fields are always sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSystemInfo {
    #[serde(rename = "machineID")]
    pub machine_id: String,
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// `<runtime>://<version>`, e.g. `containerd://1.7.13`.
    pub container_runtime_version: String,
    pub kubelet_version: String,
    /// Deprecated; sent empty by current kubelets.
    pub kube_proxy_version: String,
    pub operating_system: String,
    pub architecture: String,
    /// swap and later additions, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NodeSystemInfo {
    /// `swap.capacity`: the machine's swap in bytes.
    pub fn set_swap_capacity(&mut self, bytes: u64) {
        self.extra
            .insert("swap".to_owned(), serde_json::json!({ "capacity": bytes }));
    }

    /// Forgets `swap` (the machine has none now); true when it was there.
    pub fn clear_swap(&mut self) -> bool {
        self.extra.remove("swap").is_some()
    }

    /// `swap.capacity`, when reported.
    pub fn swap_capacity(&self) -> Option<u64> {
        self.extra.get("swap")?.get("capacity")?.as_u64()
    }
}

/// An image present on the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerImage {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub names: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api_node() -> Value {
        json!({
          "apiVersion": "v1",
          "kind": "Node",
          "metadata": {
            "name": "edge-1",
            "uid": "5e0c",
            "resourceVersion": "998",
            "creationTimestamp": "2024-04-30T08:00:00Z",
            "labels": {"kubernetes.io/hostname": "edge-1", "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "arm64"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
          },
          "spec": {
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24", "fd00:1::/64"],
            "providerID": "k3s://edge-1",
            "unschedulable": true,
            "taints": [
              {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
               "timeAdded": "2024-05-01T09:00:00Z"},
              {"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}
            ]
          },
          "status": {
            "capacity": {"cpu": "4", "memory": "8049152Ki", "pods": "110",
                         "ephemeral-storage": "61255492Ki", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "3800m", "memory": "7946752Ki", "pods": "110",
                            "ephemeral-storage": "56453061334", "hugepages-2Mi": "0"},
            "conditions": [
              {"type": "MemoryPressure", "status": "False",
               "lastHeartbeatTime": "2024-05-01T10:00:00Z",
               "lastTransitionTime": "2024-04-30T08:00:10Z",
               "reason": "KubeletHasSufficientMemory",
               "message": "kubelet has sufficient memory available"},
              {"type": "Ready", "status": "True",
               "lastHeartbeatTime": "2024-05-01T10:00:00Z",
               "lastTransitionTime": "2024-04-30T08:00:20Z",
               "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.20"},
                          {"type": "Hostname", "address": "edge-1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
              "machineID": "m1", "systemUUID": "s1", "bootID": "b1",
              "kernelVersion": "6.6.20", "osImage": "Debian GNU/Linux 12 (bookworm)",
              "containerRuntimeVersion": "containerd://1.7.13",
              "kubeletVersion": "v1.31.0", "kubeProxyVersion": "",
              "operatingSystem": "linux", "architecture": "arm64",
              "swap": {"capacity": 0}
            },
            "images": [{"names": ["docker.io/library/nginx@sha256:aa",
                                  "docker.io/library/nginx:1.25"], "sizeBytes": 67000000}],
            "volumesInUse": ["kubernetes.io/csi/x^vol-1"],
            "volumesAttached": [{"name": "kubernetes.io/csi/x^vol-1", "devicePath": ""}],
            "runtimeHandlers": [{"name": "runc", "features": {"recursiveReadOnlyMounts": true}}]
          }
        })
    }

    fn q(s: &str) -> Quantity {
        serde_json::from_value(json!(s)).unwrap()
    }

    #[test]
    fn decodes_api_server_node() {
        let node: Node = serde_json::from_value(api_node()).unwrap();
        assert_eq!(node.name(), "edge-1");
        assert_eq!(node.metadata.label(LABEL_ARCH), Some("arm64"));
        assert_eq!(node.spec.pod_cidr.as_deref(), Some("10.244.1.0/24"));
        assert_eq!(node.spec.pod_cidrs.len(), 2);
        assert_eq!(node.spec.provider_id.as_deref(), Some("k3s://edge-1"));
        assert_eq!(node.spec.unschedulable, Some(true));
        let t = &node.spec.taints;
        assert_eq!(
            (t[0].key.as_str(), &t[0].effect),
            (TAINT_UNSCHEDULABLE, &TaintEffect::NoSchedule)
        );
        assert!(t[0].time_added.is_some() && t[1].time_added.is_none());
        assert_eq!(t[1].value.as_deref(), Some("gpu"));

        let st = &node.status;
        assert_eq!(st.capacity.get("cpu"), Some(&q("4")));
        assert_eq!(st.allocatable.get("memory"), Some(&q("7946752Ki")));
        assert!(node.is_ready());
        let mp = node.condition(NODE_MEMORY_PRESSURE).unwrap();
        assert_eq!(mp.status, ConditionStatus::False);
        assert_eq!(
            mp.last_heartbeat_time.unwrap().to_string(),
            "2024-05-01T10:00:00Z"
        );
        assert_eq!(st.addresses[0].type_, ADDRESS_INTERNAL_IP);
        let port = st
            .daemon_endpoints
            .as_ref()
            .and_then(|d| d.kubelet_endpoint.as_ref());
        assert_eq!(port.map(|e| e.port), Some(10250));
        let info = st.node_info.as_ref().unwrap();
        assert_eq!(
            (info.machine_id.as_str(), info.system_uuid.as_str()),
            ("m1", "s1")
        );
        assert_eq!(info.boot_id, "b1");
        assert_eq!(info.container_runtime_version, "containerd://1.7.13");
        assert!(info.extra.contains_key("swap"));
        assert_eq!(st.images[0].size_bytes, Some(67_000_000));
        assert_eq!(st.volumes_in_use, ["kubernetes.io/csi/x^vol-1"]);
        let mut extra: Vec<_> = st.extra.keys().collect();
        extra.sort();
        assert_eq!(extra, ["runtimeHandlers", "volumesAttached"]);
        assert!(node.extra.is_empty() && node.spec.extra.is_empty());
        assert!(node.metadata.extra.is_empty());

        assert_eq!(serde_json::to_value(&node).unwrap(), api_node());
    }

    #[test]
    fn unknown_fields_survive_read_modify_write() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "futureMeta": 1},
            "spec": {"configSource": {"configMap": {}}, "externalID": "x"},
            "status": {"phase": "Running", "features": {"supplementalGroupsPolicy": true}},
            "futureTop": [true]
        }))
        .unwrap();
        node.spec.unschedulable = Some(false);
        node.status.conditions.push(NodeCondition {
            type_: NODE_READY.into(),
            status: ConditionStatus::True,
            ..NodeCondition::default()
        });
        let out = serde_json::to_value(&node).unwrap();
        assert_eq!(out["metadata"]["futureMeta"], 1);
        assert_eq!(out["spec"]["externalID"], "x");
        assert_eq!(out["spec"]["configSource"], json!({"configMap": {}}));
        assert_eq!(out["spec"]["unschedulable"], false);
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["status"]["features"]["supplementalGroupsPolicy"], true);
        assert_eq!(
            out["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(out["futureTop"], json!([true]));
    }

    #[test]
    fn serialisation_omits_unset_fields() {
        assert_eq!(
            serde_json::to_value(Node::new("edge-1")).unwrap(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}})
        );
        // A status-only patch body carries nothing but what was set.
        let mut patch = Node::default();
        patch.status.daemon_endpoints = Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        });
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}})
        );
    }

    #[test]
    fn unknown_taint_effect_is_kept() {
        let t: Taint = serde_json::from_value(json!({"key": "k", "effect": "NoDance"})).unwrap();
        assert_eq!(t.effect, TaintEffect::Other("NoDance".into()));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"key": "k", "effect": "NoDance"})
        );
    }
}
