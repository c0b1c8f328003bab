//! QoS decisions: a pod's QoS class (upstream `qos.GetPodQOS`), the oom_score_adj the
//! runtime gives each container (upstream `pkg/kubelet/qos/policy.go`). The CPU shares
//! of the QoS cgroups are a conversion (`convert.rs`, which reads the class here).
//!
//! Only cpu and memory decide the class. Containers are read with the API's request
//! defaulting (see [`super::pod_resources`]). Pure functions; the runtime (sandbox and
//! container configs) and the manager call them.

use std::collections::BTreeSet;

use crate::api::pod::{self, Container, Pod, RESOURCE_CPU, RESOURCE_MEMORY};
use crate::api::quantity::Quantity;

use super::pod_resources::{
    aggregate_containers, container_limits, container_requests, memory_bytes, pod_level_limits,
    pod_level_requests, pod_level_set, ResourceList,
};

/// oom_score_adj of Guaranteed containers (and of node-critical pods).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// oom_score_adj of BestEffort containers: killed first.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// Burstable containers stay strictly between the two classes.
pub const BURSTABLE_MIN_OOM_SCORE_ADJ: i64 = 1000 + GUARANTEED_OOM_SCORE_ADJ;
pub const BURSTABLE_MAX_OOM_SCORE_ADJ: i64 = BEST_EFFORT_OOM_SCORE_ADJ - 1;

/// Priority from which a pod is critical (`system-cluster-critical` and above;
/// upstream's SystemCriticalPriority).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";

/// A pod's quality-of-service class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container limits cpu and memory and requests exactly its limits.
    Guaranteed,
    /// Something is requested or limited, but not as Guaranteed needs.
    Burstable,
    /// No container requests or limits cpu or memory.
    BestEffort,
}

impl From<QosClass> for crate::api::pod::QosClass {
    fn from(class: QosClass) -> Self {
        match class {
            QosClass::Guaranteed => Self::Guaranteed,
            QosClass::Burstable => Self::Burstable,
            QosClass::BestEffort => Self::BestEffort,
        }
    }
}

impl QosClass {
    /// The class as the API reports it in `status.qosClass`.
    pub fn to_api(self) -> pod::QosClass {
        match self {
            QosClass::Guaranteed => pod::QosClass::Guaranteed,
            QosClass::Burstable => pod::QosClass::Burstable,
            QosClass::BestEffort => pod::QosClass::BestEffort,
        }
    }

    /// The class of an API value; `None` for a value this version does not know.
    pub fn from_api(class: &pod::QosClass) -> Option<QosClass> {
        match class {
            pod::QosClass::Guaranteed => Some(QosClass::Guaranteed),
            pod::QosClass::Burstable => Some(QosClass::Burstable),
            pod::QosClass::BestEffort => Some(QosClass::BestEffort),
            pod::QosClass::Other(_) => None,
        }
    }
}

/// The pod's class: `status.qosClass` when the API server set it (it never changes for
/// the pod's life, also across resizes), otherwise computed from the spec.
pub fn pod_qos(pod: &Pod) -> QosClass {
    pod.status
        .qos_class
        .as_ref()
        .and_then(QosClass::from_api)
        .unwrap_or_else(|| compute_pod_qos(pod))
}

fn qos_resource(name: &str) -> bool {
    name == RESOURCE_CPU || name == RESOURCE_MEMORY
}

