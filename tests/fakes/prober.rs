//! Exec probes through the prober against the fake CRI's ExecSync (real gRPC on a
//! unix socket): exit 0, exit 1, a missing binary, a slow runtime, scripted outcomes
//! that change, and a hung exec that does not block a TCP probe beside it. Then the
//! results where they are used: a liveness failure becomes a kill and restart in
//! `compute_pod_actions`, readiness becomes container `ready` and the pod `Ready`
//! condition in status generation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::fake_cri::{self, FakeCri};
use crate::support::pods;
use crate::support::probes::{exec, status};
use crate::support::wait_until;
use crossbeam_channel::{Receiver, Sender};
use litelet::api::pod::{Container, Pod, Probe, ProbeHandler};
use litelet::cri::{pb, RuntimeClient};
use litelet::events::{EventRecord, Recorder};
use litelet::prober::{ProbeKind, ProbeManager, ProbeUpdate, ProberConfig};
use litelet::runtime::actions::ProbeResult;
use protobuf::MessageField;

const BUSYBOX: &str = "localhost/litelet/busybox:1.0";
const WAIT: Duration = Duration::from_secs(20);

struct World {
    fake: FakeCri,
    runtime: RuntimeClient,
    sandbox: String,
    manager: ProbeManager,
    updates: Receiver<ProbeUpdate>,
    events: Receiver<EventRecord>,
    _shutdown: Sender<()>,
}

fn world() -> World {
    let fake = FakeCri::start();
    fake.state().images.insert(BUSYBOX.into(), 1_300_000);
    let (runtime, _) = fake.clients(Duration::from_secs(30));
    let config = pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: "probed".into(),
            uid: "uid-probed".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = runtime
        .run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(config),
            ..Default::default()
        })
        .unwrap()
        .pod_sandbox_id;
    let (events_tx, events) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let (manager, _) = ProbeManager::start(
        ProberConfig::default(),
        runtime.clone(),
        Recorder::new(events_tx),
        shutdown_rx,
    )
    .unwrap();
    let updates = manager.results();
    World {
        fake,
        runtime,
        sandbox,
        manager,
        updates,
        events,
        _shutdown: shutdown,
    }
}

impl World {
    /// Creates and starts a container; returns its ID.
    fn run(&self, name: &str) -> String {
        let config = fake_cri::container_config(name, BUSYBOX, Default::default());
        fake_cri::run_container(&self.runtime, &self.sandbox, config)
    }

    fn next_update(&self) -> ProbeUpdate {
        self.updates.recv_timeout(WAIT).expect("a probe update")
    }

    /// Waits for an event whose message starts with `prefix`; returns it.
    fn event(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        while let Ok(e) = self
            .events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if e.message.starts_with(prefix) {
                return e.message;
            }
        }
        panic!("no event starting with {prefix:?}");
    }
}

fn pod(containers: Vec<Container>) -> Pod {
    let mut pod = pods::meta("default", "probed", "uid-probed");
    pod.spec.containers = containers;
    pod
}

fn update(id: &str, kind: ProbeKind, result: ProbeResult) -> ProbeUpdate {
    ProbeUpdate {
        uid: "uid-probed".into(),
        container_id: id.into(),
        kind,
        result,
    }
}

#[test]
fn exec_exit_codes_and_missing_binary() {
    let w = world();
    let ok = w.run("ok");
    let bad = w.run("bad");
    let typo = w.run("typo");
    let p = pod(vec![
        Container {
            name: "ok".into(),
            liveness_probe: exec(&["true"]),
            ..Default::default()
        },
        Container {
            name: "bad".into(),
            readiness_probe: exec(&["cat", "/tmp/ready"]),
            ..Default::default()
        },
        Container {
            name: "typo".into(),
            liveness_probe: exec(&["no-such-binary", "--check"]),
            ..Default::default()
        },
    ]);
    w.fake.state().exec_results.insert(
        "cat /tmp/ready".into(),
        (1, "cat: /tmp/ready: No such file".into()),
    );
    w.manager.update_pod(
        &Arc::new(p.clone()),
        &status(&p, &[("ok", &ok), ("bad", &bad), ("typo", &typo)]),
        "",
    );
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(w.next_update());
    }
    assert!(got.contains(&update(&ok, ProbeKind::Liveness, ProbeResult::Success)));
    assert!(got.contains(&update(&bad, ProbeKind::Readiness, ProbeResult::Failure)));
    assert!(got.contains(&update(&typo, ProbeKind::Liveness, ProbeResult::Failure)));

    let missing = w.event("Liveness probe failed: command [\"no-such-binary\"");
    assert!(missing.contains("executable file not found"), "{missing}");
    let exited = w.event("Readiness probe failed: command [\"cat\"");
    assert_eq!(
        exited,
        "Readiness probe failed: command [\"cat\", \"/tmp/ready\"] exited with 1: \
         cat: /tmp/ready: No such file"
    );
    assert_eq!(w.manager.readiness("uid-probed", &bad), Some(false));

    // The scripted outcome turns good: readiness follows.
    w.fake
        .state()
        .exec_results
        .insert("cat /tmp/ready".into(), (0, "ready".into()));
    assert_eq!(
        w.next_update(),
        update(&bad, ProbeKind::Readiness, ProbeResult::Success)
    );
    assert_eq!(w.manager.readiness("uid-probed", &bad), Some(true));
    // The calls reached the runtime with the probe's timeout.
    let calls = w.fake.calls();
    assert!(calls.iter().any(|c| c.method == "ExecSync"));
}

