//! The process-wide metrics registry: counters, gauges and fixed-bucket histograms
//! that any thread bumps with one call, and the Prometheus text rendering that the
//! node server's `/metrics` reads.
//!
//! No external crate: a metric family is a `static` holding a mutex over its label
//! sets (a `BTreeMap`, so the output order is stable). A bump takes that mutex for a
//! few nanoseconds and never blocks on I/O; callers are the CRI client (every call),
//! the PLEG thread (each relist), the sync loop (each iteration), pod workers (each
//! sync) and the status manager (pod start latency). Rendering copies nothing but the
//! numbers. Invariants: counters only grow; histogram bucket counts are cumulative
//! only in the rendering (stored per bucket); label values are escaped when rendered.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Latency buckets in seconds, as upstream's default histogram buckets plus longer ones.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Buckets for pod start latency, which includes image pulls.
pub const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0, 600.0,
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a family holds per label set.
enum Kind {
    Counter,
    Gauge,
    Histogram(&'static [f64]),
}

#[derive(Clone, Default)]
struct Series {
    /// Counter or gauge value; for histograms the sum of observations.
    value: f64,
    /// Histogram: observations per bucket (not cumulative), plus the overflow at the end.
    buckets: Vec<u64>,
    count: u64,
}

/// One metric name with its help text, label names and series.
pub struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    kind: Kind,
    series: Mutex<BTreeMap<Vec<String>, Series>>,
}

impl Family {
    pub const fn counter(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Family {
        Family::new(name, help, labels, Kind::Counter)
    }

    pub const fn gauge(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Family {
        Family::new(name, help, labels, Kind::Gauge)
    }

    pub const fn histogram(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        buckets: &'static [f64],
    ) -> Family {
        Family::new(name, help, labels, Kind::Histogram(buckets))
    }

    const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        kind: Kind,
    ) -> Family {
        Family {
            name,
            help,
            labels,
            kind,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    fn with(&self, values: &[&str], f: impl FnOnce(&mut Series)) {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let mut series = lock(&self.series);
        f(series.entry(key).or_default());
    }

    /// Adds `n` to a counter (or gauge).
    pub fn add(&self, values: &[&str], n: f64) {
        self.with(values, |s| s.value += n);
    }

    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1.0);
    }

    /// Sets a gauge.
    pub fn set(&self, values: &[&str], v: f64) {
        self.with(values, |s| s.value = v);
    }

    /// Records one observation (seconds) in a histogram.
    pub fn observe(&self, values: &[&str], v: f64) {
        let Kind::Histogram(bounds) = self.kind else {
            return self.set(values, v);
        };
        self.with(values, |s| {
            if s.buckets.len() != bounds.len() + 1 {
                s.buckets = vec![0; bounds.len() + 1];
            }
            let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
            s.buckets[i] += 1;
            s.count += 1;
            s.value += v;
        });
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, values: &[&str], d: Duration) {
        self.observe(values, d.as_secs_f64());
    }

    /// Drops every series whose label values match `gone` (series of deleted pods,
    /// so label sets do not pile up for the life of the process).
    pub fn forget(&self, gone: impl Fn(&[String]) -> bool) {
        lock(&self.series).retain(|values, _| !gone(values));
    }

    /// The value of a counter or gauge series (tests and the server's own checks).
    pub fn value(&self, values: &[&str]) -> f64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        lock(&self.series).get(&key).map(|s| s.value).unwrap_or(0.0)
    }

    /// The number of observations of a histogram series.
    pub fn count(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        lock(&self.series).get(&key).map(|s| s.count).unwrap_or(0)
    }

