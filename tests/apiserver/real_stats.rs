//! Usage stats through a real kube-apiserver (v1.33+, `KUBEBUILDER_ASSETS`): litelet
//! as a node on a private real containerd runs two pods, and the node API paths that
//! metrics-server and monitoring read answer through the apiserver's node proxy,
//! `kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary` and
//! `.../proxy/metrics/resource`; also `/configz`, `/runningpods/` and `/metrics/probes`
//! through the same proxy. Skips loudly without the assets or root unless CI=true.

use crate::support::real_node::{busybox_pod, RealNode};
use serde_json::Value;

/// A host-network busybox pod bound to `node` that burns a little CPU, then sleeps.
fn pod(ns: &str, name: &str, node: &str) -> Value {
    let script = "trap 'exit 0' TERM; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; \
                  echo busy-done; while true; do sleep 1; done";
    busybox_pod(ns, name, node, 2, script)
}

fn raw(node: &RealNode, path: &str) -> Option<String> {
    let out = node.cp.kubectl(&["get", "--raw", path]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How many sampling rounds read `what` ("node": the node alone, "pods": pods too),
/// from litelet's `/metrics` through the apiserver.
fn rounds(node: &RealNode, base: &str, what: &str) -> u64 {
    let metrics = raw(node, &format!("{base}/metrics")).expect("/metrics");
    let label = format!("read=\"{what}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("litelet_stats_sampling_duration_seconds_count"))
        .filter(|l| l.contains(&label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Both pods' containers have CPU (with a rate) and memory in the summary, and the
/// runtime counts its images' bytes (containerd refreshes that count every 10 s).
fn complete(summary: &Value, ns: &str) -> bool {
    let Some(pods) = summary["pods"].as_array() else {
        return false;
    };
    let image_bytes = &summary["node"]["runtime"]["imageFs"]["usedBytes"];
    if image_bytes.as_u64().unwrap_or(0) == 0 {
        return false;
    }
    ["one", "two"].iter().all(|name| {
        pods.iter().any(|p| {
            p["podRef"]["namespace"] == ns
                && p["podRef"]["name"] == *name
                && p["containers"][0]["cpu"]["usageNanoCores"].is_u64()
                && p["containers"][0]["memory"]["workingSetBytes"].is_u64()
        })
    })
}

#[test]
fn stats_summary_and_resource_metrics_through_the_apiserver_for_two_pods() {
    let Some(node) = RealNode::start(
        "stats_summary_and_resource_metrics_through_the_apiserver_for_two_pods",
        "rn-stats",
        &[],
    ) else {
        return;
    };
    node.wait_ready();
    let ns = "stats-e2e";
    node.cp.namespace(ns);
    for name in ["one", "two"] {
        node.cp.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &pod(ns, name, &node.name),
        );
    }
    for name in ["one", "two"] {
        node.wait_pod(ns, name, "Running", |p| p["status"]["phase"] == "Running");
    }

    let base = format!("/api/v1/nodes/{}/proxy", node.name);
    // Nobody has read pods' usage yet: the sampler has read the node alone.
    node.wait_for("a sampling round", || rounds(&node, &base, "node") > 0);
    assert_eq!(
        rounds(&node, &base, "pods"),
        0,
        "pods read before anyone asked"
    );
    let mut summary = Value::Null;
    // The first read wakes the sampler for pods, and a second round a second later
    // gives their CPU rates.
    node.wait_for("both pods in /stats/summary with CPU rates", || match raw(
        &node,
        &format!("{base}/stats/summary"),
    )
    .map(|s| serde_json::from_str(&s))
    {
        Some(Ok(v)) => {
            summary = v;
            complete(&summary, ns)
        }
        _ => false,
    });
    assert!(
        rounds(&node, &base, "pods") >= 2,
        "the summary's pods came from two rounds that read them"
    );
    eprintln!(
        "---- /stats/summary ----\n{}",
        serde_json::to_string_pretty(&summary).unwrap()
    );
    let n = &summary["node"];
    assert_eq!(n["nodeName"], "rn-stats");
    for key in ["usageNanoCores", "usageCoreNanoSeconds"] {
        assert!(
            n["cpu"][key].as_u64().is_some_and(|v| v > 0),
            "node cpu {key}: {n}"
        );
    }
    let ws = n["memory"]["workingSetBytes"]
        .as_u64()
        .expect("node working set");
    let usage = n["memory"]["usageBytes"].as_u64().expect("node usage");
    assert!(ws <= usage && n["memory"]["availableBytes"].is_u64(), "{n}");
    assert!(
        n["fs"]["capacityBytes"].as_u64().is_some_and(|c| c > 0),
        "nodefs: {n}"
    );
    assert!(n["fs"]["inodesFree"].is_u64());
    assert!(
        n["runtime"]["imageFs"]["usedBytes"]
            .as_u64()
            .is_some_and(|u| u > 0),
        "imagefs: {n}"
    );
    let pods = summary["pods"].as_array().unwrap();
    for name in ["one", "two"] {
        let p = pods
            .iter()
            .find(|p| p["podRef"]["namespace"] == ns && p["podRef"]["name"] == name)
            .unwrap();
        let api_pod = node
            .cp
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .unwrap();
        assert_eq!(p["podRef"]["uid"], api_pod["metadata"]["uid"]);
        let c = &p["containers"][0];
        assert_eq!(c["name"], "main");
        assert!(c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
        assert!(
            p["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap()
                >= c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap()
        );
        assert!(p["memory"]["workingSetBytes"].is_u64(), "pod memory: {p}");
        assert!(
            p["process_stats"]["process_count"].as_u64().unwrap() >= 2,
            "{p}"
        );
        assert!(c["rootfs"]["usedBytes"].is_u64(), "writable layer: {c}");
        assert!(c["logs"]["usedBytes"].as_u64().unwrap() > 0, "logs: {c}");
        assert!(p["ephemeral-storage"]["usedBytes"].is_u64());
    }

    let metrics = raw(&node, &format!("{base}/metrics/resource")).expect("/metrics/resource");
    eprintln!("---- /metrics/resource ----\n{metrics}");
    for name in ["one", "two"] {
        for family in [
            "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes",
            "container_start_time_seconds",
        ] {
            let prefix =
                format!("{family}{{container=\"main\",namespace=\"{ns}\",pod=\"{name}\"}} ");
            assert!(
                metrics.lines().any(|l| l.starts_with(&prefix)),
                "{prefix} missing:\n{metrics}"
            );
        }
        for family in [
            "pod_cpu_usage_seconds_total",
            "pod_memory_working_set_bytes",
        ] {
            let prefix = format!("{family}{{namespace=\"{ns}\",pod=\"{name}\"}} ");
            assert!(metrics.lines().any(|l| l.starts_with(&prefix)), "{prefix}");
        }
    }
    for line in ["resource_scrape_error 0", "scrape_error 0"] {
        assert!(metrics.lines().any(|l| l == line), "{line}:\n{metrics}");
    }
    assert!(metrics
        .lines()
        .any(|l| l.starts_with("node_cpu_usage_seconds_total ")));
    // The cost of a sampling round, measured (not asserted): the stats thread's histogram.
    if let Some(all) = raw(&node, &format!("{base}/metrics")) {
        let lines: Vec<&str> = all
            .lines()
            .filter(|l| l.starts_with("litelet_stats_sampling_duration_seconds_"))
            .filter(|l| l.contains("_sum") || l.contains("_count"))
            .collect();
        eprintln!("---- sampling cost ----\n{}", lines.join("\n"));
    }
    assert!(metrics
        .lines()
        .any(|l| l.starts_with("node_memory_working_set_bytes ")));

    // The rest of the node API answers through the same proxy (nodes/proxy covers the
    // fine-grained subresources for the admin): the running configuration, what the
    // runtime runs, and the probe counters.
    let configz: Value = raw(&node, &format!("{base}/configz"))
        .and_then(|t| serde_json::from_str(&t).ok())
        .expect("/configz through the apiserver");
    assert_eq!(
        configz["kubeletconfig"]["cgroupRoot"],
        node.cgroup_root(),
        "{configz}"
    );
    let running: Value = raw(&node, &format!("{base}/runningpods/"))
        .and_then(|t| serde_json::from_str(&t).ok())
        .expect("/runningpods/ through the apiserver");
    let names: Vec<&str> = running["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    for name in ["one", "two"] {
        assert!(names.contains(&name), "{name} not in {running}");
    }
    assert!(
        raw(&node, &format!("{base}/metrics/probes")).is_some(),
        "/metrics/probes through the apiserver"
    );
}
