//! The exact order of pod cgroup writes and CRI updates, from `compute_pod_actions`
//! through `plan_resize`, for each kind of resize; and a property: no step ever leaves
//! a container's limit above its pod's.

use super::*;
use crate::api::pod::{Container, ContainerResizePolicy, Pod, ResizeRestartPolicy, RestartPolicy};
use crate::cgroups::convert::{resource_config_for_pod, PodCgroupOptions};
use crate::cgroups::pod_resources::tests::container;
use crate::runtime::actions::{compute_pod_actions, PodActions, ProbeResults};
use crate::runtime::hash::{container_hash, container_hash_without_resources};
use crate::runtime::model::{
    ContainerResources, ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState,
    SandboxStatus,
};
use crate::runtime::resize::values::container_values;
use proptest::prelude::*;

const MI: u64 = 1 << 20;

fn pod_of(containers: Vec<Container>) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some("uid-1".into());
    pod.spec.restart_policy = Some(RestartPolicy::Always);
    pod.spec.containers = containers;
    pod
}

fn runtime_of(created: &[Container]) -> PodRuntimeStatus {
    PodRuntimeStatus {
        uid: "uid-1".into(),
        sandboxes: vec![SandboxStatus {
            id: "sb".into(),
            state: SandboxState::Ready,
            ip: "10.0.0.2".into(),
            ..SandboxStatus::default()
        }],
        containers: created
            .iter()
            .map(|c| {
                let v = container_values(c);
                ContainerStatus {
                    id: format!("id-{}", c.name),
                    name: c.name.clone(),
                    state: ContainerState::Running,
                    hash: container_hash(c),
                    hash_without_resources: container_hash_without_resources(c),
                    resources: Some(ContainerResources {
                        cpu_shares: Some(v.cpu_shares),
                        cpu_quota: v.cpu_quota,
                        cpu_period: Some(v.cpu_period),
                        memory_limit: v.memory_limit,
                    }),
                    ..ContainerStatus::default()
                }
            })
            .collect(),
        ..PodRuntimeStatus::default()
    }
}

/// Actions and the plan for a pod created as `before` and now asking for `after`; the
/// pod cgroup holds `before`'s settings (`None`: no pod cgroup).
fn scenario(
    before: Vec<Container>,
    after: Vec<Container>,
    pod_cgroup: bool,
    usage: u64,
) -> (PodActions, Result<Vec<Step>, PlanError>) {
    let old = pod_of(before.clone());
    let new = pod_of(after);
    let actions = compute_pod_actions(&new, &runtime_of(&before), &ProbeResults::default());
    let options = PodCgroupOptions::default();
    let input = PlanInput {
        updates: Some(&actions.containers_to_update),
        pod: pod_cgroup.then(|| PodCgroupView {
            current: resource_config_for_pod(&old, &options),
            desired: resource_config_for_pod(&new, &options),
            memory_usage: usage,
        }),
        ..PlanInput::default()
    };
    let plan = plan_resize(&input);
    (actions, plan)
}

fn limit(l: Limit) -> String {
    match l {
        Limit::Value(v) if v % MI == 0 => format!("{}Mi", v / MI),
        other => other.to_string(),
    }
}

/// One line per write: `pod ...` (cgroupfs) or `cri <name> ...` (UpdateContainerResources).
fn render(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Pod(r) => {
                let mut parts = vec!["pod".to_string()];
                if let Some(m) = r.memory_limit {
                    parts.push(format!("memory={}", limit(m)));
                }
                if let Some(q) = r.cpu_quota {
                    parts.push(format!("quota={q}/{}", r.cpu_period.unwrap_or(0)));
                }
                if let Some(sh) = r.cpu_shares {
                    parts.push(format!("shares={sh}"));
                }
                parts.join(" ")
            }
            Step::Container { name, values, .. } => format!(
                "cri {name} shares={} quota={} memory={}",
                values.cpu_shares,
                values.cpu_quota,
                limit(values.memory_limit)
            ),
        })
        .collect()
}

fn g(name: &str, cpu: &str, memory: &str) -> Container {
    container(
        name,
        &[("cpu", cpu), ("memory", memory)],
        &[("cpu", cpu), ("memory", memory)],
    )
}

fn check(before: Vec<Container>, after: Vec<Container>, want: &[&str]) {
    let (_, plan) = scenario(before, after, true, 0);
    assert_eq!(render(&plan.unwrap()), want);
}

#[test]
fn memory_up_raises_the_pod_first() {
    check(
        vec![g("c", "1", "256Mi")],
        vec![g("c", "1", "512Mi")],
        &[
            "pod memory=512Mi",
            "cri c shares=1024 quota=100000 memory=512Mi",
        ],
    );
}

