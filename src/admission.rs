//! Pod admission (upstream lifecycle predicates): may this node run the pod next to
//! the pods it already runs? Pure: the node's allocatable, labels and taints and the
//! other active pods are inputs; a rejection carries upstream's reason and message.
//!
//! Checks, first failure wins: fields litelet does not carry out (`fields.rs`:
//! `hostUsers: false`, unsupported volume sources, ...), sysctls (`sysctls.rs`, `SysctlForbidden`), node name,
//! OS, node selector and required node affinity (`affinity.rs`, `NodeAffinity`),
//! untolerated NoExecute taints (API pods only), host ports, then resources — pods
//! count, cpu, memory, ephemeral-storage and any other requested resource
//! (`OutOf<name>`).
//!
//! Below both of its callers: the sync loop admits new pods with [`admit`], and resize
//! admission (`resize::admission`) checks the fit alone with [`fits`].
//!
//! The node's labels and taints are the API server's (the `node-watch` thread's
//! `NodeLister`) once known, else the ones litelet registers the node with: the sync
//! loop builds the [`NodeView`] for each batch of additions.
//!
//! No soft admission (upstream `canRunPod`'s soft admit handlers): upstream's only soft
//! handler on Linux is AppArmor's, which keeps a pod Pending with `Blocked` containers
//! when the profiles it asks for cannot be enforced. litelet sends the profiles to the
//! runtime (`runtime/profiles.rs`) and, on a host without AppArmor, refuses to create
//! a container that asks for one: the pod is admitted and its container waits with
//! `CreateContainerConfigError` and a message saying why, never running unconfined
//! (pinned by `b54_...` below and the profile tests).

pub mod affinity;
pub mod fields;
pub mod sysctls;

use std::collections::{BTreeMap, HashSet};

use crate::api::node::{Taint, TaintEffect};
use crate::api::pod::{Pod, TolerationOperator, RESOURCE_PODS};
use crate::api::quantity::Quantity;
use crate::cgroups::pod_resources::pod_requests;

/// What the node offers.
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Allocatable resources (cpu, memory, pods, ephemeral-storage, ...).
    pub allocatable: BTreeMap<String, Quantity>,
    /// Sysctls pods may set: the safe ones plus `--allowed-unsafe-sysctls`.
    pub sysctls: sysctls::SysctlAllowlist,
    /// The runtime's features and whether RuntimeClasses resolve (`fields.rs`).
    pub support: fields::NodeSupport,
}

/// Upstream's message for a pod whose node selector or affinity does not match.
pub const NODE_AFFINITY_MESSAGE: &str =
    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector";

impl NodeView {
    /// This view with the labels and taints of the Node as the API server has it,
    /// when known (upstream admits against the node lister's Node).
    pub fn with_listed(&self, listed: Option<crate::node::lister::ListedNode>) -> NodeView {
        let mut view = self.clone();
        if let Some(listed) = listed {
            view.labels = listed.labels;
            view.taints = listed.taints;
        }
        view
    }
}

/// A refusal: reason (e.g. `OutOfcpu`) and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

fn reject(reason: impl Into<String>, message: impl Into<String>) -> Result<(), Rejection> {
    Err(Rejection {
        reason: reason.into(),
        message: message.into(),
    })
}

fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    pod.spec
        .containers
        .iter()
        .chain(pod.spec.init_containers.iter())
        .flat_map(|c| c.ports.iter())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| {
            let protocol = p
                .protocol
                .as_ref()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "TCP".into());
            let ip = p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into());
            (protocol, ip, p.host_port.unwrap_or(0))
        })
        .collect()
}

fn ports_conflict(a: &(String, String, i32), b: &(String, String, i32)) -> bool {
    let wildcard = |ip: &str| ip == "0.0.0.0" || ip == "::" || ip.is_empty();
    a.0 == b.0 && a.2 == b.2 && (a.1 == b.1 || wildcard(&a.1) || wildcard(&b.1))
}

