//! Issue 23: an unattended node stays healthy. litelet as a node of a real
//! kube-apiserver (from `KUBEBUILDER_ASSETS`) on a private real containerd, faced with
//! what an edge node meets when nobody watches: an image that cannot be pulled and a
//! static pod manifest the API server would refuse. Skips loudly without the assets
//! or root unless CI=true.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::real_node::{container_status, RealNode};

/// The waiting reason of container `main`, if it is waiting.
fn waiting_reason(pod: &Value) -> Option<String> {
    container_status(pod, "main")?["state"]["waiting"]["reason"]
        .as_str()
        .map(str::to_owned)
}

// Issue 23 item 4: pulls of an image that cannot be pulled follow upstream's back-off
// (10 s doubling) and the waiting reason says ErrImagePull after a failed pull and
// ImagePullBackOff while waiting. Before, pulls came 60-90 s apart (the resync
// period) and the reason lagged one sync behind.
#[test]
fn unpullable_image_is_retried_on_the_backoff_schedule_with_matching_reasons() {
    let Some(node) = RealNode::start(
        "unpullable_image_is_retried_on_the_backoff_schedule_with_matching_reasons",
        "rn-pullback",
        &[],
    ) else {
        return;
    };
    node.wait_ready();
    let ns = "pull-backoff";
    node.cp.namespace(ns);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nopull", "namespace": ns},
        "spec": {
            "nodeName": node.name,
            "hostNetwork": true,
            "containers": [{"name": "main", "image": "127.0.0.1:1/litelet/nope:1"}]
        }
    });
    node.cp
        .create(&format!("/api/v1/namespaces/{ns}/pods"), &pod);
    let path = format!("/api/v1/namespaces/{ns}/pods/nopull");
    node.wait_pod(ns, "nopull", "ErrImagePull", |p| {
        waiting_reason(p).as_deref() == Some("ErrImagePull")
    });
    let first_failure = Instant::now();

    // Record every change of the waiting reason for 45 s: (seconds, reason).
    let mut changes: Vec<(f64, String)> = Vec::new();
    let mut last = Some("ErrImagePull".to_owned());
    while first_failure.elapsed() < Duration::from_secs(45) {
        let reason = node.cp.get(&path).as_ref().and_then(waiting_reason);
        if reason != last {
            if let Some(r) = &reason {
                changes.push((first_failure.elapsed().as_secs_f64(), r.clone()));
            }
            last = reason;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // A change into ErrImagePull is a failed pull. Pull 2 comes 10 s after pull 1,
    // pull 3 20 s after that (30 s), pull 4 not before 70 s; in between the pod waits
    // with ImagePullBackOff (the first sync after each failure already says so).
    let pulls: Vec<f64> = changes
        .iter()
        .filter(|(_, r)| r == "ErrImagePull")
        .map(|(t, _)| *t)
        .collect();
    let context = || format!("changes {changes:?}; litelet log:\n{}", node.tail());
    let third = pulls.iter().find(|t| (28.0..36.0).contains(*t));
    assert!(
        third.is_some(),
        "no pull 30 s after the first: {}",
        context()
    );
    assert!(
        pulls.iter().all(|t| *t < 36.0),
        "a pull before the 40 s back-off ended: {}",
        context()
    );
    let waited = changes
        .iter()
        .any(|(t, r)| r == "ImagePullBackOff" && (15.0..*third.unwrap_or(&0.0)).contains(t));
    assert!(
        waited,
        "no ImagePullBackOff before the third pull: {}",
        context()
    );
    // The events say the same: the pull failed and was backed off.
    let events = node
        .cp
        .get(&format!("/api/v1/namespaces/{ns}/events"))
        .expect("events");
    let reasons_seen: Vec<&str> = events["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|e| e["reason"].as_str()).collect())
        .unwrap_or_default();
    for want in ["Pulling", "Failed", "BackOff"] {
        assert!(
            reasons_seen.contains(&want),
            "{want} missing: {reasons_seen:?}"
        );
    }
}

// Issue 23 item 3: a CPU limit of 2^63-1 (or 1e400) failed at the cgroup write
// (the kernel's largest CFS quota is 2^44-1 µs) and was then reported as "Pod
// resize failed" on a pod never resized. It is clamped to that largest quota.
#[test]
fn absurd_cpu_limits_are_clamped_and_the_pod_runs_without_resize_errors() {
    let Some(node) = RealNode::start(
        "absurd_cpu_limits_are_clamped_and_the_pod_runs_without_resize_errors",
        "rn-absurd",
        &[],
    ) else {
        return;
    };
    node.wait_ready();
    let ns = "absurd";
    node.cp.namespace(ns);
    for (name, limit) in [("huge", "9223372036854775807"), ("e400", "1e400")] {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": node.name,
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": support::containerd::BUSYBOX,
                    "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": limit, "memory": "9223372036854775807"}
                    }
                }]
            }
        });
        node.cp
            .create(&format!("/api/v1/namespaces/{ns}/pods"), &pod);
    }
    for name in ["huge", "e400"] {
        node.wait_pod(ns, name, "Running", |p| {
            container_status(p, "main").is_some_and(|c| c["state"]["running"].is_object())
        });
    }
    // A few syncs later: no resize wording, no resize condition, no failed update.
    std::thread::sleep(Duration::from_secs(5));
    let events = node
        .cp
        .get(&format!("/api/v1/namespaces/{ns}/events"))
        .expect("events");
    let bad: Vec<String> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            let text = format!("{} {}", e["reason"], e["message"]).to_lowercase();
            text.contains("resize") || text.contains("failed")
        })
        .map(|e| format!("{}: {}", e["reason"], e["message"]))
        .collect();
    assert!(bad.is_empty(), "{bad:?}\nlitelet log:\n{}", node.tail());
    for name in ["huge", "e400"] {
        let pod = node
            .cp
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .expect("pod");
        let conditions = pod["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conditions
                .iter()
                .all(|c| !c["type"].as_str().unwrap_or("").starts_with("PodResize")),
            "{name}: {conditions:?}"
        );
    }
}

