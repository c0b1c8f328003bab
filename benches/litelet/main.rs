//! `make bench`: litelet's footprint, start-up, pod start, status and resize latency,
//! and scale, measured on the release binary against the fake CRI and the fake API
//! server from `tests/support` (and a private real containerd where the machine can
//! run one). Prints one table and writes JSON.
//!
//! Arguments (after `--`): names of scenarios to run (default all): `startup`,
//! `footprint`, `latency`, `resize`, `scale`, `streams` (log follows held on the node
//! API, `streams.rs`), `relist` (what the PLEG's listing costs at 100 pods, read lean
//! and decoded whole, `relist.rs`), `containerd`, `binary`, `real` (a real kube-apiserver from
//! `KUBEBUILDER_ASSETS` and a real containerd, `real.rs`), and, only when named,
//! `side-by-side` (litelet against the upstream kubelet on the same real control
//! plane, `side_by_side.rs`; over an hour).
//! Environment: `LITELET_BENCH_JSON` (output path, default `bench-results.json`),
//! `LITELET_BENCH_QUICK=1` (short windows and fewer pods, for trying the harness; the
//! numbers are not the ones to report), `LITELET_BENCH_KEEP_LOGS=DIR` (keep each
//! litelet's log there), `LITELET_BENCH_WRAPPER="valgrind --tool=massif ..."` (run
//! litelet under a profiler; the numbers then describe the profiler, not litelet).
//! `LITELET_BENCH_BINARY=PATH` (measure another build, e.g. `--profile profiling`).
//! litelet inherits the environment, so `RUST_LOG` reaches it.

#[path = "../../tests/support/mod.rs"]
mod support;

mod cluster;
mod process;
mod real;
mod relist;
mod report;
mod scenarios;
mod side_by_side;
mod streams;

use std::time::{Duration, Instant};

use serde_json::json;

/// Sizes and windows of the run.
pub struct Settings {
    pub idle_window: Duration,
    pub scale_window: Duration,
    pub settle: Duration,
    pub startup_runs: usize,
    pub latency_pods: usize,
    pub resizes: usize,
    pub scale_pods: Vec<usize>,
    pub containerd_pods: usize,
    /// Real cluster: runs of the one-pod and exit measurements.
    pub real_runs: usize,
    /// Real cluster: pods created at once, then the total for the last idle window.
    pub real_pods: (usize, usize),
    /// Side by side: each idle window, long enough to scale API traffic to an hour.
    pub traffic_window: Duration,
    /// Log follows held at once on the node API.
    pub streams: usize,
}

impl Settings {
    fn full() -> Settings {
        Settings {
            idle_window: Duration::from_secs(60),
            scale_window: Duration::from_secs(30),
            settle: Duration::from_secs(10),
            startup_runs: 5,
            latency_pods: 110,
            resizes: 60,
            scale_pods: vec![500, 1000],
            containerd_pods: 10,
            real_runs: 5,
            real_pods: (30, 100),
            traffic_window: Duration::from_secs(600),
            streams: 1000,
        }
    }

    fn quick() -> Settings {
        Settings {
            idle_window: Duration::from_secs(6),
            scale_window: Duration::from_secs(5),
            settle: Duration::from_secs(2),
            startup_runs: 2,
            latency_pods: 20,
            resizes: 10,
            scale_pods: vec![200],
            containerd_pods: 3,
            real_runs: 2,
            real_pods: (5, 10),
            traffic_window: Duration::from_secs(20),
            streams: 100,
        }
    }
}

fn machine() -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    json!({
        "cpu": model,
        "cores": cores,
        "memory_gib": (mem_kib as f64 / 1048576.0).round(),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "os": read("/etc/os-release").lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).unwrap_or("").trim_matches('"'),
    })
}

