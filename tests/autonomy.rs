//! Edge autonomy (issue 20) end to end, on the real kube-apiserver and a real
//! containerd: a litelet restarted while cut off from its API server keeps managing
//! the pods of its checkpoint, and catches up when the link returns.
//!
//! The control plane is shared by the test binary's tests and cannot be stopped, so
//! litelet's kubeconfig points through a TCP proxy in the test (`support::tcp_proxy`)
//! that the test cuts and restores: a lost uplink, as an edge node sees it.
//! Skips loudly without the assets or root unless CI=true.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use litelet::cri::{self, pb, ConnectOptions, Endpoint, RuntimeClient};
use serde_json::{json, Value};
use support::real_node::{busybox_pod, container_status, RealNode};
use support::tcp_proxy::TcpProxy;
use support::wait_until;

/// A pod bound to `node`: busybox on the host network that, on SIGTERM, writes
/// `<name>` into the host directory `marks` (to prove a graceful kill) and exits.
fn pod(ns: &str, name: &str, node: &str, marks: &Path) -> Value {
    let script = format!("trap 'echo term > /marks/{name}; exit 0' TERM; sleep 3600 & wait");
    let mut pod = busybox_pod(ns, name, node, 10, &script);
    pod["spec"]["volumes"] =
        json!([{"name": "marks", "hostPath": {"path": marks.display().to_string()}}]);
    pod["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "marks", "mountPath": "/marks"}]);
    pod
}

fn runtime_of(node: &RealNode) -> RuntimeClient {
    let endpoint = Endpoint::parse(&node.containerd.endpoint()).expect("endpoint");
    cri::connect(&endpoint, &ConnectOptions::default()).0
}

/// Running containers of pod `name`, by id.
fn running_containers(runtime: &RuntimeClient, name: &str) -> Vec<String> {
    runtime
        .list_containers(&Default::default())
        .map(|r| r.containers)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(name))
        .filter(|c| c.state.enum_value_or_default() == pb::ContainerState::CONTAINER_RUNNING)
        .map(|c| c.id)
        .collect()
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

#[test]
fn restarted_while_cut_off_litelet_runs_checkpointed_pods_then_catches_up() {
    let Some(mut node) = RealNode::start(
        "restarted_while_cut_off_litelet_runs_checkpointed_pods_then_catches_up",
        "rn-auto",
        &[],
    ) else {
        return;
    };
    // Through a proxy the test can cut.
    let target = node
        .cp
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("control plane address");
    let proxy = TcpProxy::start(target);
    node.set_api_server(&proxy.url());
    node.restart();
    let ns = "rn-auto";
    node.cp.namespace(ns);
    node.wait_ready();
    let marks = node.dir().join("marks");
    std::fs::create_dir_all(&marks).expect("marks dir");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    for name in ["keep-a", "keep-b", "doomed"] {
        node.cp.create(&pods, &pod(ns, name, &node.name, &marks));
    }
    for name in ["keep-a", "keep-b", "doomed"] {
        node.wait_pod(ns, name, "Running", |p| phase(p) == "Running");
    }
    // The checkpoint has all three (it is written a quiet second after a change).
    let checkpoint = node.root().join("checkpoints/api-pods");
    node.wait_for("the three pods in the checkpoint", || {
        std::fs::read_to_string(&checkpoint)
            .is_ok_and(|t| ["keep-a", "keep-b", "doomed"].iter().all(|n| t.contains(n)))
    });
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&checkpoint)
            .expect("checkpoint")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // litelet stops; meanwhile one pod is deleted and a fourth is bound here.
    node.stop();
    let out = node
        .cp
        .kubectl(&["delete", "pod", "doomed", "-n", ns, "--wait=false"]);
    assert!(out.status.success(), "{out:?}");
    node.cp.create(&pods, &pod(ns, "late", &node.name, &marks));
    // The API server becomes unreachable; litelet starts again, cut off.
    proxy.cut();
    node.start_again();
    let runtime = runtime_of(&node);
    node.wait_for("litelet running from its checkpoint", || {
        node.log().contains("from the checkpoint")
    });

    // A container killed now is restarted, and /healthz stays 200.
    let before = running_containers(&runtime, "keep-a");
    assert_eq!(before.len(), 1, "keep-a runs: {before:?}");
    runtime
        .stop_container(&pb::StopContainerRequest {
            container_id: before[0].clone(),
            timeout: 0,
            ..Default::default()
        })
        .expect("kill keep-a's container");
    let killed = Instant::now();
    node.wait_for("keep-a's container restarted while cut off", || {
        let now = running_containers(&runtime, "keep-a");
        now.len() == 1 && now[0] != before[0]
    });
    eprintln!("restarted while cut off after {:?}", killed.elapsed());
    assert_eq!(node.healthz(), Some(200), "healthz while cut off");
    // Still cut off: the deletion is unknown, the fourth pod not started, nothing
    // of the checkpoint killed.
    std::thread::sleep(Duration::from_secs(3));
    for name in ["keep-a", "keep-b", "doomed"] {
        assert_eq!(
            running_containers(&runtime, name).len(),
            1,
            "{name} runs while cut off; log:\n{}",
            node.tail()
        );
    }
    assert!(running_containers(&runtime, "late").is_empty());
    assert!(!marks.join("doomed").exists());
    assert_eq!(node.healthz(), Some(200), "healthz while cut off");

    // The link returns: the deleted pod is killed gracefully and finally deleted,
    // the fourth starts, statuses catch up (keep-a's restart reaches the API).
    proxy.restore();
    node.wait_pod(ns, "late", "Running", |p| phase(p) == "Running");
    node.wait_for("doomed gone from the API", || {
        node.cp.get(&format!("{pods}/doomed")).is_none()
    });
    assert!(
        marks.join("doomed").exists(),
        "doomed got SIGTERM (its grace period), not only SIGKILL"
    );
    assert!(running_containers(&runtime, "doomed").is_empty());
    node.wait_pod(ns, "keep-a", "the restart in its status", |p| {
        container_status(p, "main").is_some_and(|c| c["restartCount"].as_i64() >= Some(1))
    });
    assert_eq!(running_containers(&runtime, "keep-b").len(), 1);
    assert!(wait_until(Duration::from_secs(5), || node.healthz() == Some(200)));
}
