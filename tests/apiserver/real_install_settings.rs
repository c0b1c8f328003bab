//! What real installs set, on the real control plane (kube-apiserver v1.36 from
//! `KUBEBUILDER_ASSETS`, a private containerd): `--cloud-provider=external` (the
//! uninitialized taint and the provided-node-ip annotation; a cloud controller
//! manager's addresses and its cleared taint survive litelet's restarts),
//! `--provider-id`, a dual-stack `--node-ip`, `nodeLeaseDurationSeconds`, and the
//! kubelet section of the CIS Kubernetes Benchmark as a flag line and as a config
//! file. Skips loudly without the assets or root unless CI=true.

use crate::support;

use crate::support::real_node::{condition, RealNode};
use litelet::api::PatchType;
use serde_json::{json, Value};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The node's `(type, address)` pairs.
fn addresses(node: &Value) -> Vec<(String, String)> {
    node["status"]["addresses"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|a| {
                    let text = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
                    (text("type"), text("address"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
        .collect()
}

fn has_taint(node: &Value, key: &str) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|taints| taints.iter().any(|t| t["key"] == key))
}

/// The Ready condition's last heartbeat, as the apiserver has it.
fn heartbeat(node: &RealNode) -> String {
    node.node_object()
        .and_then(|n| {
            n["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| c["lastHeartbeatTime"].as_str())
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Restarts litelet and waits until it has sent the Node's status again (a Ready
/// heartbeat newer than before the restart).
fn restart_and_wait_for_a_status(node: &mut RealNode) {
    let before = heartbeat(node);
    // The heartbeat has one-second resolution: on a busy machine the restarted
    // litelet's first status could otherwise fall in the same second as the last one
    // and look unchanged (the next report is 5 minutes away).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    node.restart();
    node.wait_for("a status sent after the restart", || {
        heartbeat(node) != before
    });
}

#[test]
fn an_external_cloud_provider_node_registers_uninitialized_and_leaves_the_manager_its_fields() {
    let test =
        "an_external_cloud_provider_node_registers_uninitialized_and_leaves_the_manager_its_fields";
    let Some(mut node) = RealNode::start(
        test,
        "rn-cloud",
        &[
            "--cloud-provider=external",
            "--provider-id=litelet-test://zone-a/rn-cloud",
        ],
    ) else {
        return;
    };
    node.wait_ready();
    let ip = node.cp.node_ip.to_string();
    let n = node.node_object().expect("node");
    let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
    assert!(
        taints.contains(&json!({"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"})),
        "{taints:?}"
    );
    assert_eq!(n["metadata"]["annotations"][PROVIDED_NODE_IP], ip.as_str());
    assert_eq!(n["spec"]["providerID"], "litelet-test://zone-a/rn-cloud");
    assert_eq!(
        addresses(&n),
        pairs(&[("InternalIP", &ip), ("Hostname", "rn-cloud")]),
        "with --node-ip the node starts with it, for the manager to confirm"
    );

    // The cloud controller manager initialises the node: its addresses, and the
    // taint goes.
    let managers = json!([
        {"type": "InternalIP", "address": ip},
        {"type": "ExternalIP", "address": "203.0.113.10"},
        {"type": "Hostname", "address": "rn-cloud"},
    ]);
    let admin = node.cp.admin();
    admin
        .patch::<Value>(
            "/api/v1/nodes/rn-cloud/status",
            PatchType::Merge,
            &json!({"status": {"addresses": managers}}),
        )
        .expect("the manager sets the addresses");
    admin
        .patch::<Value>(
            "/api/v1/nodes/rn-cloud",
            PatchType::Merge,
            &json!({"spec": {"taints": null}}),
        )
        .expect("the manager removes the taint");

    // litelet restarted: it registers again (the Node exists) and reports its status;
    // neither brings the taint back nor replaces the manager's addresses.
    restart_and_wait_for_a_status(&mut node);
    let n = node.node_object().expect("node");
    assert!(!has_taint(&n, UNINITIALIZED), "{}", n["spec"]);
    assert_eq!(
        addresses(&n),
        pairs(&[
            ("InternalIP", &ip),
            ("ExternalIP", "203.0.113.10"),
            ("Hostname", "rn-cloud")
        ])
    );
    assert_eq!(n["spec"]["providerID"], "litelet-test://zone-a/rn-cloud");
    assert_eq!(condition(&n["status"], "Ready"), Some("True"));
}

#[test]
fn a_dual_stack_node_ip_publishes_both_internal_ips_in_order() {
    let test = "a_dual_stack_node_ip_publishes_both_internal_ips_in_order";
    let Some(ip) = support::control_plane::ControlPlane::shared(test).map(|cp| cp.node_ip) else {
        return;
    };
    let pair = format!("{ip},fd00:4c69:7465::5");
    let Some(node) = RealNode::start(test, "rn-dual", &["--node-ip", &pair]) else {
        return;
    };
    node.wait_ready();
    let n = node.node_object().expect("node");
    assert_eq!(
        addresses(&n),
        pairs(&[
            ("InternalIP", &ip.to_string()),
            ("InternalIP", "fd00:4c69:7465::5"),
            ("Hostname", "rn-dual")
        ])
    );
    assert!(!has_taint(&n, UNINITIALIZED), "no cloud provider, no taint");
    assert!(
        n["metadata"]["annotations"].get(PROVIDED_NODE_IP).is_none(),
        "no cloud provider, no annotation"
    );
}
