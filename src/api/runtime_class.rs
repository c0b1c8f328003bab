//! The node.k8s.io/v1 RuntimeClass object: the CRI runtime handler a pod's
//! `runtimeClassName` stands for. Read-only for a node (the Node authorizer allows
//! get, list and watch); the overhead and scheduling parts are applied to the pod by
//! the API server's RuntimeClass admission, so the kubelet only needs the handler.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, ObjectMeta};
use crate::api::quantity::Quantity;

/// The API group and resource, as the API server names them in a NotFound answer.
pub const GROUP_RESOURCE: &str = "runtimeclasses.node.k8s.io";

/// A RuntimeClass as the API server stores it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RuntimeClass {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    /// The CRI runtime handler (`RunPodSandboxRequest.runtime_handler`); required.
    pub handler: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// nodeSelector and tolerations merged into pods by admission; kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resources the sandbox itself costs, added to each pod of the class.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Overhead {
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub pod_fixed: BTreeMap<String, Quantity>,
}

/// The URL path of RuntimeClass `name` (cluster-scoped).
pub fn path(name: &str) -> String {
    format!("/apis/node.k8s.io/v1/runtimeclasses/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_handler_and_overhead() {
        let rc: RuntimeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "gvisor"},
            "handler": "runsc",
            "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
            "scheduling": {"nodeSelector": {"sandbox": "true"}}
        }))
        .unwrap();
        assert_eq!(rc.metadata.name.as_deref(), Some("gvisor"));
        assert_eq!(rc.handler, "runsc");
        assert_eq!(
            rc.overhead.unwrap().pod_fixed["cpu"],
            Quantity::parse("250m").unwrap()
        );
        assert_eq!(path("gvisor"), "/apis/node.k8s.io/v1/runtimeclasses/gvisor");
    }
}
