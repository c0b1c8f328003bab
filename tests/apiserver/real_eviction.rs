//! Node-pressure eviction for real (issue 22): litelet as a node of a real
//! kube-apiserver (`KUBEBUILDER_ASSETS`) on a private real containerd, its
//! `--root-dir` on a 64 MiB tmpfs with `--eviction-hard=nodefs.available<24Mi`. A pod
//! fills an emptyDir (which lives on nodefs) until the threshold is crossed; the
//! eviction manager must report DiskPressure on the Node, evict that pod (Failed,
//! reason `Evicted`, a message naming ephemeral-storage, an `Evicted` event) and not
//! the quiet one, refuse a new pod while the pressure lasts, and clear the condition
//! once the pod's volume is gone and the transition period (20 s) has passed.
//! Skips loudly without the assets or root unless CI=true.

use std::time::Instant;

use crate::support::containerd::BUSYBOX;
use crate::support::real_node::{busybox_pod, condition, RealNode};
use serde_json::{json, Value};

const NS: &str = "evict-e2e";

/// A host-network busybox pod bound to `node` running `script`, with an emptyDir.
fn pod(name: &str, node: &str, script: &str) -> Value {
    let mut pod = busybox_pod(NS, name, node, 5, script);
    pod["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": "/scratch"}]);
    pod["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    pod
}

fn disk_pressure(node: &RealNode) -> Option<String> {
    node.node_object()
        .and_then(|n| condition(&n["status"], "DiskPressure").map(str::to_owned))
}

#[test]
fn disk_pressure_evicts_the_pod_filling_nodefs_and_clears_after_the_transition_period() {
    let Some(node) = RealNode::start_with_root_tmpfs(
        "disk_pressure_evicts_the_pod_filling_nodefs_and_clears_after_the_transition_period",
        "rn-evict",
        &[
            "--eviction-hard=nodefs.available<24Mi",
            "--eviction-pressure-transition-period=20s",
            "--node-status-update-frequency=2s",
        ],
        "64m",
    ) else {
        return;
    };
    let t0 = Instant::now();
    let stamp = |what: &str| eprintln!("[{:>5.1} s] {what}", t0.elapsed().as_secs_f64());
    node.wait_ready();
    assert_eq!(disk_pressure(&node).as_deref(), Some("False"));
    // status.images: the runtime's images, largest first (busybox beats pause).
    node.wait_for("status.images on the Node", || {
        node.node_object().is_some_and(|n| {
            let images = n["status"]["images"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let sizes: Vec<i64> = images
                .iter()
                .filter_map(|i| i["sizeBytes"].as_i64())
                .collect();
            images.iter().any(|i| {
                i["names"]
                    .as_array()
                    .is_some_and(|names| names.iter().any(|n| n == BUSYBOX))
            }) && sizes.windows(2).all(|w| w[0] >= w[1])
        })
    });
    stamp("node Ready, DiskPressure False");
    node.cp.namespace(NS);
    let sleeper = "trap 'exit 0' TERM; while true; do sleep 1; done";
    node.cp.create(
        &format!("/api/v1/namespaces/{NS}/pods"),
        &pod("quiet", &node.name, sleeper),
    );
    node.wait_pod(NS, "quiet", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    stamp("quiet Running");

    // 48 MiB into the emptyDir (on the 64 MiB nodefs) leaves less than 24 MiB.
    let filler = "dd if=/dev/zero of=/scratch/fill bs=1M count=48; \
                  trap 'exit 0' TERM; while true; do sleep 1; done";
    node.cp.create(
        &format!("/api/v1/namespaces/{NS}/pods"),
        &pod("hog", &node.name, filler),
    );
    let hog = node.wait_pod(NS, "hog", "evicted", |p| p["status"]["phase"] == "Failed");
    stamp("hog Failed");
    assert_eq!(hog["status"]["reason"], "Evicted", "{hog:#}");
    let message = hog["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 24Mi, available: "),
        "{message}"
    );
    assert_eq!(
        condition(&hog["status"], "DisruptionTarget"),
        Some("True"),
        "{hog:#}"
    );

    // While the pressure lasts, a new pod is refused as upstream refuses it.
    node.cp.create(
        &format!("/api/v1/namespaces/{NS}/pods"),
        &pod("late", &node.name, sleeper),
    );
    let late = node.wait_pod(NS, "late", "rejected", |p| p["status"]["phase"] == "Failed");
    stamp("late rejected");
    assert_eq!(late["status"]["reason"], "Evicted", "{late:#}");
    assert_eq!(
        late["status"]["message"], "Pod was rejected: The node had condition: [DiskPressure]. ",
        "{late:#}"
    );

    node.wait_for("DiskPressure True on the Node", || {
        disk_pressure(&node).as_deref() == Some("True")
    });
    stamp("Node DiskPressure True");

    let events = node
        .cp
        .get(&format!(
            "/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name=hog"
        ))
        .unwrap_or(Value::Null);
    let evicted = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["reason"] == "Evicted" && e["type"] == "Warning");
    assert!(evicted, "no Evicted event for hog: {events:#}");

    // Upstream's node events: at start, and for the condition's transitions.
    let node_events = node
        .cp
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind=Node,involvedObject.name={}",
            node.name
        ))
        .unwrap_or(Value::Null);
    let reasons: Vec<&str> = node_events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    for want in [
        "Starting",
        "NodeAllocatableEnforced",
        "NodeHasDiskPressure",
        "EvictionThresholdMet",
    ] {
        assert!(reasons.contains(&want), "no {want} node event: {reasons:?}");
    }

    // The evicted pod's volume is removed; the condition ends after the transition
    // period, and the quiet pod was never touched.
    node.wait_for("DiskPressure False again", || {
        disk_pressure(&node).as_deref() == Some("False")
    });
    stamp("Node DiskPressure False");
    let quiet = node.wait_pod(NS, "quiet", "still Running", |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(
        quiet["status"]["containerStatuses"][0]["restartCount"], 0,
        "{quiet:#}"
    );
    let log = node.log();
    for line in log
        .lines()
        .filter(|l| l.contains("eviction") || l.contains("DiskPressure"))
    {
        eprintln!("{line}");
    }
    assert!(
        log.contains("eviction: evicting pod evict-e2e/hog"),
        "{}",
        node.tail()
    );
    assert!(!log.contains("eviction: evicting pod evict-e2e/quiet"));
}

