//! Does the pod's node selector and required node affinity match this node's labels
//! (upstream `PodMatchesNodeSelectorAndAffinityTerms`)? Pure.
//!
//! Terms are ORed, a term's requirements ANDed; a term with no requirement, an
//! unknown operator or a `Gt`/`Lt` that is not one integer matches nothing (upstream
//! drops such terms); undecodable affinity matches nothing either. `matchFields`
//! knows `metadata.name` only, as upstream.

use std::collections::BTreeMap;

use crate::api::affinity::{required_node_selector, NodeSelectorRequirement};
use crate::api::pod::Pod;

/// True when `pod` may run on the node named `node_name` carrying `labels`.
pub fn matches_node(pod: &Pod, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let selector_ok = pod
        .spec
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !selector_ok {
        return false;
    }
    let Some(affinity) = pod.spec.affinity.as_ref() else {
        return true;
    };
    match required_node_selector(affinity) {
        Ok(None) => true,
        Ok(Some(selector)) => selector.node_selector_terms.iter().any(|term| {
            let fields = BTreeMap::from([("metadata.name".to_owned(), node_name.to_owned())]);
            (!term.match_expressions.is_empty() || !term.match_fields.is_empty())
                && term
                    .match_expressions
                    .iter()
                    .all(|r| requirement_matches(r, labels))
                && term.match_fields.iter().all(|r| {
                    r.key == "metadata.name"
                        && matches!(r.operator.as_str(), "In" | "NotIn")
                        && requirement_matches(r, &fields)
                })
        }),
        Err(err) => {
            log::warn!(
                "pod {}: undecodable required node affinity: {err}",
                pod.full_name()
            );
            false
        }
    }
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    let bound = || match r.values.as_slice() {
        [one] => number(one),
        _ => None,
    };
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| r.values.contains(v)),
        "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(|v| number(v)), bound()), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((value.and_then(|v| number(v)), bound()), (Some(v), Some(b)) if v < b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), "node2".to_owned()),
            ("site".to_owned(), "berlin".to_owned()),
            ("cores".to_owned(), "4".to_owned()),
        ])
    }

    fn with_terms(terms: serde_json::Value) -> Pod {
        let mut pod = Pod::default();
        pod.spec.affinity = Some(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}));
        pod
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> serde_json::Value {
        json!([{"matchExpressions": [{"key": key, "operator": op, "values": values}]}])
    }

    fn check(name: &str, pod: Pod, want: bool) {
        assert_eq!(matches_node(&pod, "node2", &labels()), want, "{name}");
    }

    #[test]
    fn required_node_affinity_table() {
        let host = "kubernetes.io/hostname";
        check("no affinity", Pod::default(), true);
        check(
            "In own hostname",
            with_terms(expr(host, "In", &["node2"])),
            true,
        );
        check(
            "In other hostname",
            with_terms(expr(host, "In", &["node1"])),
            false,
        );
        check(
            "NotIn own hostname",
            with_terms(expr(host, "NotIn", &["node2"])),
            false,
        );
        check(
            "NotIn other hostname",
            with_terms(expr(host, "NotIn", &["node1"])),
            true,
        );
        check(
            "Exists hostname",
            with_terms(expr(host, "Exists", &[])),
            true,
        );
        check(
            "Exists missing",
            with_terms(expr("gpu", "Exists", &[])),
            false,
        );
        check(
            "DoesNotExist missing",
            with_terms(expr("gpu", "DoesNotExist", &[])),
            true,
        );
        check("Gt", with_terms(expr("cores", "Gt", &["3"])), true);
        check("Lt", with_terms(expr("cores", "Lt", &["3"])), false);
        check(
            "Gt not a number",
            with_terms(expr("cores", "Gt", &["x"])),
            false,
        );
        check(
            "unknown operator",
            with_terms(expr(host, "Like", &["node2"])),
            false,
        );
        check("empty term", with_terms(json!([{}])), false);
        check("no terms", with_terms(json!([])), false);
        let ored = json!([
            {"matchExpressions": [{"key": host, "operator": "In", "values": ["node1"]}]},
            {"matchExpressions": [{"key": "site", "operator": "In", "values": ["berlin"]}]}
        ]);
        check("terms are ORed", with_terms(ored), true);
        let anded = json!([{"matchExpressions": [
            {"key": host, "operator": "In", "values": ["node2"]},
            {"key": "site", "operator": "In", "values": ["paris"]}
        ]}]);
        check("expressions are ANDed", with_terms(anded), false);
        let field = |v: &str| json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [v]}]}]);
        check("matchFields own name", with_terms(field("node2")), true);
        check("matchFields other name", with_terms(field("node1")), false);
        let mut bad = Pod::default();
        bad.spec.affinity = Some(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": "nonsense"}}));
        check("undecodable", bad, false);
        let mut preferred_only = Pod::default();
        preferred_only.spec.affinity = Some(json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": []}}));
        check("preferred only", preferred_only, true);
    }

    #[test]
    fn node_selector_must_match_every_label() {
        let mut pod = Pod::default();
        pod.spec
            .node_selector
            .insert("site".into(), "berlin".into());
        check("selector present", pod.clone(), true);
        pod.spec.node_selector.insert("tier".into(), "edge".into());
        check("selector missing label", pod, false);
    }
}
