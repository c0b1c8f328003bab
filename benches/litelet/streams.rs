//! The node API holding many long streams (issue 39, item 5): N `containerLogs?follow`
//! connections presented with a client certificate, as the API server opens them for
//! `kubectl logs -f`, against one pod on the fake CRI whose log file the harness
//! appends to. Measured: litelet's RSS and threads with the streams held, per stream
//! over the idle baseline, its CPU while they stream, and its threads after the
//! clients hang up.

use std::io::{BufReader, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::PodShape;
use crate::process::{cpu_percent, Sample};
use crate::report::Row;
use crate::scenarios::{Bench, WAIT};
use crate::support::https::{self, Identity, Pki};
use crate::Settings;

/// One held follow: its thread counts the lines it received.
struct Follower {
    lines: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// Where the fake runtime's container logs to: the CRI path litelet gave it.
fn log_file(bench: &Bench, pod: &str, uid: &str) -> std::path::PathBuf {
    let dir = bench
        .litelet
        .dir()
        .join("logs")
        .join(format!("default_{pod}_{uid}"))
        .join("main");
    std::fs::create_dir_all(&dir).expect("container log dir");
    dir.join("0.log")
}

fn append(path: &std::path::Path, n: usize) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the container log");
    writeln!(f, "2024-01-01T00:00:00.000000000Z stdout F line-{n}").expect("append a line");
}

fn follow(
    port: u16,
    server_ca: Arc<Vec<u8>>,
    client: Arc<Identity>,
    path: Arc<String>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Follower {
    let lines = Arc::new(AtomicUsize::new(0));
    let seen = lines.clone();
    let thread = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let Ok(tls) = https::connect(addr, &server_ca, Some(&client)) else {
                return;
            };
            let mut reader = BufReader::new(tls);
            if https::send(reader.get_mut(), "GET", &path, &[], b"").is_err() {
                return;
            }
            if !matches!(https::read_head(&mut reader), Ok((200, _))) {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                match https::read_chunk(&mut reader) {
                    Ok(Some(chunk)) => {
                        let n = chunk.iter().filter(|b| **b == b'\n').count();
                        seen.fetch_add(n, Ordering::Relaxed);
                    }
                    _ => return,
                }
            }
        })
        .expect("spawn a follower");
    Follower { lines, thread }
}

/// This process holds a socket per follower.
fn raise_own_open_files() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

pub fn streams(settings: &Settings, rows: &mut Vec<Row>, n: usize) {
    let scenario = format!("streams, {n} log follows held");
    raise_own_open_files();
    let pki = Pki::new("bench-client-ca");
    let serving = pki.server(&["127.0.0.1"]);
    let files = tempfile::tempdir().expect("pki dir");
    let write = |name: &str, pem: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, pem).expect("write pem");
        path.display().to_string()
    };
    let extra = vec![
        "--client-ca-file".to_owned(),
        write("ca.crt", &pki.ca_pem),
        "--tls-cert-file".to_owned(),
        write("serving.crt", &serving.cert_pem),
        "--tls-private-key-file".to_owned(),
        write("serving.key", &serving.key_pem),
    ];
    let bench = Bench::start_with(10, extra, |_| {});
    bench.wait_node_ready();
    let pod = "talker".to_owned();
    let since = Instant::now();
    bench.create(std::slice::from_ref(&pod), &PodShape::default());
    bench.wait_running(std::slice::from_ref(&pod), since, WAIT);
    let log = log_file(&bench, &pod, &bench.uid(&pod));
    append(&log, 0);
    std::thread::sleep(settings.settle);
    let idle = bench.litelet.sample();

    // The API server's client certificate: the class with no per-user share.
    let client = Arc::new(pki.client("kube-apiserver-kubelet-client", &["system:masters"]));
    let server_ca = Arc::new(pki.ca_pem.clone().into_bytes());
    let path = Arc::new(format!(
        "/containerLogs/default/{pod}/main?follow=true&tailLines=1"
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = bench.litelet.port();
    let followers: Vec<Follower> = (0..n)
        .map(|_| {
            follow(
                port,
                server_ca.clone(),
                client.clone(),
                path.clone(),
                stop.clone(),
            )
        })
        .collect();
    let mut line = 1;
    let all_streaming = |followers: &[Follower], at_least: usize| {
        followers
            .iter()
            .all(|f| f.lines.load(Ordering::Relaxed) >= at_least)
    };
    let deadline = Instant::now() + WAIT;
    while !all_streaming(&followers, 2) && Instant::now() < deadline {
        append(&log, line);
        line += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let streaming = followers
        .iter()
        .filter(|f| f.lines.load(Ordering::Relaxed) >= 2)
        .count();
    assert_eq!(
        streaming,
        n,
        "followers that streamed; litelet log:\n{}",
        bench.litelet.log_tail()
    );
    // Held and streaming: a line a second for the window.
    std::thread::sleep(settings.settle);
    let first = bench.litelet.sample();
    let window_end = Instant::now() + settings.scale_window;
    while Instant::now() < window_end {
        append(&log, line);
        line += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
    let held = bench.litelet.sample();
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / n as f64;
    rows.push(Row::new(
        &scenario,
        "RSS idle (before)",
        idle.rss_mib(),
        "MiB",
    ));
    rows.push(Row::new(&scenario, "RSS held", held.rss_mib(), "MiB"));
    rows.push(
        Row::new(
            &scenario,
            "RSS per held stream",
            per(idle.rss_kib, held.rss_kib),
            "KiB",
        )
        .under(64.0),
    );
    rows.push(Row::new(
        &scenario,
        "threads per held stream",
        per(idle.threads, held.threads),
        "",
    ));
    rows.push(Row::new(
        &scenario,
        "open fds per held stream",
        per(idle.fds, held.fds),
        "",
    ));
    rows.push(Row::new(
        &scenario,
        "CPU, streams held (a line/s each)",
        cpu_percent(&first, &held),
        "%core",
    ));

    stop.store(true, Ordering::Relaxed);
    // Each client sees the stop after its next line and hangs up.
    append(&log, line);
    for f in followers {
        let _ = f.thread.join();
    }
    let mut after: Sample = bench.litelet.sample();
    let back = Instant::now() + WAIT;
    while after.threads > idle.threads + 2 && Instant::now() < back {
        std::thread::sleep(Duration::from_millis(200));
        after = bench.litelet.sample();
    }
    rows.push(Row::new(
        &scenario,
        "threads after hang-up (idle before)",
        after.threads as f64 - idle.threads as f64,
        "",
    ));
}
