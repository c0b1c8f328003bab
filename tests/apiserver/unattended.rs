//! Issue 23: an unattended node stays healthy. litelet as a node of a real
//! kube-apiserver (from `KUBEBUILDER_ASSETS`) on a private real containerd, faced with
//! what an edge node meets when nobody watches: an image that cannot be pulled and a
//! static pod manifest the API server would refuse. Skips loudly without the assets
//! or root unless CI=true.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::pods::ApiPod;
use crate::support::real_node::{busybox_pod, container_status, RealNode};
use serde_json::{json, Value};

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
    let pod = ApiPod::new(ns, "nopull", &node.name, "127.0.0.1:1/litelet/nope:1")
        .host_network()
        .json();
    node.cp
        .create(&format!("/api/v1/namespaces/{ns}/pods"), &pod);
    let path = format!("/api/v1/namespaces/{ns}/pods/nopull");
    node.wait_pod(ns, "nopull", "ErrImagePull", |p| {
        waiting_reason(p).as_deref() == Some("ErrImagePull")
    });
    let first_failure = Instant::now();

    // Watch the waiting reason until litelet has made three pull attempts (75 s at
    // most). The attempts' times come from litelet's own log, so a loaded machine
    // (slow pulls, slow status writes) shifts nothing the test measures.
    let pulls_in_log = || -> Vec<f64> {
        node.log()
            .lines()
            .filter(|l| l.contains("nopull spec.containers{main}: Pulling:"))
            .filter_map(log_seconds)
            .collect()
    };
    let mut reasons: Vec<String> = vec!["ErrImagePull".to_owned()];
    while pulls_in_log().len() < 3 && first_failure.elapsed() < Duration::from_secs(75) {
        if let Some(r) = node.cp.get(&path).as_ref().and_then(waiting_reason) {
            if reasons.last() != Some(&r) {
                reasons.push(r);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let pulls = pulls_in_log();
    let context = || {
        format!(
            "pulls {pulls:?}, reasons {reasons:?}; litelet log:\n{}",
            node.tail()
        )
    };
    assert!(pulls.len() >= 3, "three pull attempts: {}", context());
    // Upstream's back-off: 10 s after the first failure, then 20 s (a pull itself
    // takes a moment, so the gaps are at least the back-off, never less).
    let gaps: Vec<f64> = pulls.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        (9.5..30.0).contains(&gaps[0]),
        "first back-off: {}",
        context()
    );
    assert!(
        (19.5..45.0).contains(&gaps[1]),
        "second back-off: {}",
        context()
    );
    // Between pulls the pod waits as ImagePullBackOff (it showed ErrImagePull after
    // the first failure above; later ones may be replaced by the next sync's
    // ImagePullBackOff before the status thread sends them, which is fine: the
    // status manager keeps only the latest).
    assert!(
        reasons.iter().any(|r| r == "ImagePullBackOff"),
        "no ImagePullBackOff while waiting: {}",
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
    // Containers of API pods wait for the first services list (as upstream, with a
    // Failed event); let it land first so every event below is about the limits.
    node.wait_for("the first services list", || {
        node.log().contains("services: listed")
    });
    let ns = "absurd";
    node.cp.namespace(ns);
    for (name, limit) in [("huge", "9223372036854775807"), ("e400", "1e400")] {
        let script = "trap 'exit 0' TERM; sleep 3600 & wait";
        let mut pod = busybox_pod(ns, name, &node.name, 1, script);
        pod["spec"]["containers"][0]["resources"] = json!({
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": limit, "memory": "9223372036854775807"}
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
        "rn-static-invalid",
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
    let all = node.all_sandboxes().into_iter();
    all.map(|s| s.metadata.name.clone()).collect()
}

/// Seconds since midnight of a litelet log line's `[2026-01-02T03:04:05.678Z` stamp.
fn log_seconds(line: &str) -> Option<f64> {
    let time = line.get(12..24)?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}
