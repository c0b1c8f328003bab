//! RuntimeClass and user namespaces on a real kube-apiserver and a real containerd
//! whose config has a second runc handler, `runc-alt`, with its own runc state root
//! (`tests/containerd/start-containerd.sh`): the node reads the RuntimeClass a pod
//! names, runs the sandbox with its handler (the runtime reports it, and runc's state
//! for the sandbox is under that handler's root), counts the class's overhead in the
//! pod cgroup, and fails clearly — events and pod status — when the class is missing,
//! when the runtime lacks the handler, and for `hostUsers: false`, which containerd
//! 1.6 cannot run. Skips loudly without the assets or root unless CI=true.

use std::path::Path;

use crate::support::control_plane::ControlPlane;
use crate::support::real_node::{busybox_pod, condition, find_pod_cgroup_file, RealNode};
use serde_json::{json, Value};

fn pod(ns: &str, name: &str, node: &str, class: Option<&str>) -> Value {
    let mut pod = busybox_pod(ns, name, node, 1, "trap 'exit 0' TERM; sleep 3600 & wait");
    pod["spec"]["runtimeClassName"] = json!(class);
    pod["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "500m", "memory": "64Mi"}});
    pod
}

fn runtime_class(name: &str, handler: &str, overhead: Option<Value>) -> Value {
    json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": handler,
        "overhead": overhead.map(|o| json!({"podFixed": o})),
    })
}

const CLASSES: &str = "/apis/node.k8s.io/v1/runtimeclasses";