fn main() {
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    // The side-by-side run takes over an hour: only when asked for by name.
    let side_by_side = chosen.iter().any(|c| c == "side-by-side");
    if side_by_side {
        // The shared control plane reads this as it starts (its audit log).
        std::env::set_var("LITELET_CP_AUDIT", "1");
    }
    let quick = std::env::var("LITELET_BENCH_QUICK").is_ok_and(|v| v == "1");
    let mut settings = if quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    // Iterating on API traffic: a shorter (or longer) idle window than the run's.
    if let Some(secs) = std::env::var("LITELET_BENCH_TRAFFIC_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        settings.traffic_window = Duration::from_secs(secs);
    }
    let began = Instant::now();
    let mut rows = Vec::new();

    let mut failed = Vec::new();
    // A scenario that fails (a panic with litelet's log) is reported and the rest run:
    // one broken measurement must not lose the others.
    let mut run = |name: &str, rows: &mut Vec<report::Row>, f: &dyn Fn(&mut Vec<report::Row>)| {
        eprintln!(
            "bench: {name} ({:.0} s so far)",
            began.elapsed().as_secs_f64()
        );
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(rows)));
        if outcome.is_err() {
            rows.push(report::Row::new(
                name,
                "FAILED (see the panic above)",
                0.0,
                "",
            ));
            failed.push(name.to_owned());
        }
    };
    if wants("binary") {
        run("binary", &mut rows, &|rows| scenarios::binary_size(rows));
    }
    if wants("startup") {
        run("startup", &mut rows, &|rows| {
            scenarios::startup(&settings, rows)
        });
    }
    if wants("footprint") {
        for n in [0, 30, 110] {
            run(&format!("footprint, {n} pods"), &mut rows, &|rows| {
                scenarios::footprint(&settings, rows, n, false)
            });
        }
        run("footprint, 110 pods with probes", &mut rows, &|rows| {
            scenarios::footprint(&settings, rows, 110, true)
        });
    }
    if wants("stats") {
        for n in [0, 110] {
            run(&format!("stats sampling, {n} pods"), &mut rows, &|rows| {
                scenarios::stats_sampling(&settings, rows, n)
            });
        }
    }
    if wants("logs") {
        run("log manager idle", &mut rows, &|rows| {
            scenarios::log_manager(&settings, rows)
        });
    }
    if wants("latency") {
        run("pod start and status latency", &mut rows, &|rows| {
            scenarios::pod_start_and_status(&settings, rows)
        });
    }
    if wants("resize") {
        run("resize latency", &mut rows, &|rows| {
            scenarios::resize(&settings, rows)
        });
    }
    if wants("scale") {
        for &n in &settings.scale_pods {
            run(&format!("scale, {n} pods"), &mut rows, &|rows| {
                scenarios::scale(&settings, rows, n)
            });
        }
    }
    if wants("streams") {
        let n = settings.streams;
        run(&format!("streams, {n} held"), &mut rows, &|rows| {
            streams::streams(&settings, rows, n)
        });
    }
    if wants("relist") {
        run("relist", &mut rows, &|rows| relist::relist(rows));
    }
    if wants("containerd") {
        run("real containerd", &mut rows, &|rows| {
            scenarios::containerd(&settings, rows)
        });
    }

    if wants("real") {
        run("real cluster", &mut rows, &|rows| {
            real::real_cluster(&settings, rows)
        });
    }
    if side_by_side {
        run("side by side", &mut rows, &|rows| {
            side_by_side::side_by_side(&settings, rows)
        });
    }

    let seconds = began.elapsed().as_secs_f64();
    report::print_table(&rows);
    println!(
        "bench: {} rows in {seconds:.0} s{}",
        rows.len(),
        if quick {
            " (QUICK: not for reporting)"
        } else {
            ""
        }
    );
    let path = std::env::var("LITELET_BENCH_JSON").unwrap_or_else(|_| "bench-results.json".into());
    let json = report::to_json(&rows, machine(), seconds);
    match serde_json::to_string_pretty(&json) {
        Ok(text) => match std::fs::write(&path, text + "\n") {
            Ok(()) => println!("bench: results written to {path}"),
            Err(e) => eprintln!("bench: cannot write {path}: {e}"),
        },
        Err(e) => eprintln!("bench: cannot encode results: {e}"),
    }
    if !failed.is_empty() {
        eprintln!("bench: failed scenarios: {}", failed.join(", "));
        std::process::exit(1);
    }
}
