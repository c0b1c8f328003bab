//! The PLEG thread against the fake CRI: a nudge brings a relist forward, so a change
//! litelet made itself is reported without waiting out the relist period, and leaves
//! the periodic relists where they were; the last
//! relist is shared with housekeeping while it is fresh; where the runtime streams
//! container events, an exit is reported from its event, relisting slows down while
//! the stream is up (but not while a pod's inspection has failed), a reopened stream is followed by a catch-up relist, and relisting
//! comes back to its period when the retries run out, the runtime has no stream, or
//! events are turned off.

use std::time::{Duration, Instant};

use crate::support::fake_cri::{self, FakeCri};
use crate::support::wait_until;
use crossbeam_channel::Receiver;
use grpcio::RpcStatusCode;
use litelet::cri::{pb, RuntimeClient};
use litelet::pleg::{Pleg, PodLifecycleEvent, PodLifecycleEventType};
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
    let config = fake_cri::container_config("main", IMAGE, container_labels);
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
    let relists = || relists(&fake);
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

/// A nudged relist does not move the periodic ones: a container that exits soon after
/// litelet started it is seen at the next slot of the schedule, not a whole period
/// after the nudge (upstream's schedule is fixed).
#[test]
fn a_nudged_relist_leaves_the_periodic_schedule_where_it_was() {
    let fake = FakeCri::start();
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    let (events_tx, _events) = crossbeam_channel::bounded(100);
    let period = Duration::from_secs(4);
    let pleg = Pleg::new(runtime, PodStatusCache::new(), events_tx).with_period(period);
    let nudge = pleg.nudger();
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) == 1));
    let first = Instant::now();

    // Half a period later, a nudge: one relist now.
    std::thread::sleep(period / 2);
    nudge.nudge();
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) == 2));
    // The next one keeps its slot, a period after the first (counted from the
    // nudge it would come at one and a half periods).
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) == 3));
    let third = first.elapsed();
    assert!(
        third < period + period / 4,
        "third relist {third:?} after the first, period {period:?}"
    );
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

/// Full relists so far: a relist lists every sandbox; inspecting one pod lists with
/// a label selector.
fn relists(fake: &FakeCri) -> usize {
    fake.calls()
        .iter()
        .filter(|c| c.method == "ListPodSandbox" && c.detail == "all")
        .count()
}

/// Waits for an event of `kind` about container `id`, skipping others.
fn wait_for(
    events: &Receiver<PodLifecycleEvent>,
    kind: PodLifecycleEventType,
    id: &str,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(e) if e.kind == kind && e.container_id == id => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Makes container `id` exit and waits for its ContainerDied event.
fn exit_is_reported(fake: &FakeCri, events: &Receiver<PodLifecycleEvent>, id: &str) -> bool {
    fake.exit_container(id, 1)
        && wait_for(
            events,
            PodLifecycleEventType::ContainerDied,
            id,
            Duration::from_secs(10),
        )
}

fn start(runtime: &RuntimeClient, id: &str) {
    runtime
        .start_container(&pb::StartContainerRequest {
            container_id: id.to_owned(),
            ..Default::default()
        })
        .unwrap();
}

/// A fake runtime with a created container in a pod, serving events or not.
fn runtime_with_a_container(events: bool) -> (FakeCri, RuntimeClient, String) {
    let fake = FakeCri::start();
    fake.state().images.insert(IMAGE.into(), 1);
    fake.serve_events(events);
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    let id = created_container(&runtime);
    (fake, runtime, id)
}

/// True once no relist came for a second (relisting slowed to the evented period).
fn relisting_paused(fake: &FakeCri) -> bool {
    let before = relists(fake);
    std::thread::sleep(Duration::from_secs(1));
    relists(fake) == before
}

#[test]
fn a_container_exit_is_reported_from_the_runtime_event_without_a_relist() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    // Beyond the first relist and the catch-up after the stream opened, no relist
    // comes within the test: only events can report anything.
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_secs(3600));
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        relists(&fake) == 2 && fake.event_stream_counts().0 == 1
    }));
    // The stream is counted live once the catch-up relist has finished, a moment
    // after the fake saw it start.
    assert!(
        wait_until(Duration::from_secs(5), || {
            litelet::metrics::EVENTED_PLEG_CONNECTIONS.value(&[]) >= 1.0
        }),
        "the live stream is counted"
    );

    start(&runtime, &id);
    assert!(
        wait_for(
            &events,
            PodLifecycleEventType::ContainerStarted,
            &id,
            Duration::from_secs(10)
        ),
        "the start event is reported"
    );
    assert!(
        exit_is_reported(&fake, &events, &id),
        "the exit event is reported"
    );
    assert_eq!(relists(&fake), 2, "events, not relists, found both changes");
}

#[test]
fn a_pod_whose_inspection_failed_on_an_event_is_relisted_at_the_normal_period() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    start(&runtime, &id);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_millis(200));
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || relisting_paused(&fake)),
        "relisting slows down while events flow"
    );

    // The inspection the exit event makes fails; the next relist is the only
    // thing left to report the exit.
    let before = relists(&fake);
    fake.fail_nth("PodSandboxStatus", 1, RpcStatusCode::INTERNAL, "busy");
    assert!(
        exit_is_reported(&fake, &events, &id),
        "the exit is reported by a relist soon after the failed inspection"
    );
    assert!(
        relists(&fake) > before,
        "a relist reported it, not the event"
    );
}

