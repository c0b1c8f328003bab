//! Edge autonomy end to end, on the real kube-apiserver and a real containerd: a
//! litelet restarted while cut off from its API server keeps managing the pods of
//! its checkpoint, and catches up when the link returns; after a reboot while cut
//! off (the runtime's sandboxes and the volumes' tmpfs gone), pods with a token, a
//! secret volume and env from a secret and a configMap run again from the node's
//! copy (`--checkpoint-secrets`), or wait saying why when it is off.
//!
//! The control plane is shared by the test binary's tests and cannot be stopped, so
//! litelet's kubeconfig points through a TCP proxy in the test (`support::tcp_proxy`)
//! that the test cuts and restores: a lost uplink, as an edge node sees it.
//! Skips loudly without the assets or root unless CI=true.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::pod_data;
use crate::support::real_node::{busybox_pod, container_status, RealNode};
use crate::support::tcp_proxy::TcpProxy;
use crate::support::wait_until;
use litelet::cri::{self, pb, ConnectOptions, Endpoint, RuntimeClient};
use serde_json::{json, Value};

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

/// Restarts litelet reaching its API server through a proxy the test can cut.
fn behind_proxy(node: &mut RealNode) -> TcpProxy {
    let target = node
        .cp
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("control plane address");
    let proxy = TcpProxy::start(target);
    node.set_api_server(&proxy.url());
    node.restart();
    proxy
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
    let proxy = behind_proxy(&mut node);
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
    let back = Instant::now();
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
    eprintln!(
        "restartCount reached the API server {:?} after it returned",
        back.elapsed()
    );
    assert_eq!(running_containers(&runtime, "keep-b").len(), 1);
    assert!(wait_until(Duration::from_secs(5), || node.healthz() == Some(200)));
}

/// A pod that reads the pod data (`support::pod_data`) and notes it in `/marks/<name>`.
fn data_pod(ns: &str, name: &str, node: &str, marks: &Path) -> Value {
    let mut pod = pod(ns, name, node, marks);
    pod_data::read_by(&mut pod, &format!("/marks/{name}"));
    pod
}

