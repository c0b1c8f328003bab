//! Exec probes against a real containerd (busybox, host network): a readiness probe
//! that fails until a file exists, a liveness probe that outlives its timeout, and one
//! whose binary does not exist. Skips loudly without root unless CI=true.

use std::time::{Duration, Instant};

use crate::support::containerd::{
    busybox_container, host_network_sandbox, remove_cgroup_tree, remove_sandbox, Containerd,
};
use crate::support::pods;
use crate::support::probes::{exec, status};
use litelet::api::pod::Container;
use litelet::cri::{self, pb, ConnectOptions, Endpoint, RuntimeClient};
use litelet::events::Recorder;
use litelet::prober::{ProbeKind, ProbeManager, ProbeUpdate, ProberConfig};
use litelet::runtime::actions::ProbeResult;

const WAIT: Duration = Duration::from_secs(30);

fn run(
    containerd: &Containerd,
    runtime: &RuntimeClient,
    sandbox_id: &str,
    sandbox: &pb::PodSandboxConfig,
    name: &str,
) -> String {
    let config = busybox_container(sandbox, name, &["sleep", "3600"]);
    containerd.run_container(runtime, sandbox_id, sandbox, config)
}

#[test]
fn exec_probes_against_real_containerd() {
    let Some(containerd) = Containerd::start("exec_probes_against_real_containerd") else {
        return;
    };
    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let (runtime, _) = cri::connect(&endpoint, &ConnectOptions::default());
    let uid = format!("probe-{}", std::process::id());
    let log_dir = containerd.dir().join("pod-logs");
    std::fs::create_dir_all(&log_dir).unwrap();
    let cgroup_parent = format!("/litelet-probe-test-{}", std::process::id());
    let config = host_network_sandbox("probed", &uid, &log_dir, &cgroup_parent);
    let sandbox_id = containerd.run_sandbox(&runtime, &config);
    let main = run(&containerd, &runtime, &sandbox_id, &config, "main");
    let typo = run(&containerd, &runtime, &sandbox_id, &config, "typo");

    let mut pod = pods::meta("default", "probed", &uid);
    pod.spec.containers = vec![
        Container {
            name: "main".into(),
            readiness_probe: exec(&["cat", "/tmp/ready"]),
            liveness_probe: exec(&["sleep", "5"]),
            ..Default::default()
        },
        Container {
            name: "typo".into(),
            liveness_probe: exec(&["no-such-binary"]),
            ..Default::default()
        },
    ];
    let status = status(&pod, &[("main", &main), ("typo", &typo)]);

    let (events_tx, events) = crossbeam_channel::unbounded();
    let (_shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    let (manager, _) = ProbeManager::start(
        ProberConfig::default(),
        runtime.clone(),
        Recorder::new(events_tx),
        shutdown_rx,
    )
    .unwrap();
    let updates = manager.results();
    let started = Instant::now();
    manager.update_pod(&std::sync::Arc::new(pod.clone()), &status, "127.0.0.1");

    let want = |id: &str, kind, result| ProbeUpdate {
        uid: uid.clone(),
        container_id: id.to_owned(),
        kind,
        result,
    };
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(updates.recv_timeout(WAIT).expect("a probe update"));
    }
    assert!(
        got.contains(&want(&main, ProbeKind::Readiness, ProbeResult::Failure)),
        "{got:?}"
    );
    assert!(
        got.contains(&want(&main, ProbeKind::Liveness, ProbeResult::Failure)),
        "{got:?}"
    );
    assert!(
        got.contains(&want(&typo, ProbeKind::Liveness, ProbeResult::Failure)),
        "{got:?}"
    );
    // `sleep 5` was cut at the 1 s timeout, well before it would have ended.
    assert!(started.elapsed() < Duration::from_secs(5));

    let messages: Vec<String> = events.try_iter().map(|e| e.message).collect();
    for m in &messages {
        eprintln!("event: {m}");
    }
    assert!(
        messages
            .iter()
            .any(|m| m == "Liveness probe failed: command [\"sleep\", \"5\"] timed out after 1s"),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m
            .starts_with("Liveness probe failed: command [\"no-such-binary\"]: cri exec_sync:")
            && m.contains("no-such-binary")),
        "{messages:?}"
    );

    // The file appears: readiness passes.
    runtime
        .exec_sync(&pb::ExecSyncRequest {
            container_id: main.clone(),
            cmd: vec!["touch".into(), "/tmp/ready".into()],
            timeout: 10,
            ..Default::default()
        })
        .expect("touch the ready file");
    assert_eq!(
        updates.recv_timeout(WAIT).expect("readiness passes"),
        want(&main, ProbeKind::Readiness, ProbeResult::Success)
    );
    assert_eq!(manager.readiness(&uid, &main), Some(true));

    manager.remove_pod(&pod);
    remove_sandbox(&runtime, &sandbox_id);
    remove_cgroup_tree(&cgroup_parent);
}
