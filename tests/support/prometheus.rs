//! A private Prometheus for tests: Debian's `prometheus` package, with its own config
//! file and data directory under a temp dir, listening on a free loopback port, and
//! scraping a node's API as kube-prometheus' kubelet `ServiceMonitor` has it scraped
//! (jobs for `/metrics` and `/metrics/cadvisor`: https, a service account's bearer
//! token, no certificate check, the same relabelings and metric drops). Queried
//! through its HTTP API; stopped (by its PID) on drop.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::control_plane::skip;
use super::free_port;
use super::wait_until;

pub struct Prometheus {
    dir: tempfile::TempDir,
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

/// One sample of an instant vector: its labels and value.
#[derive(Debug)]
pub struct Sample {
    pub labels: Value,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> &str {
        self.labels[name].as_str().unwrap_or("")
    }
}

/// kube-prometheus' kubelet `ServiceMonitor` (its `/metrics` and `/metrics/cadvisor`
/// endpoints) as the scrape jobs the operator renders from it, against `target`
/// (the node's API address), the node label kube-prometheus' relabeling adds, and
/// every 2 seconds instead of 30 so a test sees rates quickly.
pub fn kubelet_scrape_config(target: SocketAddr, node: &str, token_file: &str) -> String {
    let job = |n: u32, path: &str, honor_timestamps: bool, drops: &str| {
        format!(
            "- job_name: serviceMonitor/monitoring/kubelet/{n}
  honor_labels: true
  honor_timestamps: {honor_timestamps}
  metrics_path: {path}
  scheme: https
  authorization:
    credentials_file: {token_file}
  tls_config:
    insecure_skip_verify: true
  static_configs:
  - targets: ['{target}']
    labels:
      node: {node}
  relabel_configs:
  - target_label: job
    replacement: kubelet
  - target_label: endpoint
    replacement: https-metrics
  - source_labels: [__metrics_path__]
    target_label: metrics_path
  metric_relabel_configs:
{drops}"
        )
    };
    // The drops kube-prometheus configures for each endpoint.
    let metrics_drops = "  - source_labels: [__name__]
    regex: kubelet_(pod_worker_latency_microseconds|pod_start_latency_microseconds|cgroup_manager_latency_microseconds|pod_worker_start_latency_microseconds|pleg_relist_latency_microseconds|pleg_relist_interval_microseconds|runtime_operations|runtime_operations_latency_microseconds|runtime_operations_errors|eviction_stats_age_microseconds|device_plugin_registration_count|device_plugin_alloc_latency_microseconds|network_plugin_operations_latency_microseconds)
    action: drop
  - source_labels: [__name__, le]
    regex: (apiserver_request_duration_seconds_bucket|kubelet_runtime_operations_duration_seconds_bucket);(0.15|0.2|0.3|0.35|0.4|0.45|0.6|0.7|0.8|0.9|1.25|1.5|1.75|2|3|3.5|4|4.5|6|7|8|9|15|25|40|50)
    action: drop
";
    let cadvisor_drops = "  - source_labels: [__name__]
    regex: container_(network_tcp_usage_total|network_udp_usage_total|tasks_state|cpu_load_average_10s)
    action: drop
  - source_labels: [__name__, pod, namespace]
    regex: (container_spec_.*|container_file_descriptors|container_sockets|container_threads_max|container_threads|container_start_time_seconds|container_last_seen);;
    action: drop
  - source_labels: [__name__, container]
    regex: (container_blkio_device_usage_total);.+
    action: drop
";
    format!(
        "global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 2s
scrape_configs:
{}{}",
        job(0, "/metrics", true, metrics_drops),
        job(1, "/metrics/cadvisor", false, cadvisor_drops),
    )
}

impl Prometheus {
    /// Starts Debian's prometheus with `config` (skips loudly outside CI when it is
    /// not installed: `scripts/install-deps.sh` installs it).
    pub fn start(test: &str, config: &str) -> Option<Prometheus> {
        let binary = "prometheus";
        if Command::new(binary).arg("--version").output().is_err() {
            return skip(
                test,
                "prometheus is not installed (scripts/install-deps.sh)",
            );
        }
        let dir = tempfile::tempdir().expect("prometheus temp dir");
        let d = dir.path();
        std::fs::write(d.join("prometheus.yml"), config).expect("write prometheus.yml");
        let listen = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(d.join("prometheus.log")).expect("prometheus log");
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                d.join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
            .arg(format!("--web.listen-address={listen}"))
            .arg("--log.level=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            dir,
            child,
            url: format!("http://{listen}"),
        };
        let ready = wait_until(std::time::Duration::from_secs(60), || {
            ureq::get(format!("{}/-/ready", prometheus.url))
                .call()
                .is_ok()
        });
        assert!(ready, "prometheus not ready:\n{}", prometheus.log_tail());
        Some(prometheus)
    }

    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `/api/v1/query` with `promql` now: the instant vector's samples, or the
    /// error Prometheus answered.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let mut answer = ureq::get(format!("{}/api/v1/query", self.url))
            .query("query", promql)
            .call()
            .map_err(|e| format!("{promql}: {e}"))?;
        let body: Value = answer
            .body_mut()
            .read_json()
            .map_err(|e| format!("{promql}: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("{promql}: {body}"));
        }
        let result = body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(result
            .into_iter()
            .map(|s| Sample {
                value: s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
                labels: s["metric"].clone(),
            })
            .collect())
    }

    /// The scrape targets' health, as `/api/v1/targets` reports it: (scrape URL,
    /// health, last error).
    pub fn targets(&self) -> Vec<(String, String, String)> {
        let Ok(mut answer) = ureq::get(format!("{}/api/v1/targets", self.url)).call() else {
            return Vec::new();
        };
        let body: Value = answer.body_mut().read_json().unwrap_or_default();
        body["data"]["activeTargets"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        let s = |k: &str| t[k].as_str().unwrap_or("").to_owned();
                        (s("scrapeUrl"), s("health"), s("lastError"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