    /// Appends this family in the Prometheus text format (version 0.0.4).
    pub fn render(&self, out: &mut String) {
        let series = lock(&self.series).clone();
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
        for (values, s) in &series {
            let labels = label_pairs(self.labels, values);
            match self.kind {
                Kind::Counter | Kind::Gauge => {
                    let _ = writeln!(out, "{}{} {}", self.name, braces(&labels), fmt(s.value));
                }
                Kind::Histogram(bounds) => {
                    let mut cumulative = 0;
                    for (i, bound) in bounds.iter().chain([&f64::INFINITY]).enumerate() {
                        cumulative += s.buckets.get(i).copied().unwrap_or(0);
                        let le = if bound.is_infinite() {
                            "+Inf".to_owned()
                        } else {
                            fmt(*bound)
                        };
                        let mut with_le = labels.clone();
                        with_le.push(format!("le=\"{le}\""));
                        let _ =
                            writeln!(out, "{}_bucket{} {cumulative}", self.name, braces(&with_le));
                    }
                    let _ = writeln!(out, "{}_sum{} {}", self.name, braces(&labels), fmt(s.value));
                    let _ = writeln!(out, "{}_count{} {}", self.name, braces(&labels), s.count);
                }
            }
        }
    }
}

fn label_pairs(names: &[&str], values: &[String]) -> Vec<String> {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect()
}

fn braces(pairs: &[String]) -> String {
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A number as Prometheus prints it (integers without a fraction).
pub fn fmt(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

// ---- the families litelet exports (upstream names where the meaning matches) ----

pub static SYNC_LOOP_DURATION: Family = Family::histogram(
    "litelet_sync_loop_iteration_duration_seconds",
    "Time the sync loop spent handling one event.",
    &["event"],
    LATENCY_BUCKETS,
);
pub static POD_WORKER_DURATION: Family = Family::histogram(
    "kubelet_pod_worker_duration_seconds",
    "Duration in seconds to sync a single pod, by the kind of work.",
    &["operation_type"],
    LATENCY_BUCKETS,
);
pub static PLEG_RELIST_DURATION: Family = Family::histogram(
    "kubelet_pleg_relist_duration_seconds",
    "Duration in seconds for relisting pods in PLEG.",
    &[],
    LATENCY_BUCKETS,
);
pub static POD_START_DURATION: Family = Family::histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from litelet seeing a pod for the first time to the pod running.",
    &[],
    POD_START_BUCKETS,
);
pub static RUNNING_PODS: Family = Family::gauge(
    "kubelet_running_pods",
    "Number of pods that have a running pod sandbox.",
    &[],
);
pub static RUNNING_CONTAINERS: Family = Family::gauge(
    "kubelet_running_containers",
    "Number of containers currently known, by state.",
    &["container_state"],
);
pub static CRI_OPERATIONS: Family = Family::counter(
    "kubelet_runtime_operations_total",
    "Cumulative number of runtime operations by operation type.",
    &["operation_type"],
);
pub static CRI_ERRORS: Family = Family::counter(
    "kubelet_runtime_operations_errors_total",
    "Cumulative number of runtime operation errors by operation type.",
    &["operation_type"],
);
pub static CRI_DURATION: Family = Family::histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations, by operation type.",
    &["operation_type"],
    LATENCY_BUCKETS,
);
pub static POD_RESIZES: Family = Family::counter(
    "litelet_pod_resizes_total",
    "In-place pod resizes by outcome (accepted, deferred, infeasible, completed, failed).",
    &["outcome"],
);
pub static HTTP_REQUESTS: Family = Family::counter(
    "litelet_http_requests_total",
    "Requests served by the node server, by path kind and status code.",
    &["path", "code"],
);
pub static HTTP_REJECTED_CONNECTIONS: Family = Family::counter(
    "litelet_http_rejected_connections_total",
    "Connections closed at once because the server was at its connection limit.",
    &["server"],
);
pub static STATS_ROUND_DURATION: Family = Family::histogram(
    "litelet_stats_sampling_duration_seconds",
    "Time one round of usage sampling took (the stats thread), by result and by what it read (node, or node and pods).",
    &["result", "read"],
    LATENCY_BUCKETS,
);
pub static STATS_SAMPLE_BYTES: Family = Family::gauge(
    "litelet_stats_sample_bytes",
    "Estimated heap bytes of the usage samples the stats thread keeps (latest and previous).",
    &[],
);
pub static EVICTIONS: Family = Family::counter(
    "kubelet_evictions",
    "Cumulative number of pod evictions by eviction signal.",
    &["eviction_signal"],
);
pub static PLEG_RELIST_INTERVAL: Family = Family::histogram(
    "kubelet_pleg_relist_interval_seconds",
    "Interval in seconds between relisting in PLEG.",
    &[],
    LATENCY_BUCKETS,
);
pub static EVENTED_PLEG_CONNECTIONS: Family = Family::counter(
    "kubelet_evented_pleg_connection_success_count",
    "The number of times a container event stream from the runtime was established (evented PLEG).",
    &[],
);
pub static EVENTED_PLEG_CONNECTION_ERRORS: Family = Family::counter(
    "kubelet_evented_pleg_connection_error_count",
    "The number of times the container event stream from the runtime failed or was refused (evented PLEG).",
    &[],
);
pub static EVENTED_PLEG_LATENCY: Family = Family::histogram(
    "kubelet_evented_pleg_connection_latency_seconds",
    "Seconds from a container event in the runtime to the PLEG receiving it (evented PLEG).",
    &[],
    LATENCY_BUCKETS,
);
pub static NODE_NAME: Family = Family::gauge(
    "kubelet_node_name",
    "The node's name. The count is always 1.",
    &["node"],
);
pub static NODE_CONFIG_ERROR: Family = Family::gauge(
    "kubelet_node_config_error",
    "This metric is true (1) if the node is experiencing a configuration-related error, false (0) otherwise.",
    &[],
);
pub static REST_CLIENT_REQUESTS: Family = Family::counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    &["code", "host", "method"],
);
pub static REST_CLIENT_DURATION: Family = Family::histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    &["host", "verb"],
    LATENCY_BUCKETS,
);
pub static HEALTHCHECKS: Family = Family::counter(
    "kubernetes_healthchecks_total",
    "This metric records the results of all healthcheck.",
    &["name", "status", "type"],
);

