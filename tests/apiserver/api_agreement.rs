//! The fake API server must answer like the real one wherever litelet depends on the
//! answer. Each check here runs the same assertions, through litelet's own client as
//! a node (`system:node:<name>`), against the fake (`tests/support/fake_api`) and
//! against a real kube-apiserver (`KUBEBUILDER_ASSETS`; skipped loudly without it
//! unless CI=true): what the Node authorizer lets a node read, the status codes of
//! preconditions, and the shape of a 404.

use crate::support::control_plane::ControlPlane;
use crate::support::fake_api::{pod_json, FakeApi};
use litelet::api::{ApiClient, ApiError, DeleteOptions, ListOptions, PatchType};
use serde_json::{json, Value};

/// What a check needs from a cluster: an admin to set the scene, a node to act.
trait Cluster {
    fn create_pod(&self, ns: &str, name: &str, node: &str) -> Value;
    fn node_client(&self, node: &str) -> ApiClient;
}

struct Fake(FakeApi);

impl Cluster for Fake {
    fn create_pod(&self, ns: &str, name: &str, node: &str) -> Value {
        self.0.create_pod(ns, name, node)
    }
    fn node_client(&self, node: &str) -> ApiClient {
        self.0.act_as_node_authorizer(Some(node));
        self.0.client()
    }
}

