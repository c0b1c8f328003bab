//! The manager end to end with HTTP and TCP probes against loopback listeners (exec
//! probes are covered against the fake CRI in `tests/fakes/prober.rs`).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

use super::*;
use crate::api::pod::{
    ContainerPort, HttpGetAction, IntOrString, Probe, ProbeHandler, TcpSocketAction,
};
use crate::cri::{ConnectOptions, Endpoint};
use crate::events::EventRecord;
use crate::prober::testing::{Reply, TestHttp};
use crate::runtime::model::{self, ContainerStatus};

const WAIT: Duration = Duration::from_secs(20);

fn wait_until(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

struct Harness {
    manager: ProbeManager,
    updates: Receiver<ProbeUpdate>,
    events: Receiver<EventRecord>,
    _shutdown: Sender<()>,
}

fn start() -> Harness {
    start_with(ProberConfig::default())
}

fn start_with(config: ProberConfig) -> Harness {
    // Exec is not used here: a runtime that is never called.
    let endpoint = Endpoint::parse("unix:///nonexistent/litelet-prober-test.sock").unwrap();
    let (runtime, _) = crate::cri::connect(&endpoint, &ConnectOptions::default());
    let (events_tx, events) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let (manager, _) =
        ProbeManager::start(config, runtime, Recorder::new(events_tx), shutdown_rx).unwrap();
    let updates = manager.results();
    Harness {
        manager,
        updates,
        events,
        _shutdown: shutdown,
    }
}

fn quick(handler: ProbeHandler) -> Option<Probe> {
    Some(Probe {
        handler,
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    })
}

fn http(port: u16, path: &str) -> ProbeHandler {
    ProbeHandler {
        http_get: Some(HttpGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tcp(port: IntOrString) -> ProbeHandler {
    ProbeHandler {
        tcp_socket: Some(TcpSocketAction { port, host: None }),
        ..Default::default()
    }
}

/// A pod as the kubelet shares it with the prober.
fn pod(uid: &str, container: Container) -> Arc<Pod> {
    let mut pod = Pod::default();
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(uid.into());
    pod.spec.containers.push(container);
    Arc::new(pod)
}

fn running(pod: &Pod, ids: &[(&str, &str)]) -> PodRuntimeStatus {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    PodRuntimeStatus {
        uid: pod.uid().into(),
        containers: ids
            .iter()
            .map(|(name, id)| ContainerStatus {
                id: (*id).into(),
                name: (*name).into(),
                state: model::ContainerState::Running,
                started_at: now.as_nanos() as i64,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn next_update(h: &Harness) -> ProbeUpdate {
    h.updates.recv_timeout(WAIT).expect("a probe update")
}

fn update(uid: &str, id: &str, kind: ProbeKind, result: ProbeResult) -> ProbeUpdate {
    ProbeUpdate {
        uid: uid.into(),
        container_id: id.into(),
        kind,
        result,
    }
}

/// The server's answer for /ready: 200 until `FLIP` is set to a non-zero value.
static READY_STATUS: AtomicU16 = AtomicU16::new(200);

fn ready_route(path: &str, _: u16) -> Reply {
    match path {
        "/ready" => Reply::Status(READY_STATUS.load(Ordering::SeqCst), "ok".into()),
        "/hang" => Reply::Hang,
        _ => Reply::Status(200, "ok".into()),
    }
}

#[test]
fn readiness_follows_the_server_and_changes_are_sent_once() {
    let server = TestHttp::start(ready_route);
    let h = start();
    let p = pod(
        "r1",
        Container {
            name: "app".into(),
            readiness_probe: quick(http(server.port, "/ready")),
            ..Default::default()
        },
    );
    h.manager.add_pod(&p);
    assert_eq!(
        h.manager.readiness("r1", "c1"),
        None,
        "no worker before update"
    );
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    let first = next_update(&h);
    assert_eq!(
        first,
        update("r1", "c1", ProbeKind::Readiness, ProbeResult::Success)
    );
    assert_eq!(h.manager.readiness("r1", "c1"), Some(true));
    assert_eq!(
        h.manager.status_results("r1").readiness.get("c1"),
        Some(&true)
    );

    READY_STATUS.store(503, Ordering::SeqCst);
    let second = next_update(&h);
    assert_eq!(
        second,
        update("r1", "c1", ProbeKind::Readiness, ProbeResult::Failure)
    );
    assert_eq!(h.manager.readiness("r1", "c1"), Some(false));
    let event = h
        .events
        .try_iter()
        .find(|e| e.reason == "Unhealthy")
        .expect("an Unhealthy event");
    assert_eq!(
        event.message,
        "Readiness probe failed: HTTP probe failed with statuscode: 503"
    );
    // Further failures change nothing: no more updates.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(h.updates.try_recv().is_err());
    READY_STATUS.store(200, Ordering::SeqCst);

    // The container stops: its worker and results go.
    h.manager.update_pod(&p, &running(&p, &[]), "127.0.0.1");
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.workers == 0)));
    assert_eq!(h.manager.readiness("r1", "c1"), None);
}

#[test]
fn startup_gates_liveness_and_readiness() {
    let server = TestHttp::start(ready_route);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = start();
    let p = pod(
        "s1",
        Container {
            name: "app".into(),
            startup_probe: Some(Probe {
                failure_threshold: Some(1000),
                ..quick(tcp(IntOrString::Int(i32::from(port)))).unwrap()
            }),
            readiness_probe: quick(http(server.port, "/gated-ready")),
            liveness_probe: quick(http(server.port, "/gated-live")),
            ..Default::default()
        },
    );
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    assert!(wait_until(|| h.events.try_iter().any(|e| e
        .message
        .starts_with("Startup probe failed: dial tcp"))));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(h.manager.started("s1", "c1"), Some(false));
    assert_eq!(h.manager.readiness("s1", "c1"), Some(false));
    let gated = server.seen.lock().unwrap().len();
    assert_eq!(
        gated, 0,
        "no liveness or readiness request before startup passes"
    );
    assert!(h.updates.try_recv().is_err());

    // The port opens: started, then readiness and liveness run.
    let _listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(next_update(&h));
    }
    assert_eq!(
        got[0],
        update("s1", "c1", ProbeKind::Startup, ProbeResult::Success)
    );
    assert!(got.contains(&update(
        "s1",
        "c1",
        ProbeKind::Readiness,
        ProbeResult::Success
    )));
    assert!(got.contains(&update(
        "s1",
        "c1",
        ProbeKind::Liveness,
        ProbeResult::Success
    )));
    assert_eq!(h.manager.started("s1", "c1"), Some(true));
    let results = h.manager.probe_results("s1");
    assert_eq!(results.startup.get("c1"), Some(&ProbeResult::Success));
    assert_eq!(results.liveness.get("c1"), Some(&ProbeResult::Success));
}

#[test]
fn liveness_failure_holds_until_a_new_container() {
    let h = start();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = pod(
        "l1",
        Container {
            name: "app".into(),
            liveness_probe: quick(tcp(IntOrString::Int(i32::from(closed)))),
            ..Default::default()
        },
    );
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    assert_eq!(
        next_update(&h),
        update("l1", "c1", ProbeKind::Liveness, ProbeResult::Failure)
    );
    assert_eq!(
        h.manager.probe_results("l1").liveness.get("c1"),
        Some(&ProbeResult::Failure)
    );
    // On hold: no more attempts against c1.
    let failures = |h: &Harness| {
        h.events
            .try_iter()
            .filter(|e| e.message.starts_with("Liveness probe failed"))
            .count()
    };
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(failures(&h), 1);

    // The restarted instance gets a fresh worker; c1's result is gone.
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c2")]), "127.0.0.1");
    assert_eq!(
        next_update(&h),
        update("l1", "c2", ProbeKind::Liveness, ProbeResult::Failure)
    );
    assert_eq!(h.manager.probe_results("l1").liveness.get("c1"), None);
}

#[test]
fn bad_input_fails_without_blocking_others() {
    let server = TestHttp::start(ready_route);
    let h = start();
    // A missing port name, and a server that never answers.
    let bad = pod(
        "b1",
        Container {
            name: "app".into(),
            ports: vec![ContainerPort {
                name: Some("web".into()),
                container_port: 1,
                ..Default::default()
            }],
            liveness_probe: quick(tcp(IntOrString::String("metrics".into()))),
            readiness_probe: quick(http(server.port, "/hang")),
            ..Default::default()
        },
    );
    let good = pod(
        "g1",
        Container {
            name: "app".into(),
            readiness_probe: quick(http(server.port, "/ok")),
            ..Default::default()
        },
    );
    h.manager
        .update_pod(&bad, &running(&bad, &[("app", "b-c1")]), "127.0.0.1");
    h.manager
        .update_pod(&good, &running(&good, &[("app", "g-c1")]), "127.0.0.1");
    let mut got = Vec::new();
    while got.len() < 2 {
        got.push(next_update(&h));
    }
    assert!(got.contains(&update(
        "b1",
        "b-c1",
        ProbeKind::Liveness,
        ProbeResult::Failure
    )));
    assert!(got.contains(&update(
        "g1",
        "g-c1",
        ProbeKind::Readiness,
        ProbeResult::Success
    )));
    let missing =
        "Liveness probe failed: port \"metrics\" is not a named port of container \"app\"";
    let mut seen = Vec::new();
    assert!(wait_until(|| {
        seen.extend(h.events.try_iter().map(|e| e.message));
        seen.iter().any(|m| m == missing)
    }));
    let hung = format!(
        "Readiness probe failed: Get \"http://127.0.0.1:{}/hang\": timed out after 1s",
        server.port
    );
    assert!(wait_until(|| {
        seen.extend(h.events.try_iter().map(|e| e.message));
        seen.contains(&hung)
    }));
    assert_eq!(h.manager.readiness("b1", "b-c1"), Some(false));
}

#[test]
fn deletion_quiets_liveness_and_remove_forgets() {
    let server = TestHttp::start(ready_route);
    let h = start();
    let mut p = pod(
        "d1",
        Container {
            name: "app".into(),
            startup_probe: quick(http(server.port, "/ok")),
            liveness_probe: quick(http(server.port, "/ok")),
            readiness_probe: quick(http(server.port, "/ok")),
            ..Default::default()
        },
    );
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    assert!(wait_until(|| h.manager.readiness("d1", "c1") == Some(true)));
    Arc::make_mut(&mut p).metadata.deletion_timestamp =
        Some(crate::api::meta::Time::from_unix_seconds(5));
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.workers == 1)));
    let results = h.manager.probe_results("d1");
    assert_eq!(results.liveness.get("c1"), Some(&ProbeResult::Success));
    assert_eq!(results.startup.get("c1"), Some(&ProbeResult::Success));

    h.manager.remove_pod(&p);
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.workers == 0 && s.pods == 0)));
    assert_eq!(h.manager.readiness("d1", "c1"), None);
    assert_eq!(
        h.manager.probe_results("d1"),
        actions::ProbeResults::default()
    );

    // Housekeeping removes pods not in the keep set.
    h.manager
        .update_pod(&p, &running(&p, &[("app", "c1")]), "127.0.0.1");
    h.manager.cleanup_pods(&HashSet::new());
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.pods == 0)));
}