pub static LOG_ROTATIONS: Family = Family::counter(
    "litelet_container_log_rotations_total",
    "Container log files rotated by the log manager.",
    &[],
);

pub static CLIENT_CERT_TTL: Family = Family::gauge(
    "kubelet_certificate_manager_client_ttl_seconds",
    "Seconds until the client certificate expires (negative once it has), as last loaded.",
    &[],
);

pub static CLIENT_CERT_RENEW_ERRORS: Family = Family::counter(
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "Failed attempts to renew the client certificate.",
    &[],
);

pub static SERVER_CERT_TTL: Family = Family::gauge(
    "kubelet_certificate_manager_server_ttl_seconds",
    "Seconds until the rotated serving certificate expires (negative once it has).",
    &[],
);

pub static SERVER_CERT_RENEW_ERRORS: Family = Family::counter(
    "kubelet_server_expiration_renew_errors",
    "Counter of certificate renewal errors.",
    &[],
);
pub static CGROUP_MANAGER_DURATION: Family = Family::histogram(
    "kubelet_cgroup_manager_duration_seconds",
    "Duration in seconds for cgroup manager operations. Broken down by method.",
    &["operation_type"],
    LATENCY_BUCKETS,
);
pub static VOLUMES_TOTAL: Family = Family::gauge(
    "volume_manager_total_volumes",
    "Number of volumes in Volume Manager",
    &["plugin_name", "state"],
);
pub static STORAGE_OPERATION_DURATION: Family = Family::histogram(
    "storage_operation_duration_seconds",
    "Storage operation duration",
    &["migrated", "operation_name", "status", "volume_plugin"],
    LATENCY_BUCKETS,
);

