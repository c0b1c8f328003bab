//! Monitoring as clusters scrape it: Debian's Prometheus scrapes a litelet node of
//! the real control plane (real kube-apiserver, `KUBEBUILDER_ASSETS`; real
//! containerd) with kube-prometheus' kubelet scrape jobs (https, the bearer token of
//! a service account bound as kube-prometheus binds its Prometheus, `/metrics` and
//! `/metrics/cadvisor` with its metric drops), and the PromQL of kube-prometheus'
//! dashboards, recording rules and alerts returns a running pod's CPU, memory,
//! throttling and network, and the node's kubelet series. Skips loudly without root,
//! the assets or the `prometheus` package unless CI=true.

use crate::support::prometheus::{kubelet_scrape_config, Prometheus, Sample};
use crate::support::real_node::{bound_claim, busybox_pod, RealNode, WAIT};
use crate::support::wait_until;
use serde_json::json;

const NS: &str = "rn-prom";
const POD: &str = "busy";
const CLAIM: &str = "data";

/// kube-prometheus' `prometheus-k8s` ClusterRole (what it may read of a node) bound
/// to a service account of `NS`; its token, as a file Prometheus reads.
fn scraper_token(node: &RealNode, dir: &std::path::Path) -> String {
    let cp = node.cp;
    cp.create(
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus-k8s"}}),
    );
    cp.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "prometheus-k8s"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                    {"nonResourceURLs": ["/metrics", "/metrics/slis"], "verbs": ["get"]}]}),
    );
    cp.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "prometheus-k8s"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "prometheus-k8s"},
                "subjects": [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": NS}]}),
    );
    let out = cp.kubectl(&[
        "create",
        "token",
        "prometheus-k8s",
        "-n",
        NS,
        "--duration=1h",
    ]);
    assert!(
        out.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("token");
    std::fs::write(&path, String::from_utf8_lossy(&out.stdout).trim()).expect("write token");
    path.display().to_string()
}

/// A pod on the pod network whose container `c` spins under a 100m CPU limit (so
/// it is throttled) in 64 MiB, with claim `CLAIM` mounted.
fn spinning_pod(node: &str) -> serde_json::Value {
    let mut pod = busybox_pod(NS, POD, node, 1, "while true; do :; done");
    pod["spec"]["hostNetwork"] = json!(false);
    pod["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}]);
    let container = &mut pod["spec"]["containers"][0];
    container["name"] = json!("c");
    container["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    container["resources"] = json!({
        "limits": {"cpu": "100m", "memory": "64Mi"},
        "requests": {"cpu": "100m", "memory": "64Mi"}
    });
    pod
}

/// Polls `promql` until `check` accepts its answer; the answer then.
fn wait_query(
    prom: &Prometheus,
    node: &RealNode,
    promql: &str,
    check: impl Fn(&[Sample]) -> bool,
) -> Vec<Sample> {
    let mut last = Err(String::new());
    let done = wait_until(WAIT, || {
        last = prom.query(promql);
        last.as_deref().is_ok_and(&check)
    });
    assert!(
        done,
        "{promql}\nanswered {last:?}\ntargets: {:?}\nprometheus log:\n{}\nlitelet log:\n{}",
        prom.targets(),
        prom.log_tail(),
        node.tail()
    );
    last.unwrap_or_default()
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn mem_total() -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib * 1024.0)
}

