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
