//! The core/v1 ConfigMap and Secret objects as the kubelet reads them (GET only), and
//! the decoding of their data into bytes.
//!
//! This module holds wire types only: it models the JSON the API server sends and
//! performs no I/O. Secret values and configMap `binaryData` travel as base64; the
//! decoding lives here so that no other module knows the wire encoding.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::base64;
use crate::api::meta::{is_default, nullable, ObjectMeta};

/// Name of the configMap every namespace holds with the cluster's CA bundle.
pub const KUBE_ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// A configMap: text values in `data`, base64 values in `binaryData`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigMap {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub data: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub binary_data: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A secret: every value in `data` is base64 on the wire.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Secret {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub data: BTreeMap<String, String>,
    /// Write-only on the real server; honoured here for objects from files or fakes.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub string_data: BTreeMap<String, String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ConfigMap {
    /// Every key with its bytes: `data` as UTF-8, `binaryData` decoded. A key in both
    /// maps is refused by the API server's validation; here `data` wins.
    pub fn decoded(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut out = BTreeMap::new();
        for (key, value) in &self.binary_data {
            let bytes =
                base64::decode(value).map_err(|why| format!("binaryData key {key:?}: {why}"))?;
            out.insert(key.clone(), bytes);
        }
        for (key, value) in &self.data {
            out.insert(key.clone(), value.clone().into_bytes());
        }
        Ok(out)
    }
}

impl Secret {
    /// Every key with its decoded bytes (`stringData` overrides `data`, as the API
    /// server merges them on write).
    pub fn decoded(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut out = BTreeMap::new();
        for (key, value) in &self.data {
            let bytes = base64::decode(value).map_err(|why| format!("data key {key:?}: {why}"))?;
            out.insert(key.clone(), bytes);
        }
        for (key, value) in &self.string_data {
            out.insert(key.clone(), value.clone().into_bytes());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_maps_and_secrets_decode_to_bytes() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
            "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
            "binaryData": {"blob": "AAEC"}
        }))
        .unwrap();
        let data = cm.decoded().unwrap();
        assert_eq!(data["ca.crt"], b"-----BEGIN CERTIFICATE-----\n");
        assert_eq!(data["blob"], [0u8, 1, 2]);

        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds"},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="}
        }))
        .unwrap();
        assert_eq!(secret.decoded().unwrap()["password"], b"hunter2");
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));

        let bad: Secret = serde_json::from_value(serde_json::json!({"data": {"k": "!!"}})).unwrap();
        assert!(bad.decoded().unwrap_err().contains("data key \"k\""));
    }
}