/// Local storage limits (upstream localStorageEviction) on a node with plenty of disk:
/// a pod whose emptyDir outgrows its sizeLimit and one whose container (writable
/// layer) outgrows its ephemeral-storage limit are evicted with upstream's messages;
/// a pod without limits writing as much is left alone.
#[test]
fn pods_over_their_emptydir_size_limit_or_ephemeral_storage_limit_are_evicted() {
    let Some(node) = RealNode::start(
        "pods_over_their_emptydir_size_limit_or_ephemeral_storage_limit_are_evicted",
        "rn-evict-local",
        &[],
    ) else {
        return;
    };
    node.cp.namespace(NS);
    node.wait_ready();
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let fill = |path: &str| format!("dd if=/dev/zero of={path} bs=1048576 count=16; sleep 3600");

    let mut sized = pod("local-sized", &node.name, &fill("/scratch/f"));
    sized["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = json!("4Mi");
    let mut limited = pod("local-limited", &node.name, &fill("/fill"));
    limited["spec"]["containers"][0]["resources"] = json!({"limits": {"ephemeral-storage": "4Mi"}});
    let free = pod("local-free", &node.name, &fill("/scratch/f"));
    for p in [&sized, &limited, &free] {
        node.cp.create(&pods, p);
    }

    let evicted = |name: &str, message: &str| {
        let p = node.wait_pod(NS, name, "evicted", |p| p["status"]["phase"] == "Failed");
        assert_eq!(p["status"]["reason"], "Evicted", "{p}");
        assert_eq!(p["status"]["message"], message, "{p}");
    };
    evicted(
        "local-sized",
        r#"Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". "#,
    );
    evicted(
        "local-limited",
        "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ",
    );
    let p = node
        .cp
        .get(&format!("{pods}/local-free"))
        .expect("the pod without limits");
    assert_eq!(p["status"]["phase"], "Running", "{p}");
}
