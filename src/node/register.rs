//! Pure registration decisions: the Node object litelet creates (labels, the
//! attach/detach annotation, `--register-with-taints` and, under an external cloud
//! provider, the uninitialized taint and the provided-node-ip annotation,
//! `--provider-id`, the full initial status), and the patch that brings an already
//! registered node's labels and annotations back to what litelet owns.
//!
//! Used by the `node` thread (`updater.rs`), which does the requests. No I/O.
//!
//! Invariants: taints and the provider ID are only ever set at creation (NodeRestriction
//! refuses a node changing its own taints, upstream leaves them to admins and the cloud
//! controller manager after that, which clears the uninitialized taint for good);
//! reconcile adds or updates litelet's labels and never removes a label; the only
//! annotation it removes is a stale provided-node-ip (as upstream).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::node::{Node, NodeStatus, LABEL_ARCH, LABEL_HOSTNAME, LABEL_OS};
use crate::api::node_patch;
use crate::node::addresses::{provided_node_ip, ANNOTATION_PROVIDED_NODE_IP};
use crate::node::config::NodeConfig;

/// Legacy OS and architecture labels, still set by upstream.
pub const LABEL_OS_BETA: &str = "beta.kubernetes.io/os";
pub const LABEL_ARCH_BETA: &str = "beta.kubernetes.io/arch";
/// Tells the attach/detach controller to attach this node's volumes (upstream default).
pub const ANNOTATION_CONTROLLER_MANAGED_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// The labels litelet owns on its node: hostname, OS and architecture (current and
/// beta names), then `--node-labels` (which win over the defaults, as upstream).
pub fn owned_labels(config: &NodeConfig, architecture: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_HOSTNAME.to_owned(), config.hostname.clone());
    labels.insert(LABEL_OS.to_owned(), "linux".to_owned());
    labels.insert(LABEL_ARCH.to_owned(), architecture.to_owned());
    labels.insert(LABEL_OS_BETA.to_owned(), "linux".to_owned());
    labels.insert(LABEL_ARCH_BETA.to_owned(), architecture.to_owned());
    for (k, v) in &config.labels {
        if let Some(old) = labels.get(k).filter(|old| *old != v) {
            log::warn!("node label {k}={v} overrides the default value {old}");
        }
        labels.insert(k.clone(), v.clone());
    }
    labels
}

/// The annotations litelet owns on its node: controller-managed attach/detach and,
/// under an external cloud provider with `--node-ip`, the provided node IPs.
pub fn owned_annotations(config: &NodeConfig) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    annotations.insert(
        ANNOTATION_CONTROLLER_MANAGED_ATTACH.to_owned(),
        "true".to_owned(),
    );
    if let Some(ips) = provided_node_ip(config.cloud_provider, config.node_ips()) {
        annotations.insert(ANNOTATION_PROVIDED_NODE_IP.to_owned(), ips);
    }
    annotations
}

/// The Node to create: name, owned labels and annotations, the registration taints
/// (then the cloud provider's, as upstream orders them), the provider ID and the
/// whole status (allocatable included: the API server refuses in-place pod resizes
/// on a node that has not published it).
pub fn initial_node(config: &NodeConfig, architecture: &str, status: NodeStatus) -> Node {
    let mut node = Node::new(&config.node_name);
    node.metadata.labels = owned_labels(config, architecture);
    node.metadata.annotations = owned_annotations(config);
    node.spec.taints = config.register_with_taints.clone();
    node.spec
        .taints
        .extend(config.cloud_provider.registration_taint());
    node.spec.provider_id = config.provider_id.clone().filter(|id| !id.is_empty());
    node.status = status;
    node
}

/// A JSON merge patch of the node's metadata that sets `wanted`'s labels and
/// annotations where `existing` differs, and drops a provided-node-ip annotation
/// `wanted` no longer has; `None` when nothing needs to change. Taints and the
/// provider ID are left alone on purpose (see the module doc).
pub fn reconcile_patch(existing: &Node, wanted: &Node) -> Option<Value> {
    let stale: &[&str] = if wanted
        .metadata
        .annotations
        .contains_key(ANNOTATION_PROVIDED_NODE_IP)
    {
        &[]
    } else {
        &[ANNOTATION_PROVIDED_NODE_IP]
    };
    node_patch::labels_patch(existing, wanted, stale)
}