/// Whether one of the pod's tolerations tolerates `taint`.
pub fn tolerates(pod: &Pod, taint: &Taint) -> bool {
    pod.spec.tolerations.iter().any(|t| {
        let effect_ok = t.effect.as_ref().is_none_or(|e| *e == taint.effect);
        let key = t.key.as_deref().unwrap_or("");
        match t.operator.clone().unwrap_or(TolerationOperator::Equal) {
            TolerationOperator::Exists => effect_ok && (key.is_empty() || key == taint.key),
            _ => {
                effect_ok
                    && key == taint.key
                    && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
        }
    })
}

/// Decides whether `pod` may run on `node` beside `others` (the active pods).
pub fn admit(pod: &Pod, others: &[&Pod], node: &NodeView) -> Result<(), Rejection> {
    fields::check(pod, &node.support)?;
    if let Some(message) = node.sysctls.check(pod) {
        return reject(sysctls::FORBIDDEN_REASON, message);
    }
    if let Some(name) = pod.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        if name != node.name {
            return reject(
                "NodeName",
                format!(
                    "Pod is bound to node {name:?}, this is node {:?}",
                    node.name
                ),
            );
        }
    }
    if let Some(os) = pod.spec.os.as_ref().filter(|os| !os.name.is_empty()) {
        if os.name != "linux" {
            return reject(
                "PodOSNotSupported",
                format!(
                    "Failed to admit pod as the OS field {:?} does not match node OS linux",
                    os.name
                ),
            );
        }
    }
    if let Some(os) = pod.spec.node_selector.get("kubernetes.io/os") {
        if os != "linux" {
            return reject(
                "PodOSSelectorNodeLabelDoesNotMatch",
                format!("Failed to admit pod as the `kubernetes.io/os` label {os:?} does not match node OS linux"),
            );
        }
    }
    if !affinity::matches_node(pod, &node.name, &node.labels) {
        return reject("NodeAffinity", NODE_AFFINITY_MESSAGE);
    }
    if !pod.is_static() {
        if let Some(taint) = node
            .taints
            .iter()
            .find(|t| t.effect == TaintEffect::NoExecute && !tolerates(pod, t))
        {
            return reject(
                "Taint",
                format!(
                    "Predicate TaintToleration failed: untolerated taint {}:{}",
                    taint.key,
                    taint.effect.as_str()
                ),
            );
        }
    }
    let used: Vec<_> = others.iter().flat_map(|p| host_ports(p)).collect();
    for wanted in host_ports(pod) {
        if used.iter().any(|u| ports_conflict(u, &wanted)) {
            return reject(
                "NodePorts",
                format!(
                    "Predicate NodePorts failed: host port {}/{} is in use",
                    wanted.2, wanted.0
                ),
            );
        }
    }
    fits(pod, others, node)
}

/// The resource part of admission: pods count, then every requested resource.
pub fn fits(pod: &Pod, others: &[&Pod], node: &NodeView) -> Result<(), Rejection> {
    if let Some(max) = node.allocatable.get(RESOURCE_PODS) {
        if (others.len() as i64) + 1 > max.value() {
            return reject(
                format!("OutOf{RESOURCE_PODS}"),
                format!("Node didn't have enough resource: {RESOURCE_PODS}, requested: 1, used: {}, capacity: {}", others.len(), max.value()),
            );
        }
    }
    let wanted = pod_requests(pod);
    let mut names: Vec<&String> = wanted.keys().collect();
    names.sort_by_key(|n| match n.as_str() {
        "cpu" => 0,
        "memory" => 1,
        _ => 2,
    });
    let checked: HashSet<&str> = ["cpu", "memory", "ephemeral-storage"].into_iter().collect();
    for name in names {
        let request = &wanted[name];
        if request.is_zero() {
            continue;
        }
        let Some(capacity) = node.allocatable.get(name) else {
            if checked.contains(name.as_str()) {
                continue;
            }
            return reject(format!("OutOf{name}"), format!("Node didn't have enough resource: {name}, requested: {request}, used: 0, capacity: 0"));
        };
        let used_milli: i64 = others
            .iter()
            .map(|p| {
                pod_requests(p)
                    .get(name)
                    .map(|q| q.milli_value())
                    .unwrap_or(0)
            })
            .sum();
        if used_milli.saturating_add(request.milli_value()) > capacity.milli_value() {
            let used = Quantity::from_milli(used_milli, Default::default());
            return reject(
                format!("OutOf{name}"),
                format!("Node didn't have enough resource: {name}, requested: {request}, used: {used}, capacity: {capacity}"),
            );
        }
    }
    Ok(())
}