/// The messages of the pod's events with `reason`.
fn event_messages(cp: &ControlPlane, ns: &str, pod: &str, reason: &str) -> Vec<String> {
    let Some(list) = cp.get(&format!("/api/v1/namespaces/{ns}/events")) else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["involvedObject"]["name"] == pod && e["reason"] == reason)
                .filter_map(|e| e["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The runtime's sandboxes of the pod with this UID: (id, runtime handler).
fn sandboxes(node: &RealNode, uid: &str) -> Vec<(String, String)> {
    let found = node.sandboxes(uid).into_iter();
    found.map(|s| (s.id, s.runtime_handler)).collect()
}

/// A file of the pod's cgroup in the v1 `controller` hierarchy, below the node's root.
fn pod_cgroup_file(node: &RealNode, controller: &str, uid: &str, file: &str) -> Option<String> {
    let root = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(node.cgroup_root().trim_start_matches('/'));
    find_pod_cgroup_file(&root, uid, 4, file)
}

#[test]
fn runtime_class_runs_the_sandbox_with_its_handler_and_overhead_in_the_pod_cgroup() {
    let Some(node) = RealNode::start(
        "runtime_class_runs_the_sandbox_with_its_handler_and_overhead_in_the_pod_cgroup",
        "rc-alt",
        &[],
    ) else {
        return;
    };
    let ns = "rc-alt";
    node.cp.namespace(ns);
    let class = format!("alt-{}", std::process::id());
    node.cp.create(
        CLASSES,
        &runtime_class(
            &class,
            "runc-alt",
            Some(json!({"cpu": "250m", "memory": "32Mi"})),
        ),
    );
    node.wait_ready();
    let mut alt = pod(ns, "alt", &node.name, Some(&class));
    // A label reaches the runtime, which ignores it on this host without SELinux (as
    // upstream): the pod runs.
    alt["spec"]["securityContext"] = json!({"seLinuxOptions": {"level": "s0:c1,c2"}});
    let created = node
        .cp
        .create(&format!("/api/v1/namespaces/{ns}/pods"), &alt);
    // The API server's RuntimeClass admission copied the class's overhead in.
    assert_eq!(created["spec"]["overhead"]["cpu"], "250m", "{created}");
    let uid = created["metadata"]["uid"].as_str().expect("uid").to_owned();
    node.wait_pod(ns, "alt", "Running and Ready", |p| {
        p["status"]["phase"] == "Running" && condition(&p["status"], "Ready") == Some("True")
    });

    let found = sandboxes(&node, &uid);
    assert_eq!(found.len(), 1, "{found:?}");
    let (id, handler) = &found[0];
    assert_eq!(
        handler, "runc-alt",
        "the runtime reports the sandbox's handler"
    );
    let dir = node.containerd.dir();
    assert!(
        dir.join("runc-alt/k8s.io").join(id).is_dir(),
        "runc's state for the sandbox is under the runc-alt handler's root"
    );
    assert!(
        !dir.join("runc/k8s.io").join(id).exists(),
        "and not under the default handler's"
    );

    // Pod cgroup limits = container limits + overhead (upstream's pod-level cgroup).
    assert_eq!(
        pod_cgroup_file(&node, "cpu", &uid, "cpu.cfs_quota_us").as_deref(),
        Some("75000"),
        "500m + 250m overhead at a 100 ms period"
    );
    assert_eq!(
        pod_cgroup_file(&node, "memory", &uid, "memory.limit_in_bytes").as_deref(),
        Some((96u64 << 20).to_string().as_str()),
        "64Mi + 32Mi overhead"
    );
    node.cp.delete(&format!("{CLASSES}/{class}"));
}

#[test]
fn missing_runtime_class_unknown_handler_and_host_users_false_fail_clearly() {
    let test = "missing_runtime_class_unknown_handler_and_host_users_false_fail_clearly";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    let ns = "rc-fail";
    let node_name = "rc-fail";
    cp.namespace(ns);
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    // The API server refuses a pod naming a missing class, so the class goes away
    // after the pod is created and before the node starts.
    let gone = format!("gone-{}", std::process::id());
    cp.create(CLASSES, &runtime_class(&gone, "runc", None));
    cp.create(&pods, &pod(ns, "gone", node_name, Some(&gone)));
    cp.delete(&format!("{CLASSES}/{gone}"));
    let bad_handler = format!("nohandler-{}", std::process::id());
    cp.create(
        CLASSES,
        &runtime_class(&bad_handler, "no-such-handler", None),
    );
    cp.create(&pods, &pod(ns, "nohandler", node_name, Some(&bad_handler)));
    let mut userns = pod(ns, "userns", node_name, None);
    userns["spec"]["hostNetwork"] = json!(false);
    userns["spec"]["hostUsers"] = json!(false);
    cp.create(&pods, &userns);

    let Some(node) = RealNode::start(test, node_name, &[]) else {
        return;
    };

    // A missing RuntimeClass: the sandbox is not created, upstream's event says why.
    let not_found = format!("runtimeclasses.node.k8s.io \"{gone}\" not found");
    node.wait_for(
        "FailedCreatePodSandBox for the missing RuntimeClass",
        || {
            event_messages(node.cp, ns, "gone", "FailedCreatePodSandBox")
                .iter()
                .any(|m| m == &format!("Failed to create pod sandbox: {not_found}"))
        },
    );
    let gone_pod = node.cp.get(&format!("{pods}/gone")).expect("pod gone");
    assert_eq!(gone_pod["status"]["phase"], "Pending", "{gone_pod}");
    let uid = gone_pod["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        sandboxes(&node, &uid).is_empty(),
        "no sandbox without a handler"
    );

    // A handler the runtime lacks: containerd's refusal, in the same event.
    node.wait_for("FailedCreatePodSandBox for the unknown handler", || {
        event_messages(node.cp, ns, "nohandler", "FailedCreatePodSandBox")
            .iter()
            .any(|m| {
                m.starts_with("Failed to create pod sandbox: ")
                    && m.contains(r#"no runtime for "no-such-handler" is configured"#)
            })
    });

    // hostUsers: false on a runtime without user namespaces: refused at admission.
    let p = node.wait_pod(ns, "userns", "Failed at admission", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(p["status"]["reason"], "UserNamespacesNotSupported", "{p}");
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
    );

    // The missing class is not remembered: once it exists, the pod starts.
    node.cp.create(CLASSES, &runtime_class(&gone, "runc", None));
    node.wait_pod(ns, "gone", "Running once its RuntimeClass exists", |p| {
        p["status"]["phase"] == "Running"
    });
    node.cp.delete(&format!("{CLASSES}/{gone}"));
    node.cp.delete(&format!("{CLASSES}/{bad_handler}"));
}
