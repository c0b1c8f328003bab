//! The measurements of issue 11, one function each. Every scenario starts its own
//! fakes and its own litelet, so none inherits another's state.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::{self, PodShape, Timeline};
use crate::process::{cpu_percent, Histogram, Litelet, Options, Sample};
use crate::report::{latency_rows, Row};
use crate::support::fake_api::FakeApi;
use crate::support::fake_cri::FakeCri;
use crate::Settings;

pub(crate) const WAIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1024 * 1024;

/// A litelet against the fake CRI and the fake API, with timelines of pods and nodes.
pub(crate) struct Bench {
    // Field order is drop order: litelet stops before the fakes go.
    pub(crate) litelet: Litelet,
    pub(crate) pods: Timeline,
    nodes: Timeline,
    pub(crate) api: FakeApi,
    cri: FakeCri,
}

impl Bench {
    fn start(max_pods: usize, before_start: impl FnOnce(&FakeApi)) -> Bench {
        Bench::start_with(max_pods, Vec::new(), before_start)
    }

    pub(crate) fn start_with(
        max_pods: usize,
        extra: Vec<String>,
        before_start: impl FnOnce(&FakeApi),
    ) -> Bench {
        let cri = FakeCri::start();
        let api = FakeApi::start();
        let pods = Timeline::follow(&api, "pods");
        let nodes = Timeline::follow(&api, "nodes");
        before_start(&api);
        let litelet = Litelet::start(Options {
            endpoint: cri.endpoint(),
            api: Some(&api),
            max_pods,
            extra,
        });
        Bench {
            litelet,
            pods,
            nodes,
            api,
            cri,
        }
    }

    pub(crate) fn wait_node_ready(&self) -> Instant {
        let names = [crate::process::NODE.to_owned()];
        let since = self.litelet.started;
        if !self.nodes.wait_all(
            &names,
            since,
            WAIT,
            || self.litelet.alive(),
            cluster::node_ready,
        ) {
            panic!(
                "node never Ready; litelet log:\n{}",
                self.litelet.log_tail()
            );
        }
        self.nodes
            .first(&names[0], since, cluster::node_ready)
            .unwrap_or(since)
    }

    /// Creates the pods now; returns each one's creation instant.
    pub(crate) fn create(&self, names: &[String], shape: &PodShape) -> HashMap<String, Instant> {
        names
            .iter()
            .map(|name| {
                let at = Instant::now();
                self.api
                    .create("pods", "default", cluster::pod(name, shape));
                (name.clone(), at)
            })
            .collect()
    }

    pub(crate) fn wait_running(&self, names: &[String], since: Instant, timeout: Duration) {
        if !self.pods.wait_all(
            names,
            since,
            timeout,
            || self.litelet.alive(),
            cluster::is_running,
        ) {
            let missing = names
                .iter()
                .filter(|n| self.pods.first(n, since, cluster::is_running).is_none())
                .count();
            panic!(
                "{missing} of {} pods never Running in the API; litelet log:\n{}",
                names.len(),
                self.litelet.log_tail()
            );
        }
    }