/// The lines pod `name`'s container wrote, one per start.
fn marks_of(marks: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(marks.join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A file of the pod's volume of `plugin` (e.g. `kubernetes.io~projected`) as the
/// node holds it, if any.
fn volume_file(node: &RealNode, uid: &str, plugin: &str, file: &str) -> Option<String> {
    let dir = node.root().join(format!("pods/{uid}/volumes/{plugin}"));
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find_map(|volume| std::fs::read_to_string(volume.path().join(file)).ok())
}

fn uid_of(node: &RealNode, ns: &str, name: &str) -> String {
    let pod = node
        .cp
        .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
        .expect("pod");
    pod["metadata"]["uid"].as_str().expect("uid").to_owned()
}

/// Events about pod `name` with `reason`, as the API server has them: their messages.
fn events_of(node: &RealNode, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let list = node
        .cp
        .get(&format!("/api/v1/namespaces/{ns}/events"))
        .unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect()
}

/// Every file under `dir` whose bytes contain `needle` (a mount point's content is
/// read too: callers unmount first).
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(path),
                Ok(t) if t.is_file() => {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        found.push(path);
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// A reboot as the node's state sees it: litelet stops, the runtime loses every
/// sandbox, and the tmpfs mounts (secret and token volumes) are gone.
fn reboot(node: &mut RealNode) {
    node.stop();
    node.remove_sandboxes();
    support::unmount_everything_below(&node.root());
}

#[test]
fn after_a_reboot_while_cut_off_pods_run_again_with_their_tokens_secrets_and_env() {
    let Some(mut node) = RealNode::start(
        "after_a_reboot_while_cut_off_pods_run_again_with_their_tokens_secrets_and_env",
        "rn-reboot",
        &[],
    ) else {
        return;
    };
    let proxy = behind_proxy(&mut node);
    let ns = "rn-reboot";
    node.cp.namespace(ns);
    node.wait_ready();
    let marks = node.dir().join("marks");
    std::fs::create_dir_all(&marks).expect("marks dir");
    pod_data::create_objects(node.cp, ns, "s3cret-at-rest");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    for name in ["app", "gone"] {
        node.cp
            .create(&pods, &data_pod(ns, name, &node.name, &marks));
    }
    for name in ["app", "gone"] {
        node.wait_pod(ns, name, "Running", |p| phase(p) == "Running");
    }
    node.wait_for("app's first start", || marks_of(&marks, "app").len() == 1);
    let first = marks_of(&marks, "app").remove(0);
    assert!(
        first.starts_with(&pod_data::seen("s3cret-at-rest")),
        "{first}"
    );
    let uid = uid_of(&node, ns, "app");
    let token = volume_file(&node, &uid, "kubernetes.io~projected", "token").expect("token");
    // The node's copy: private, and holds the token and the secret.
    let store = node.root().join("checkpoints/pod-data");
    node.wait_for("the pod data kept", || {
        !files_holding(&store, token.as_bytes()).is_empty()
            && !files_holding(&store, b"s3cret-at-rest").is_empty()
    });
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&store), 0o700);
    for entry in std::fs::read_dir(&store).expect("store").flatten() {
        assert_eq!(mode(&entry.path()), 0o600, "{}", entry.path().display());
    }

    // A power cut while the uplink is down: the node comes back cut off.
    proxy.cut();
    reboot(&mut node);
    assert_eq!(
        volume_file(&node, &uid, "kubernetes.io~projected", "token"),
        None
    );
    // Meanwhile, in the cluster: the secret changes and one pod is deleted.
    node.cp.patch(
        &format!("/api/v1/namespaces/{ns}/secrets/creds"),
        &json!({"stringData": {"password": "s3cret-changed"}}),
    );
    let out = node
        .cp
        .kubectl(&["delete", "pod", "gone", "-n", ns, "--wait=false"]);
    assert!(out.status.success(), "{out:?}");
    node.start_again();
    node.wait_for("app started again while cut off", || {
        marks_of(&marks, "app").len() == 2
    });
    assert_eq!(
        marks_of(&marks, "app")[1],
        first,
        "the same secret, env, configMap and token after the reboot; log:\n{}",
        node.tail()
    );
    assert_eq!(node.healthz(), Some(200), "healthz while cut off");
    let runtime = runtime_of(&node);
    // Pod workers start pods side by side: gone may come up just after app.
    node.wait_for("gone runs while cut off", || {
        running_containers(&runtime, "gone").len() == 1
    });

    // The link returns: a fresh token, the changed secret, the deletion honoured,
    // and the events about the node's copy reach the API server.
    proxy.restore();
    let back = Instant::now();
    node.wait_for("a fresh token in app's volume", || {
        volume_file(&node, &uid, "kubernetes.io~projected", "token")
            .is_some_and(|t| !t.is_empty() && t != token)
    });
    node.wait_for("the changed secret in app's volume", || {
        volume_file(&node, &uid, "kubernetes.io~secret", "password").as_deref()
            == Some("s3cret-changed")
    });
    node.wait_for("gone deleted", || {
        node.cp.get(&format!("{pods}/gone")).is_none()
    });
    let running = running_containers(&runtime, "app");
    assert_eq!(running.len(), 1, "app runs");
    node.wait_pod(ns, "app", "its new container in the status", |p| {
        container_status(p, "main")
            .and_then(|c| c["containerID"].as_str())
            .is_some_and(|id| id.ends_with(&running[0]))
    });
    eprintln!(
        "status converged {:?} after the API server returned",
        back.elapsed()
    );
    node.wait_for("FromNodeCopy events", || {
        let told = events_of(&node, ns, "app", "FromNodeCopy");
        [
            "token for service account",
            "secret rn-reboot/creds",
            "configmap rn-reboot/cfg",
        ]
        .iter()
        .all(|what| told.iter().any(|m| m.contains(what)))
    });
}

#[test]
fn with_checkpoint_secrets_off_nothing_secret_is_on_disk_and_pods_wait_after_a_reboot() {
    let Some(mut node) = RealNode::start(
        "with_checkpoint_secrets_off_nothing_secret_is_on_disk_and_pods_wait_after_a_reboot",
        "rn-nosecrets",
        &["--checkpoint-secrets=false"],
    ) else {
        return;
    };
    let proxy = behind_proxy(&mut node);
    let ns = "rn-nosecrets";
    node.cp.namespace(ns);
    node.wait_ready();
    let marks = node.dir().join("marks");
    std::fs::create_dir_all(&marks).expect("marks dir");
    pod_data::create_objects(node.cp, ns, "s3cret-not-at-rest");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    node.cp
        .create(&pods, &data_pod(ns, "app", &node.name, &marks));
    node.wait_pod(ns, "app", "Running", |p| phase(p) == "Running");
    let uid = uid_of(&node, ns, "app");
    let token = volume_file(&node, &uid, "kubernetes.io~projected", "token").expect("token");

    proxy.cut();
    reboot(&mut node);
    for secret in [b"s3cret-not-at-rest".as_slice(), token.as_bytes()] {
        let found = files_holding(&node.root(), secret);
        assert!(found.is_empty(), "secret bytes on disk: {found:?}");
    }
    node.start_again();
    node.wait_for("app waiting, saying why", || {
        node.log().contains("--checkpoint-secrets=false")
    });
    // Volumes come before containers: a pod whose volume failed has none.
    let runtime = runtime_of(&node);
    assert!(running_containers(&runtime, "app").is_empty(), "app waits");
    assert_eq!(marks_of(&marks, "app").len(), 1);

    proxy.restore();
    node.wait_for("app started again", || marks_of(&marks, "app").len() == 2);
    node.wait_for("the FailedMount event naming why", || {
        events_of(&node, ns, "app", "FailedMount")
            .iter()
            .any(|m| m.contains("--checkpoint-secrets=false"))
    });
}
