//! Real-cluster scenarios: a kubelet as a node of a real etcd + kube-apiserver
//! (`KUBEBUILDER_ASSETS`, `tests/support/control_plane.rs`) on a private real
//! containerd (`tests/support/real_node.rs`), the setting the fakes hide.
//! [`measure`] runs one sequence on one node: start → Node Ready; idle at 0 pods; one
//! pod alone create → Running and ready; container exit → terminated in the status;
//! resize (the `resize` subresource) → the status shows the new resources; 30 pods at
//! once → Running and ready; idle at 30; 70 more at once; idle at 100; pod cgroups
//! left once every pod is deleted. `real` reports it for litelet; `side_by_side.rs`
//! runs it for litelet and the upstream kubelet and compares. Pods use the host
//! network (no CNI work in the measurement). Latencies are read by polling the
//! apiserver every 5 ms, so they are upper bounds by that much.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::process::{cpu_percent, sample, Sample};
use crate::report::{latency_rows, Row};
use crate::support::containerd::BUSYBOX;
use crate::support::real_node::{condition, container_status, RealNode};
use crate::support::tcp_proxy::{TcpProxy, TrafficSample};
use crate::Settings;

const SCENARIO: &str = "real cluster";
const NS: &str = "bench";
const POLL: Duration = Duration::from_millis(5);
const WAIT: Duration = Duration::from_secs(300);

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}

/// A host-network busybox pod bound to `node` running `script`.
fn pod(name: &str, node: &str, script: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "command": ["sh", "-c", format!("trap 'exit 0' TERM; {script}")],
            }]
        }
    })
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(&p["status"], "Ready") == Some("True")
}

/// Polls `check` every 5 ms; the instant it first held.
fn poll_until(what: &str, mut check: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + WAIT;
    loop {
        if check() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "real cluster: timed out on {what}"
        );
        std::thread::sleep(POLL);
    }
}

fn get_pod(node: &RealNode, name: &str) -> Option<Value> {
    node.cp.get(&format!("{}/{name}", pods_path()))
}

/// When each pod in `names` first satisfied `check`, polling the pod list.
fn wait_all(
    node: &RealNode,
    names: &[String],
    check: impl Fn(&Value) -> bool,
) -> HashMap<String, Instant> {
    let mut seen: HashMap<String, Instant> = HashMap::new();
    poll_until("every pod", || {
        let list = node.cp.get(&pods_path()).unwrap_or(Value::Null);
        let now = Instant::now();
        for p in list["items"].as_array().into_iter().flatten() {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_owned();
            if names.contains(&name) && check(p) {
                seen.entry(name).or_insert(now);
            }
        }
        seen.len() == names.len()
    });
    seen
}

fn delete_and_wait(node: &RealNode, names: &[String]) {
    for name in names {
        node.cp.delete(&format!("{}/{name}", pods_path()));
    }
    poll_until("pods deleted", || {
        names.iter().all(|n| get_pod(node, n).is_none())
    });
}

/// What crossed the node's uplink in a window: bytes each way through the counting
/// proxy, and the node's requests by verb and resource from the audit log.
#[derive(Clone, Debug, Default)]
pub struct Traffic {
    pub bytes: TrafficSample,
    pub requests: BTreeMap<String, u64>,
}

/// The node's uplink as the benchmark watches it: the proxy its kubeconfig points
/// at, and the apiserver's audit log (`LITELET_CP_AUDIT=1`).
pub struct Uplink {
    pub proxy: TcpProxy,
    pub audit_log: PathBuf,
    /// The node's user in the audit log (`system:node:<name>`).
    pub user: String,
}

/// Where a traffic window began.
struct Mark {
    bytes: TrafficSample,
    audit_offset: u64,
}

impl Uplink {
    fn mark(&self) -> Mark {
        Mark {
            bytes: self.proxy.traffic(),
            audit_offset: std::fs::metadata(&self.audit_log).map_or(0, |m| m.len()),
        }
    }

    fn since(&self, mark: &Mark) -> Traffic {
        Traffic {
            bytes: self.proxy.traffic().since(&mark.bytes),
            requests: audit_requests(&self.audit_log, mark.audit_offset, &self.user),
        }
    }
}