/// The boot ID the API server last saw, when it differs from this boot's.
pub fn previous_boot<'a>(existing: &'a Node, boot_id: &str) -> Option<&'a str> {
    let old = existing.status.node_info.as_ref()?.boot_id.as_str();
    (!old.is_empty() && !boot_id.is_empty() && old != boot_id).then_some(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node::{NodeSystemInfo, TaintEffect};
    use crate::node::config::{parse_node_labels, parse_taints};
    use serde_json::json;

    fn config() -> NodeConfig {
        let mut c = NodeConfig::new("edge-1", "edge-1.local");
        c.labels = parse_node_labels("site=berlin,kubernetes.io/arch=arm").unwrap();
        c.register_with_taints = parse_taints("dedicated=edge:NoSchedule").unwrap();
        c
    }

    #[test]
    fn initial_node_carries_labels_taints_and_status() {
        let mut status = NodeStatus::default();
        status.allocatable.insert(
            "cpu".into(),
            crate::api::quantity::Quantity::parse("2").unwrap(),
        );
        let node = initial_node(&config(), "arm64", status);
        assert_eq!(node.name(), "edge-1");
        let l = &node.metadata.labels;
        assert_eq!(l[LABEL_HOSTNAME], "edge-1.local");
        assert_eq!(l[LABEL_OS], "linux");
        assert_eq!(l[LABEL_OS_BETA], "linux");
        assert_eq!(l[LABEL_ARCH_BETA], "arm64");
        assert_eq!(l[LABEL_ARCH], "arm", "--node-labels win");
        assert_eq!(l["site"], "berlin");
        assert_eq!(
            node.metadata.annotations[ANNOTATION_CONTROLLER_MANAGED_ATTACH],
            "true"
        );
        assert_eq!(node.spec.taints.len(), 1);
        assert_eq!(node.spec.taints[0].effect, TaintEffect::NoSchedule);
        assert!(node.status.allocatable.contains_key("cpu"));
        let wire = serde_json::to_value(&node).unwrap();
        assert_eq!(wire["spec"]["taints"][0]["value"], "edge");
        assert_eq!(wire["status"]["allocatable"]["cpu"], "2");
    }

    #[test]
    fn reconcile_sets_owned_labels_only() {
        let wanted = initial_node(&config(), "arm64", NodeStatus::default());
        let mut existing = wanted.clone();
        existing.spec.taints.clear(); // an admin removed the taint: it stays removed
        existing
            .metadata
            .labels
            .insert("node-role.kubernetes.io/edge".into(), "".into());
        assert_eq!(reconcile_patch(&existing, &wanted), None);

        existing
            .metadata
            .labels
            .insert(LABEL_HOSTNAME.into(), "old-name".into());
        existing.metadata.labels.remove("site");
        existing.metadata.annotations.clear();
        let patch = reconcile_patch(&existing, &wanted).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {
                "labels": {LABEL_HOSTNAME: "edge-1.local", "site": "berlin"},
                "annotations": {ANNOTATION_CONTROLLER_MANAGED_ATTACH: "true"}
            }})
        );
    }

    fn external(node_ip: &str) -> NodeConfig {
        let mut c = config();
        c.cloud_provider = crate::node::addresses::CloudProvider::External;
        c.node_ips = crate::node::addresses::NodeIps::parse(node_ip).unwrap();
        c.provider_id = Some("aws:///eu-west-1a/i-0abc".into());
        c
    }

    #[test]
    fn an_external_cloud_provider_adds_the_uninitialized_taint_and_the_node_ip_annotation() {
        let node = initial_node(
            &external("10.0.0.5,2001:db8::5"),
            "amd64",
            NodeStatus::default(),
        );
        let taints: Vec<(&str, Option<&str>, TaintEffect)> = node
            .spec
            .taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.clone()))
            .collect();
        assert_eq!(
            taints,
            [
                ("dedicated", Some("edge"), TaintEffect::NoSchedule),
                (
                    crate::node::addresses::TAINT_UNINITIALIZED,
                    Some("true"),
                    TaintEffect::NoSchedule
                ),
            ],
            "--register-with-taints first, then the cloud provider's"
        );
        assert_eq!(
            node.metadata.annotations[ANNOTATION_PROVIDED_NODE_IP],
            "10.0.0.5,2001:db8::5"
        );
        assert_eq!(
            node.spec.provider_id.as_deref(),
            Some("aws:///eu-west-1a/i-0abc")
        );
        let wire = serde_json::to_value(&node).unwrap();
        assert_eq!(wire["spec"]["providerID"], "aws:///eu-west-1a/i-0abc");

        let plain = initial_node(&config(), "amd64", NodeStatus::default());
        assert_eq!(
            plain.spec.taints.len(),
            1,
            "no cloud taint without a provider"
        );
        assert!(!plain
            .metadata
            .annotations
            .contains_key(ANNOTATION_PROVIDED_NODE_IP));
        assert_eq!(plain.spec.provider_id, None);
        let no_ip = initial_node(&external(""), "amd64", NodeStatus::default());
        assert!(!no_ip
            .metadata
            .annotations
            .contains_key(ANNOTATION_PROVIDED_NODE_IP));
    }

    #[test]
    fn reconcile_keeps_a_cleared_cloud_taint_cleared_and_corrects_the_node_ip_annotation() {
        let wanted = initial_node(&external("10.0.0.5"), "amd64", NodeStatus::default());
        let mut existing = wanted.clone();
        // The cloud controller manager initialised the node and removed the taint.
        existing
            .spec
            .taints
            .retain(|t| t.key != crate::node::addresses::TAINT_UNINITIALIZED);
        assert_eq!(reconcile_patch(&existing, &wanted), None);

        existing
            .metadata
            .annotations
            .insert(ANNOTATION_PROVIDED_NODE_IP.into(), "10.0.0.9".into());
        assert_eq!(
            reconcile_patch(&existing, &wanted).unwrap(),
            json!({"metadata": {"annotations": {ANNOTATION_PROVIDED_NODE_IP: "10.0.0.5"}}})
        );

        // Restarted without a cloud provider: the stale annotation goes.
        let plain = initial_node(&config(), "amd64", NodeStatus::default());
        assert_eq!(
            reconcile_patch(&existing, &plain).unwrap(),
            json!({"metadata": {"annotations": {ANNOTATION_PROVIDED_NODE_IP: null}}})
        );
    }

    #[test]
    fn reboot_detection() {
        let mut n = Node::new("n");
        assert_eq!(previous_boot(&n, "b2"), None);
        n.status.node_info = Some(NodeSystemInfo {
            boot_id: "b1".into(),
            ..NodeSystemInfo::default()
        });
        assert_eq!(previous_boot(&n, "b2"), Some("b1"));
        assert_eq!(previous_boot(&n, "b1"), None);
        assert_eq!(previous_boot(&n, ""), None);
    }
}
