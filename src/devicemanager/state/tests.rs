//! Tests of the device state: capacity and health, a plugin stopped or replaced,
//! admission, picking devices, freeing them, and the checkpoint round trip.

use super::*;
use crate::api::pod::ResourceRequirements;
use crate::api::quantity::Quantity;

const R: &str = "example.com/resource";

fn pod(uid: &str, count: &str) -> Pod {
    let mut resources = ResourceRequirements::default();
    let q = Quantity::parse(count).unwrap();
    resources.limits.insert(R.into(), q.clone());
    resources.requests.insert(R.into(), q);
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.into());
    pod.spec.containers.push(Container {
        name: "app".into(),
        resources: Some(resources),
        ..Default::default()
    });
    pod
}

fn two_devices() -> (DeviceState, Instant) {
    let mut state = DeviceState::default();
    let generation = state.register(R);
    state.set_devices(
        R,
        generation,
        [("Dev-1".to_owned(), true), ("Dev-2".to_owned(), true)],
    );
    (state, Instant::now())
}

fn key(uid: &str) -> ContainerKey {
    (uid.to_owned(), "app".to_owned())
}

#[test]
fn healthy_devices_are_allocatable_and_every_device_is_capacity() {
    let (mut state, now) = two_devices();
    assert_eq!(state.capacity(now)[R], (2, 2));
    let generation = state.resource(R).unwrap().generation;
    state.set_devices(
        R,
        generation,
        [("Dev-1".to_owned(), true), ("Dev-2".to_owned(), false)],
    );
    assert_eq!(state.capacity(now)[R], (2, 1));
}

#[test]
fn a_stopped_plugin_loses_allocatable_at_once_and_capacity_after_the_grace() {
    let (mut state, now) = two_devices();
    let generation = state.resource(R).unwrap().generation;
    assert!(state.stopped(R, generation, now));
    assert_eq!(state.capacity(now)[R], (2, 0));
    assert_eq!(
        state.capacity(now + STOP_GRACE - Duration::from_secs(1))[R],
        (2, 0)
    );
    assert_eq!(state.capacity(now + STOP_GRACE)[R], (0, 0));
}

#[test]
fn a_replaced_plugins_late_stream_changes_nothing() {
    let (mut state, now) = two_devices();
    let old = state.resource(R).unwrap().generation;
    let new = state.register(R);
    assert!(!state.stopped(R, old, now));
    assert!(!state.set_devices(R, old, []));
    assert_eq!(state.capacity(now)[R], (2, 2));
    assert!(state.set_devices(R, new, [("Dev-3".to_owned(), true)]));
    assert_eq!(state.capacity(now)[R], (1, 1));
}

#[test]
fn admission_counts_the_active_pods_requests_against_healthy_devices() {
    let (state, now) = two_devices();
    let (a, b, c) = (pod("a", "1"), pod("b", "1"), pod("c", "1"));
    assert_eq!(state.admit(&a, &[], now), Ok(()));
    assert_eq!(state.admit(&b, &[&a], now), Ok(()));
    let refused = state.admit(&c, &[&a, &b], now).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0"
    );
    assert!(state.admit(&pod("d", "3"), &[], now).is_err());
}

#[test]
fn resources_no_plugin_serves_are_left_to_the_predicates() {
    let state = DeviceState::default();
    assert_eq!(state.admit(&pod("a", "1"), &[], Instant::now()), Ok(()));
}

#[test]
fn picking_prefers_the_plugins_choice_and_never_hands_out_a_held_device() {
    let (mut state, _) = two_devices();
    assert_eq!(
        state.pick(&key("a"), R, 1, &["Dev-2".into()], &[]).unwrap(),
        ["Dev-2"]
    );
    assert_eq!(state.free(R), ["Dev-1"]);
    // The preference names a held device: the free one is given instead.
    assert_eq!(
        state.pick(&key("b"), R, 1, &["Dev-2".into()], &[]).unwrap(),
        ["Dev-1"]
    );
    let refused = state.pick(&key("c"), R, 1, &[], &[]).unwrap_err();
    assert_eq!(refused.available, 0);
    state.release(&key("b"), R);
    assert_eq!(state.free(R), ["Dev-1"]);
}