/// A static pod manifest in `ns` named `name` whose container has `resources`.
fn static_manifest(ns: &str, name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n    resources: {resources}\n",
        support::containerd::BUSYBOX
    )
}

// Issue 23 item 2: a static pod the API server would refuse (here a negative CPU
// limit, and a 1 MiB annotation) ran anyway, with no mirror pod. Now its file is
// skipped with one error naming the file and the field, and nothing runs from it,
// while a valid neighbour runs with its mirror pod.
#[test]
fn an_invalid_static_pod_runs_nothing_and_is_reported_with_file_and_field() {
    let Some(node) = RealNode::start(
        "an_invalid_static_pod_runs_nothing_and_is_reported_with_file_and_field",
        "rn-static",
        &[],
    ) else {
        return;
    };
    node.wait_ready();
    let ns = "static-check";
    node.cp.namespace(ns);
    let dir = node.manifests();
    let negative = static_manifest(ns, "negcpu", "{limits: {cpu: \"-1\"}}");
    std::fs::write(dir.join("negcpu.yaml"), negative).expect("write manifest");
    let big = static_manifest(ns, "bigann", "{}").replace(
        "  namespace:",
        &format!(
            "  annotations: {{blob: {}}}\n  namespace:",
            "x".repeat(1 << 20)
        ),
    );
    std::fs::write(dir.join("bigann.yaml"), big).expect("write manifest");
    std::fs::write(
        dir.join("good.yaml"),
        static_manifest(ns, "good", "{limits: {cpu: 100m, memory: 32Mi}}"),
    )
    .expect("write manifest");

    node.wait_pod(ns, &format!("good-{}", node.name), "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let log = node.log();
    for (file, field) in [
        ("negcpu.yaml", "spec.containers[0].resources.limits.cpu"),
        ("bigann.yaml", "metadata.annotations"),
    ] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(file) && l.contains(field))
            .collect();
        assert!(
            !lines.is_empty(),
            "no error naming {file} and {field}:\n{log}"
        );
    }
    // Nothing from the invalid files: no mirror pod and no sandbox in the runtime.
    for name in ["negcpu", "bigann"] {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}-{}", node.name);
        assert!(node.cp.get(&path).is_none(), "{name} has a mirror pod");
    }
    let sandboxes = sandbox_names(&node);
    assert!(
        sandboxes.iter().any(|n| n.starts_with("good-")),
        "{sandboxes:?}"
    );
    assert!(
        sandboxes
            .iter()
            .all(|n| !n.starts_with("negcpu") && !n.starts_with("bigann")),
        "{sandboxes:?}"
    );
}

/// Names of the pod sandboxes the node's containerd holds.
fn sandbox_names(node: &RealNode) -> Vec<String> {
    use litelet::cri::{self, pb, ConnectOptions, Endpoint};
    let endpoint = Endpoint::parse(&node.containerd.endpoint()).expect("endpoint");
    let (runtime, _) = cri::connect(&endpoint, &ConnectOptions::default());
    let list = runtime
        .list_pod_sandbox(&pb::ListPodSandboxRequest::default())
        .expect("list sandboxes");
    list.items
        .into_iter()
        .map(|s| s.metadata.name.clone())
        .collect()
}