/// The class from the spec alone, as upstream computes it: positive cpu/memory
/// requests and limits are summed over all containers (init containers included) or
/// taken from pod-level resources when set. Guaranteed needs every set to limit both
/// cpu and memory and the summed requests to equal the summed limits.
pub fn compute_pod_qos(pod: &Pod) -> QosClass {
    let sets: Vec<(ResourceList, ResourceList)> = if pod_level_set(pod) {
        vec![(pod_level_requests(pod), pod_level_limits(pod))]
    } else {
        pod.spec
            .containers
            .iter()
            .chain(&pod.spec.init_containers)
            .map(|c| (container_requests(c), container_limits(c)))
            .collect()
    };
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();
    let mut guaranteed = true;
    let add = |list: &mut ResourceList, name: &String, q: &Quantity| {
        let total = match list.get(name) {
            Some(known) => known.add(q).unwrap_or_else(|| known.clone()),
            None => q.clone(),
        };
        list.insert(name.clone(), total);
    };
    for (set_requests, set_limits) in &sets {
        for (name, q) in set_requests {
            if qos_resource(name) && q > &Quantity::zero() {
                add(&mut requests, name, q);
            }
        }
        let mut limited = BTreeSet::new();
        for (name, q) in set_limits {
            if qos_resource(name) && q > &Quantity::zero() {
                limited.insert(name.as_str());
                add(&mut limits, name, q);
            }
        }
        if !(limited.contains(RESOURCE_CPU) && limited.contains(RESOURCE_MEMORY)) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    let equal = requests.len() == limits.len()
        && requests
            .iter()
            .all(|(name, req)| limits.get(name).is_some_and(|lim| lim == req));
    if guaranteed && equal {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// Node-critical pods get the Guaranteed score whatever their class: a
/// `system-node-critical` pod that is static, mirrored or of critical priority.
fn node_critical(pod: &Pod) -> bool {
    is_critical(pod) && pod.spec.priority_class_name.as_deref() == Some(SYSTEM_NODE_CRITICAL)
}

/// Upstream IsCriticalPod: static, mirror, or of system-critical priority. Such pods
/// are never evicted and never get swap.
pub fn is_critical(pod: &Pod) -> bool {
    pod.is_static()
        || pod.is_mirror()
        || pod
            .spec
            .priority
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// `1000 - 1000 * request / capacity`, in wide arithmetic.
fn score_for_request(request: i64, capacity: i64) -> i64 {
    let capacity = i128::from(capacity.max(1));
    let score = 1000 - (1000 * i128::from(request.max(0))) / capacity;
    i64::try_from(score).unwrap_or(i64::MIN)
}

/// The oom_score_adj for `container` of `pod` on a machine with `memory_capacity`
/// bytes (upstream `GetContainerOOMScoreAdjust`; pass the pod with its allocated
/// resources). Guaranteed → -997, BestEffort → 1000; Burstable → `1000 - 1000 *
/// memoryRequest / capacity`, kept within [3, 999] so that the classes never overlap.
/// A sidecar never scores above the regular container with the smallest request, so it
/// is not killed before what it serves. With pod-level memory requests, the part not
/// requested by any container is shared equally among the containers.
pub fn container_oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> i64 {
    if node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match pod_qos(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let unassigned_share = unassigned_pod_memory_per_container(pod);
    let request = memory_bytes(&container_requests(container)).saturating_add(unassigned_share);
    let mut score = score_for_request(request, memory_capacity);

    let is_sidecar = container.is_sidecar()
        && pod
            .spec
            .init_containers
            .iter()
            .any(|c| c.name == container.name);
    if is_sidecar {
        let smallest_regular = pod
            .spec
            .containers
            .iter()
            .map(|c| memory_bytes(&container_requests(c)))
            .min();
        if let Some(smallest) = smallest_regular {
            let bound =
                score_for_request(smallest.saturating_add(unassigned_share), memory_capacity);
            score = score.min(bound);
        }
    }
    if score < BURSTABLE_MIN_OOM_SCORE_ADJ {
        BURSTABLE_MIN_OOM_SCORE_ADJ
    } else if score >= BEST_EFFORT_OOM_SCORE_ADJ {
        BURSTABLE_MAX_OOM_SCORE_ADJ
    } else {
        score
    }
}

/// Pod-level memory request minus what the containers request, per container.
fn unassigned_pod_memory_per_container(pod: &Pod) -> i64 {
    let pod_request = memory_bytes(&pod_level_requests(pod));
    if pod_request == 0 {
        return 0;
    }
    let count = pod.spec.containers.len() + pod.spec.init_containers.len();
    let containers = memory_bytes(&aggregate_containers(pod, container_requests));
    let count = i64::try_from(count.max(1)).unwrap_or(i64::MAX);
    pod_request.saturating_sub(containers) / count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::{container, pod, sidecar};

    const GI: i64 = 1 << 30;

    #[test]
    fn qos_classes() {
        let c = container;
        let full = |name| {
            c(
                name,
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )
        };
        let cases: Vec<(&str, Pod, QosClass)> = vec![
            (
                "no resources",
                pod(vec![c("a", &[], &[])], vec![]),
                QosClass::BestEffort,
            ),
            (
                "only ephemeral storage",
                pod(vec![c("a", &[("ephemeral-storage", "1Gi")], &[])], vec![]),
                QosClass::BestEffort,
            ),
            (
                "requests equal limits",
                pod(vec![full("a"), full("b")], vec![]),
                QosClass::Guaranteed,
            ),
            (
                "limits only (requests default to limits)",
                pod(
                    vec![c("a", &[], &[("cpu", "1"), ("memory", "1Gi")])],
                    vec![],
                ),
                QosClass::Guaranteed,
            ),
            (
                "request below limit",
                pod(
                    vec![c(
                        "a",
                        &[("cpu", "500m"), ("memory", "1Gi")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    )],
                    vec![],
                ),
                QosClass::Burstable,
            ),
            (
                "memory limit missing",
                pod(vec![c("a", &[("cpu", "1")], &[("cpu", "1")])], vec![]),
                QosClass::Burstable,
            ),
            (
                "one container without resources",
                pod(vec![full("a"), c("b", &[], &[])], vec![]),
                QosClass::Burstable,
            ),
            (
                "init container without resources",
                pod(vec![full("a")], vec![c("init", &[], &[])]),
                QosClass::Burstable,
            ),
            (
                "init container with requests only",
                pod(
                    vec![c("a", &[], &[])],
                    vec![c("init", &[("memory", "1Mi")], &[])],
                ),
                QosClass::Burstable,
            ),
            (
                "guaranteed sidecar",
                pod(vec![full("a")], vec![sidecar(full("s"))]),
                QosClass::Guaranteed,
            ),
            (
                "zero quantities count as unset",
                pod(vec![c("a", &[("cpu", "0")], &[("memory", "0")])], vec![]),
                QosClass::BestEffort,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(compute_pod_qos(&p), want, "{name}");
        }
    }

    #[test]
    fn pod_level_resources_decide_the_class() {
        let mut p = pod(vec![container("a", &[], &[])], vec![]);
        p.spec.resources = Some(crate::api::pod::ResourceRequirements {
            limits: [
                ("cpu".to_owned(), Quantity::parse("1").unwrap()),
                ("memory".to_owned(), Quantity::parse("1Gi").unwrap()),
            ]
            .into(),
            ..Default::default()
        });
        assert_eq!(compute_pod_qos(&p), QosClass::Guaranteed);
    }

    #[test]
    fn status_class_wins_over_spec() {
        let mut p = pod(vec![container("a", &[], &[])], vec![]);
        p.status.qos_class = Some(pod::QosClass::Burstable);
        assert_eq!(pod_qos(&p), QosClass::Burstable);
        p.status.qos_class = Some(pod::QosClass::Other("Platinum".into()));
        assert_eq!(pod_qos(&p), QosClass::BestEffort);
        assert_eq!(QosClass::Guaranteed.to_api(), pod::QosClass::Guaranteed);
    }

    #[test]
    fn oom_score_adj_policy() {
        let c = container;
        let cap = 10 * GI;
        let guaranteed = pod(
            vec![c("a", &[], &[("cpu", "1"), ("memory", "1Gi")])],
            vec![],
        );
        assert_eq!(
            container_oom_score_adj(&guaranteed, &guaranteed.spec.containers[0], cap),
            -997
        );
        let best_effort = pod(vec![c("a", &[], &[])], vec![]);
        assert_eq!(
            container_oom_score_adj(&best_effort, &best_effort.spec.containers[0], cap),
            1000
        );

        // (memory request, expected) for a Burstable container on a 10 GiB machine.
        let cases = [
            ("1Gi", 900), // 10 % of memory
            ("5Gi", 500),
            ("10Gi", 3), // 0 → floor
            ("20Gi", 3), // negative → floor
            ("0", 999),  // 1000 → just below BestEffort
            ("1Ki", 999),
        ];
        for (request, want) in cases {
            let p = pod(
                vec![c("a", &[("memory", request)], &[("cpu", "1")])],
                vec![],
            );
            assert_eq!(
                container_oom_score_adj(&p, &p.spec.containers[0], cap),
                want,
                "{request}"
            );
        }
    }

    #[test]
    fn sidecar_scores_no_higher_than_smallest_regular_container() {
        let c = container;
        let p = pod(
            vec![
                c("big", &[("memory", "5Gi")], &[]),
                c("small", &[("memory", "2Gi")], &[]),
            ],
            vec![sidecar(c("side", &[("memory", "1Gi")], &[]))],
        );
        let cap = 10 * GI;
        assert_eq!(container_oom_score_adj(&p, &p.spec.containers[1], cap), 800);
        assert_eq!(
            container_oom_score_adj(&p, &p.spec.init_containers[0], cap),
            800
        );
        // A plain init container is not bound that way.
        let mut plain = p.clone();
        plain.spec.init_containers[0].restart_policy = None;
        assert_eq!(
            container_oom_score_adj(&plain, &plain.spec.init_containers[0], cap),
            900
        );
    }

    #[test]
    fn node_critical_static_pod_is_protected() {
        let mut p = pod(vec![container("a", &[], &[])], vec![]);
        p.spec.priority_class_name = Some(SYSTEM_NODE_CRITICAL.to_owned());
        p.spec.priority = Some(2_000_001_000);
        assert_eq!(container_oom_score_adj(&p, &p.spec.containers[0], GI), -997);
        p.spec.priority = Some(0);
        assert_eq!(container_oom_score_adj(&p, &p.spec.containers[0], GI), 1000);
    }

    #[test]
    fn pod_level_memory_request_is_shared() {
        let mut p = pod(
            vec![
                container("a", &[("memory", "1Gi")], &[]),
                container("b", &[], &[]),
            ],
            vec![],
        );
        p.spec.resources = Some(crate::api::pod::ResourceRequirements {
            requests: [("memory".to_owned(), Quantity::parse("3Gi").unwrap())].into(),
            ..Default::default()
        });
        // (3Gi - 1Gi) / 2 = 1Gi extra each.
        assert_eq!(
            container_oom_score_adj(&p, &p.spec.containers[0], 10 * GI),
            800
        );
        assert_eq!(
            container_oom_score_adj(&p, &p.spec.containers[1], 10 * GI),
            900
        );
    }
}
