//! Swap for containers (upstream kuberuntime's configureContainerSwapResources and
//! `memorySwap.swapBehavior`), pure: which containers may swap and how much, written
//! into the CRI `LinuxContainerResources` that CreateContainer and
//! UpdateContainerResources carry.
//!
//! - No swap controller on the host (no `memory.memsw.limit_in_bytes` on v1, no
//!   `memory.swap.max` in litelet's own v2 cgroup): nothing is set, the runtime's
//!   default stands, as upstream.
//! - `NoSwap` (the default): on cgroup v2 `unified["memory.swap.max"] = "0"`; on v1 the
//!   memory+swap limit equals the memory limit (`memory_swap_limit_in_bytes`), so a
//!   container gets no swap above its limit (without a memory limit the runtime
//!   ignores it).
//! - `LimitedSwap` (cgroup v2 only; v1 falls back to NoSwap): a Burstable pod's
//!   container that requests memory below its limit (or has no limit) gets
//!   `request / node memory × node swap` bytes; critical pods (static, mirror,
//!   priority ≥ 2000000000), Guaranteed and BestEffort pods, and containers without a
//!   memory request get 0.
//!
//! Callers: `runtime/container.rs` (CreateContainer) and `runtime/resize/apply.rs`
//! (in-place resize). The host facts come once from the agent ([`SwapSettings`]).

use crate::api::pod::{Container, Pod};
use crate::cgroups::pod_resources::{container_limits, container_requests, memory_bytes};
use crate::cgroups::qos::{is_critical, pod_qos, QosClass};
use crate::cri::pb;

/// The cgroup v2 interface file CRI's unified map sets.
pub const SWAP_MAX: &str = "memory.swap.max";

/// `memorySwap.swapBehavior`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwapBehavior {
    /// Containers never swap (upstream's default).
    #[default]
    NoSwap,
    /// Burstable containers swap in proportion to their memory request.
    LimitedSwap,
}

impl SwapBehavior {
    pub fn as_str(self) -> &'static str {
        match self {
            SwapBehavior::NoSwap => "NoSwap",
            SwapBehavior::LimitedSwap => "LimitedSwap",
        }
    }
}

/// A `swapBehavior` other than upstream's names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a swap behavior (NoSwap or LimitedSwap)")]
pub struct UnknownSwapBehavior(pub String);

impl std::str::FromStr for SwapBehavior {
    type Err = UnknownSwapBehavior;

    /// Upstream's names; empty is the default.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "NoSwap" => Ok(SwapBehavior::NoSwap),
            "LimitedSwap" => Ok(SwapBehavior::LimitedSwap),
            other => Err(UnknownSwapBehavior(other.to_owned())),
        }
    }
}

/// The node's swap facts and policy, resolved once at start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapSettings {
    pub behavior: SwapBehavior,
    /// The host runs the unified cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    /// The memory controller can limit swap here (see the module doc). False: litelet
    /// sets nothing about swap.
    pub controller: bool,
    /// The machine's memory in bytes.
    pub memory_capacity: i64,
    /// The machine's swap in bytes (`SwapTotal`).
    pub swap_capacity: i64,
}

impl SwapSettings {
    /// No swap controller: litelet leaves swap to the runtime (tests, unknown hosts).
    pub const UNTOUCHED: SwapSettings = SwapSettings {
        behavior: SwapBehavior::NoSwap,
        cgroup_v2: false,
        controller: false,
        memory_capacity: 0,
        swap_capacity: 0,
    };
}

/// What one container gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerSwap {
    /// Leave swap to the runtime (no swap controller).
    Untouched,
    /// cgroup v1: memory+swap limited to the memory limit.
    V1NoSwap,
    /// cgroup v2: `memory.swap.max` in bytes (0: no swap).
    V2Max(i64),
}

/// The swap `container` of `pod` gets under `settings` (pass the pod at its allocated
/// resources).
pub fn container_swap(settings: &SwapSettings, pod: &Pod, container: &Container) -> ContainerSwap {
    if !settings.controller {
        return ContainerSwap::Untouched;
    }
    if !settings.cgroup_v2 {
        return ContainerSwap::V1NoSwap;
    }
    if settings.behavior != SwapBehavior::LimitedSwap
        || is_critical(pod)
        || pod_qos(pod) != QosClass::Burstable
    {
        return ContainerSwap::V2Max(0);
    }
    let request = memory_bytes(&container_requests(container));
    let limit = memory_bytes(&container_limits(container));
    if request == 0 || request == limit {
        return ContainerSwap::V2Max(0);
    }
    let bytes = limited_swap_bytes(request, settings.memory_capacity, settings.swap_capacity);
    ContainerSwap::V2Max(bytes.unwrap_or(0))
}

/// `request / memory capacity × swap capacity` (upstream calcSwapForBurstablePods);
/// `None` when the machine's memory is unknown or smaller than the request, in which
/// case the container gets no swap.
pub fn limited_swap_bytes(request: i64, memory_capacity: i64, swap_capacity: i64) -> Option<i64> {
    if memory_capacity <= 0 || request > memory_capacity || request < 0 {
        return None;
    }
    // Wide arithmetic: 2^63 × 2^63 fits in i128, and the quotient is ≤ swap.
    let bytes =
        i128::from(request) * i128::from(swap_capacity.max(0)) / i128::from(memory_capacity);
    i64::try_from(bytes).ok()
}

