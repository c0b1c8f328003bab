//! `make bench ONLY=relist`: what one relist's listing costs litelet's CPU at 100 pods,
//! read lean (`cri/listing.rs`, what the PLEG calls) and decoded into the generated
//! types (what it called before). On a runtime without container events the PLEG
//! lists once a second, so at 100 idle pods this is most of the node's idle CPU.
//!
//! The fake CRI holds 100 sandboxes and 100 running containers with the labels and
//! annotations a kubelet puts on them; the bench calls `ListPodSandbox` and
//! `ListContainers` over the real gRPC channel many times each way and counts the
//! calling thread's CPU time (`/proc/thread-self/schedstat`): the answer is decoded
//! on the thread that waits for it, and the fake server's work is not counted.

use std::collections::HashMap;
use std::time::Duration;

use litelet::cri::{pb, RuntimeClient};
use protobuf::MessageField;

use crate::report::Row;
use crate::support::fake_cri::{self, FakeCri};

const SCENARIO: &str = "relist listing, 100 pods";
const PODS: usize = 100;
const ROUNDS: usize = 2000;
const IMAGE: &str = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1";

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let nanos = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(nanos)
}

fn strings(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Sandbox `i` and its container, labelled and annotated as a kubelet does.
fn add_pod(runtime: &RuntimeClient, i: usize) {
    let (name, uid, ns) = (
        format!("idle-{i}"),
        format!("uid-{i:04}-5e1f"),
        "bench".to_owned(),
    );
    let pod_labels = [
        ("io.kubernetes.pod.name", name.clone()),
        ("io.kubernetes.pod.namespace", ns.clone()),
        ("io.kubernetes.pod.uid", uid.clone()),
    ];
    let mut sandbox_labels = pod_labels.to_vec();
    sandbox_labels.push(("app", name.clone()));
    let sandbox = runtime
        .run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(pb::PodSandboxConfig {
                metadata: MessageField::some(pb::PodSandboxMetadata {
                    name: name.clone(),
                    uid: uid.clone(),
                    namespace: ns.clone(),
                    ..Default::default()
                }),
                labels: strings(&sandbox_labels),
                annotations: strings(&[
                    (
                        "kubernetes.io/config.seen",
                        "2026-11-28T23:00:00.000000000Z".into(),
                    ),
                    ("kubernetes.io/config.source", "api".into()),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("sandbox")
        .pod_sandbox_id;
    let mut labels = pod_labels.to_vec();
    labels.push(("io.kubernetes.container.name", "main".into()));
    let config = pb::ContainerConfig {
        annotations: strings(&[
            ("io.kubernetes.container.hash", "3b7ed2a1".into()),
            (
                "io.kubernetes.container.hashWithoutResources",
                "91ac0e55".into(),
            ),
            ("io.kubernetes.container.restartCount", "0".into()),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log".into(),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy",
                "File".into(),
            ),
            ("io.kubernetes.pod.terminationGracePeriod", "30".into()),
        ]),
        ..fake_cri::container_config("main", IMAGE, strings(&labels))
    };
    fake_cri::run_container(runtime, &sandbox, config);
}

/// CPU per round of `list`, after a few rounds to warm the channel.
fn cpu_per_round(list: &dyn Fn() -> usize) -> Duration {
    for _ in 0..50 {
        list();
    }
    let before = thread_cpu();
    for _ in 0..ROUNDS {
        assert_eq!(list(), 2 * PODS, "a listing lost items");
    }
    (thread_cpu() - before) / ROUNDS as u32
}

pub fn relist(rows: &mut Vec<Row>) {
    let fake = FakeCri::start();
    let (runtime, images) = fake.clients(Duration::from_secs(10));
    images
        .pull_image(&pb::PullImageRequest {
            image: MessageField::some(pb::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("pull");
    for i in 0..PODS {
        add_pod(&runtime, i);
    }
    let all_sandboxes = pb::ListPodSandboxRequest::default();
    let all_containers = pb::ListContainersRequest::default();
    let generated = cpu_per_round(&|| {
        let sandboxes = runtime.list_pod_sandbox(&all_sandboxes).expect("list");
        let containers = runtime.list_containers(&all_containers).expect("list");
        sandboxes.items.len() + containers.containers.len()
    });
    let lean = cpu_per_round(&|| {
        let sandboxes = runtime.list_pod_sandbox_lean(&all_sandboxes).expect("list");
        let containers = runtime.list_containers_lean(&all_containers).expect("list");
        sandboxes.len() + containers.len()
    });
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    rows.push(Row::new(
        SCENARIO,
        "CPU per listing, generated types",
        micros(generated),
        "µs",
    ));
    rows.push(Row::new(
        SCENARIO,
        "CPU per listing, lean",
        micros(lean),
        "µs",
    ));
    rows.push(Row::new(
        SCENARIO,
        "lean / generated",
        lean.as_secs_f64() / generated.as_secs_f64().max(1e-9),
        "x",
    ));
    // Once a second, as a relist without container events runs.
    rows.push(Row::new(
        SCENARIO,
        "CPU per minute saved at one relist a second",
        (generated.saturating_sub(lean)).as_secs_f64() * 60.0 * 1000.0,
        "ms",
    ));
}
