//! A pod's effective requests and limits (upstream `component-helpers/resource`
//! `PodRequests` / `PodLimits`), which size its pod cgroup and decide admission.
//!
//! - regular containers are summed; restartable init containers (sidecars) are added to
//!   that sum too, since they keep running;
//! - each plain init container runs alone next to the sidecars started before it, so
//!   while it runs the pod needs `init + sidecars so far`; the pod's value is the larger
//!   of the steady-state sum and the largest such init-time need, per resource;
//! - pod-level `spec.resources` (cpu, memory, hugepages) replace the container
//!   aggregate when set;
//! - `spec.overhead` is added to requests, and to limits only where a limit exists.
//!
//! A container request that is missing while its limit is set counts as equal to the
//! limit: that is the API server's defaulting, applied here too so that static pods read
//! from files (which never pass through the API server) size the same way. On defaulted
//! pods it changes nothing. Ephemeral containers do not count. Pure functions.

use std::collections::BTreeMap;

use crate::api::pod::{
    Container, Pod, ResourceRequirements, RESOURCE_CPU, RESOURCE_HUGEPAGES_PREFIX, RESOURCE_MEMORY,
};
use crate::api::quantity::{Format, Quantity};

/// Amounts by resource name.
pub type ResourceList = BTreeMap<String, Quantity>;

/// `a + b`, saturating instead of failing for sums beyond `Quantity`'s range.
fn sum(a: &Quantity, b: &Quantity) -> Quantity {
    a.add(b).unwrap_or_else(|| {
        let extreme = if b.is_negative() { i64::MIN } else { i64::MAX };
        Quantity::from_value(extreme, Format::DecimalSI)
    })
}

fn add_into(list: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        let total = match list.get(name) {
            Some(known) => sum(known, q),
            None => q.clone(),
        };
        list.insert(name.clone(), total);
    }
}

fn max_into(list: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        if list.get(name).is_none_or(|known| q > known) {
            list.insert(name.clone(), q.clone());
        }
    }
}

/// Requests with the API's default applied: a limited resource without a request
/// requests its limit.
pub fn defaulted_requests(resources: Option<&ResourceRequirements>) -> ResourceList {
    let Some(resources) = resources else {
        return ResourceList::new();
    };
    let mut requests = resources.requests.clone();
    for (name, limit) in &resources.limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
    requests
}

/// The container's requests, defaulted as above.
pub fn container_requests(container: &Container) -> ResourceList {
    defaulted_requests(container.resources.as_ref())
}

/// The container's limits.
pub fn container_limits(container: &Container) -> ResourceList {
    container
        .resources
        .as_ref()
        .map(|r| r.limits.clone())
        .unwrap_or_default()
}

fn pod_level_resource(name: &str) -> bool {
    name == RESOURCE_CPU || name == RESOURCE_MEMORY || name.starts_with(RESOURCE_HUGEPAGES_PREFIX)
}

/// Pod-level requests (`spec.resources`, defaulted), restricted to the resources that
/// may be set at pod level; empty when the pod sets none.
pub fn pod_level_requests(pod: &Pod) -> ResourceList {
    let mut list = defaulted_requests(pod.spec.resources.as_ref());
    list.retain(|name, _| pod_level_resource(name));
    list
}

/// Pod-level limits, restricted as [`pod_level_requests`].
pub fn pod_level_limits(pod: &Pod) -> ResourceList {
    let mut list = pod
        .spec
        .resources
        .as_ref()
        .map(|r| r.limits.clone())
        .unwrap_or_default();
    list.retain(|name, _| pod_level_resource(name));
    list
}

/// Whether the pod sets any pod-level cpu, memory or hugepages value.
pub fn pod_level_set(pod: &Pod) -> bool {
    !pod_level_requests(pod).is_empty() || !pod_level_limits(pod).is_empty()
}