#[test]
fn memory_down_lowers_the_pod_last() {
    check(
        vec![g("c", "1", "512Mi")],
        vec![g("c", "1", "256Mi")],
        &[
            "cri c shares=1024 quota=100000 memory=256Mi",
            "pod memory=256Mi",
        ],
    );
}

#[test]
fn cpu_up_raises_the_pod_first() {
    check(
        vec![g("c", "1", "256Mi")],
        vec![g("c", "2", "256Mi")],
        &[
            "pod quota=200000/100000 shares=2048",
            "cri c shares=2048 quota=200000 memory=256Mi",
        ],
    );
}

#[test]
fn cpu_down_lowers_the_pod_last() {
    check(
        vec![g("c", "2", "256Mi")],
        vec![g("c", "500m", "256Mi")],
        &[
            "cri c shares=512 quota=50000 memory=256Mi",
            "pod quota=50000/100000 shares=512",
        ],
    );
}

#[test]
fn mixed_containers_decrease_first_and_the_pod_follows_the_net_change() {
    // Net zero: no pod write at all.
    check(
        vec![g("a", "1", "256Mi"), g("b", "1", "512Mi")],
        vec![g("a", "1", "512Mi"), g("b", "1", "256Mi")],
        &[
            "cri b shares=1024 quota=100000 memory=256Mi",
            "cri a shares=1024 quota=100000 memory=512Mi",
        ],
    );
    // Net up: the pod first.
    check(
        vec![g("a", "1", "256Mi"), g("b", "1", "512Mi")],
        vec![g("a", "1", "768Mi"), g("b", "1", "256Mi")],
        &[
            "pod memory=1024Mi",
            "cri b shares=1024 quota=100000 memory=256Mi",
            "cri a shares=1024 quota=100000 memory=768Mi",
        ],
    );
    // CPU net down: the pod last.
    check(
        vec![g("a", "1", "64Mi"), g("b", "2", "64Mi")],
        vec![g("a", "2", "64Mi"), g("b", "500m", "64Mi")],
        &[
            "cri b shares=512 quota=50000 memory=64Mi",
            "cri a shares=2048 quota=200000 memory=64Mi",
            "pod quota=250000/100000 shares=2560",
        ],
    );
}

#[test]
fn memory_then_cpu_with_the_latest_values_of_the_other() {
    check(
        vec![g("c", "2", "256Mi")],
        vec![g("c", "1", "512Mi")],
        &[
            "pod memory=512Mi",
            "cri c shares=2048 quota=200000 memory=512Mi",
            "cri c shares=1024 quota=100000 memory=512Mi",
            "pod quota=100000/100000 shares=1024",
        ],
    );
}

#[test]
fn restart_policy_writes_only_the_pod_cgroup() {
    let mut after = g("c", "2", "512Mi");
    after.resize_policy = vec![ContainerResizePolicy {
        resource_name: "cpu".into(),
        restart_policy: ResizeRestartPolicy::RestartContainer,
    }];
    let mut before = g("c", "1", "256Mi");
    before.resize_policy = after.resize_policy.clone();
    let (actions, plan) = scenario(vec![before], vec![after], true, 0);
    assert!(actions.update_pod_resources);
    assert_eq!(actions.containers_to_start, vec![0]);
    assert!(actions.containers_to_kill.contains_key("id-c"));
    // SyncPod: StopContainer(c) (step 2), these writes (step 9), start c (step 10).
    assert_eq!(
        render(&plan.unwrap()),
        ["pod memory=512Mi", "pod quota=200000/100000 shares=2048"]
    );
}

#[test]
fn memory_below_pod_usage_writes_nothing() {
    let (_, plan) = scenario(
        vec![g("c", "1", "512Mi")],
        vec![g("c", "1", "256Mi")],
        true,
        300 * MI,
    );
    assert_eq!(
        plan,
        Err(PlanError::MemoryBelowUsage {
            what: "pod".into(),
            limit: 256 * MI,
            usage: 300 * MI
        })
    );
}

#[test]
fn memory_below_container_usage_writes_nothing() {
    let before = vec![g("c", "1", "512Mi")];
    let actions = compute_pod_actions(
        &pod_of(vec![g("c", "1", "256Mi")]),
        &runtime_of(&before),
        &ProbeResults::default(),
    );
    let input = PlanInput {
        updates: Some(&actions.containers_to_update),
        pod: None,
        container_usage: BTreeMap::from([("id-c".to_string(), 400 * MI)]),
    };
    assert!(matches!(
        plan_resize(&input),
        Err(PlanError::MemoryBelowUsage { what, .. }) if what == "container c"
    ));
}

