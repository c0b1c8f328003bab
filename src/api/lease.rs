//! The coordination.k8s.io/v1 Lease the kubelet renews as its node
//! heartbeat (in the `kube-node-lease` namespace, named after the node).
//!
//! This module holds wire types only: it models the JSON the API server
//! sends and accepts and performs no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, MicroTime, ObjectMeta};

/// Namespace holding the per-node heartbeat leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// A lease object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Lease {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub spec: LeaseSpec,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Lease {
    pub const API_VERSION: &'static str = "coordination.k8s.io/v1";
    pub const KIND: &'static str = "Lease";

    /// An empty lease with apiVersion, kind, name and namespace filled in.
    pub fn new(name: &str, namespace: &str) -> Self {
        Self {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            ..Self::default()
        }
    }

    /// The merge patch that renews this lease as it stands: the holder and the renew
    /// time, nothing else (no resourceVersion: the holder asserts its claim, as a PUT
    /// of the whole lease would, in about a tenth of the bytes).
    pub fn renewal_patch(&self) -> Value {
        serde_json::json!({"spec": {
            "holderIdentity": self.spec.holder_identity,
            "renewTime": self.spec.renew_time,
        }})
    }
}

/// Who holds the lease and until when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LeaseSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long after `renew_time` the lease counts as expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<MicroTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<MicroTime>,
    /// Number of times the holder has changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i32>,
    /// preferredHolder, strategy and later additions, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_round_trip() {
        let json = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"node1","namespace":"kube-node-lease","resourceVersion":"9",
              "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"node1","uid":"u"}]},
            "spec":{"holderIdentity":"node1","leaseDurationSeconds":40,
              "renewTime":"2024-05-01T10:00:00.123456Z","strategy":"OldestEmulationVersion"}}"#;
        let mut lease: Lease = serde_json::from_str(json).unwrap();
        assert_eq!(lease.spec.lease_duration_seconds, Some(40));
        assert_eq!(
            lease.spec.renew_time.map(|t| t.to_string()).as_deref(),
            Some("2024-05-01T10:00:00.123456Z")
        );
        lease.spec.renew_time = Some(MicroTime::from_unix_micros(1_714_557_601_000_001));
        let out = serde_json::to_value(&lease).unwrap();
        assert_eq!(out["spec"]["renewTime"], "2024-05-01T10:00:01.000001Z");
        assert_eq!(out["spec"]["strategy"], "OldestEmulationVersion");
        assert!(out["spec"].get("acquireTime").is_none());

        assert_eq!(
            lease.renewal_patch(),
            serde_json::json!({"spec": {"holderIdentity": "node1",
                "renewTime": "2024-05-01T10:00:01.000001Z"}})
        );

        let fresh = serde_json::to_value(Lease::new("n", NODE_LEASE_NAMESPACE)).unwrap();
        assert_eq!(
            fresh,
            serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "n", "namespace": "kube-node-lease"}})
        );
    }
}
