//! The node-affinity part of `spec.affinity` (core/v1 `NodeSelector`): wire types
//! only. `Pod.spec.affinity` stays raw JSON (litelet reads nothing else of it);
//! [`required_node_selector`] decodes the one part admission checks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::meta::nullable;

/// `requiredDuringSchedulingIgnoredDuringExecution`: the terms are ORed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(deserialize_with = "nullable")]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// One term: its expressions and field expressions are ANDed; an empty term
/// matches no node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(deserialize_with = "nullable")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    #[serde(deserialize_with = "nullable")]
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// `key operator values`; operator is In, NotIn, Exists, DoesNotExist, Gt or Lt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<String>,
}

/// The required node selector of a pod's `spec.affinity`, if it has one.
pub fn required_node_selector(affinity: &Value) -> Result<Option<NodeSelector>, serde_json::Error> {
    match affinity.pointer("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => NodeSelector::deserialize(v).map(Some),
    }
}