/// The user's requests in the audit log after byte `offset`, keyed "verb resource"
/// (with the subresource): a watch counts when it starts, any other request when it
/// completes.
fn audit_requests(path: &Path, offset: u64, user: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read(path).unwrap_or_default();
    let start = (offset as usize).min(text.len());
    let mut counts = BTreeMap::new();
    for line in String::from_utf8_lossy(&text[start..]).lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let counted = match event["stage"].as_str() {
            Some("ResponseStarted") => verb == "watch",
            Some("ResponseComplete") => verb != "watch",
            _ => false,
        };
        if !counted {
            continue;
        }
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("-").to_owned();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts.entry(format!("{verb} {resource}")).or_insert(0) += 1;
    }
    counts
}

/// One idle window with `pods` running.
#[derive(Clone, Debug, Default)]
pub struct Idle {
    pub pods: usize,
    pub first: Sample,
    pub last: Sample,
    pub peak_kib: u64,
    pub window: Duration,
    pub traffic: Option<Traffic>,
}

impl Idle {
    pub fn cpu_ms_per_min(&self) -> f64 {
        (self.last.cpu_seconds - self.first.cpu_seconds) * 1000.0 * 60.0 / self.window.as_secs_f64()
    }

    /// `count` over the window, scaled to an hour.
    pub fn per_hour(&self, count: u64) -> f64 {
        count as f64 * 3600.0 / self.window.as_secs_f64()
    }
}

/// Everything one sequence measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub ready: Duration,
    pub idle: Vec<Idle>,
    pub alone: Vec<Duration>,
    pub exits: Vec<Duration>,
    pub resizes: Vec<Duration>,
    /// The first batch created at once (30), then the rest (70 more).
    pub batches: Vec<(usize, Vec<Duration>)>,
    pub cgroups_left: usize,
    /// The kubelet's peak RSS (VmHWM) and CPU seconds at the end of the sequence.
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
}

/// Idle footprint (and traffic, with an uplink) with `n` pods running.
fn idle(
    node: &RealNode,
    n: usize,
    settle: Duration,
    window: Duration,
    uplink: Option<&Uplink>,
) -> Option<Idle> {
    let pid = node.pid()?;
    std::thread::sleep(settle);
    // Said so that a profiler can be attached to the node for exactly this window.
    eprintln!(
        "bench: idle at {n} pods for {} s (node pid {pid})",
        window.as_secs()
    );
    let first: Sample = sample(pid);
    let mark = uplink.map(Uplink::mark);
    let mut peak = first.rss_kib;
    let end = Instant::now() + window;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1).min(end - Instant::now()));
        peak = peak.max(sample(pid).rss_kib);
    }
    let last = sample(pid);
    let traffic = uplink.zip(mark.as_ref()).map(|(u, m)| u.since(m));
    Some(Idle {
        pods: n,
        first,
        last,
        peak_kib: peak,
        window,
        traffic,
    })
}

/// The process's peak RSS (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Every `pod*` directory under the node's cgroup root, in any hierarchy.
fn pod_cgroups(root: &str) -> usize {
    fn walk(dir: &Path, depth: usize) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                if e.file_name().to_string_lossy().starts_with("pod") {
                    1
                } else if depth > 0 {
                    walk(&e.path(), depth - 1)
                } else {
                    0
                }
            })
            .sum()
    }
    std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|h| walk(&h.path().join(root.trim_start_matches('/')), 3))
        .sum()
}

/// One pod alone, `runs` times: create → Running and ready.
fn one_pod_alone(node: &RealNode, runs: usize) -> Vec<Duration> {
    let mut alone = Vec::new();
    for i in 0..runs {
        let name = format!("alone-{i}");
        let t0 = Instant::now();
        node.cp
            .create(&pods_path(), &pod(&name, &node.name, "sleep 3600"));
        let t = poll_until("one pod ready", || {
            get_pod(node, &name).is_some_and(|p| running_and_ready(&p))
        });
        alone.push(t - t0);
        delete_and_wait(node, &[name]);
    }
    alone
}

