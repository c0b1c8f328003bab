//! A container's cgroup values for in-place resize (pure): what its spec asks for,
//! what the runtime reports, how two compare, and what to send over CRI.
//!
//! Everything is compared in the runtime's units (shares, CFS quota and period, bytes),
//! the units the runtime reports back, never in Kubernetes units: a CPU request of 1m
//! and one of 2m both mean 2 shares, and a 5m limit means the 1 ms minimum quota, so
//! comparing milli-CPU would call such a resize unfinished forever (kubernetes#128680,
//! kubernetes#128769). The spec → values mapping is the one container creation uses
//! (`runtime::container::linux_resources`, CFS limits enforced), checked by a test.

use std::cmp::Ordering;

use crate::api::pod::{Container, RESOURCE_CPU, RESOURCE_MEMORY};
use crate::cgroups::convert::{
    memory_limit, milli_cpu_to_quota, milli_cpu_to_shares, DEFAULT_QUOTA_PERIOD_US,
};
use crate::cgroups::Limit;
use crate::cri::pb;
use crate::runtime::model::ContainerResources;

/// A container's cgroup values as in-place resize compares and applies them: the units
/// the runtime reports back (CRI `LinuxContainerResources`), not Kubernetes units, so
/// "equal" means "nothing to write" even where Kubernetes amounts round (1m and 2m CPU
/// are both 2 shares; 5m and 10m CPU limits are both the 1 ms minimum quota).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceValues {
    /// `cpu.shares` (from the CPU request, or the limit without a request).
    pub cpu_shares: u64,
    /// CFS quota in microseconds per `cpu_period`; unlimited without a CPU limit.
    pub cpu_quota: Limit,
    pub cpu_period: u64,
    /// Memory limit in bytes; unlimited without one.
    pub memory_limit: Limit,
}

/// The CFS period containers are created with.
pub const CONTAINER_CPU_PERIOD_US: u64 = DEFAULT_QUOTA_PERIOD_US;

/// The cgroup values `container`'s spec asks for: shares from the CPU request (the
/// limit stands in for a missing request), quota from the CPU limit, the memory limit.
pub fn container_values(container: &Container) -> ResourceValues {
    let resources = container.resources.clone().unwrap_or_default();
    let milli = |list: &std::collections::BTreeMap<String, crate::api::quantity::Quantity>| {
        list.get(RESOURCE_CPU).map_or(0, |q| q.milli_value())
    };
    let cpu_request = milli(&resources.requests);
    let cpu_limit = milli(&resources.limits);
    let shares_from = if cpu_request == 0 {
        cpu_limit
    } else {
        cpu_request
    };
    let memory = resources
        .limits
        .get(RESOURCE_MEMORY)
        .map_or(0, |q| q.value());
    ResourceValues {
        cpu_shares: milli_cpu_to_shares(shares_from),
        cpu_quota: milli_cpu_to_quota(cpu_limit, CONTAINER_CPU_PERIOD_US),
        cpu_period: CONTAINER_CPU_PERIOD_US,
        memory_limit: memory_limit(memory),
    }
}

/// The values the runtime reports, with the fields it leaves unset (shares, period)
/// taken from `desired`: an unknown value cannot be compared, so it never asks for a
/// write on its own.
pub fn current_values(reported: &ContainerResources, desired: &ResourceValues) -> ResourceValues {
    ResourceValues {
        cpu_shares: reported.cpu_shares.unwrap_or(desired.cpu_shares),
        cpu_quota: reported.cpu_quota,
        cpu_period: reported.cpu_period.unwrap_or(desired.cpu_period),
        memory_limit: reported.memory_limit,
    }
}

/// Whether two CPU limits are the same cgroup setting (the period only matters with a
/// quota).
pub fn same_cpu_limit(a: &ResourceValues, b: &ResourceValues) -> bool {
    match (a.cpu_quota, b.cpu_quota) {
        (Limit::Unlimited, Limit::Unlimited) => true,
        (Limit::Value(x), Limit::Value(y)) => x == y && a.cpu_period == b.cpu_period,
        _ => false,
    }
}

/// Orders two CPU limits by the CPU time they allow (quota per period); unlimited is
/// the largest.
pub fn cpu_limit_order(a: &ResourceValues, b: &ResourceValues) -> Ordering {
    match (a.cpu_quota, b.cpu_quota) {
        (Limit::Unlimited, Limit::Unlimited) => Ordering::Equal,
        (Limit::Unlimited, Limit::Value(_)) => Ordering::Greater,
        (Limit::Value(_), Limit::Unlimited) => Ordering::Less,
        (Limit::Value(x), Limit::Value(y)) => {
            let lhs = u128::from(x) * u128::from(b.cpu_period.max(1));
            let rhs = u128::from(y) * u128::from(a.cpu_period.max(1));
            lhs.cmp(&rhs)
        }
    }
}

/// Whether the runtime's values differ from the desired ones in anything resize
/// writes.
pub fn differ(desired: &ResourceValues, current: &ResourceValues) -> bool {
    desired.memory_limit != current.memory_limit
        || !same_cpu_limit(desired, current)
        || desired.cpu_shares != current.cpu_shares
}

fn cri_limit(value: Limit, previous: Limit) -> i64 {
    match (value, previous) {
        (Limit::Value(v), _) => i64::try_from(v).unwrap_or(i64::MAX),
        // Zero means "leave as is" to the runtime: lifting a limit needs -1.
        (Limit::Unlimited, Limit::Value(_)) => -1,
        (Limit::Unlimited, Limit::Unlimited) => 0,
    }
}