#[test]
fn events_update_the_shared_pods_and_the_status_cache() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let cache = PodStatusCache::new();
    let pleg =
        Pleg::new(runtime.clone(), cache.clone(), events_tx).with_period(Duration::from_secs(3600));
    let shared = pleg.last_relist();
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(wait_until(Duration::from_secs(10), || fake
        .event_stream_counts()
        .0
        == 1));

    start(&runtime, &id);
    assert!(wait_for(
        &events,
        PodLifecycleEventType::ContainerStarted,
        &id,
        Duration::from_secs(10)
    ));
    let pods = shared
        .fresh(Instant::now(), Duration::from_secs(3600))
        .expect("a relist happened");
    assert_eq!(pods[UID].containers[0].state, ContainerState::Running);
    let status = cache.get(UID).status.expect("inspected");
    assert_eq!(status.containers[0].state, ContainerState::Running);

    runtime
        .remove_pod_sandbox(&pb::RemovePodSandboxRequest {
            pod_sandbox_id: status.sandboxes[0].id.clone(),
            ..Default::default()
        })
        .unwrap();
    assert!(wait_for(
        &events,
        PodLifecycleEventType::ContainerRemoved,
        &id,
        Duration::from_secs(10)
    ));
    assert!(wait_until(Duration::from_secs(10), || {
        shared
            .fresh(Instant::now(), Duration::from_secs(3600))
            .is_some_and(|pods| !pods.contains_key(UID))
    }));
}

#[test]
fn a_reopened_stream_is_followed_by_a_relist_that_catches_what_it_missed() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    start(&runtime, &id);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_secs(3600));
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || relists(&fake) == 2),
        "live"
    );

    // The runtime restarts: the stream breaks, the PLEG relists at once and reopens
    // the stream a second later. The container exits in between, unseen by any stream.
    fake.break_event_streams();
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) == 3));
    std::thread::sleep(Duration::from_millis(300)); // that relist is over
    assert!(fake.exit_container(&id, 1));
    assert_eq!(
        fake.event_stream_counts().0,
        1,
        "exited while the stream was down"
    );

    assert!(
        wait_for(
            &events,
            PodLifecycleEventType::ContainerDied,
            &id,
            Duration::from_secs(10)
        ),
        "the relist after reopening reports the exit"
    );
    assert_eq!(fake.event_stream_counts().0, 2, "the stream was reopened");
    assert_eq!(relists(&fake), 4, "one relist after reopening");
}

#[test]
fn once_the_stream_retries_run_out_relisting_returns_to_its_period() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    start(&runtime, &id);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_millis(200))
        .with_stream_retry_wait(Duration::from_millis(20));
    let health = pleg.health();
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || relisting_paused(&fake)),
        "relisting slows down while events flow"
    );
    let now = Instant::now();
    assert!(
        health.check(now + Duration::from_secs(400), now).is_ok(),
        "a relist minutes old is healthy while events flow"
    );

    // The stream breaks and every reopening fails: five failures in a row.
    let errors = litelet::metrics::EVENTED_PLEG_CONNECTION_ERRORS.value(&[]);
    for nth in 1..=4 {
        fake.fail_nth(
            "GetContainerEvents",
            nth,
            RpcStatusCode::UNAVAILABLE,
            "restarting",
        );
    }
    fake.break_event_streams();
    assert!(wait_until(Duration::from_secs(10), || fake
        .count("GetContainerEvents")
        == 5));
    let before = relists(&fake);
    std::thread::sleep(Duration::from_secs(2));
    let during = relists(&fake) - before;
    assert!(during >= 5, "{during} relists in 2 s at a 200 ms period");
    assert_eq!(
        fake.count("GetContainerEvents"),
        5,
        "no attempt after giving up"
    );
    let counted = litelet::metrics::EVENTED_PLEG_CONNECTION_ERRORS.value(&[]) - errors;
    assert!(counted >= 5.0, "failures counted ({counted})");
    assert!(exit_is_reported(&fake, &events, &id));
}

#[test]
fn a_runtime_without_events_is_relisted_at_the_normal_period_and_not_asked_again() {
    let (fake, runtime, id) = runtime_with_a_container(false);
    start(&runtime, &id);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_millis(200));
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) >= 2));
    let before = relists(&fake);
    std::thread::sleep(Duration::from_secs(3));
    let during = relists(&fake) - before;
    assert!(during >= 8, "{during} relists in 3 s at a 200 ms period");
    assert_eq!(fake.event_stream_refusals(), 1, "asked once, never retried");
    assert!(exit_is_reported(&fake, &events, &id));
}

#[test]
fn with_events_turned_off_the_pleg_only_relists() {
    let (fake, runtime, id) = runtime_with_a_container(true);
    start(&runtime, &id);
    let (events_tx, events) = crossbeam_channel::bounded(100);
    let pleg = Pleg::new(runtime.clone(), PodStatusCache::new(), events_tx)
        .with_period(Duration::from_millis(200))
        .without_events();
    let (_shutdown_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let _thread = pleg.spawn(shutdown).unwrap();
    assert!(wait_until(Duration::from_secs(10), || relists(&fake) >= 5));
    assert!(exit_is_reported(&fake, &events, &id));
    assert_eq!(
        fake.count("GetContainerEvents"),
        0,
        "never asked for events"
    );
    assert_eq!(fake.event_stream_counts(), (0, 0));
}