struct Real(&'static ControlPlane, tempfile::TempDir);

impl Cluster for Real {
    fn create_pod(&self, ns: &str, name: &str, node: &str) -> Value {
        self.0.namespace(ns);
        let mut pod = pod_json(ns, name, node);
        pod["spec"]["containers"][0]["image"] = json!("busybox:1.0");
        self.0
            .create(&format!("/api/v1/namespaces/{ns}/pods"), &pod)
    }
    fn node_client(&self, node: &str) -> ApiClient {
        let path = self.1.path().join(format!("{node}.kubeconfig"));
        self.0.write_node_kubeconfig(node, &path);
        let mut config = litelet::api::kubeconfig::load(&path).expect("node kubeconfig");
        config.retry.max_retries = 0;
        ApiClient::new(&config).expect("node client")
    }
}

fn code<T>(r: Result<T, ApiError>) -> Option<u16> {
    match r {
        Ok(_) => Some(200),
        Err(e) => e.status_code(),
    }
}

/// The Node authorizer: a node sees its own pods through its field selector only,
/// and any other pod, also one that does not exist, is 403 (not 404).
fn node_reads_only_its_bound_pods(cluster: &dyn Cluster, prefix: &str) {
    let ns = format!("{prefix}-agree");
    let mine = format!("{prefix}-mine");
    let other = format!("{prefix}-other");
    cluster.create_pod(&ns, "a", &mine);
    cluster.create_pod(&ns, "b", &other);
    let api = cluster.node_client(&mine);

    let selector = ListOptions {
        field_selector: Some(format!("spec.nodeName={mine}")),
        ..Default::default()
    };
    let list = api
        .list::<Value>("/api/v1/pods", &selector)
        .expect("list with the node's field selector");
    let names: Vec<&str> = list
        .items
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a"], "{prefix}: the node's pods");

    assert_eq!(
        code(api.list::<Value>("/api/v1/pods", &ListOptions::default())),
        Some(403),
        "{prefix}: a list without the field selector"
    );
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    assert_eq!(code(api.get::<Value>(&format!("{pods}/a"))), Some(200));
    assert_eq!(
        code(api.get::<Value>(&format!("{pods}/b"))),
        Some(403),
        "{prefix}: a pod bound to another node"
    );
    assert_eq!(
        code(api.get::<Value>(&format!("{pods}/gone"))),
        Some(403),
        "{prefix}: a pod that does not exist"
    );
    // Status writes pass the authorizer; NodeRestriction refuses another node's
    // pod, and a pod that does not exist is 404.
    let status_patch = |name: &str| {
        code(api.patch::<Value>(
            &format!("{pods}/{name}/status"),
            PatchType::StrategicMerge,
            &json!({"status": {"phase": "Running"}}),
        ))
    };
    assert_eq!(
        status_patch("b"),
        Some(403),
        "{prefix}: another node's pod status"
    );
    assert_eq!(
        status_patch("gone"),
        Some(404),
        "{prefix}: a missing pod's status"
    );
}

/// A status patch carrying another UID is 422 (the UID is immutable), a stale
/// resourceVersion is 409, a delete with another UID as its precondition is 409;
/// the right UID passes and conditions merge by type.
fn uid_preconditions_conflict(cluster: &dyn Cluster, prefix: &str) {
    let ns = format!("{prefix}-precond");
    let node = format!("{prefix}-pnode");
    let pod = cluster.create_pod(&ns, "p", &node);
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    let api = cluster.node_client(&node);
    let path = format!("/api/v1/namespaces/{ns}/pods/p");
    let patch = |uid: &str| {
        api.patch::<Value>(
            &format!("{path}/status"),
            PatchType::StrategicMerge,
            &json!({"metadata": {"uid": uid}, "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}]}}),
        )
    };
    // Another UID in a patch is an immutable-field error, not a conflict.
    assert_eq!(code(patch("not-the-uid")), Some(422), "{prefix}: patch");
    let patched = patch(&uid).expect("patch with the right uid");
    assert_eq!(patched["status"]["phase"], "Running");
    let stale = api.patch::<Value>(
        &format!("{path}/status"),
        PatchType::StrategicMerge,
        &json!({"metadata": {"uid": "not-the-uid", "resourceVersion": "1"},
                "status": {"phase": "Running"}}),
    );
    assert_eq!(
        code(stale),
        Some(409),
        "{prefix}: a stale resourceVersion wins"
    );
    // Conditions merge by type: a second patch of another type keeps the first.
    let patched: Value = api
        .patch(
            &format!("{path}/status"),
            PatchType::StrategicMerge,
            &json!({"status": {"conditions": [{"type": "Initialized", "status": "True"}]}}),
        )
        .expect("second patch");
    let types: Vec<&str> = patched["status"]["conditions"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        types.contains(&"Ready") && types.contains(&"Initialized"),
        "{prefix}: conditions merged by type: {types:?}"
    );

    let wrong = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some("not-the-uid".into()),
        ..Default::default()
    };
    assert_eq!(
        code(api.delete(&path, &wrong)),
        Some(409),
        "{prefix}: delete"
    );
    let right = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some(uid),
        ..Default::default()
    };
    api.delete(&path, &right)
        .expect("delete with the right uid");
}

/// A node's status patch with `nodeInfo.swap: null` (swap turned off) is accepted and
/// removes the swap it published before; the rest of nodeInfo stays.
fn swap_null_removes_published_swap(cluster: &dyn Cluster, prefix: &str) {
    let name = format!("{prefix}-swapless");
    let api = cluster.node_client(&name);
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    api.create::<Value>("/api/v1/nodes", &node)
        .expect("the node creates its Node");
    let status = format!("/api/v1/nodes/{name}/status");
    let info = |swap: Value| {
        let mut info = json!({
            "machineID": "m1", "systemUUID": "s1", "bootID": "b1",
            "kernelVersion": "6.6", "osImage": "Edge OS", "containerRuntimeVersion": "containerd://1.7",
            "kubeletVersion": "v1.31.0", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64",
        });
        info["swap"] = swap;
        json!({"status": {"nodeInfo": info}})
    };
    let patched: Value = api
        .patch(
            &status,
            PatchType::StrategicMerge,
            &info(json!({"capacity": 1u64 << 30})),
        )
        .expect("status with swap");
    assert_eq!(
        patched["status"]["nodeInfo"]["swap"]["capacity"],
        1u64 << 30,
        "{prefix}"
    );
    let patched: Value = api
        .patch(&status, PatchType::StrategicMerge, &info(Value::Null))
        .expect("status with swap: null");
    let got = &patched["status"]["nodeInfo"];
    assert!(got.get("swap").is_none(), "{prefix}: {got}");
    assert_eq!(got["machineID"], "m1", "{prefix}");
}

#[test]
fn swap_null_in_a_status_patch_agrees_between_the_fake_and_the_real_apiserver() {
    swap_null_removes_published_swap(&Fake(FakeApi::start()), "fake");
    let Some(cp) = ControlPlane::shared("swap_null_agrees") else {
        return;
    };
    swap_null_removes_published_swap(&Real(cp, tempfile::tempdir().unwrap()), "real");
}

#[test]
fn node_authorizer_answers_agree_between_the_fake_and_the_real_apiserver() {
    node_reads_only_its_bound_pods(&Fake(FakeApi::start()), "fake");
    let Some(cp) = ControlPlane::shared("node_authorizer_answers_agree") else {
        return;
    };
    node_reads_only_its_bound_pods(&Real(cp, tempfile::tempdir().unwrap()), "real");
}

#[test]
fn uid_preconditions_agree_between_the_fake_and_the_real_apiserver() {
    uid_preconditions_conflict(&Fake(FakeApi::start()), "fake");
    let Some(cp) = ControlPlane::shared("uid_preconditions_agree") else {
        return;
    };
    uid_preconditions_conflict(&Real(cp, tempfile::tempdir().unwrap()), "real");
}