/// Container exit → terminated in the status, `runs` times: the container exits as
/// soon as a file shows up in a hostPath directory the harness writes. The file is
/// written at a different delay after the pod is ready each time, spread evenly over
/// a second: a kubelet that relists every second reported the pod ready at some
/// point of its relist period, so exits at one fixed delay after that would all land
/// at the same point of the next period and measure that point, not the average.
fn container_exits(node: &RealNode, runs: usize) -> Vec<Duration> {
    let signal_dir = node.dir().join("exit-signal");
    let _ = std::fs::create_dir_all(&signal_dir);
    let mut exits = Vec::new();
    for i in 0..runs {
        let name = format!("exit-{i}");
        let flag = format!("go-{i}");
        let mut p = pod(
            &name,
            &node.name,
            &format!("while [ ! -e /signal/{flag} ]; do sleep 0.01; done; exit 0"),
        );
        p["spec"]["restartPolicy"] = json!("Never");
        p["spec"]["volumes"] = json!([{"name": "signal", "hostPath": {"path": signal_dir}}]);
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "signal", "mountPath": "/signal"}]);
        node.cp.create(&pods_path(), &p);
        poll_until("exit pod running", || {
            get_pod(node, &name).is_some_and(|p| running_and_ready(&p))
        });
        let phase = Duration::from_secs(1) * (2 * i as u32 + 1) / (2 * runs as u32);
        std::thread::sleep(phase);
        let t0 = Instant::now();
        let _ = std::fs::write(signal_dir.join(&flag), b"");
        let t = poll_until("container terminated in status", || {
            get_pod(node, &name)
                .as_ref()
                .and_then(|p| container_status(p, "main").cloned())
                .is_some_and(|c| c["state"]["terminated"].is_object())
        });
        exits.push(t - t0);
        delete_and_wait(node, &[name]);
    }
    exits
}

/// Resize → status: the cpu limit of one pod, up and down, 500 ms apart.
fn resizes(node: &RealNode, count: usize) -> Vec<Duration> {
    let mut elastic = pod("elastic", &node.name, "sleep 3600");
    elastic["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"}
    });
    node.cp.create(&pods_path(), &elastic);
    poll_until("resize pod ready", || {
        get_pod(node, "elastic").is_some_and(|p| running_and_ready(&p))
    });
    std::thread::sleep(Duration::from_secs(2));
    let admin = node.cp.admin();
    let mut times = Vec::new();
    for i in 0..count {
        let cpu = if i % 2 == 0 { "300m" } else { "200m" };
        let patch = json!({"spec": {"containers": [
            {"name": "main", "resources": {"limits": {"cpu": cpu}}}
        ]}});
        let t0 = Instant::now();
        let sent = admin.patch::<Value>(
            &format!("{}/elastic/resize", pods_path()),
            litelet::api::client::PatchType::StrategicMerge,
            &patch,
        );
        if let Err(e) = sent {
            panic!("real cluster: resize {i}: {e}");
        }
        let t = poll_until("resize in status", || {
            get_pod(node, "elastic").is_some_and(|p| {
                container_status(&p, "main").is_some_and(|c| c["resources"]["limits"]["cpu"] == cpu)
                    && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                    && condition(&p["status"], "PodResizeInProgress").is_none()
            })
        });
        times.push(t - t0);
        std::thread::sleep(Duration::from_millis(500));
    }
    delete_and_wait(node, &["elastic".to_owned()]);
    times
}

/// Creates `names` at once; each one's create → Running and ready.
fn batch(node: &RealNode, names: &[String]) -> Vec<Duration> {
    let t0 = Instant::now();
    for name in names {
        node.cp
            .create(&pods_path(), &pod(name, &node.name, "sleep 3600"));
    }
    let seen = wait_all(node, names, running_and_ready);
    seen.values().map(|t| *t - t0).collect()
}