/// Every family of `/metrics`, in rendering order (`HEALTHCHECKS` is `/metrics/slis`').
pub fn families() -> [&'static Family; 31] {
    [
        &SYNC_LOOP_DURATION,
        &POD_WORKER_DURATION,
        &PLEG_RELIST_DURATION,
        &POD_START_DURATION,
        &RUNNING_PODS,
        &RUNNING_CONTAINERS,
        &CRI_OPERATIONS,
        &CRI_ERRORS,
        &CRI_DURATION,
        &POD_RESIZES,
        &HTTP_REQUESTS,
        &HTTP_REJECTED_CONNECTIONS,
        &STATS_ROUND_DURATION,
        &STATS_SAMPLE_BYTES,
        &EVICTIONS,
        &LOG_ROTATIONS,
        &CLIENT_CERT_TTL,
        &CLIENT_CERT_RENEW_ERRORS,
        &SERVER_CERT_TTL,
        &PLEG_RELIST_INTERVAL,
        &EVENTED_PLEG_CONNECTIONS,
        &EVENTED_PLEG_CONNECTION_ERRORS,
        &EVENTED_PLEG_LATENCY,
        &NODE_NAME,
        &NODE_CONFIG_ERROR,
        &REST_CLIENT_REQUESTS,
        &REST_CLIENT_DURATION,
        &SERVER_CERT_RENEW_ERRORS,
        &CGROUP_MANAGER_DURATION,
        &VOLUMES_TOTAL,
        &STORAGE_OPERATION_DURATION,
    ]
}

/// Renders every registered family.
pub fn render() -> String {
    let mut out = String::new();
    for family in families() {
        family.render(&mut out);
    }
    out
}

// ---- one-line hooks for the instrumented places ----

/// One CRI call (the CRI client's `call`).
pub fn cri_call(op: &str, took: Duration, ok: bool) {
    CRI_OPERATIONS.inc(&[op]);
    CRI_DURATION.observe_duration(&[op], took);
    if !ok {
        CRI_ERRORS.inc(&[op]);
    }
}

/// One round of the `stats` thread; `clean` when nothing in it failed.
pub fn stats_round(took: Duration, clean: bool, read_pods: bool) {
    let result = if clean { "ok" } else { "partial" };
    let read = if read_pods { "pods" } else { "node" };
    STATS_ROUND_DURATION.observe_duration(&[result, read], took);
}

/// The heap the `stats` thread's retained samples hold.
pub fn stats_retained(bytes: usize) {
    STATS_SAMPLE_BYTES.set(&[], bytes as f64);
}

/// One pod evicted for `signal` (the `eviction` thread).
pub fn evicted(signal: &str) {
    EVICTIONS.inc(&[signal]);
}

/// One container log rotated (`logs::manager`).
pub fn log_rotated() {
    LOG_ROTATIONS.inc(&[]);
}

/// One finished request to the API server (the API clients' attempt observer,
/// installed by the agent): client-go's `rest_client_*` series.
pub fn rest_attempt(attempt: &crate::api::stats::Attempt<'_>) {
    let code = attempt
        .code
        .map_or_else(|| "<error>".to_owned(), |c| c.to_string());
    REST_CLIENT_REQUESTS.inc(&[&code, attempt.host, attempt.method]);
    REST_CLIENT_DURATION.observe_duration(&[attempt.host, attempt.method], attempt.took);
}

/// One cgroup manager operation (the cgroups' operation observer, installed by the
/// agent).
/// `operation` is `create`, `update` or `destroy`.
pub fn cgroup_operation(operation: &str, took: Duration) {
    CGROUP_MANAGER_DURATION.observe_duration(&[operation], took);
}

/// One volume mount or unmount by the volume manager, for `volume_plugin` (e.g.
/// `kubernetes.io/configmap`).
pub fn storage_operation(operation: &str, plugin: &str, ok: bool, took: Duration) {
    let status = if ok { "success" } else { "fail-unknown" };
    STORAGE_OPERATION_DURATION.observe_duration(&["false", operation, status, plugin], took);
}

/// When the PLEG last relisted, for the interval histogram.
static LAST_RELIST: Mutex<Option<Instant>> = Mutex::new(None);

/// What one PLEG relist saw: pods with a running sandbox, and containers by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelistCounts {
    pub running_pods: u32,
    pub running: u32,
    pub exited: u32,
    pub created: u32,
    pub unknown: u32,
}