/// Containers' aggregate of `amounts` (requests or limits) following the sidecar rule.
pub fn aggregate_containers(pod: &Pod, amounts: fn(&Container) -> ResourceList) -> ResourceList {
    let mut total = ResourceList::new();
    for container in &pod.spec.containers {
        add_into(&mut total, &amounts(container));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for container in &pod.spec.init_containers {
        let own = amounts(container);
        let need = if container.is_sidecar() {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut need = own;
            add_into(&mut need, &sidecars);
            need
        };
        max_into(&mut init_peak, &need);
    }
    max_into(&mut total, &init_peak);
    total
}

/// The pod's effective requests, overhead included.
pub fn pod_requests(pod: &Pod) -> ResourceList {
    let mut requests = aggregate_containers(pod, container_requests);
    for (name, q) in pod_level_requests(pod) {
        requests.insert(name, q);
    }
    add_into(&mut requests, &pod.spec.overhead);
    requests
}

/// The pod's effective limits; overhead is added only to limits that are set.
pub fn pod_limits(pod: &Pod) -> ResourceList {
    let mut limits = aggregate_containers(pod, container_limits);
    for (name, q) in pod_level_limits(pod) {
        limits.insert(name, q);
    }
    for (name, overhead) in &pod.spec.overhead {
        if let Some(limit) = limits.get_mut(name) {
            if !limit.is_zero() {
                *limit = sum(limit, overhead);
            }
        }
    }
    limits
}

/// Milli-CPU of the list's `cpu` entry (rounded up), 0 when absent.
pub fn cpu_milli(list: &ResourceList) -> i64 {
    list.get(RESOURCE_CPU).map_or(0, Quantity::milli_value)
}

/// Bytes of the list's `memory` entry (rounded up), 0 when absent.
pub fn memory_bytes(list: &ResourceList) -> i64 {
    list.get(RESOURCE_MEMORY).map_or(0, Quantity::value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::pod::RestartPolicy;

    /// A container named `name` with `requests` and `limits` as `(resource, quantity)`.
    pub(crate) fn container(
        name: &str,
        requests: &[(&str, &str)],
        limits: &[(&str, &str)],
    ) -> Container {
        let list = |items: &[(&str, &str)]| {
            items
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
                .collect::<ResourceList>()
        };
        let resources =
            (!requests.is_empty() || !limits.is_empty()).then(|| ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            });
        Container {
            name: name.to_owned(),
            resources,
            ..Default::default()
        }
    }

    pub(crate) fn sidecar(mut c: Container) -> Container {
        c.restart_policy = Some(RestartPolicy::Always);
        c
    }

    pub(crate) fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("uid-1".to_owned());
        pod.spec.containers = containers;
        pod.spec.init_containers = init;
        pod
    }

    fn amounts(list: &ResourceList) -> (i64, i64) {
        (cpu_milli(list), memory_bytes(list))
    }

    struct Case {
        name: &'static str,
        pod: Pod,
        requests: (i64, i64),
        limits: (i64, i64),
    }

    fn check(case: Case) {
        assert_eq!(
            amounts(&pod_requests(&case.pod)),
            case.requests,
            "{}: requests",
            case.name
        );
        assert_eq!(
            amounts(&pod_limits(&case.pod)),
            case.limits,
            "{}: limits",
            case.name
        );
    }

    #[test]
    fn effective_pod_resources() {
        let c = container;
        let mut overhead = pod(
            vec![c("a", &[("cpu", "100m")], &[("memory", "1Mi")])],
            vec![],
        );
        overhead.spec.overhead = [
            ("cpu".to_owned(), Quantity::parse("10m").unwrap()),
            ("memory".to_owned(), Quantity::parse("1Ki").unwrap()),
        ]
        .into();
        let mut pod_level = pod(vec![c("a", &[("cpu", "100m")], &[("cpu", "200m")])], vec![]);
        pod_level.spec.resources = Some(ResourceRequirements {
            limits: [("cpu".to_owned(), Quantity::parse("1").unwrap())].into(),
            ..Default::default()
        });
        let cases = [
            Case {
                name: "empty pod",
                pod: pod(vec![c("a", &[], &[])], vec![]),
                requests: (0, 0),
                limits: (0, 0),
            },
            Case {
                name: "regular containers are summed",
                pod: pod(
                    vec![
                        c("a", &[("cpu", "100m"), ("memory", "10Mi")], &[("cpu", "1")]),
                        c(
                            "b",
                            &[("cpu", "250m")],
                            &[("cpu", "500m"), ("memory", "20Mi")],
                        ),
                    ],
                    vec![],
                ),
                // b's memory request defaults to its limit.
                requests: (350, 30 << 20),
                limits: (1500, 20 << 20),
            },
            Case {
                name: "a big init container dominates",
                pod: pod(
                    vec![c("a", &[("cpu", "100m")], &[])],
                    vec![c("init", &[("cpu", "2")], &[("memory", "1Gi")])],
                ),
                requests: (2000, 1 << 30),
                limits: (0, 1 << 30),
            },
            Case {
                name: "a small init container does not count",
                pod: pod(
                    vec![c("a", &[("cpu", "1")], &[])],
                    vec![c("init", &[("cpu", "500m")], &[])],
                ),
                requests: (1000, 0),
                limits: (0, 0),
            },
            Case {
                name: "sidecars add to the sum and to later init containers",
                pod: pod(
                    vec![c("a", &[("cpu", "100m")], &[])],
                    vec![
                        sidecar(c("side", &[("cpu", "200m")], &[])),
                        c("init", &[("cpu", "250m")], &[]),
                    ],
                ),
                // max(100 + 200, 250 + 200)
                requests: (450, 0),
                limits: (0, 0),
            },
            Case {
                name: "an init container before a sidecar runs without it",
                pod: pod(
                    vec![c("a", &[("cpu", "100m")], &[])],
                    vec![
                        c("init", &[("cpu", "250m")], &[]),
                        sidecar(c("side", &[("cpu", "200m")], &[])),
                    ],
                ),
                // max(100 + 200, 250)
                requests: (300, 0),
                limits: (0, 0),
            },
            Case {
                name: "overhead adds to requests and to set limits only",
                pod: overhead,
                requests: (110, (1 << 20) + 1024),
                limits: (0, (1 << 20) + 1024),
            },
            Case {
                name: "pod-level values replace the aggregate",
                pod: pod_level,
                requests: (1000, 0),
                limits: (1000, 0),
            },
        ];
        for case in cases {
            check(case);
        }
    }

    #[test]
    fn ephemeral_storage_is_kept_but_ignored_by_cpu_and_memory() {
        let p = pod(
            vec![container("a", &[("ephemeral-storage", "1Gi")], &[])],
            vec![],
        );
        let requests = pod_requests(&p);
        assert!(requests.contains_key("ephemeral-storage"));
        assert_eq!(amounts(&requests), (0, 0));
    }

    #[test]
    fn sums_saturate() {
        let huge = "9e18";
        let p = pod(
            vec![
                container("a", &[("memory", huge)], &[]),
                container("b", &[("memory", huge)], &[]),
            ],
            vec![],
        );
        assert_eq!(memory_bytes(&pod_requests(&p)), i64::MAX);
    }
}