/// Upstream's reason for a pod its device plugins cannot serve (the resource
/// allocation admit handler's).
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

/// Device plugins' part of admission (upstream's resource allocation handler, run
/// before the predicates): enough free healthy devices for every device-plugin
/// resource `pod` asks for, else `UnexpectedAdmissionError`. On success the node's
/// allocatable for those resources is the plugins' healthy count, so [`fits`] checks
/// them like any other resource (upstream's UpdatePluginResources).
pub fn admit_devices(
    devices: &crate::devicemanager::DeviceManager,
    pod: &Pod,
    active: &[&Pod],
    node: &NodeView,
) -> Result<NodeView, Rejection> {
    devices.admit(pod, active).map_err(|e| Rejection {
        reason: UNEXPECTED_ADMISSION_ERROR.to_owned(),
        message: format!("Allocate failed due to {e}, which is unexpected"),
    })?;
    // What the node then offers: at least what the active pods and this one ask
    // (upstream sets it to the devices allocated), so a pod holding devices from
    // before a restart passes while its plugin has not listed them again.
    let mut view = node.clone();
    for (name, (_, allocatable)) in devices.capacity() {
        let asked: i64 = active
            .iter()
            .copied()
            .chain(std::iter::once(pod))
            .map(|p| pod_requests(p).get(&name).map(|q| q.value()).unwrap_or(0))
            .sum();
        let offered = allocatable.max(asked);
        view.allocatable.insert(
            name,
            Quantity::from_milli(offered.saturating_mul(1000), Default::default()),
        );
    }
    Ok(view)
}

/// An extra admission check run before the built-in ones (upstream PodAdmitHandler;
/// the eviction manager's refuses pods under node pressure). Implementations read
/// shared state only: the sync loop calls it.
pub trait PodAdmitHandler: Send + Sync {
    fn admit(&self, pod: &Pod) -> Result<(), Rejection>;
}

/// Several handlers asked in order; the first refusal wins (upstream's list of admit
/// handlers: the eviction manager's, then the node shutdown manager's).
pub struct AdmitHandlers(pub Vec<std::sync::Arc<dyn PodAdmitHandler>>);

impl PodAdmitHandler for AdmitHandlers {
    fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        self.0.iter().try_for_each(|h| h.admit(pod))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{Container, ContainerPort, ResourceRequirements, Toleration};

    fn node() -> NodeView {
        let q = |s: &str| Quantity::parse(s).unwrap();
        NodeView {
            name: "edge-1".into(),
            labels: BTreeMap::from([("zone".to_owned(), "a".to_owned())]),
            taints: vec![],
            allocatable: BTreeMap::from([
                ("cpu".to_owned(), q("2")),
                ("memory".to_owned(), q("1Gi")),
                ("pods".to_owned(), q("3")),
            ]),
            ..Default::default()
        }
    }

