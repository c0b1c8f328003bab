//! Real-cluster scenarios (issue 18 item 6): litelet as a node of a real etcd +
//! kube-apiserver (`KUBEBUILDER_ASSETS`, `tests/support/control_plane.rs`) on a
//! private real containerd (`tests/support/real_node.rs`), the setting the fakes hide.
//! One node serves every measurement, in this order: start → Node Ready; idle at 0
//! pods; one pod alone create → Running and ready; container exit → terminated in
//! the status; resize (the `resize` subresource) → the status shows the new
//! resources; 30 pods at once → Running and ready; idle at 30 and 100 pods; pod
//! cgroups left once every pod is deleted. Pods use the host network (no CNI work in
//! the measurement). Latencies are read by polling the apiserver every 5 ms, so they
//! are upper bounds by that much. Skipped (one row says so) where no control plane
//! or containerd can run.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::process::{cpu_percent, sample, Sample};
use crate::report::{latency_rows, Row};
use crate::support::containerd::BUSYBOX;
use crate::support::real_node::{condition, container_status, RealNode};
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

/// Idle footprint with `n` pods running: RSS, threads, CPU over the idle window.
fn idle(settings: &Settings, node: &RealNode, n: usize, rows: &mut Vec<Row>) {
    let Some(pid) = node.pid() else {
        return;
    };
    std::thread::sleep(settings.settle);
    let first: Sample = sample(pid);
    let mut peak = first.rss_kib;
    let end = Instant::now() + settings.idle_window;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1).min(end - Instant::now()));
        peak = peak.max(sample(pid).rss_kib);
    }
    let last = sample(pid);
    let scenario = format!("{SCENARIO}, idle {n} pods");
    let window = settings.idle_window.as_secs_f64();
    let cpu_ms_per_min = (last.cpu_seconds - first.cpu_seconds) * 1000.0 * 60.0 / window;
    rows.push(Row::new(&scenario, "RSS", last.rss_mib(), "MiB"));
    rows.push(Row::new(&scenario, "RSS anonymous", last.anon_mib(), "MiB"));
    rows.push(Row::new(&scenario, "RSS peak", peak as f64 / 1024.0, "MiB"));
    rows.push(Row::new(&scenario, "threads", last.threads as f64, ""));
    rows.push(Row::new(
        &scenario,
        "CPU",
        cpu_percent(&first, &last),
        "%core",
    ));
    rows.push(Row::new(&scenario, "CPU per 60 s", cpu_ms_per_min, "ms"));
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

pub fn real_cluster(settings: &Settings, rows: &mut Vec<Row>) {
    let started = Instant::now();
    let Some(node) = RealNode::start("bench real cluster", "bench-real", &["--max-pods", "110"])
    else {
        rows.push(Row::new(SCENARIO, "skipped (no control plane)", 0.0, ""));
        return;
    };
    let spawned = Instant::now();
    let ready = poll_until("node Ready", || {
        node.node_object()
            .is_some_and(|n| condition(&n["status"], "Ready") == Some("True"))
    });
    rows.push(Row::ms(SCENARIO, "start → Node Ready", ready - spawned));
    eprintln!(
        "bench: real cluster: containerd + litelet up in {:.1} s",
        (spawned - started).as_secs_f64()
    );
    node.cp.namespace(NS);
    idle(settings, &node, 0, rows);

    // One pod alone, several times.
    let mut alone = Vec::new();
    for i in 0..settings.real_runs {
        let name = format!("alone-{i}");
        let t0 = Instant::now();
        node.cp
            .create(&pods_path(), &pod(&name, &node.name, "sleep 3600"));
        let t = poll_until("one pod ready", || {
            get_pod(&node, &name).is_some_and(|p| running_and_ready(&p))
        });
        alone.push(t - t0);
        delete_and_wait(&node, &[name]);
    }
    rows.extend(latency_rows(
        SCENARIO,
        "1 pod alone: create → Running and ready",
        &alone,
        None,
    ));

    // Container exit → terminated: the container exits as soon as a file shows up
    // in a hostPath directory the harness writes.
    let signal_dir = node.dir().join("exit-signal");
    let _ = std::fs::create_dir_all(&signal_dir);
    let mut exits = Vec::new();
    for i in 0..settings.real_runs {
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
            get_pod(&node, &name).is_some_and(|p| running_and_ready(&p))
        });
        let t0 = Instant::now();
        let _ = std::fs::write(signal_dir.join(&flag), b"");
        let t = poll_until("container terminated in status", || {
            get_pod(&node, &name)
                .as_ref()
                .and_then(|p| container_status(p, "main").cloned())
                .is_some_and(|c| c["state"]["terminated"].is_object())
        });
        exits.push(t - t0);
        delete_and_wait(&node, &[name]);
    }
    rows.extend(latency_rows(
        SCENARIO,
        "container exit → status terminated",
        &exits,
        None,
    ));

    // Resize → status: the cpu limit of one pod, up and down, 500 ms apart.
    let mut elastic = pod("elastic", &node.name, "sleep 3600");
    elastic["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"}
    });
    node.cp.create(&pods_path(), &elastic);
    poll_until("resize pod ready", || {
        get_pod(&node, "elastic").is_some_and(|p| running_and_ready(&p))
    });
    std::thread::sleep(Duration::from_secs(2));
    let admin = node.cp.admin();
    let mut resizes = Vec::new();
    for i in 0..settings.resizes {
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
            get_pod(&node, "elastic").is_some_and(|p| {
                container_status(&p, "main").is_some_and(|c| c["resources"]["limits"]["cpu"] == cpu)
                    && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                    && condition(&p["status"], "PodResizeInProgress").is_none()
            })
        });
        resizes.push(t - t0);
        std::thread::sleep(Duration::from_millis(500));
    }
    rows.extend(latency_rows(
        SCENARIO,
        "resize: patch → status shows new resources",
        &resizes,
        Some(50.0),
    ));
    delete_and_wait(&node, &["elastic".to_owned()]);

    // Many at once, then idle at 30 and 100.
    let (some, many) = settings.real_pods;
    let first: Vec<String> = (0..some).map(|i| format!("many-{i}")).collect();
    let t0 = Instant::now();
    for name in &first {
        node.cp
            .create(&pods_path(), &pod(name, &node.name, "sleep 3600"));
    }
    let seen = wait_all(&node, &first, running_and_ready);
    let times: Vec<Duration> = seen.values().map(|t| *t - t0).collect();
    rows.extend(latency_rows(
        SCENARIO,
        &format!("{some} at once: create → Running and ready"),
        &times,
        None,
    ));
    idle(settings, &node, some, rows);
    let rest: Vec<String> = (some..many).map(|i| format!("many-{i}")).collect();
    for name in &rest {
        node.cp
            .create(&pods_path(), &pod(name, &node.name, "sleep 3600"));
    }
    wait_all(&node, &rest, running_and_ready);
    idle(settings, &node, many, rows);

    // Everything deleted: pod cgroups left behind (runc makes them in every
    // hierarchy; litelet must remove them all).
    let all: Vec<String> = first.into_iter().chain(rest).collect();
    delete_and_wait(&node, &all);
    let mut left = pod_cgroups(node.cgroup_root());
    let deadline = Instant::now() + Duration::from_secs(30);
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        left = pod_cgroups(node.cgroup_root());
    }
    rows.push(
        Row::new(
            SCENARIO,
            "pod cgroups left 30 s after all pods were deleted",
            left as f64,
            "",
        )
        .under(1.0),
    );
}