#[test]
fn a_preference_naming_a_device_twice_or_one_not_free_still_gives_distinct_free_devices() {
    let (mut state, _) = two_devices();
    let generation = state.resource(R).unwrap().generation;
    let three = ["Dev-1", "Dev-2", "Dev-3"].map(|id| (id.to_owned(), true));
    state.set_devices(R, generation, three);
    let twice: Vec<String> = vec!["Dev-2".into(), "Dev-2".into()];
    assert_eq!(
        state.pick(&key("a"), R, 2, &twice, &[]).unwrap(),
        ["Dev-2", "Dev-1"]
    );
    assert_eq!(state.free(R), ["Dev-3"]);
    // Unknown and held devices are passed over; fewer than needed are topped up.
    let odd: Vec<String> = vec!["Dev-9".into(), "Dev-1".into()];
    let refused = state.pick(&key("b"), R, 2, &odd, &[]).unwrap_err();
    assert_eq!((refused.requested, refused.available), (2, 1));
    assert_eq!(state.pick(&key("b"), R, 1, &odd, &[]).unwrap(), ["Dev-3"]);
    assert!(state.free(R).is_empty());
}

#[test]
fn a_checkpointed_device_named_twice_is_held_once() {
    let mut state = DeviceState::default();
    let twice = Assigned {
        ids: vec!["Dev-1".into(), "Dev-1".into(), "Dev-2".into()],
        options: None,
    };
    state.restore_allocation(key("a"), R.into(), twice);
    assert_eq!(
        state.assigned(&key("a"), R).unwrap().ids,
        ["Dev-1", "Dev-2"]
    );
}

#[test]
fn unhealthy_devices_are_never_picked() {
    let (mut state, _) = two_devices();
    let generation = state.resource(R).unwrap().generation;
    state.set_devices(
        R,
        generation,
        [("Dev-1".to_owned(), false), ("Dev-2".to_owned(), true)],
    );
    assert_eq!(
        state.pick(&key("a"), R, 1, &["Dev-1".into()], &[]).unwrap(),
        ["Dev-2"]
    );
}

#[test]
fn devices_of_pods_no_longer_active_go_back() {
    let (mut state, _) = two_devices();
    state.pick(&key("a"), R, 1, &[], &[]).unwrap();
    state.pick(&key("b"), R, 1, &[], &[]).unwrap();
    assert!(state.free(R).is_empty());
    assert!(state.retain_pods(&["b".to_owned()].into()));
    assert_eq!(state.free(R), ["Dev-1"]);
    assert!(!state.retain_pods(&["b".to_owned()].into()));
}

#[test]
fn the_checkpoint_round_trips_allocations_and_restores_resources_at_zero() {
    let (mut state, now) = two_devices();
    state.pick(&key("a"), R, 1, &[], &[]).unwrap();
    let options = DeviceRunOptions {
        envs: [("DEV".to_owned(), "1".to_owned())].into(),
        ..Default::default()
    };
    state.set_options(&key("a"), R, options.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(crate::devicemanager::checkpoint::FILE);
    crate::devicemanager::checkpoint::store(&path, &state).unwrap();

    let mut restored = DeviceState::default();
    crate::devicemanager::checkpoint::load(&path, &mut restored, now).unwrap();
    let held = restored.assigned(&key("a"), R).unwrap();
    assert_eq!(held.ids, ["Dev-1"]);
    assert_eq!(held.options.as_ref(), Some(&options));
    // Until the plugin registers again: known, but nothing to admit against.
    assert!(restored.serves(R));
    assert_eq!(restored.capacity(now)[R], (0, 0));
    assert!(restored.admit(&pod("b", "1"), &[], now).is_err());
    // Once it lists its devices again, the held one stays held.
    let generation = restored.register(R);
    restored.set_devices(
        R,
        generation,
        [("Dev-1".to_owned(), true), ("Dev-2".to_owned(), true)],
    );
    assert_eq!(restored.free(R), ["Dev-2"]);
}

#[test]
fn a_damaged_checkpoint_restores_no_allocations_and_is_kept_aside() {
    use crate::devicemanager::checkpoint::{restore, store, CORRUPT_SUFFIX, FILE};
    let (mut state, now) = two_devices();
    state.pick(&key("a"), R, 1, &[], &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE);
    store(&path, &state).unwrap();
    assert_eq!(
        restore(&path, now).assigned(&key("a"), R).unwrap().ids,
        ["Dev-1"]
    );
    std::fs::write(&path, b"{\"entries\": [{\"podUID\": 7").unwrap();
    let restored = restore(&path, now);
    assert!(restored.allocations().is_empty());
    assert!(!restored.serves(R));
    assert!(!path.exists());
    let aside = dir.path().join(format!("{FILE}{CORRUPT_SUFFIX}"));
    assert_eq!(
        std::fs::read(aside).unwrap(),
        b"{\"entries\": [{\"podUID\": 7"
    );
}

#[test]
fn a_missing_checkpoint_is_empty_and_a_corrupt_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allocations.json");
    let mut state = DeviceState::default();
    crate::devicemanager::checkpoint::load(&path, &mut state, Instant::now()).unwrap();
    assert!(state.allocations().is_empty());
    std::fs::write(&path, b"{not json").unwrap();
    assert!(crate::devicemanager::checkpoint::load(&path, &mut state, Instant::now()).is_err());
}