    pub(crate) fn uid(&self, name: &str) -> String {
        self.api
            .get("pods", "default", name)
            .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Samples every `step` for `window`; returns (first, last, peak RSS in KiB).
fn observe(litelet: &Litelet, window: Duration, step: Duration) -> (Sample, Sample, u64) {
    let first = litelet.sample();
    let mut peak = first.rss_kib;
    let end = Instant::now() + window;
    let mut last = first;
    while Instant::now() < end {
        std::thread::sleep(step.min(end.saturating_duration_since(Instant::now())));
        last = litelet.sample();
        peak = peak.max(last.rss_kib);
    }
    (first, last, peak)
}

/// Start-up (item 2): process start → node Ready in the API, → first pod Running.
pub fn startup(settings: &Settings, rows: &mut Vec<Row>) {
    let scenario = "startup (fake CRI)";
    let (mut to_ready, mut to_running) = (Vec::new(), Vec::new());
    for _ in 0..settings.startup_runs {
        let bench = Bench::start(110, |api| {
            api.create(
                "pods",
                "default",
                cluster::pod("first", &PodShape::default()),
            );
        });
        let ready = bench.wait_node_ready();
        let first = ["first".to_owned()];
        bench.wait_running(&first, bench.litelet.started, WAIT);
        let running = bench
            .pods
            .first("first", bench.litelet.started, cluster::is_running)
            .unwrap_or(ready);
        to_ready.push(ready - bench.litelet.started);
        to_running.push(running - bench.litelet.started);
    }
    rows.extend(latency_rows(
        scenario,
        "start → node Ready",
        &to_ready,
        None,
    ));
    rows.extend(latency_rows(
        scenario,
        "start → first pod Running",
        &to_running,
        None,
    ));
}

/// Footprint (item 1) at idle with `n` running pods (with three probes each if asked).
pub fn footprint(settings: &Settings, rows: &mut Vec<Row>, n: usize, probes: bool) {
    let scenario = if probes {
        format!("idle, {n} pods × 3 probes")
    } else {
        format!("idle, {n} pods")
    };
    let bench = Bench::start(n.max(110), |_| {});
    bench.wait_node_ready();
    let shape = PodShape {
        probes_port: probes.then(cluster::probe_target),
        ..Default::default()
    };
    let pods = names("idle", n);
    let since = Instant::now();
    bench.create(&pods, &shape);
    bench.wait_running(&pods, since, WAIT);
    if probes {
        // Ready needs the startup probe, then a readiness success.
        let ready = |p: &Value| p["status"]["containerStatuses"][0]["ready"] == true;
        if !bench
            .pods
            .wait_all(&pods, since, WAIT, || bench.litelet.alive(), ready)
        {
            panic!(
                "probed pods never ready; log:\n{}",
                bench.litelet.log_tail()
            );
        }
    }
    std::thread::sleep(settings.settle);
    eprintln!(
        "bench: {scenario}: idle window starts (litelet pid {})",
        bench.litelet.pid()
    );
    let requests_before = bench.api.requests().len();
    let (first, last, peak) = observe(&bench.litelet, settings.idle_window, Duration::from_secs(5));
    let requests = bench.api.requests().len() - requests_before;
    let minutes = settings.idle_window.as_secs_f64() / 60.0;

    let mut rss = Row::new(&scenario, "RSS", last.rss_mib(), "MiB");
    let mut cpu = Row::new(&scenario, "CPU", cpu_percent(&first, &last), "%core");
    match (n, probes) {
        (0, _) => rss = rss.under(8.0),
        (110, false) => {
            rss = rss.under(20.0);
            cpu = cpu.under(0.5);
        }
        _ => {}
    }
    rows.push(rss);
    rows.push(Row::new(&scenario, "RSS anonymous", last.anon_mib(), "MiB"));
    rows.push(Row::new(
        &scenario,
        "RSS file-backed",
        last.file_mib(),
        "MiB",
    ));
    rows.push(Row::new(&scenario, "RSS peak", peak as f64 / 1024.0, "MiB"));
    rows.push(Row::new(&scenario, "threads", last.threads as f64, ""));
    rows.push(Row::new(&scenario, "open fds", last.fds as f64, ""));
    rows.push(cpu);
    rows.push(Row::new(
        &scenario,
        "API requests",
        requests as f64 / minutes,
        "/min",
    ));
}

/// The container log manager's idle cost (issue 23): 110 idle pods with rotation off
/// (`--container-log-max-size=-1`) and on (the defaults: checked every 10 s), the same
/// window each; the difference is the log manager's (one ListContainers, and per
/// running container one ContainerStatus and one stat, per interval).
pub fn log_manager(settings: &Settings, rows: &mut Vec<Row>) {
    let scenario = "log manager idle, 110 pods";
    let n = 110;
    let mut cpu = Vec::new();
    for extra in [vec!["--container-log-max-size=-1".to_owned()], Vec::new()] {
        let off = !extra.is_empty();
        let bench = Bench::start_with(n, extra, |_| {});
        bench.wait_node_ready();
        let pods = names("logs", n);
        let since = Instant::now();
        bench.create(&pods, &PodShape::default());
        bench.wait_running(&pods, since, WAIT);
        std::thread::sleep(settings.settle);
        let status_before = bench.cri.count("ContainerStatus");
        let reopen_before = bench.cri.count("ReopenContainerLog");
        let (first, last, _) =
            observe(&bench.litelet, settings.idle_window, Duration::from_secs(5));
        let minutes = settings.idle_window.as_secs_f64() / 60.0;
        let label = if off { "rotation off" } else { "rotation on" };
        let percent = cpu_percent(&first, &last);
        cpu.push(percent);
        rows.push(Row::new(
            scenario,
            &format!("CPU, {label}"),
            percent,
            "%core",
        ));
        rows.push(Row::new(
            scenario,
            &format!("threads, {label}"),
            last.threads as f64,
            "",
        ));
        rows.push(Row::new(
            scenario,
            &format!("RSS, {label}"),
            last.rss_mib(),
            "MiB",
        ));
        rows.push(Row::new(
            scenario,
            &format!("CRI ContainerStatus, {label}"),
            (bench.cri.count("ContainerStatus") - status_before) as f64 / minutes,
            "/min",
        ));
        if !off {
            rows.push(Row::new(
                scenario,
                "CRI ReopenContainerLog (nothing to rotate)",
                (bench.cri.count("ReopenContainerLog") - reopen_before) as f64 / minutes,
                "/min",
            ));
        }
    }
    if let [off, on] = cpu[..] {
        rows.push(Row::new(
            scenario,
            "CPU added by rotation",
            on - off,
            "%core",
        ));
    }
}

/// The usage sampler's own cost (issue 22) at `n` idle pods on a monitored node (one
/// `/stats/summary` read before the window keeps pods sampled for five minutes): the
/// CPU of the `stats` and `eviction` threads alone over the idle window (from
/// `/proc/<pid>/task`), the mean sampling round, and the heap its two retained
/// samples hold (litelet's `litelet_stats_sample_bytes`). The whole process's RSS is
/// in the footprint rows.
pub fn stats_sampling(settings: &Settings, rows: &mut Vec<Row>, n: usize) {
    let scenario = format!("stats sampling, {n} pods");
    let bench = Bench::start(n.max(110), |_| {});
    bench.wait_node_ready();
    let pods = names("stats", n);
    let since = Instant::now();
    bench.create(&pods, &PodShape::default());
    bench.wait_running(&pods, since, WAIT);
    std::thread::sleep(settings.settle);
    if bench.litelet.get("/stats/summary").is_none() {
        eprintln!("stats sampling: /stats/summary did not answer; pods may not be sampled");
    }
    let pid = bench.litelet.pid();
    let metrics_before = bench.litelet.metrics().unwrap_or_default();
    let threads = |name| crate::process::thread_cpu_seconds(pid, name);
    let (stats0, evict0, t0) = (threads("stats"), threads("eviction"), Instant::now());
    std::thread::sleep(settings.idle_window);
    let (stats1, evict1) = (threads("stats"), threads("eviction"));
    let seconds = t0.elapsed().as_secs_f64();
    let metrics = bench.litelet.metrics().unwrap_or_default();
    rows.push(
        Row::new(
            &scenario,
            "CPU, stats thread",
            100.0 * (stats1 - stats0) / seconds,
            "%core",
        )
        .under(0.1),
    );
    rows.push(Row::new(
        &scenario,
        "CPU, eviction thread",
        100.0 * (evict1 - evict0) / seconds,
        "%core",
    ));
    const ROUND: &str = "litelet_stats_sampling_duration_seconds";
    let rounds = Histogram::parse(&metrics, ROUND, r#"read="pods""#).minus(&Histogram::parse(
        &metrics_before,
        ROUND,
        r#"read="pods""#,
    ));
    if let Some(mean) = rounds.mean() {
        rows.push(Row::new(
            &scenario,
            &format!("sampling round mean (n={})", rounds.count),
            mean * 1000.0,
            "ms",
        ));
    }
    let retained = metrics
        .lines()
        .find_map(|l| l.strip_prefix("litelet_stats_sample_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    rows.push(
        Row::new(
            &scenario,
            "retained samples (heap)",
            retained / MIB as f64,
            "MiB",
        )
        .under(1.0),
    );
    rows.push(Row::new(
        &scenario,
        "process RSS (context)",
        bench.litelet.sample().rss_mib(),
        "MiB",
    ));
}

/// Pod start latency, one by one and all at once (item 3), and status latency (item 4).
pub fn pod_start_and_status(settings: &Settings, rows: &mut Vec<Row>) {
    let n = settings.latency_pods;
    let shape = PodShape {
        run_once: true,
        ..Default::default()
    };

    // One by one: a pod every 200 ms, none waiting for the previous one.
    let scenario = format!("pod start, {n} one by one");
    let bench = Bench::start(n.max(110), |_| {});
    bench.wait_node_ready();
    let pods = names("seq", n);
    let since = Instant::now();
    let mut created = HashMap::new();
    for name in &pods {
        created.extend(bench.create(std::slice::from_ref(name), &shape));
        std::thread::sleep(Duration::from_millis(200));
    }
    bench.wait_running(&pods, since, WAIT);
    let started = Started {
        pods: &pods,
        created: &created,
        since,
    };
    start_rows(&bench, &scenario, &started, 50.0, rows);

    // 4. Status latency: the containers exit one at a time (100 ms apart) at the CRI.
    std::thread::sleep(Duration::from_secs(2));
    let scenario = format!("status, {} container exits", n.min(100));
    let containers = cluster::running_containers(&bench.cri);
    let mut exits = Vec::new();
    for name in pods.iter().take(100) {
        let Some(id) = containers.get(name) else {
            continue;
        };
        let at = Instant::now();
        if bench.cri.exit_container(id, 0) {
            exits.push((name.clone(), at));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let exited: Vec<String> = exits.iter().map(|(n, _)| n.clone()).collect();
    bench.pods.wait_all(
        &exited,
        since,
        WAIT,
        || bench.litelet.alive(),
        cluster::has_terminated_container,
    );
    let latencies: Vec<Duration> = exits
        .iter()
        .filter_map(|(name, at)| {
            let seen = bench
                .pods
                .first(name, *at, cluster::has_terminated_container)?;
            Some(seen - *at)
        })
        .collect();
    rows.extend(latency_rows(
        &scenario,
        "exit at CRI → API status",
        &latencies,
        Some(1500.0),
    ));
    drop(bench);

    // All at once.
    let scenario = format!("pod start, {n} at once");
    let bench = Bench::start(n.max(110), |_| {});
    bench.wait_node_ready();
    let pods = names("burst", n);
    let since = Instant::now();
    let created = bench.create(&pods, &shape);
    bench.wait_running(&pods, since, WAIT);
    let started = Started {
        pods: &pods,
        created: &created,
        since,
    };
    start_rows(&bench, &scenario, &started, 1000.0, rows);
}

/// Pods a scenario created: their names, when each went to the API, and when the
/// scenario began.
struct Started<'a> {
    pods: &'a [String],
    created: &'a HashMap<String, Instant>,
    since: Instant,
}

fn start_rows(
    bench: &Bench,
    scenario: &str,
    started: &Started,
    p99_target_ms: f64,
    rows: &mut Vec<Row>,
) {
    let starts = cluster::start_calls(&bench.cri, started.since);
    let mut to_start = Vec::new();
    let mut to_running = Vec::new();
    for name in started.pods {
        let Some(c) = started.created.get(name) else {
            continue;
        };
        if let Some(s) = starts.get(name) {
            to_start.push(s.saturating_duration_since(*c));
        }
        if let Some(r) = bench.pods.first(name, *c, cluster::is_running) {
            to_running.push(r - *c);
        }
    }
    rows.extend(latency_rows(
        scenario,
        "API add → StartContainer",
        &to_start,
        Some(p99_target_ms),
    ));
    rows.extend(latency_rows(
        scenario,
        "API add → Running in API",
        &to_running,
        None,
    ));
}

fn guaranteed(cpu: &str, memory: &str) -> Value {
    json!({
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    })
}

/// Resize latency (item 5), from the spec change in the API to: the pod cgroup
/// written, UpdateContainerResources at the CRI, the new resources in the API status.
pub fn resize(settings: &Settings, rows: &mut Vec<Row>) {
    let scenario = "resize (memory up/down)";
    let pods_n = 10;
    let bench = Bench::start(110, |_| {});
    bench.wait_node_ready();
    let pods = names("rs", pods_n);
    let shape = PodShape {
        resources: Some(guaranteed("100m", "128Mi")),
        ..Default::default()
    };
    let since = Instant::now();
    bench.create(&pods, &shape);
    bench.wait_running(&pods, since, WAIT);
    std::thread::sleep(Duration::from_secs(2));
    let containers = cluster::running_containers(&bench.cri);
    let cgroups: HashMap<&String, std::path::PathBuf> = pods
        .iter()
        .filter_map(|p| Some((p, bench.litelet.pod_memory_cgroup(&bench.uid(p))?)))
        .collect();

    let mut resizes = Vec::new();
    let mut to_cgroup = Vec::new();
    for i in 0..settings.resizes {
        let name = &pods[i % pods_n];
        let mi: u64 = if (i / pods_n) % 2 == 0 { 192 } else { 128 };
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        bench.api.modify("pods", "default", name, |p| {
            p["spec"]["containers"][0]["resources"] = guaranteed("100m", &format!("{mi}Mi"));
        });
        if let Some(dir) = cgroups.get(name) {
            let file = dir.join("memory.limit_in_bytes");
            let want = (mi * MIB).to_string();
            let deadline = t0 + Duration::from_secs(10);
            while Instant::now() < deadline {
                if std::fs::read_to_string(&file).is_ok_and(|v| v.trim() == want) {
                    to_cgroup.push(t0.elapsed());
                    break;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        resizes.push((name.clone(), t0, mi));
    }
    std::thread::sleep(Duration::from_secs(3));

    let calls = bench.cri.calls();
    let mut to_update = Vec::new();
    let mut to_status = Vec::new();
    for (name, t0, mi) in &resizes {
        if let Some(id) = containers.get(name) {
            if let Some(call) = calls
                .iter()
                .find(|c| c.method == "UpdateContainerResources" && c.target == *id && c.at >= *t0)
            {
                to_update.push(call.at - *t0);
            }
        }
        let shows = |p: &Value| {
            p["status"]["containerStatuses"][0]["resources"]["limits"]["memory"]
                == format!("{mi}Mi").as_str()
        };
        if let Some(seen) = bench.pods.first(name, *t0, shows) {
            to_status.push(seen - *t0);
        }
    }
    if cgroups.is_empty() {
        rows.push(Row::new(
            scenario,
            "pod cgroup writes not observed (needs root and cgroup v1)",
            0.0,
            "",
        ));
    } else {
        rows.extend(latency_rows(
            scenario,
            "API change → pod cgroup written",
            &to_cgroup,
            Some(100.0),
        ));
    }
    rows.extend(latency_rows(
        scenario,
        "API change → UpdateContainerResources",
        &to_update,
        None,
    ));
    rows.extend(latency_rows(
        scenario,
        "API change → resources in API status",
        &to_status,
        None,
    ));
}

/// Scale (item 6): `n` pods at once with `--max-pods` raised.
pub fn scale(settings: &Settings, rows: &mut Vec<Row>, n: usize) {
    let scenario = format!("scale, {n} pods");
    let bench = Bench::start(n + 10, |_| {});
    bench.wait_node_ready();
    let pods = names("s", n);
    let since = Instant::now();
    bench.create(&pods, &PodShape::default());
    let started = crate::support::wait_until(Duration::from_secs(600), || {
        bench.cri.count("StartContainer") >= n || !bench.litelet.alive()
    }) && bench.litelet.alive();
    let all_started = since.elapsed();
    assert!(
        started,
        "{n} pods never started; log:\n{}",
        bench.litelet.log_tail()
    );
    bench.wait_running(&pods, since, Duration::from_secs(900));
    let all_running = since.elapsed();
    std::thread::sleep(settings.settle);

    eprintln!(
        "bench: {scenario}: idle window starts (litelet pid {})",
        bench.litelet.pid()
    );
    let metrics_before = bench.litelet.metrics().unwrap_or_default();
    let (first, last, peak) = observe(
        &bench.litelet,
        settings.scale_window,
        Duration::from_secs(5),
    );
    let metrics_after = bench.litelet.metrics().unwrap_or_default();

    rows.push(Row::ms(&scenario, "all StartContainer", all_started));
    rows.push(Row::ms(&scenario, "all Running in API", all_running));
    rows.push(Row::new(&scenario, "RSS", last.rss_mib(), "MiB"));
    rows.push(Row::new(
        &scenario,
        "RSS peak (idle window)",
        peak as f64 / 1024.0,
        "MiB",
    ));
    rows.push(Row::new(&scenario, "threads", last.threads as f64, ""));
    rows.push(Row::new(
        &scenario,
        "CPU idle",
        cpu_percent(&first, &last),
        "%core",
    ));
    sync_loop_rows(&scenario, &metrics_before, &metrics_after, rows);
}

/// Sync-loop iteration latency from litelet's own histogram: over the whole run, and
/// over the idle window.
fn sync_loop_rows(scenario: &str, before: &str, after: &str, rows: &mut Vec<Row>) {
    const NAME: &str = "litelet_sync_loop_iteration_duration_seconds";
    let whole = Histogram::parse(after, NAME, "");
    let window = whole.minus(&Histogram::parse(before, NAME, ""));
    for (label, h) in [("whole run", &whole), ("idle window", &window)] {
        let (Some(mean), Some(p99)) = (h.mean(), h.quantile_bound(0.99)) else {
            rows.push(Row::new(
                scenario,
                &format!("sync loop ({label}): no data"),
                0.0,
                "",
            ));
            continue;
        };
        rows.push(Row::new(
            scenario,
            &format!("sync loop iteration mean ({label}, n={})", h.count),
            mean * 1000.0,
            "ms",
        ));
        rows.push(Row::new(
            scenario,
            &format!("sync loop iteration p99 ≤ bucket ({label})"),
            p99 * 1000.0,
            "ms",
        ));
    }
}

/// Binary size (item 7): the bench build (release profile, stripped, dynamic glibc), and
/// the static binary of `make static` when it has been built.
pub fn binary_size(rows: &mut Vec<Row>) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_litelet"));
    if let Ok(meta) = std::fs::metadata(bin) {
        rows.push(Row::new(
            "binary",
            "release (stripped, dynamic)",
            meta.len() as f64 / 1e6,
            "MB",
        ));
    }
    // target/release/litelet → target/x86_64-unknown-linux-gnu/dist/litelet
    let static_bin = bin
        .parent()
        .and_then(|p| p.parent())
        .map(|t| t.join("x86_64-unknown-linux-gnu/dist/litelet"));
    match static_bin.and_then(|p| std::fs::metadata(p).ok()) {
        Some(meta) => rows.push(
            Row::new(
                "binary",
                "static (make static)",
                meta.len() as f64 / 1e6,
                "MB",
            )
            .under(10.0),
        ),
        None => rows.push(Row::new(
            "binary",
            "static: not built (run make static)",
            0.0,
            "",
        )),
    }
}

/// Start-up, pod start and footprint against a real containerd, where this machine can
/// run one (root and containerd installed); skipped with a message otherwise.
pub fn containerd(settings: &Settings, rows: &mut Vec<Row>) {
    use crate::support::containerd::{Containerd, BUSYBOX};
    let scenario = "real containerd";
    let root = nix::unistd::geteuid().is_root();
    let installed = std::process::Command::new("containerd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !installed {
        eprintln!("bench: real containerd skipped (needs root and containerd installed)");
        rows.push(Row::new(
            scenario,
            "skipped (needs root and containerd)",
            0.0,
            "",
        ));
        return;
    }
    let Some(ctd) = Containerd::start("bench") else {
        rows.push(Row::new(scenario, "skipped", 0.0, ""));
        return;
    };
    let shape = PodShape {
        host_network: true,
        image: Some(BUSYBOX.to_owned()),
        ..Default::default()
    };
    let api = FakeApi::start();
    let pods_timeline = Timeline::follow(&api, "pods");
    let nodes_timeline = Timeline::follow(&api, "nodes");
    api.create("pods", "default", cluster::pod("first", &shape));
    let litelet = Litelet::start(Options {
        endpoint: ctd.endpoint(),
        api: Some(&api),
        max_pods: 110,
        extra: Vec::new(),
    });
    let started = litelet.started;
    let node = [crate::process::NODE.to_owned()];
    let first = ["first".to_owned()];
    let alive = || litelet.alive();
    // Host-network pods run while the runtime's network is not ready (the private
    // containerd has no CNI config), but the node stays NotReady, as upstream's does.
    let ok = pods_timeline.wait_all(&first, started, WAIT, alive, cluster::is_running);
    if !ok {
        panic!(
            "real containerd: pod never ran; litelet log:\n{}\ncontainerd log:\n{}",
            litelet.log_tail(),
            ctd.log_tail()
        );
    }
    let at = |timeline: &Timeline, name: &str, check: fn(&Value) -> bool| {
        timeline.first(name, started, check).map(|t| t - started)
    };
    match at(&nodes_timeline, &node[0], |n| {
        n["status"]["conditions"].is_array()
    }) {
        Some(d) => rows.push(Row::ms(scenario, "start → node status posted", d)),
        None => rows.push(Row::new(scenario, "node status never posted", 0.0, "")),
    }
    if let Some(d) = at(&pods_timeline, "first", cluster::is_running) {
        rows.push(Row::ms(scenario, "start → first pod Running", d));
    }

    // Pods one by one, each after the previous one runs.
    let mut to_running = Vec::new();
    for name in names("ctd", settings.containerd_pods) {
        let t0 = Instant::now();
        api.create("pods", "default", cluster::pod(&name, &shape));
        let one = [name.clone()];
        if pods_timeline.wait_all(&one, t0, WAIT, alive, cluster::is_running) {
            if let Some(r) = pods_timeline.first(&name, t0, cluster::is_running) {
                to_running.push(r - t0);
            }
        }
    }
    rows.extend(latency_rows(
        scenario,
        "API add → Running in API",
        &to_running,
        None,
    ));
    std::thread::sleep(settings.settle);
    let window = settings.idle_window.min(Duration::from_secs(30));
    let (a, b, _) = observe(&litelet, window, Duration::from_secs(5));
    let label = format!("idle, {} pods", settings.containerd_pods + 1);
    rows.push(Row::new(
        scenario,
        &format!("{label}: RSS"),
        b.rss_mib(),
        "MiB",
    ));
    rows.push(Row::new(
        scenario,
        &format!("{label}: threads"),
        b.threads as f64,
        "",
    ));
    rows.push(Row::new(
        scenario,
        &format!("{label}: CPU"),
        cpu_percent(&a, &b),
        "%core",
    ));

    // Leave nothing running behind: graceful deletes, which litelet finishes by
    // removing the API pods once their containers are gone.
    let all: Vec<String> = std::iter::once("first".to_owned())
        .chain(names("ctd", settings.containerd_pods))
        .collect();
    for name in &all {
        let _ = api.delete("pods", "default", name, Some(1));
    }
    crate::support::wait_until(Duration::from_secs(60), || {
        all.iter().all(|n| api.get("pods", "default", n).is_none())
    });
    drop(litelet);
    drop(ctd);
}