/// One PLEG relist: its duration and the running pods and containers it saw (counted
/// by the PLEG, so this module, below the runtime, needs none of its types).
pub fn relisted(took: Duration, counts: RelistCounts) {
    PLEG_RELIST_DURATION.observe_duration(&[], took);
    let now = Instant::now();
    if let Some(last) = lock(&LAST_RELIST).replace(now) {
        PLEG_RELIST_INTERVAL.observe_duration(&[], now.saturating_duration_since(last));
    }
    RUNNING_PODS.set(&[], f64::from(counts.running_pods));
    let states = [
        ("running", counts.running),
        ("exited", counts.exited),
        ("created", counts.created),
        ("unknown", counts.unknown),
    ];
    for (state, n) in states {
        RUNNING_CONTAINERS.set(&[state], f64::from(n));
    }
}

/// The PLEG's container event stream counts as established (it stayed open for its
/// probation and a relist followed).
pub fn evented_pleg_connected() {
    EVENTED_PLEG_CONNECTIONS.inc(&[]);
}

/// The PLEG's container event stream ended or was refused.
pub fn evented_pleg_connection_failed() {
    EVENTED_PLEG_CONNECTION_ERRORS.inc(&[]);
}

/// One container event reached the PLEG `took` after the runtime stamped it.
pub fn evented_pleg_event(took: Duration) {
    EVENTED_PLEG_LATENCY.observe_duration(&[], took);
}

/// Pods seen but not yet running, for the start latency (bounded so a flood of
/// pods that never start cannot grow it without end).
static FIRST_SEEN: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
const FIRST_SEEN_LIMIT: usize = 10_000;

/// The sync loop saw a pod for the first time.
pub fn pod_seen(uid: &str, at: Instant) {
    let mut seen = lock(&FIRST_SEEN);
    let map = seen.get_or_insert_with(HashMap::new);
    if map.len() < FIRST_SEEN_LIMIT {
        map.entry(uid.to_owned()).or_insert(at);
    }
}

/// The pod's status turned Running: observes the start latency once per pod.
pub fn pod_running(uid: &str, at: Instant) {
    let first = lock(&FIRST_SEEN).as_mut().and_then(|m| m.remove(uid));
    if let Some(first) = first {
        POD_START_DURATION.observe_duration(&[], at.saturating_duration_since(first));
    }
}

/// A pod is gone: forget it if it never ran.
pub fn pod_forgotten(uid: &str) {
    if let Some(map) = lock(&FIRST_SEEN).as_mut() {
        map.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        static H: Family = Family::histogram("t_seconds", "help", &["op"], &[0.1, 1.0]);
        H.observe(&["a"], 0.05);
        H.observe(&["a"], 0.5);
        H.observe(&["a"], 5.0);
        let mut out = String::new();
        H.render(&mut out);
        assert!(out.contains("# TYPE t_seconds histogram"), "{out}");
        assert!(
            out.contains("t_seconds_bucket{op=\"a\",le=\"0.1\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"a\",le=\"1\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"a\",le=\"+Inf\"} 3"),
            "{out}"
        );
        assert!(out.contains("t_seconds_count{op=\"a\"} 3"), "{out}");
        assert!(out.contains("t_seconds_sum{op=\"a\"} 5.55"), "{out}");
    }

    #[test]
    fn counters_and_escaping() {
        static C: Family = Family::counter("t_total", "help", &["path"]);
        C.inc(&["a\"b\\c\nd"]);
        C.add(&["a\"b\\c\nd"], 2.0);
        let mut out = String::new();
        C.render(&mut out);
        assert!(out.contains("t_total{path=\"a\\\"b\\\\c\\nd\"} 3"), "{out}");
        assert_eq!(C.value(&["a\"b\\c\nd"]), 3.0);
    }

    #[test]
    fn start_latency_is_observed_once() {
        let t0 = Instant::now();
        let before = POD_START_DURATION.count(&[]);
        pod_seen("uid-start-test", t0);
        pod_running("uid-start-test", t0 + Duration::from_secs(2));
        pod_running("uid-start-test", t0 + Duration::from_secs(3));
        assert_eq!(POD_START_DURATION.count(&[]), before + 1);
    }
}