/// The CRI resources for `UpdateContainerResources`: all of `values` (CPU and memory,
/// so the runtime never falls back to stale ones), where `previous` is what the
/// container had, needed to lift a limit explicitly.
pub fn to_cri(values: &ResourceValues, previous: &ResourceValues) -> pb::LinuxContainerResources {
    let quota = cri_limit(values.cpu_quota, previous.cpu_quota);
    pb::LinuxContainerResources {
        cpu_shares: i64::try_from(values.cpu_shares).unwrap_or(i64::MAX),
        cpu_quota: quota,
        cpu_period: match values.cpu_quota {
            Limit::Value(_) => i64::try_from(values.cpu_period).unwrap_or(i64::MAX),
            Limit::Unlimited => 0,
        },
        memory_limit_in_bytes: cri_limit(values.memory_limit, previous.memory_limit),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::Pod;
    use crate::cgroups::pod_resources::tests::container;
    use crate::runtime::container::{linux_resources, ContainerContext};
    use crate::runtime::env::{EnvContext, NoConfigSource};

    #[test]
    fn spec_values_match_what_container_creation_writes() {
        let cases = [
            container(
                "a",
                &[("cpu", "250m")],
                &[("cpu", "500m"), ("memory", "128Mi")],
            ),
            container("b", &[], &[("cpu", "1")]),
            container("c", &[("cpu", "1m"), ("memory", "1Gi")], &[]),
            container("d", &[], &[]),
            container("e", &[], &[("cpu", "5m"), ("memory", "1G")]),
        ];
        for c in cases {
            let pod = Pod::default();
            let env = EnvContext::default();
            let volumes = Default::default();
            let ctx = ContainerContext {
                pod: &pod,
                container: &c,
                restart_count: 0,
                image_ref: "",
                env: &env,
                config_source: &NoConfigSource,
                volumes: &volumes,
                sub_paths: &Default::default(),
                termination_log: None,
                hosts_file: None,
                memory_capacity: 1 << 30,
                enforce_cpu_limits: true,
                target_container_id: None,
                seccomp_root: std::path::Path::new("/"),
                seccomp_default: false,
                apparmor_enabled: false,
                swap: &crate::runtime::swap::SwapSettings::UNTOUCHED,
                userns: None,
            };
            let created = linux_resources(&ctx);
            let values = container_values(&c);
            let reported = crate::runtime::inspect::resources_from_cri(&created);
            assert_eq!(current_values(&reported, &values), values, "{}", c.name);
        }
    }

    #[test]
    fn conversions_table() {
        let v = container_values(&container(
            "a",
            &[("cpu", "250m")],
            &[("cpu", "500m"), ("memory", "256Mi")],
        ));
        assert_eq!(v.cpu_shares, 256);
        assert_eq!(v.cpu_quota, Limit::Value(50_000));
        assert_eq!(v.cpu_period, 100_000);
        assert_eq!(v.memory_limit, Limit::Value(256 << 20));
        // Only a request: no quota, no memory limit.
        let v = container_values(&container("b", &[("cpu", "1m")], &[]));
        assert_eq!(v.cpu_shares, 2);
        assert_eq!(v.cpu_quota, Limit::Unlimited);
        assert_eq!(v.memory_limit, Limit::Unlimited);
        // Below the kernel's minimums, different Kubernetes amounts are one setting.
        let a = container_values(&container("x", &[("cpu", "1m")], &[("cpu", "5m")]));
        let b = container_values(&container("x", &[("cpu", "2m")], &[("cpu", "10m")]));
        assert!(!differ(&a, &b));
    }

    #[test]
    fn cpu_limits_order_by_rate_and_unlimited_is_largest() {
        let at = |q: Limit, p: u64| ResourceValues {
            cpu_shares: 2,
            cpu_quota: q,
            cpu_period: p,
            memory_limit: Limit::Unlimited,
        };
        let half = at(Limit::Value(50_000), 100_000);
        let half_other_period = at(Limit::Value(25_000), 50_000);
        let one = at(Limit::Value(100_000), 100_000);
        let none = at(Limit::Unlimited, 100_000);
        assert_eq!(cpu_limit_order(&half, &one), Ordering::Less);
        assert_eq!(cpu_limit_order(&none, &one), Ordering::Greater);
        assert_eq!(cpu_limit_order(&half, &half_other_period), Ordering::Equal);
        assert!(!same_cpu_limit(&half, &half_other_period));
        assert!(same_cpu_limit(&none, &at(Limit::Unlimited, 7)));
    }

    #[test]
    fn cri_update_lifts_limits_explicitly() {
        let limited = ResourceValues {
            cpu_shares: 512,
            cpu_quota: Limit::Value(50_000),
            cpu_period: 100_000,
            memory_limit: Limit::Value(64 << 20),
        };
        let open = ResourceValues {
            cpu_quota: Limit::Unlimited,
            memory_limit: Limit::Unlimited,
            ..limited
        };
        let sent = to_cri(&limited, &open);
        assert_eq!(
            (sent.cpu_shares, sent.cpu_quota, sent.cpu_period),
            (512, 50_000, 100_000)
        );
        assert_eq!(sent.memory_limit_in_bytes, 64 << 20);
        let lifted = to_cri(&open, &limited);
        assert_eq!((lifted.cpu_quota, lifted.cpu_period), (-1, 0));
        assert_eq!(lifted.memory_limit_in_bytes, -1);
        let unchanged = to_cri(&open, &open);
        assert_eq!(
            (unchanged.cpu_quota, unchanged.memory_limit_in_bytes),
            (0, 0)
        );
    }
}