/// Writes `swap` into the CRI resources (after the memory limit is set).
pub fn apply(swap: ContainerSwap, linux: &mut pb::LinuxContainerResources) {
    match swap {
        ContainerSwap::Untouched => {}
        ContainerSwap::V1NoSwap => linux.memory_swap_limit_in_bytes = linux.memory_limit_in_bytes,
        ContainerSwap::V2Max(bytes) => {
            linux.unified.insert(SWAP_MAX.to_owned(), bytes.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::container;

    const GI: i64 = 1 << 30;

    fn v2(behavior: SwapBehavior) -> SwapSettings {
        SwapSettings {
            behavior,
            cgroup_v2: true,
            controller: true,
            memory_capacity: 8 * GI,
            swap_capacity: 2 * GI,
        }
    }

    fn pod_of(containers: Vec<Container>) -> Pod {
        let mut pod = Pod::default();
        pod.spec.containers = containers;
        pod
    }

    /// Every case through one helper: the swap of the pod's first container.
    fn check(settings: SwapSettings, pod: &Pod) -> ContainerSwap {
        container_swap(&settings, pod, &pod.spec.containers[0])
    }

    #[test]
    fn limited_swap_is_the_requests_share_of_the_nodes_swap() {
        assert_eq!(limited_swap_bytes(GI, 8 * GI, 2 * GI), Some(GI / 4));
        assert_eq!(limited_swap_bytes(8 * GI, 8 * GI, 2 * GI), Some(2 * GI));
        assert_eq!(limited_swap_bytes(0, 8 * GI, 2 * GI), Some(0));
        assert_eq!(limited_swap_bytes(GI, 8 * GI, 0), Some(0));
        // Past the machine, or an unknown machine: no swap at all.
        assert_eq!(limited_swap_bytes(9 * GI, 8 * GI, 2 * GI), None);
        assert_eq!(limited_swap_bytes(GI, 0, 2 * GI), None);
        // No overflow at the extremes.
        assert_eq!(
            limited_swap_bytes(i64::MAX, i64::MAX, i64::MAX),
            Some(i64::MAX)
        );
    }

    #[test]
    fn limited_swap_goes_to_burstable_containers_only() {
        let burstable = pod_of(vec![container(
            "a",
            &[("memory", "1Gi")],
            &[("memory", "2Gi")],
        )]);
        let limited = v2(SwapBehavior::LimitedSwap);
        assert_eq!(check(limited, &burstable), ContainerSwap::V2Max(GI / 4));
        // Burstable without a memory limit swaps too.
        let unlimited = pod_of(vec![container("a", &[("memory", "2Gi")], &[])]);
        assert_eq!(check(limited, &unlimited), ContainerSwap::V2Max(GI / 2));
        // NoSwap: nobody.
        assert_eq!(
            check(v2(SwapBehavior::NoSwap), &burstable),
            ContainerSwap::V2Max(0)
        );
        let guaranteed = pod_of(vec![container(
            "a",
            &[],
            &[("cpu", "1"), ("memory", "1Gi")],
        )]);
        assert_eq!(check(limited, &guaranteed), ContainerSwap::V2Max(0));
        let best_effort = pod_of(vec![container("a", &[], &[])]);
        assert_eq!(check(limited, &best_effort), ContainerSwap::V2Max(0));
        // A Burstable pod's container that asks no memory, or exactly its limit.
        let cpu_only = pod_of(vec![container("a", &[("cpu", "1")], &[])]);
        assert_eq!(check(limited, &cpu_only), ContainerSwap::V2Max(0));
        let at_limit = pod_of(vec![container(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("memory", "1Gi")],
        )]);
        assert_eq!(check(limited, &at_limit), ContainerSwap::V2Max(0));
        // Critical pods never swap.
        let mut critical = burstable.clone();
        critical.spec.priority = Some(2_000_000_000);
        assert_eq!(check(limited, &critical), ContainerSwap::V2Max(0));
        let mut high_but_not_critical = burstable.clone();
        high_but_not_critical.spec.priority = Some(1_999_999_999);
        assert_eq!(
            check(limited, &high_but_not_critical),
            ContainerSwap::V2Max(GI / 4)
        );
    }

    #[test]
    fn cgroup_v1_limits_memory_and_swap_together_and_no_controller_leaves_it_alone() {
        let burstable = pod_of(vec![container(
            "a",
            &[("memory", "1Gi")],
            &[("memory", "2Gi")],
        )]);
        let v1 = SwapSettings {
            cgroup_v2: false,
            ..v2(SwapBehavior::LimitedSwap)
        };
        assert_eq!(check(v1, &burstable), ContainerSwap::V1NoSwap);
        let none = SwapSettings {
            controller: false,
            ..v2(SwapBehavior::LimitedSwap)
        };
        assert_eq!(check(none, &burstable), ContainerSwap::Untouched);
    }

    #[test]
    fn the_cri_fields_carry_the_decision() {
        let mut linux = pb::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        };
        apply(ContainerSwap::Untouched, &mut linux);
        assert_eq!(linux.memory_swap_limit_in_bytes, 0);
        assert!(linux.unified.is_empty());
        apply(ContainerSwap::V1NoSwap, &mut linux);
        assert_eq!(linux.memory_swap_limit_in_bytes, 64 << 20);
        let mut linux = pb::LinuxContainerResources::default();
        apply(ContainerSwap::V2Max(12345), &mut linux);
        assert_eq!(
            linux.unified.get(SWAP_MAX).map(String::as_str),
            Some("12345")
        );
        assert_eq!(linux.memory_swap_limit_in_bytes, 0);
    }

    #[test]
    fn behaviors_parse_upstream_names() {
        assert_eq!("".parse(), Ok(SwapBehavior::NoSwap));
        assert_eq!("NoSwap".parse(), Ok(SwapBehavior::NoSwap));
        assert_eq!("LimitedSwap".parse(), Ok(SwapBehavior::LimitedSwap));
        assert!("UnlimitedSwap".parse::<SwapBehavior>().is_err());
    }
}