#[test]
fn pool_grows_for_hung_probes_and_shrinks_when_idle() {
    let server = TestHttp::start(ready_route);
    let h = start_with(ProberConfig {
        grow_after: Duration::from_millis(10),
        idle_timeout: Duration::from_millis(500),
        ..ProberConfig::default()
    });
    let pods: Vec<Arc<Pod>> = (0..5)
        .map(|i| {
            pod(
                &format!("h{i}"),
                Container {
                    name: "app".into(),
                    readiness_probe: quick(http(server.port, "/hang")),
                    ..Default::default()
                },
            )
        })
        .collect();
    for p in &pods {
        h.manager
            .update_pod(p, &running(p, &[("app", "c")]), "127.0.0.1");
    }
    // Each hung attempt holds a thread for its 1 s timeout: the pool grows.
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.attempt_threads >= 3)));
    for p in &pods {
        h.manager.remove_pod(p);
    }
    // Idle again: back to one thread.
    assert!(wait_until(|| h
        .manager
        .stats()
        .is_some_and(|s| s.attempt_threads == 1 && s.in_flight == 0)));
}

#[test]
fn pods_without_probes_leave_nothing_behind() {
    let server = TestHttp::start(ready_route);
    let h = start();
    let plain = pod(
        "n1",
        Container {
            name: "app".into(),
            ..Default::default()
        },
    );
    h.manager.add_pod(&plain);
    h.manager
        .update_pod(&plain, &running(&plain, &[("app", "c1")]), "127.0.0.1");
    let probed = pod(
        "p1",
        Container {
            name: "app".into(),
            readiness_probe: quick(http(server.port, "/ok")),
            ..Default::default()
        },
    );
    h.manager
        .update_pod(&probed, &running(&probed, &[("app", "c2")]), "127.0.0.1");
    // Commands are handled in order: the answer counts all three updates.
    let stats = h.manager.stats();
    assert_eq!(stats.map(|s| (s.pods, s.workers)), Some((1, 1)));
    assert_eq!(
        Arc::strong_count(&plain),
        1,
        "the prober keeps no reference"
    );
    assert_eq!(h.manager.readiness("n1", "c1"), None);
}
