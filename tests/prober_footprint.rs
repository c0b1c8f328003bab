//! Footprint of the prober with 110 pods × 3 probes (startup TCP, readiness HTTP,
//! liveness exec through the fake CRI), all passing, every probe each 2 s: RSS and
//! thread count of this process before and after (attempt threads retire after 2 s
//! idle here, 30 s by default), then the same 330 probes as one
//! parked thread each (the design not taken) for comparison. Prints numbers and
//! asserts only that the probes work; run with `--nocapture` to see them:
//! `cargo test --release --test prober_footprint -- --nocapture`.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use litelet::api::pod::{
    Container, ExecAction, HttpGetAction, IntOrString, Probe, ProbeHandler, TcpSocketAction,
};
use litelet::cri::pb;
use litelet::events::Recorder;
use litelet::probe::http::{HttpClient, HttpTarget};
use litelet::prober::{ProbeManager, ProberConfig, PROBE_USER_AGENT};
use litelet::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};
use protobuf::MessageField;
use support::fake_cri::FakeCri;
use support::pods;
use support::wait_until;

const PODS: usize = 110;
const BUSYBOX: &str = "localhost/litelet/busybox:1.0";

/// (VmRSS in KiB, Threads) of this process.
fn footprint() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// A one-thread HTTP server answering 200 to everything (TCP probes connect to it too).
fn serve() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::Builder::new()
        .name("test-http".into())
        .spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 2048];
                if matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    );
                }
            }
        })
        .unwrap();
    port
}

fn probe(handler: ProbeHandler) -> Option<Probe> {
    Some(Probe {
        handler,
        period_seconds: Some(2),
        timeout_seconds: Some(1),
        ..Default::default()
    })
}

#[test]
fn footprint_of_330_probes() {
    let fake = FakeCri::start();
    fake.state().images.insert(BUSYBOX.into(), 1);
    let (runtime, _) = fake.clients(Duration::from_secs(30));
    let port = serve();

    // 110 sandboxes with one running container each.
    let mut pods = Vec::new();
    for i in 0..PODS {
        let uid = format!("uid-{i}");
        let sandbox = runtime
            .run_pod_sandbox(&pb::RunPodSandboxRequest {
                config: MessageField::some(pb::PodSandboxConfig {
                    metadata: MessageField::some(pb::PodSandboxMetadata {
                        name: format!("pod-{i}"),
                        uid: uid.clone(),
                        namespace: "default".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .unwrap()
            .pod_sandbox_id;
        let id = runtime
            .create_container(&pb::CreateContainerRequest {
                pod_sandbox_id: sandbox,
                config: MessageField::some(pb::ContainerConfig {
                    metadata: MessageField::some(pb::ContainerMetadata {
                        name: "app".into(),
                        ..Default::default()
                    }),
                    image: MessageField::some(pb::ImageSpec {
                        image: BUSYBOX.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .unwrap()
            .container_id;
        runtime
            .start_container(&pb::StartContainerRequest {
                container_id: id.clone(),
                ..Default::default()
            })
            .unwrap();
        let mut pod = pods::meta("default", &format!("pod-{i}"), &uid);
        pod.spec.containers.push(Container {
            name: "app".into(),
            startup_probe: probe(ProbeHandler {
                tcp_socket: Some(TcpSocketAction {
                    port: IntOrString::Int(i32::from(port)),
                    host: None,
                }),
                ..Default::default()
            }),
            readiness_probe: probe(ProbeHandler {
                http_get: Some(HttpGetAction {
                    path: Some("/ready".into()),
                    port: IntOrString::Int(i32::from(port)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            liveness_probe: probe(ProbeHandler {
                exec: Some(ExecAction {
                    command: vec!["true".into()],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        pods.push((pod, id));
    }

    let before = footprint();
    let (_shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    // Idle threads retire after 2 s instead of 30 s, so the start-up burst's extra
    // threads are gone by the time of the steady-state sample.
    let config = ProberConfig {
        idle_timeout: Duration::from_secs(2),
        ..ProberConfig::default()
    };
    let (manager, _) =
        ProbeManager::start(config, runtime.clone(), Recorder::log_only(), shutdown_rx).unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for (pod, id) in &pods {
        let status = PodRuntimeStatus {
            uid: pod.uid().into(),
            containers: vec![ContainerStatus {
                id: id.clone(),
                name: "app".into(),
                state: ContainerState::Running,
                started_at: now.as_nanos() as i64,
                ..Default::default()
            }],
            ..Default::default()
        };
        manager.update_pod(&std::sync::Arc::new(pod.clone()), &status, "127.0.0.1");
    }
    let all_ready = || {
        pods.iter()
            .all(|(pod, id)| manager.readiness(pod.uid(), id) == Some(true))
    };
    assert!(wait_until(Duration::from_secs(60), all_ready));
    let execs_at_ready = fake.count("ExecSync");
    let burst = manager.stats().unwrap().attempt_threads;
    // Steady state: a few more rounds of every probe.
    let steady = Instant::now();
    std::thread::sleep(Duration::from_secs(6));
    let after = footprint();
    let stats = manager.stats().unwrap();
    let execs = fake.count("ExecSync") - execs_at_ready;
    assert!(execs > 0, "liveness exec probes kept running");
    println!(
        "prober, 110 pods x 3 probes (period 2 s): RSS {} KiB -> {} KiB (+{} KiB), \
         threads {} -> {} (+{}); workers {}, attempt threads {} (peak {burst}); \
         {execs} exec attempts in {:?}",
        before.0,
        after.0,
        after.0.saturating_sub(before.0),
        before.1,
        after.1,
        after.1.saturating_sub(before.1),
        stats.workers,
        stats.attempt_threads,
        steady.elapsed(),
    );

    // The other design, roughly: one thread per probe (256 KiB stacks), each having
    // run one attempt of its kind, then parked as a probe loop would be between ticks.
    let (park_tx, park_rx) = crossbeam_channel::bounded::<()>(0);
    let base = footprint();
    let mut handles = Vec::new();
    for (i, (_, id)) in pods.iter().flat_map(|p| [p, p, p]).enumerate() {
        let park = park_rx.clone();
        let runtime = runtime.clone();
        let id = id.clone();
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                match i % 3 {
                    0 => drop(std::net::TcpStream::connect(("127.0.0.1", port))),
                    1 => {
                        let target = HttpTarget {
                            url: format!("http://127.0.0.1:{port}/ready"),
                            headers: Vec::new(),
                        };
                        let _ = HttpClient::new().get(
                            &target,
                            Duration::from_secs(1),
                            PROBE_USER_AGENT,
                        );
                    }
                    _ => {
                        let _ = runtime.exec_sync(&pb::ExecSyncRequest {
                            container_id: id,
                            cmd: vec!["true".into()],
                            timeout: 1,
                            ..Default::default()
                        });
                    }
                }
                let _ = park.recv();
            })
            .unwrap();
        handles.push(handle);
    }
    std::thread::sleep(Duration::from_secs(2));
    let parked = footprint();
    println!(
        "thread per probe (330 parked threads after one attempt each): \
         RSS +{} KiB, threads +{}",
        parked.0.saturating_sub(base.0),
        parked.1.saturating_sub(base.1),
    );
    drop(park_tx);
    for handle in handles {
        let _ = handle.join();
    }
}