#[test]
fn a_pod_holding_devices_from_the_checkpoint_is_admitted_again_before_its_plugin_lists() {
    let (mut state, now) = two_devices();
    state.pick(&key("a"), R, 1, &[], &[]).unwrap();
    let mut restored = DeviceState::default();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allocations.json");
    crate::devicemanager::checkpoint::store(&path, &state).unwrap();
    crate::devicemanager::checkpoint::load(&path, &mut restored, now).unwrap();
    assert_eq!(restored.capacity(now)[R], (0, 0));
    assert_eq!(restored.admit(&pod("a", "1"), &[], now), Ok(()));
    assert!(restored.admit(&pod("b", "1"), &[], now).is_err());
}

#[test]
fn an_init_containers_devices_are_handed_on_to_the_next_container_once() {
    let (mut state, _) = two_devices();
    let init = ("a".to_owned(), "init".to_owned());
    let (app1, app2) = (
        ("a".to_owned(), "app1".to_owned()),
        ("a".to_owned(), "app2".to_owned()),
    );
    assert_eq!(
        state.pick(&init, R, 2, &[], &[]).unwrap(),
        ["Dev-1", "Dev-2"]
    );
    let reusable = [init.clone()];
    assert_eq!(state.pick(&app1, R, 1, &[], &reusable).unwrap(), ["Dev-1"]);
    assert_eq!(state.pick(&app2, R, 1, &[], &reusable).unwrap(), ["Dev-2"]);
    // Another pod may not take them.
    assert!(state.pick(&key("b"), R, 1, &[], &[]).is_err());
}

#[test]
fn held_and_healthy_devices_carry_the_numa_nodes_their_plugin_reported() {
    let (mut state, _) = two_devices();
    let generation = state.resource(R).unwrap().generation;
    state.set_topology(R, generation, BTreeMap::from([("Dev-2".into(), vec![1])]));
    // A replaced registration's topology changes nothing.
    state.set_topology(R, generation + 7, BTreeMap::new());
    state.pick(&key("p1"), R, 2, &[], &[]).unwrap();
    let info = |id: &str, numa: &[i64]| DeviceInfo {
        id: id.into(),
        numa_nodes: numa.to_vec(),
    };
    let both = vec![info("Dev-1", &[]), info("Dev-2", &[1])];
    assert_eq!(
        state.container_devices(&key("p1")),
        BTreeMap::from([(R.to_owned(), both.clone())])
    );
    assert!(state.container_devices(&key("p2")).is_empty());
    assert_eq!(
        state.healthy_devices(),
        BTreeMap::from([(R.to_owned(), both)])
    );
    state.stopped(R, generation, Instant::now());
    assert!(
        state.healthy_devices().is_empty(),
        "a stopped plugin's devices are not allocatable"
    );
}
