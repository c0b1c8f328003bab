//! `make bench ONLY=side-by-side`: litelet and the upstream kubelet, one after the
//! other, as nodes of one real control plane on the same machine, each on a private
//! containerd, through the same sequence ([`crate::real::measure`]): same pods, same
//! windows. Each node reaches the apiserver through its own counting TCP proxy (bytes
//! each way, TLS and HTTP overhead included) and the apiserver writes an audit log of
//! the nodes' requests (`LITELET_CP_AUDIT=1`, Metadata level), so the rows compare
//! what matters at the edge: bytes and requests per idle node-hour, idle RSS and CPU,
//! peak RSS, whole-run CPU, and the latencies; each as litelet, upstream and their
//! ratio. The upstream kubelet comes from `KUBEBUILDER_ASSETS` (`kubelet`, put there
//! by `../shared/k8s-assets/unpack.sh`) or `LITELET_BENCH_UPSTREAM_KUBELET`; the
//! scenario is skipped, with a row saying so, where either is missing.
//! Idle windows last `Settings::traffic_window` (10 minutes in a full run), so a
//! full run takes a little over an hour.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::real::{measure, Measured, Uplink};
use crate::report::{percentile, Row};
use crate::support::real_node::RealNode;
use crate::support::tcp_proxy::TcpProxy;
use crate::Settings;

const SCENARIO: &str = "side by side";

/// The upstream kubelet binary to compare with, if there is one
/// (`LITELET_BENCH_UPSTREAM_KUBELET=none`: litelet alone, to iterate on its figures).
fn upstream_kubelet() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LITELET_BENCH_UPSTREAM_KUBELET") {
        return (path != "none").then(|| PathBuf::from(path));
    }
    let assets = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS")?);
    let path = assets.join("kubelet");
    path.exists().then_some(path)
}

/// `containerd --version`'s words after the module path ("1.7.24~ds1 ..."), as found
/// on PATH, which is what the private containerd runs.
fn containerd_version() -> String {
    let out = std::process::Command::new("containerd")
        .arg("--version")
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let words: Vec<&str> = text.split_whitespace().collect();
            format!("containerd {}", words.get(2).copied().unwrap_or("?"))
        }
        _ => "containerd (version unknown)".into(),
    }
}

/// Runs the sequence on a fresh node `name`, upstream's kubelet when `upstream` is set.
fn run(settings: &Settings, name: &str, upstream: Option<&PathBuf>) -> Option<Measured> {
    let mut node = RealNode::prepare(
        "bench side by side",
        name,
        &["--max-pods", "110", "--sync-frequency", "1m0s"],
    )?;
    let proxy = TcpProxy::start(node.cp.addr());
    node.set_api_server(&proxy.url());
    if let Some(binary) = upstream {
        node.use_upstream_kubelet(binary);
    }
    let uplink = Uplink {
        proxy,
        audit_log: node.cp.audit_log(),
        user: format!("system:node:{name}"),
    };
    let spawned = Instant::now();
    node.start_again();
    eprintln!("bench: side by side: {name} started");
    let measured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        measure(
            settings,
            &node,
            spawned,
            settings.traffic_window,
            Some(&uplink),
        )
    }));
    match measured {
        Ok(m) => Some(m),
        Err(panic) => {
            eprintln!(
                "bench: side by side: {name} failed; its log:\n{}",
                node.tail()
            );
            std::panic::resume_unwind(panic)
        }
    }
}

/// One compared figure: litelet's, upstream's and the ratio.
fn compare(
    rows: &mut Vec<Row>,
    scenario: &str,
    metric: &str,
    unit: &'static str,
    ours: f64,
    theirs: f64,
) {
    rows.push(Row::new(
        scenario,
        &format!("{metric}: litelet"),
        ours,
        unit,
    ));
    rows.push(Row::new(
        scenario,
        &format!("{metric}: upstream"),
        theirs,
        unit,
    ));
    let ratio = if theirs > 0.0 {
        ours / theirs
    } else {
        f64::NAN
    };
    rows.push(Row::new(scenario, &format!("{metric}: ratio"), ratio, "x"));
}

