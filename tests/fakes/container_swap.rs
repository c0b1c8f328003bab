//! Swap over CRI: what CreateContainer carries under each `memorySwap.swapBehavior`
//! and cgroup version (upstream configureContainerSwapResources), seen on the fake
//! runtime's record of each container's resources. The arithmetic is table-tested in
//! `src/runtime/swap.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::containerd::BUSYBOX;
use crate::support::pods;
use crate::support::runtime::{self, fake_with_busybox};
use crate::support::wait_until;
use litelet::api::pod::{Container, Pod, ResourceRequirements};
use litelet::api::quantity::Quantity;
use litelet::cri::pb;
use litelet::events::Recorder;
use litelet::runtime::env::EnvContext;
use litelet::runtime::manager::RuntimeSettings;
use litelet::runtime::swap::{SwapBehavior, SwapSettings};

const GI: i64 = 1 << 30;

fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    let list = |items: &[(&str, &str)]| {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
            .collect::<BTreeMap<_, _>>()
    };
    Container {
        name: name.into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sleep".into(), "3600".into()],
        resources: Some(ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Burstable pod: one container that may swap, one at its limit, one asking no
/// memory.
fn burstable_pod(uid: &str) -> Pod {
    let mut pod = pods::meta("default", "swapper", uid);
    pod.spec.host_network = Some(true);
    pod.spec.containers = vec![
        container("burst", &[("memory", "1Gi")], &[("memory", "2Gi")]),
        container("at-limit", &[("memory", "512Mi")], &[("memory", "512Mi")]),
        container("cpu-only", &[("cpu", "100m")], &[]),
    ];
    pod
}

/// Runs `pod` on a fresh fake runtime under `swap`; returns each container's
/// resources as CreateContainer sent them, by name.
fn created_resources(
    swap: SwapSettings,
    pod: &Pod,
) -> BTreeMap<String, pb::LinuxContainerResources> {
    let fake = fake_with_busybox();
    let dir = tempfile::tempdir().unwrap();
    let (runtime, images) = fake.clients(Duration::from_secs(30));
    let settings = RuntimeSettings {
        memory_capacity: 8 * GI,
        swap,
        ..runtime::settings(dir.path())
    };
    let manager = runtime::manager(runtime, images, Recorder::log_only(), settings);
    let volumes = BTreeMap::new();
    let env = EnvContext::default();
    let inputs = runtime::inputs(String::new(), &volumes, &env);
    let all_created = wait_until(Duration::from_secs(20), || {
        let status = manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status");
        manager.sync_pod(pod, &status, &Default::default(), &inputs);
        fake.count("CreateContainer") >= pod.spec.containers.len()
    });
    assert!(
        all_created,
        "containers were not created: {:?}",
        fake.calls()
    );
    let configs = fake.state().container_configs();
    configs
        .into_iter()
        .map(|c| {
            let name = c.metadata.as_ref().map(|m| m.name.clone());
            let linux = c.linux.into_option().unwrap_or_default();
            let resources = linux.resources.into_option().unwrap_or_default();
            (name.unwrap_or_default(), resources)
        })
        .collect()
}

fn swap_max(r: &pb::LinuxContainerResources) -> Option<&str> {
    r.unified.get("memory.swap.max").map(String::as_str)
}

fn v2(behavior: SwapBehavior) -> SwapSettings {
    SwapSettings {
        behavior,
        cgroup_v2: true,
        controller: true,
        memory_capacity: 8 * GI,
        swap_capacity: 2 * GI,
    }
}

#[test]
fn limited_swap_gives_a_burstable_container_its_share_and_the_others_none() {
    let created = created_resources(v2(SwapBehavior::LimitedSwap), &burstable_pod("swap-1"));
    // 1 GiB of 8 GiB memory → a quarter of the 2 GiB swap.
    assert_eq!(swap_max(&created["burst"]), Some("268435456"));
    assert_eq!(swap_max(&created["at-limit"]), Some("0"));
    assert_eq!(swap_max(&created["cpu-only"]), Some("0"));
    assert_eq!(created["burst"].memory_limit_in_bytes, 2 * GI);
    assert_eq!(
        created["burst"].memory_swap_limit_in_bytes, 0,
        "v1 field untouched"
    );
}

#[test]
fn no_swap_on_cgroup_v2_sets_swap_max_to_zero_for_everyone() {
    let created = created_resources(v2(SwapBehavior::NoSwap), &burstable_pod("swap-2"));
    for (name, r) in &created {
        assert_eq!(swap_max(r), Some("0"), "{name}");
    }
}

#[test]
fn cgroup_v1_limits_memory_and_swap_together() {
    let v1 = SwapSettings {
        cgroup_v2: false,
        ..v2(SwapBehavior::LimitedSwap)
    };
    let created = created_resources(v1, &burstable_pod("swap-3"));
    assert_eq!(created["burst"].memory_swap_limit_in_bytes, 2 * GI);
    assert_eq!(created["at-limit"].memory_swap_limit_in_bytes, 512 << 20);
    // Without a memory limit there is nothing to tie swap to (the runtime ignores 0).
    assert_eq!(created["cpu-only"].memory_swap_limit_in_bytes, 0);
    assert!(created.values().all(|r| swap_max(r).is_none()));
}

#[test]
fn without_a_swap_controller_swap_is_left_to_the_runtime() {
    let none = SwapSettings {
        controller: false,
        ..v2(SwapBehavior::LimitedSwap)
    };
    let created = created_resources(none, &burstable_pod("swap-4"));
    for (name, r) in &created {
        assert_eq!(swap_max(r), None, "{name}");
        assert_eq!(r.memory_swap_limit_in_bytes, 0, "{name}");
    }
}