    fn pod(cpu: &str, memory: &str) -> Pod {
        let mut requests = BTreeMap::new();
        if !cpu.is_empty() {
            requests.insert("cpu".to_owned(), Quantity::parse(cpu).unwrap());
        }
        if !memory.is_empty() {
            requests.insert("memory".to_owned(), Quantity::parse(memory).unwrap());
        }
        let mut pod = Pod::default();
        pod.spec.containers.push(Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                requests,
                ..Default::default()
            }),
            ..Default::default()
        });
        pod
    }

    fn reason(result: Result<(), Rejection>) -> String {
        result.err().map(|r| r.reason).unwrap_or_default()
    }

    #[test]
    fn resources_and_pod_count() {
        let n = node();
        let a = pod("1500m", "512Mi");
        assert_eq!(reason(admit(&pod("600m", "100Mi"), &[&a], &n)), "OutOfcpu");
        assert_eq!(
            reason(admit(&pod("100m", "600Mi"), &[&a], &n)),
            "OutOfmemory"
        );
        assert!(
            admit(&pod("500m", "512Mi"), &[&a], &n).is_ok(),
            "exactly full fits"
        );
        let full = [&a, &a, &a];
        let rejected = admit(&pod("", ""), &full, &n).unwrap_err();
        assert_eq!(rejected.reason, "OutOfpods");
        assert!(
            rejected.message.contains("capacity: 3"),
            "{}",
            rejected.message
        );
        assert_eq!(
            reason(admit(
                &pod("1", ""),
                &[],
                &NodeView {
                    allocatable: BTreeMap::new(),
                    ..node()
                }
            )),
            ""
        );
    }

    /// RuntimeClass overhead (`spec.overhead`, set by the API server) counts in the fit,
    /// for the pod admitted and for the pods already running.
    #[test]
    fn pod_overhead_counts_in_the_resource_fit() {
        let n = node();
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut with_overhead = pod("1500m", "");
        with_overhead.spec.overhead = BTreeMap::from([("cpu".to_owned(), q("600m"))]);
        let r = admit(&with_overhead, &[], &n).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert!(r.message.contains("requested: 2100m"), "{}", r.message);
        with_overhead.spec.overhead = BTreeMap::from([("cpu".to_owned(), q("500m"))]);
        assert!(admit(&with_overhead, &[], &n).is_ok(), "exactly full fits");
        assert_eq!(
            reason(admit(&pod("1m", ""), &[&with_overhead], &n)),
            "OutOfcpu",
            "a running pod's overhead is used capacity"
        );
    }

    /// `requests.ephemeral-storage` counts against the node's allocatable
    /// ephemeral-storage like cpu and memory.
    #[test]
    fn ephemeral_storage_requests_count_in_the_fit() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut n = node();
        n.allocatable
            .insert("ephemeral-storage".to_owned(), q("10Gi"));
        let with_disk = |size: &str| {
            let mut p = pod("", "");
            if let Some(r) = p.spec.containers[0].resources.as_mut() {
                r.requests.insert("ephemeral-storage".to_owned(), q(size));
            }
            p
        };
        let big = with_disk("6Gi");
        let r = admit(&with_disk("5Gi"), &[&big], &n).unwrap_err();
        assert_eq!(r.reason, "OutOfephemeral-storage");
        assert!(
            r.message.contains("ephemeral-storage, requested: 5Gi"),
            "{}",
            r.message
        );
        assert!(admit(&with_disk("4Gi"), &[&big], &n).is_ok());
    }

    #[test]
    fn node_name_os_selector_taints_ports() {
        let n = node();
        let mut p = pod("", "");
        p.spec.node_name = Some("other".into());
        assert_eq!(reason(admit(&p, &[], &n)), "NodeName");

        let mut p = pod("", "");
        p.spec.node_selector.insert("zone".into(), "b".into());
        assert_eq!(reason(admit(&p, &[], &n)), "NodeAffinity");

        let tainted = NodeView {
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("db".into()),
                effect: TaintEffect::NoExecute,
                time_added: None,
            }],
            ..node()
        };
        let mut p = pod("", "");
        assert_eq!(reason(admit(&p, &[], &tainted)), "Taint");
        p.spec.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some(TolerationOperator::Equal),
            value: Some("db".into()),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: None,
        });
        assert!(admit(&p, &[], &tainted).is_ok());

        let with_port = |host_ip: Option<&str>| {
            let mut p = pod("", "");
            p.spec.containers[0].ports.push(ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                host_ip: host_ip.map(str::to_owned),
                ..Default::default()
            });
            p
        };
        let taken = with_port(None);
        assert_eq!(
            reason(admit(&with_port(Some("127.0.0.1")), &[&taken], &n)),
            "NodePorts"
        );
    }

    /// The node as litelet registers it: default labels plus `--node-labels`.
    fn registered() -> NodeView {
        let mut config = crate::node::NodeConfig::new("node2", "node2");
        config.labels = crate::node::config::parse_node_labels("site=berlin").unwrap();
        NodeView {
            name: "node2".into(),
            labels: crate::node::register::owned_labels(&config, "amd64"),
            ..node()
        }
    }

    fn hostname_affinity(operator: &str, values: &[&str]) -> Pod {
        let mut p = pod("", "");
        p.spec.affinity = Some(serde_json::json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname",
                    "operator": operator, "values": values}]}]}}}));
        p
    }

    /// Regression: admission once saw no node labels, so every pod with node affinity
    /// or a selector on the node's own labels was refused.
    #[test]
    fn admission_sees_the_registered_labels() {
        let n = registered();
        let cases: Vec<(&str, Pod, &str)> = vec![
            ("In own hostname", hostname_affinity("In", &["node2"]), ""),
            (
                "In other hostname",
                hostname_affinity("In", &["node1"]),
                "NodeAffinity",
            ),
            (
                "NotIn own hostname",
                hostname_affinity("NotIn", &["node2"]),
                "NodeAffinity",
            ),
            (
                "NotIn other hostname",
                hostname_affinity("NotIn", &["node1"]),
                "",
            ),
            ("Exists hostname", hostname_affinity("Exists", &[]), ""),
            (
                "selector on --node-labels",
                {
                    let mut p = pod("", "");
                    p.spec.node_selector.insert("site".into(), "berlin".into());
                    p
                },
                "",
            ),
            (
                "selector on beta arch",
                {
                    let mut p = pod("", "");
                    p.spec
                        .node_selector
                        .insert("beta.kubernetes.io/arch".into(), "amd64".into());
                    p
                },
                "",
            ),
        ];
        for (name, p, want) in cases {
            let got = admit(&p, &[], &n);
            assert_eq!(reason(got.clone()), want, "{name}");
            if let Err(r) = got {
                assert_eq!(r.message, NODE_AFFINITY_MESSAGE, "{name}");
            }
        }
    }

    #[test]
    fn admission_follows_the_labels_and_taints_the_api_server_has() {
        let mut on_site = pod("", "");
        on_site
            .spec
            .node_selector
            .insert("site".into(), "berlin".into());
        let listed = crate::node::lister::ListedNode {
            labels: BTreeMap::from([("site".to_owned(), "paris".to_owned())]),
            taints: vec![Taint {
                key: "maintenance".into(),
                value: None,
                effect: TaintEffect::NoExecute,
                time_added: None,
            }],
        };
        assert!(admit(&on_site, &[], &registered()).is_ok());
        assert_eq!(
            reason(admit(&on_site, &[], &registered().with_listed(None))),
            ""
        );
        let relabelled = registered().with_listed(Some(listed));
        assert_eq!(reason(admit(&on_site, &[], &relabelled)), "NodeAffinity");
        assert_eq!(reason(admit(&pod("", ""), &[], &relabelled)), "Taint");
    }

    #[test]
    fn unsafe_sysctls_are_refused_first() {
        let mut p = pod("", "");
        p.spec.node_name = Some("elsewhere".into());
        p.spec.security_context = Some(crate::api::pod::PodSecurityContext {
            sysctls: vec![crate::api::pod::Sysctl {
                name: "kernel.msgmax".into(),
                value: "1".into(),
            }],
            ..Default::default()
        });
        let rejected = admit(&p, &[], &node()).unwrap_err();
        assert_eq!(rejected.reason, "SysctlForbidden");
        assert_eq!(
            rejected.message,
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
    }

    /// Upstream's soft admission is deliberately absent (module doc): a pod asking for an
    /// AppArmor profile passes admission; the runtime layer enforces or refuses it.
    #[test]
    fn no_soft_admission_a_pod_asking_for_apparmor_is_admitted() {
        let mut asking = pod("100m", "10Mi");
        let mut context = crate::api::pod::SecurityContext::default();
        context.extra.insert(
            "appArmorProfile".into(),
            serde_json::json!({"type": "Localhost", "localhostProfile": "k8s-deny-write"}),
        );
        asking.spec.containers[0].security_context = Some(context);
        assert!(admit(&asking, &[], &node()).is_ok());
    }

    struct Refuse(&'static str);
    impl PodAdmitHandler for Refuse {
        fn admit(&self, _: &Pod) -> Result<(), Rejection> {
            reject(self.0, "no")
        }
    }
    struct Allow;
    impl PodAdmitHandler for Allow {
        fn admit(&self, _: &Pod) -> Result<(), Rejection> {
            Ok(())
        }
    }

    #[test]
    fn handlers_are_asked_in_order_and_the_first_refusal_wins() {
        use std::sync::Arc;
        let p = pod("100m", "10Mi");
        let all = AdmitHandlers(vec![
            Arc::new(Allow),
            Arc::new(Refuse("Evicted")),
            Arc::new(Refuse("NodeShutdown")),
        ]);
        assert_eq!(all.admit(&p).unwrap_err().reason, "Evicted");
        assert!(AdmitHandlers(vec![Arc::new(Allow)]).admit(&p).is_ok());
        assert!(AdmitHandlers(Vec::new()).admit(&p).is_ok());
    }
}