/// The whole sequence on `node`, started (not yet Ready) at `spawned`. Idle windows
/// last `window`; with an `uplink` they also count its traffic.
pub fn measure(
    settings: &Settings,
    node: &RealNode,
    spawned: Instant,
    window: Duration,
    uplink: Option<&Uplink>,
) -> Measured {
    let mut m = Measured::default();
    let ready = poll_until("node Ready", || {
        node.node_object()
            .is_some_and(|n| condition(&n["status"], "Ready") == Some("True"))
    });
    m.ready = ready - spawned;
    node.cp.namespace(NS);
    m.idle
        .extend(idle(node, 0, settings.settle, window, uplink));
    m.alone = one_pod_alone(node, settings.real_runs);
    m.exits = container_exits(node, settings.real_runs);
    m.resizes = resizes(node, settings.resizes);

    let (some, many) = settings.real_pods;
    let first: Vec<String> = (0..some).map(|i| format!("many-{i}")).collect();
    m.batches.push((some, batch(node, &first)));
    m.idle
        .extend(idle(node, some, settings.settle, window, uplink));
    let rest: Vec<String> = (some..many).map(|i| format!("many-{i}")).collect();
    m.batches.push((rest.len(), batch(node, &rest)));
    m.idle
        .extend(idle(node, many, settings.settle, window, uplink));
    if let Some(pid) = node.pid() {
        m.peak_rss_mib = peak_rss_mib(pid);
        m.cpu_seconds = sample(pid).cpu_seconds;
    }

    // Everything deleted: pod cgroups left behind (runc makes them in every
    // hierarchy; the kubelet must remove them all).
    let all: Vec<String> = first.into_iter().chain(rest).collect();
    delete_and_wait(node, &all);
    let mut left = pod_cgroups(node.cgroup_root());
    let deadline = Instant::now() + Duration::from_secs(30);
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        left = pod_cgroups(node.cgroup_root());
    }
    m.cgroups_left = left;
    m
}

/// The rows of one idle window.
fn idle_rows(scenario: &str, w: &Idle, rows: &mut Vec<Row>) {
    let scenario = format!("{scenario}, idle {} pods", w.pods);
    rows.push(Row::new(&scenario, "RSS", w.last.rss_mib(), "MiB"));
    rows.push(Row::new(
        &scenario,
        "RSS anonymous",
        w.last.anon_mib(),
        "MiB",
    ));
    rows.push(Row::new(
        &scenario,
        "RSS peak",
        w.peak_kib as f64 / 1024.0,
        "MiB",
    ));
    rows.push(Row::new(&scenario, "threads", w.last.threads as f64, ""));
    rows.push(Row::new(
        &scenario,
        "CPU",
        cpu_percent(&w.first, &w.last),
        "%core",
    ));
    rows.push(Row::new(
        &scenario,
        "CPU per 60 s",
        w.cpu_ms_per_min(),
        "ms",
    ));
}

pub fn real_cluster(settings: &Settings, rows: &mut Vec<Row>) {
    let started = Instant::now();
    let Some(node) = RealNode::start("bench real cluster", "bench-real", &["--max-pods", "110"])
    else {
        rows.push(Row::new(SCENARIO, "skipped (no control plane)", 0.0, ""));
        return;
    };
    let spawned = Instant::now();
    eprintln!(
        "bench: real cluster: containerd + litelet up in {:.1} s",
        (spawned - started).as_secs_f64()
    );
    let m = measure(settings, &node, spawned, settings.idle_window, None);
    rows.push(Row::ms(SCENARIO, "start → Node Ready", m.ready));
    let runs: [(&str, &[Duration], Option<f64>); 3] = [
        ("1 pod alone: create → Running and ready", &m.alone, None),
        ("container exit → status terminated", &m.exits, None),
        (
            "resize: patch → status shows new resources",
            &m.resizes,
            Some(50.0),
        ),
    ];
    for (what, values, target) in runs {
        rows.extend(latency_rows(SCENARIO, what, values, target));
    }
    for (n, times) in &m.batches {
        rows.extend(latency_rows(
            SCENARIO,
            &format!("{n} at once: create → Running and ready"),
            times,
            None,
        ));
    }
    for w in &m.idle {
        idle_rows(SCENARIO, w, rows);
    }
    rows.push(
        Row::new(
            SCENARIO,
            "pod cgroups left 30 s after all pods were deleted",
            m.cgroups_left as f64,
            "",
        )
        .under(1.0),
    );
}