#[test]
fn slow_runtime_costs_the_timeout_and_blocks_no_one() {
    let w = world();
    let slow = w.run("slow");
    let fast = w.run("fast");
    // Every ExecSync answer comes 10 s late; the probe gives up after its 1 s.
    w.fake.delay("ExecSync", Duration::from_secs(10));
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let p = pod(vec![
        Container {
            name: "slow".into(),
            liveness_probe: exec(&["true"]),
            ..Default::default()
        },
        Container {
            name: "fast".into(),
            readiness_probe: Some(Probe {
                handler: ProbeHandler {
                    tcp_socket: Some(litelet::api::pod::TcpSocketAction {
                        port: litelet::api::pod::IntOrString::Int(i32::from(port)),
                        host: None,
                    }),
                    ..Default::default()
                },
                period_seconds: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]);
    let started = Instant::now();
    w.manager.update_pod(
        &Arc::new(p.clone()),
        &status(&p, &[("slow", &slow), ("fast", &fast)]),
        "127.0.0.1",
    );
    // The TCP readiness is not held up by the hung exec.
    assert_eq!(
        w.next_update(),
        update(&fast, ProbeKind::Readiness, ProbeResult::Success)
    );
    assert_eq!(
        w.next_update(),
        update(&slow, ProbeKind::Liveness, ProbeResult::Failure)
    );
    let message = w.event("Liveness probe failed:");
    assert_eq!(
        message,
        "Liveness probe failed: command [\"true\"] timed out after 1s"
    );
    // Well before the runtime's 10 s answer.
    assert!(started.elapsed() < Duration::from_secs(9));
    assert!(wait_until(WAIT, || w
        .manager
        .stats()
        .is_some_and(|s| s.workers == 2)));
}

#[test]
fn liveness_failure_becomes_a_restart_with_the_kill_message() {
    use litelet::api::pod::RestartPolicy;
    use litelet::runtime::actions::{compute_pod_actions, KillReason};
    use litelet::runtime::hash::container_hash;
    use litelet::runtime::model::{SandboxState, SandboxStatus};

    let w = world();
    let id = w.run("app");
    let mut p = pod(vec![Container {
        name: "app".into(),
        image: Some(BUSYBOX.into()),
        liveness_probe: exec(&["false"]),
        ..Default::default()
    }]);
    let mut runtime_status = status(&p, &[("app", &id)]);
    runtime_status.containers[0].hash = container_hash(&p.spec.containers[0]);
    runtime_status.containers[0].hash_without_resources =
        litelet::runtime::hash::container_hash_without_resources(&p.spec.containers[0]);
    runtime_status.sandboxes = vec![SandboxStatus {
        id: w.sandbox.clone(),
        state: SandboxState::Ready,
        ip: "10.0.0.2".into(),
        ..Default::default()
    }];
    w.manager
        .update_pod(&Arc::new(p.clone()), &runtime_status, "");
    assert_eq!(
        w.next_update(),
        update(&id, ProbeKind::Liveness, ProbeResult::Failure)
    );
    assert_eq!(
        w.event("Liveness probe failed:"),
        "Liveness probe failed: command [\"false\"] exited with 1"
    );
    let results = w.manager.probe_results("uid-probed");

    p.spec.restart_policy = Some(RestartPolicy::Always);
    let actions = compute_pod_actions(&p, &runtime_status, &results);
    let kill = &actions.containers_to_kill[&id];
    assert_eq!(kill.reason, KillReason::LivenessProbe);
    assert_eq!(
        kill.message,
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(actions.containers_to_start, [0]);

    // restartPolicy Never: killed, not restarted.
    p.spec.restart_policy = Some(RestartPolicy::Never);
    let actions = compute_pod_actions(&p, &runtime_status, &results);
    assert_eq!(
        actions.containers_to_kill[&id].message,
        "Container app failed liveness probe"
    );
    assert!(actions.containers_to_start.is_empty());
}

#[test]
fn readiness_drives_container_ready_and_the_pod_ready_condition() {
    use litelet::api::meta::{ConditionStatus, Time};
    use litelet::api::pod::RestartPolicy;
    use litelet::status::generate::{generate_pod_status, PodStatusInput};

    let w = world();
    let id = w.run("app");
    let mut p = pod(vec![Container {
        name: "app".into(),
        image: Some(BUSYBOX.into()),
        readiness_probe: exec(&["cat", "/tmp/ready"]),
        ..Default::default()
    }]);
    p.spec.restart_policy = Some(RestartPolicy::Always);
    let runtime_status = status(&p, &[("app", &id)]);
    let ready = |results| {
        let mut input = PodStatusInput::new(&p, &runtime_status, "containerd", Time::now());
        input.probes = results;
        let status = generate_pod_status(&input);
        let container = status.container_statuses[0].ready;
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.clone());
        (container, condition)
    };
    w.fake
        .state()
        .exec_results
        .insert("cat /tmp/ready".into(), (1, String::new()));
    w.manager
        .update_pod(&Arc::new(p.clone()), &runtime_status, "");
    // Before any result: not ready.
    assert_eq!(
        ready(w.manager.status_results("uid-probed")),
        (false, Some(ConditionStatus::False))
    );
    assert_eq!(
        w.next_update(),
        update(&id, ProbeKind::Readiness, ProbeResult::Failure)
    );
    assert_eq!(
        ready(w.manager.status_results("uid-probed")),
        (false, Some(ConditionStatus::False))
    );
    w.fake
        .state()
        .exec_results
        .insert("cat /tmp/ready".into(), (0, String::new()));
    assert_eq!(
        w.next_update(),
        update(&id, ProbeKind::Readiness, ProbeResult::Success)
    );
    assert_eq!(
        ready(w.manager.status_results("uid-probed")),
        (true, Some(ConditionStatus::True))
    );
}
