//! The core/v1 Service as the kubelet reads it (list and watch only): just the fields
//! that service environment variables need. Unknown fields are dropped on decode, so
//! the in-memory store of every Service in the cluster stays small.
//!
//! Wire types only: no I/O.

use serde::{Deserialize, Serialize};

use crate::api::meta::nullable;

/// `spec.clusterIP` of a headless service.
pub const CLUSTER_IP_NONE: &str = "None";

/// The metadata the kubelet keeps of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
}

/// A Service: its name and the spec fields that make environment variables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ServiceMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: ServiceSpec,
}

/// The parts of `spec` the kubelet reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `spec.clusterIP`: empty for ExternalName services, `None` for headless ones.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: String,
    /// ClusterIP, NodePort, LoadBalancer or ExternalName.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<ServicePort>,
}

/// One port of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    /// Required when the service has more than one port; may be empty otherwise.
    pub name: String,
    /// TCP (the default when empty), UDP or SCTP.
    pub protocol: String,
    pub port: i32,
}

impl Service {
    /// True when the service has a cluster IP (upstream IsServiceIPSet): neither
    /// headless (`None`) nor without one (ExternalName).
    pub fn has_cluster_ip(&self) -> bool {
        let ip = self.spec.cluster_ip.as_str();
        !ip.is_empty() && ip != CLUSTER_IP_NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_env_vars_need_and_drops_the_rest() {
        let json = r#"{"apiVersion":"v1","kind":"Service",
            "metadata":{"name":"web","namespace":"shop","uid":"u1","resourceVersion":"7",
                        "labels":{"a":"b"},"managedFields":[{"manager":"x"}]},
            "spec":{"clusterIP":"10.0.0.7","clusterIPs":["10.0.0.7"],"type":"ClusterIP",
                    "ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080}],
                    "selector":{"app":"web"}},
            "status":{"loadBalancer":{}}}"#;
        let svc: Service = serde_json::from_str(json).unwrap();
        assert_eq!(svc.metadata.name, "web");
        assert_eq!(svc.metadata.namespace, "shop");
        assert_eq!(svc.metadata.resource_version, "7");
        assert_eq!(svc.spec.cluster_ip, "10.0.0.7");
        assert_eq!(svc.spec.ports[0].port, 80);
        assert_eq!(svc.spec.ports[0].name, "http");
        assert!(svc.has_cluster_ip());
    }

    #[test]
    fn headless_and_external_name_services_have_no_cluster_ip() {
        let headless: Service =
            serde_json::from_str(r#"{"metadata":{"name":"h"},"spec":{"clusterIP":"None"}}"#)
                .unwrap();
        assert!(!headless.has_cluster_ip());
        let external: Service = serde_json::from_str(
            r#"{"metadata":{"name":"e"},"spec":{"type":"ExternalName","externalName":"x.org","ports":null}}"#,
        )
        .unwrap();
        assert!(!external.has_cluster_ip());
    }
}