#[test]
fn no_pod_cgroup_resizes_containers_alone() {
    // Upstream dereferenced the missing pod cgroup config and crashed the kubelet.
    let (_, plan) = scenario(
        vec![g("c", "1", "256Mi")],
        vec![g("c", "2", "512Mi")],
        false,
        0,
    );
    assert_eq!(
        render(&plan.unwrap()),
        [
            "cri c shares=1024 quota=100000 memory=512Mi",
            "cri c shares=2048 quota=200000 memory=512Mi",
        ]
    );
}

#[test]
fn burstable_pod_without_every_cpu_limit() {
    // One container has no CPU limit, so the pod has no CFS quota: upstream failed the
    // whole CPU path ("CPUQuota is nil"); here the pod keeps no quota, its shares
    // follow the requests, and the container's own limit changes.
    let limited = |cpu: &str| container("a", &[("cpu", cpu)], &[("cpu", cpu)]);
    let open = container("b", &[("cpu", "100m")], &[]);
    check(
        vec![limited("1"), open.clone()],
        vec![limited("2"), open],
        &[
            "pod shares=2150",
            "cri a shares=2048 quota=200000 memory=max",
        ],
    );
}

#[test]
fn the_pod_cgroup_follows_the_allocation_even_with_no_container_to_update() {
    // The container is restarting: nothing to update, but it must start under the
    // new pod limits.
    let before = vec![g("c", "1", "256Mi")];
    let mut runtime = runtime_of(&before);
    runtime.containers[0].state = ContainerState::Exited;
    let new = pod_of(vec![g("c", "1", "512Mi")]);
    let actions = compute_pod_actions(&new, &runtime, &ProbeResults::default());
    let options = PodCgroupOptions::default();
    let input = PlanInput {
        updates: Some(&actions.containers_to_update),
        pod: Some(PodCgroupView {
            current: resource_config_for_pod(&pod_of(before), &options),
            desired: resource_config_for_pod(&new, &options),
            memory_usage: 0,
        }),
        ..PlanInput::default()
    };
    assert_eq!(render(&plan_resize(&input).unwrap()), ["pod memory=512Mi"]);
    assert_eq!(actions.containers_to_start, vec![0]);
}

/// Plays the steps on a model of the pod and its containers and checks after each one
/// that no container's memory or CPU limit is above the pod's.
fn play(before: &[(u64, u64)], after: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let mk = |list: &[(u64, u64)]| -> Vec<Container> {
        list.iter()
            .enumerate()
            .map(|(i, (cpu, mem))| g(&format!("c{i}"), &format!("{cpu}m"), &format!("{mem}Mi")))
            .collect()
    };
    let (old, new) = (mk(before), mk(after));
    let (_, plan) = scenario(old.clone(), new.clone(), true, 0);
    let steps = plan.map_err(|e| TestCaseError::fail(e.to_string()))?;
    let options = PodCgroupOptions::default();
    let mut pod = resource_config_for_pod(&pod_of(old.clone()), &options);
    let mut containers: BTreeMap<String, ResourceValues> = old
        .iter()
        .map(|c| (format!("id-{}", c.name), container_values(c)))
        .collect();
    for step in &steps {
        match step {
            Step::Pod(r) => {
                pod.memory_limit = r.memory_limit.or(pod.memory_limit);
                pod.cpu_quota = r.cpu_quota.or(pod.cpu_quota);
                pod.cpu_period = r.cpu_period.or(pod.cpu_period);
                pod.cpu_shares = r.cpu_shares.or(pod.cpu_shares);
            }
            Step::Container { id, values, .. } => {
                containers.insert(id.clone(), *values);
            }
        }
        for c in containers.values() {
            prop_assert!(Some(c.memory_limit) <= pod.memory_limit, "{step:?}");
            let pod_cpu = ResourceValues {
                cpu_shares: 0,
                cpu_quota: pod.cpu_quota.unwrap_or(Limit::Unlimited),
                cpu_period: pod.cpu_period.unwrap_or(100_000),
                memory_limit: Limit::Unlimited,
            };
            prop_assert!(cpu_limit_order(c, &pod_cpu).is_le(), "{step:?}");
        }
    }
    let want: BTreeMap<String, ResourceValues> = new
        .iter()
        .map(|c| (format!("id-{}", c.name), container_values(c)))
        .collect();
    prop_assert_eq!(containers, want);
    prop_assert_eq!(pod, resource_config_for_pod(&pod_of(new), &options));
    Ok(())
}

proptest! {
    #[test]
    fn no_container_limit_is_ever_above_its_pods(
        sizes in proptest::collection::vec(((1u64..40), (1u64..40), (1u64..40), (1u64..40)), 1..4)
    ) {
        let before: Vec<(u64, u64)> = sizes.iter().map(|(c, m, _, _)| (c * 100, m * 32)).collect();
        let after: Vec<(u64, u64)> = sizes.iter().map(|(_, _, c, m)| (c * 100, m * 32)).collect();
        play(&before, &after)?;
    }
}