#[test]
fn kube_prometheus_queries_return_a_running_pods_usage_from_a_real_scrape() {
    let test = "kube_prometheus_queries_return_a_running_pods_usage_from_a_real_scrape";
    let Some(node) = RealNode::start(test, "rn-prom", &[]) else {
        return;
    };
    node.cp.namespace(NS);
    node.wait_ready();
    let volume = node.dir().join("pv-data");
    bound_claim(
        &node,
        NS,
        CLAIM,
        "rn-prom-data",
        json!({"hostPath": {"path": volume, "type": "DirectoryOrCreate"}}),
    );
    node.cp.create(
        &format!("/api/v1/namespaces/{NS}/pods"),
        &spinning_pod(&node.name),
    );
    node.wait_pod(NS, POD, "Running", |p| p["status"]["phase"] == "Running");

    let token_dir = tempfile::tempdir().expect("token dir");
    let token = scraper_token(&node, token_dir.path());
    let target = std::net::SocketAddr::new(node.cp.node_ip.into(), node.port);
    let config = kubelet_scrape_config(target, &node.name, &token);
    let Some(prom) = Prometheus::start(test, &config) else {
        return;
    };

    // Both endpoints are scraped with the token (TokenReview, SubjectAccessReview).
    wait_query(&prom, &node, r#"up{job="kubelet"} == 1"#, |s| {
        let mut paths: Vec<&str> = s.iter().map(|s| s.label("metrics_path")).collect();
        paths.sort_unstable();
        paths == ["/metrics", "/metrics/cadvisor"]
    });

    // The Kubelet dashboard's stat panels.
    let one = |s: &[Sample]| s.len() == 1 && s[0].value >= 1.0;
    wait_query(
        &prom,
        &node,
        r#"sum(kubelet_node_name{job="kubelet", metrics_path="/metrics"})"#,
        one,
    );
    wait_query(
        &prom,
        &node,
        r#"sum(kubelet_running_pods{job="kubelet", metrics_path="/metrics"})"#,
        one,
    );
    wait_query(
        &prom,
        &node,
        r#"sum(kubelet_running_containers{job="kubelet", metrics_path="/metrics", container_state="running"})"#,
        one,
    );
    // The Kubelet dashboard's volume counts, storage operations and cgroup manager
    // operations (the pod's claim is a hostPath PV).
    wait_query(
        &prom,
        &node,
        r#"sum(volume_manager_total_volumes{job="kubelet", metrics_path="/metrics", plugin_name="kubernetes.io/host-path"}) by (state)"#,
        |s| s.len() == 2 && s.iter().all(|s| s.value >= 1.0),
    );
    wait_query(
        &prom,
        &node,
        r#"sum(storage_operation_duration_seconds_count{job="kubelet", metrics_path="/metrics", operation_name="volume_mount", status="success"}) by (volume_plugin)"#,
        |s| {
            s.iter()
                .any(|s| s.label("volume_plugin") == "kubernetes.io/host-path" && s.value >= 1.0)
        },
    );
    wait_query(
        &prom,
        &node,
        r#"sum(kubelet_cgroup_manager_duration_seconds_count{job="kubelet", metrics_path="/metrics"}) by (operation_type)"#,
        |s| {
            s.iter()
                .any(|s| s.label("operation_type") == "create" && s.value >= 1.0)
        },
    );
    // KubePersistentVolumeFillingUp's ratio and inputs, for the pod's claim.
    let claim_sel = format!(
        r#"job="kubelet", metrics_path="/metrics", namespace="{NS}", persistentvolumeclaim="{CLAIM}""#
    );
    wait_query(
        &prom,
        &node,
        &format!(
            "kubelet_volume_stats_available_bytes{{{claim_sel}}} / kubelet_volume_stats_capacity_bytes{{{claim_sel}}}"
        ),
        |s| s.len() == 1 && s[0].value > 0.0 && s[0].value <= 1.0,
    );
    for family in [
        "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_inodes",
        "kubelet_volume_stats_inodes_used",
    ] {
        wait_query(&prom, &node, &format!("{family}{{{claim_sel}}}"), |s| {
            s.len() == 1 && s[0].value > 0.0
        });
    }
    // The kubelet alerts' recording rule joins on kubelet_node_name for the node label.
    wait_query(
        &prom,
        &node,
        r#"histogram_quantile(0.99, sum(rate(kubelet_pleg_relist_duration_seconds_bucket{job="kubelet", metrics_path="/metrics"}[1m])) by (instance, le) * on(instance) group_left(node) kubelet_node_name{job="kubelet", metrics_path="/metrics"})"#,
        |s| s.len() == 1 && s[0].label("node") == node.name && s[0].value.is_finite(),
    );

    // Compute Resources / Pod: CPU usage by container (the recording rule's irate),
    // and the issue's plainer form.
    let pod_sel = format!(
        r#"job="kubelet", metrics_path="/metrics/cadvisor", namespace="{NS}", pod="{POD}""#
    );
    let cpu = wait_query(
        &prom,
        &node,
        &format!(
            r#"sum by (container) (irate(container_cpu_usage_seconds_total{{{pod_sel}, image!=""}}[1m]))"#
        ),
        |s| s.len() == 1 && s[0].label("container") == "c" && s[0].value > 0.01,
    );
    wait_query(
        &prom,
        &node,
        &format!(
            r#"sum(rate(container_cpu_usage_seconds_total{{container!="", pod="{POD}"}}[1m]))"#
        ),
        |s| s.len() == 1 && s[0].value > 0.01,
    );
    // The counter is the container's own: over its life it used about its 100m quota
    // (the samples lag, which only lowers the ratio). Rates over a few scrapes are
    // coarse here: litelet samples every 10 s and this Prometheus scrapes every 2 s.
    let share = wait_query(
        &prom,
        &node,
        &format!(
            r#"sum by (container) (container_cpu_usage_seconds_total{{{pod_sel}, container="c"}})
  / sum by (container) (time() - container_start_time_seconds{{{pod_sel}, container="c"}})"#
        ),
        |s| s.len() == 1 && s[0].value > 0.01,
    );
    assert!(
        share[0].value <= 0.15,
        "a container limited to 100m used {} of a core over its life",
        share[0].value
    );
    // Memory: working set, RSS and cache by container, and the limit it has.
    for family in [
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_memory_usage_bytes",
    ] {
        wait_query(
            &prom,
            &node,
            &format!(r#"sum by (container) ({family}{{{pod_sel}, container!="", image!=""}})"#),
            |s| s.len() == 1 && s[0].label("container") == "c" && s[0].value > 0.0,
        );
    }
    wait_query(
        &prom,
        &node,
        &format!(r#"container_memory_cache{{{pod_sel}, container="c"}}"#),
        |s| s.len() == 1,
    );
    // CPUThrottlingHigh: the spinning container hits its quota in most periods.
    let throttled = wait_query(
        &prom,
        &node,
        &format!(
            r#"sum(increase(container_cpu_cfs_throttled_periods_total{{container!="", {pod_sel}}}[1m])) without (id, metrics_path, name, image, endpoint, job, node)
  / on (namespace, pod, container, instance) group_left
  sum(increase(container_cpu_cfs_periods_total{{{pod_sel}}}[1m])) without (id, metrics_path, name, image, endpoint, job, node)
  > (25 / 100)"#
        ),
        |s| s.len() == 1 && s[0].label("container") == "c",
    );
    // The OOM alert's counter, and the pod's own network (on its sandbox row).
    wait_query(
        &prom,
        &node,
        &format!(r#"container_oom_events_total{{{pod_sel}, container="c"}}"#),
        |s| s.len() == 1 && s[0].value == 0.0,
    );
    for family in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_network_receive_packets_total",
        "container_network_transmit_packets_dropped_total",
    ] {
        wait_query(
            &prom,
            &node,
            &format!(r#"sum by (pod) (irate({family}{{{pod_sel}}}[1m]))"#),
            |s| s.len() == 1 && s[0].label("pod") == POD && s[0].value.is_finite(),
        );
    }
    wait_query(
        &prom,
        &node,
        &format!(r#"container_network_receive_bytes_total{{{pod_sel}, interface="eth0"}}"#),
        |s| s.len() == 1,
    );
    // The container's writable layer, and the node's filesystems.
    wait_query(
        &prom,
        &node,
        &format!(r#"container_fs_usage_bytes{{{pod_sel}, container="c"}}"#),
        |s| !s.is_empty(),
    );
    wait_query(
        &prom,
        &node,
        r#"container_fs_limit_bytes{job="kubelet", metrics_path="/metrics/cadvisor", id="/"}"#,
        |s| !s.is_empty() && s.iter().all(|s| s.value > 0.0),
    );
    // The machine.
    let memory = mem_total();
    wait_query(
        &prom,
        &node,
        r#"machine_memory_bytes{job="kubelet", metrics_path="/metrics/cadvisor"}"#,
        |s| s.len() == 1 && s[0].value == memory,
    );
    wait_query(
        &prom,
        &node,
        r#"machine_cpu_cores{job="kubelet", metrics_path="/metrics/cadvisor"}"#,
        |s| s.len() == 1 && s[0].value >= 1.0,
    );
    eprintln!(
        "pod {POD}: cpu {:.3} cores by irate, {:.3} over its life, throttled in {:.0}% of periods",
        cpu[0].value,
        share[0].value,
        throttled[0].value * 100.0
    );
}
