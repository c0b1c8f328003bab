//! The PLEG thread against the fake CRI: a nudge brings a relist forward, so a change
//! litelet made itself is reported without waiting out the relist period; the last
//! relist is shared with housekeeping while it is fresh.

use std::time::{Duration, Instant};

use crate::support::fake_cri::FakeCri;
use crate::support::wait_until;
use litelet::cri::{pb, RuntimeClient};
use litelet::pleg::{Pleg, PodLifecycleEventType};
use litelet::runtime::cache::PodStatusCache;
use litelet::runtime::labels;
use litelet::runtime::model::ContainerState;
use protobuf::MessageField;

const IMAGE: &str = "localhost/litelet/busybox:1.0";
const UID: &str = "uid-nudged";

/// A created (not started) container in a sandbox labelled as litelet labels them.
fn created_container(runtime: &RuntimeClient) -> String {
    let pod_labels = [
        (labels::POD_UID, UID),
        (labels::POD_NAME, "nudged"),
        (labels::POD_NAMESPACE, "default"),
    ];
    let sandbox = pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: "nudged".into(),
            uid: UID.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        labels: pod_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let sandbox_id = runtime
        .run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(sandbox.clone()),
            ..Default::default()
        })
        .unwrap()
        .pod_sandbox_id;
    let mut container_labels = sandbox.labels.clone();
    container_labels.insert(labels::CONTAINER_NAME.into(), "main".into());
    let config = pb::ContainerConfig {
        metadata: MessageField::some(pb::ContainerMetadata {
            name: "main".into(),
            ..Default::default()
        }),
        image: MessageField::some(pb::ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        labels: container_labels,
        ..Default::default()
    };
    runtime
        .create_container(&pb::CreateContainerRequest {
            pod_sandbox_id: sandbox_id,
            config: MessageField::some(config),
            sandbox_config: MessageField::some(sandbox),
            ..Default::default()
        })
        .unwrap()
        .container_id
}

#[test]
fn a_nudge_relists_now_and_many_nudges_fold_into_few_relists() {
    let fake = FakeCri::start();
    fake.state().images.insert(IMAGE.into(), 1);
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    let id = created_container(&runtime);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    // A period far longer than the test: only the first relist and nudges happen.
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_secs(3600));
    let nudge = pleg.nudger();
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    // A relist lists every sandbox; inspecting one pod lists with a label selector.
    let relists = || {
        fake.calls()
            .iter()
            .filter(|c| c.method == "ListPodSandbox" && c.detail == "all")
            .count()
    };
    assert!(wait_until(Duration::from_secs(10), || relists() == 1));
    // The first relist reports the new sandbox; set that aside.
    while events.recv_timeout(Duration::from_millis(200)).is_ok() {}

    runtime
        .start_container(&pb::StartContainerRequest {
            container_id: id.clone(),
            ..Default::default()
        })
        .unwrap();
    // Nothing reports the start until someone nudges.
    assert!(events.recv_timeout(Duration::from_millis(300)).is_err());
    for _ in 0..50 {
        nudge.nudge();
    }
    let event = events
        .recv_timeout(Duration::from_secs(10))
        .expect("the nudged relist reports the started container");
    assert_eq!(event.kind, PodLifecycleEventType::ContainerStarted);
    assert_eq!(event.container_id, id);
    // Fifty nudges before the relist ran folded into one or two relists, not fifty.
    std::thread::sleep(Duration::from_millis(500));
    let relists = relists();
    assert!((2..=3).contains(&relists), "{relists} relists");
}

#[test]
fn the_last_relist_is_shared_while_it_is_fresh() {
    let fake = FakeCri::start();
    fake.state().images.insert(IMAGE.into(), 1);
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    let id = created_container(&runtime);
    runtime
        .start_container(&pb::StartContainerRequest {
            container_id: id.clone(),
            ..Default::default()
        })
        .unwrap();
    let (events_tx, _events) = crossbeam_channel::bounded(100);
    let mut pleg = Pleg::new(runtime, PodStatusCache::new(), events_tx);
    let shared = pleg.last_relist();
    assert!(shared
        .fresh(Instant::now(), Duration::from_secs(2))
        .is_none());

    pleg.relist();
    let pods = shared
        .fresh(Instant::now(), Duration::from_secs(2))
        .expect("a relist that just ran is fresh");
    let pod = &pods[UID];
    assert_eq!(pod.containers.len(), 1);
    assert_eq!(pod.containers[0].id, id);
    assert_eq!(pod.containers[0].state, ContainerState::Running);
    // Seen from a moment three seconds later, the same relist is too old.
    let later = Instant::now() + Duration::from_secs(3);
    assert!(shared.fresh(later, Duration::from_secs(2)).is_none());
}