fn p50_ms(values: &[Duration]) -> f64 {
    percentile(values, 50.0).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

pub fn side_by_side(settings: &Settings, rows: &mut Vec<Row>) {
    let kubelet = upstream_kubelet();
    if kubelet.is_none() {
        rows.push(Row::new(
            SCENARIO,
            "no upstream kubelet: litelet alone",
            0.0,
            "",
        ));
    }
    if std::env::var("LITELET_CP_AUDIT").as_deref() != Ok("1") {
        // The control plane reads it as it starts: it must be set before, by `main`.
        rows.push(Row::new(
            SCENARIO,
            "skipped (LITELET_CP_AUDIT=1 not set)",
            0.0,
            "",
        ));
        return;
    }
    // Which containerd both ran on: 1.7 streams container events (`make bench EVENTS=1`),
    // 1.6 does not, and the exit → status row depends on it.
    rows.push(Row::new(
        SCENARIO,
        &format!("runtime: {}", containerd_version()),
        0.0,
        "",
    ));
    let Some(ours) = run(settings, "sbs-litelet", None) else {
        rows.push(Row::new(SCENARIO, "skipped (no control plane)", 0.0, ""));
        return;
    };
    let theirs = kubelet.and_then(|k| run(settings, "sbs-upstream", Some(&k)));
    report(&ours, &theirs.unwrap_or_default(), rows);
}

fn report(ours: &Measured, theirs: &Measured, rows: &mut Vec<Row>) {
    for (i, a) in ours.idle.iter().enumerate() {
        let b = &theirs.idle.get(i).cloned().unwrap_or_default();
        let scenario = format!("{SCENARIO}, idle {} pods", a.pods);
        let (ta, tb) = (
            a.traffic.clone().unwrap_or_default(),
            b.traffic.clone().unwrap_or_default(),
        );
        let total = |t: &crate::real::Traffic| t.bytes.sent + t.bytes.received;
        compare(
            rows,
            &scenario,
            "API bytes per hour, both ways",
            "KiB",
            a.per_hour(total(&ta)) / 1024.0,
            b.per_hour(total(&tb)) / 1024.0,
        );
        compare(
            rows,
            &scenario,
            "API bytes per hour, sent",
            "KiB",
            a.per_hour(ta.bytes.sent) / 1024.0,
            b.per_hour(tb.bytes.sent) / 1024.0,
        );
        compare(
            rows,
            &scenario,
            "API bytes per hour, received",
            "KiB",
            a.per_hour(ta.bytes.received) / 1024.0,
            b.per_hour(tb.bytes.received) / 1024.0,
        );
        let count = |t: &crate::real::Traffic| t.requests.values().sum::<u64>();
        compare(
            rows,
            &scenario,
            "API requests per hour",
            "",
            a.per_hour(count(&ta)),
            b.per_hour(count(&tb)),
        );
        compare(
            rows,
            &scenario,
            "TCP connections per hour",
            "",
            a.per_hour(ta.bytes.connections),
            b.per_hour(tb.bytes.connections),
        );
        let mut kinds: Vec<&String> = ta.requests.keys().chain(tb.requests.keys()).collect();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let n = |t: &crate::real::Traffic| t.requests.get(kind).copied().unwrap_or(0);
            rows.push(Row::new(
                &scenario,
                &format!("requests per hour, {kind}: litelet"),
                a.per_hour(n(&ta)),
                "",
            ));
            rows.push(Row::new(
                &scenario,
                &format!("requests per hour, {kind}: upstream"),
                b.per_hour(n(&tb)),
                "",
            ));
        }
        compare(
            rows,
            &scenario,
            "RSS",
            "MiB",
            a.last.rss_mib(),
            b.last.rss_mib(),
        );
        compare(
            rows,
            &scenario,
            "CPU per 60 s",
            "ms",
            a.cpu_ms_per_min(),
            b.cpu_ms_per_min(),
        );
    }
    compare(
        rows,
        SCENARIO,
        "peak RSS",
        "MiB",
        ours.peak_rss_mib,
        theirs.peak_rss_mib,
    );
    compare(
        rows,
        SCENARIO,
        "whole-run CPU",
        "s",
        ours.cpu_seconds,
        theirs.cpu_seconds,
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    compare(
        rows,
        SCENARIO,
        "start → Node Ready",
        "ms",
        ms(ours.ready),
        ms(theirs.ready),
    );
    let latencies: [(&str, &[Duration], &[Duration]); 3] = [
        ("1 pod: create → ready, p50", &ours.alone, &theirs.alone),
        ("container exit → status, p50", &ours.exits, &theirs.exits),
        ("resize → status, p50", &ours.resizes, &theirs.resizes),
    ];
    for (what, a, b) in latencies {
        compare(rows, SCENARIO, what, "ms", p50_ms(a), p50_ms(b));
    }
    for (i, (n, a)) in ours.batches.iter().enumerate() {
        let b = theirs.batches.get(i).map_or(&[][..], |(_, b)| &b[..]);
        compare(
            rows,
            SCENARIO,
            &format!("{n} at once: create → ready, p50"),
            "ms",
            p50_ms(a),
            p50_ms(b),
        );
    }
}
