//! What a container status says about resources (target API 1.33+): `allocatedResources`
//! (what the node admitted) and `resources` (what the running container has). Pure;
//! called by status generation (`status::containers`) for regular and init containers.
//!
//! `resources` comes from the runtime's values (CRI `ContainerStatus.resources`), turned
//! into Kubernetes units, except that wherever the runtime's value is the very setting
//! the allocation asks for, the allocated amount is reported as written: the status
//! then reads back `100m`, not the `98m` that 100 shares round to, and a finished
//! resize shows exactly what was asked (kubernetes#123441 and its kind stayed "in
//! progress" on such rounding). The memory request has no runtime view and is the
//! allocated one. Without runtime values the allocation is reported.

use std::collections::BTreeMap;

use crate::api::pod::{Container, ResourceRequirements, RESOURCE_CPU, RESOURCE_MEMORY};
use crate::api::quantity::{Format, Quantity};
use crate::cgroups::convert::{quota_to_milli_cpu, shares_to_milli_cpu};
use crate::cgroups::Limit;
use crate::runtime::model::ContainerResources;

use super::values::{container_values, current_values, same_cpu_limit};

/// `allocatedResources`: the requests of the container as allocated (the pod passed
/// to status generation is the allocated pod).
pub fn allocated_resources(container: &Container) -> BTreeMap<String, Quantity> {
    container
        .resources
        .as_ref()
        .map(|r| r.requests.clone())
        .unwrap_or_default()
}

/// `resources` of a running container; `None` when there is nothing to say.
pub fn actual_resources(
    container: &Container,
    reported: Option<&ContainerResources>,
) -> Option<ResourceRequirements> {
    let alloc = container.resources.clone().unwrap_or_default();
    let mut out = ResourceRequirements {
        limits: alloc.limits.clone(),
        requests: alloc.requests.clone(),
        claims: Vec::new(),
    };
    if let Some(reported) = reported {
        let desired = container_values(container);
        let current = current_values(reported, &desired);
        if !same_cpu_limit(&desired, &current) {
            match current.cpu_quota {
                Limit::Value(q) => {
                    let milli = quota_to_milli_cpu(Limit::Value(q), current.cpu_period);
                    out.limits.insert(
                        RESOURCE_CPU.to_owned(),
                        Quantity::from_milli(milli, Format::DecimalSI),
                    );
                }
                Limit::Unlimited => {
                    out.limits.remove(RESOURCE_CPU);
                }
            }
        }
        if desired.memory_limit != current.memory_limit {
            match current.memory_limit {
                Limit::Value(bytes) => {
                    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
                    out.limits.insert(
                        RESOURCE_MEMORY.to_owned(),
                        Quantity::from_value(bytes, Format::BinarySI),
                    );
                }
                Limit::Unlimited => {
                    out.limits.remove(RESOURCE_MEMORY);
                }
            }
        }
        if desired.cpu_shares != current.cpu_shares {
            let milli = shares_to_milli_cpu(current.cpu_shares);
            out.requests.insert(
                RESOURCE_CPU.to_owned(),
                Quantity::from_milli(milli, Format::DecimalSI),
            );
        }
    }
    let empty = out.limits.is_empty() && out.requests.is_empty();
    (!empty).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::container;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn a_finished_resize_reads_back_exactly_what_was_allocated() {
        let c = container(
            "a",
            &[("cpu", "100m"), ("memory", "64Mi")],
            &[("cpu", "5m"), ("memory", "128Mi")],
        );
        // 100m → 102 shares → 100m only by rounding; 5m → the 1 ms minimum quota.
        let reported = ContainerResources {
            cpu_shares: Some(102),
            cpu_quota: Limit::Value(1000),
            cpu_period: Some(100_000),
            memory_limit: Limit::Value(128 << 20),
        };
        let r = actual_resources(&c, Some(&reported)).unwrap();
        assert_eq!(r.requests.get("cpu"), Some(&q("100m")));
        assert_eq!(r.limits.get("cpu"), Some(&q("5m")));
        assert_eq!(r.limits.get("memory"), Some(&q("128Mi")));
        assert_eq!(r.requests.get("memory"), Some(&q("64Mi")));
        assert_eq!(allocated_resources(&c).get("cpu"), Some(&q("100m")));
    }

    #[test]
    fn a_resize_in_flight_reports_the_runtime_values() {
        let c = container(
            "a",
            &[("cpu", "500m")],
            &[("cpu", "1"), ("memory", "256Mi")],
        );
        let reported = ContainerResources {
            cpu_shares: Some(256),
            cpu_quota: Limit::Value(50_000),
            cpu_period: Some(100_000),
            memory_limit: Limit::Value(128 << 20),
        };
        let r = actual_resources(&c, Some(&reported)).unwrap();
        assert_eq!(r.requests.get("cpu").map(|x| x.milli_value()), Some(250));
        assert_eq!(r.limits.get("cpu").map(|x| x.milli_value()), Some(500));
        assert_eq!(r.limits.get("memory").map(|x| x.value()), Some(128 << 20));
        // A limit the runtime does not have is not reported.
        let open = ContainerResources {
            cpu_quota: Limit::Unlimited,
            memory_limit: Limit::Unlimited,
            ..reported
        };
        let r = actual_resources(&c, Some(&open)).unwrap();
        assert!(r.limits.is_empty(), "{r:?}");
    }

    #[test]
    fn best_effort_has_nothing_to_report() {
        let c = container("a", &[], &[]);
        let reported = ContainerResources {
            cpu_shares: Some(2),
            ..Default::default()
        };
        assert_eq!(actual_resources(&c, Some(&reported)), None);
        assert_eq!(actual_resources(&c, None), None);
        assert!(allocated_resources(&c).is_empty());
    }
}
