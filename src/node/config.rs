//! The node's configuration as the `node` and `lease` threads use it ([`NodeConfig`]),
//! and the pure parsers of the flags that feed it: `--node-labels`,
//! `--register-with-taints`, `--kube-reserved`/`--system-reserved` and
//! `--eviction-hard`, with upstream's formats and checks.
//!
//! No I/O and no threads. Field names follow the KubeletConfiguration names
//! (`kubeReserved` → `kube_reserved`, `nodeStatusUpdateFrequency` → ...). Every parser
//! names the offending item in its error, so a bad flag is fixed at the first try.
//!
//! Invariants: labels in `labels` passed [`parse_node_labels`] (NodeRestriction
//! would refuse the others); taints have a valid key, value and effect; reservations
//! are non-negative quantities of known resources.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use crate::api::node::{Taint, TaintEffect};
use crate::api::quantity::Quantity;
use crate::node::addresses::{CloudProvider, NodeIps};

/// Node status is computed (and sent when changed) this often.
pub const DEFAULT_NODE_STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// Node status is sent at least this often, even unchanged.
pub const DEFAULT_NODE_STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);
/// The lease counts as expired this long after its renew time.
pub const DEFAULT_NODE_LEASE_DURATION_SECONDS: i32 = 40;
/// The lease is renewed every quarter of its duration, as upstream.
pub const LEASE_RENEW_FRACTION: f64 = 0.25;

/// A wrong flag or config value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("node label {item:?}: {reason}")]
    Label { item: String, reason: String },
    #[error("node label {item:?}: {source}")]
    LabelName {
        item: String,
        #[source]
        source: NameError,
    },
    #[error("taint {item:?}: {reason}")]
    Taint { item: String, reason: String },
    #[error("taint {item:?}: {source}")]
    TaintName {
        item: String,
        #[source]
        source: NameError,
    },
    #[error("reserved resource {item:?}: {reason}")]
    Reserved { item: String, reason: String },
    #[error("eviction threshold {item:?}: {reason}")]
    Eviction { item: String, reason: String },
    #[error("eviction threshold {item:?}: {source}")]
    EvictionValue {
        item: String,
        #[source]
        source: ThresholdError,
    },
    #[error("node ip {ip}: {reason}")]
    NodeIp { ip: IpAddr, reason: String },
    #[error("node name: {0}")]
    NodeName(String),
}

/// A label or taint key or value without Kubernetes' name syntax.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error("{what} must be at most 63 characters")]
    TooLong { what: &'static str },
    #[error(
        "{what} {name:?} must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    )]
    Characters { what: &'static str, name: String },
    #[error("prefix {0:?} must be a lowercase DNS subdomain (e.g. example.com)")]
    Subdomain(String),
}

/// An eviction threshold or minimum reclaim amount that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("bad percentage {0:?}")]
    Percentage(String),
    #[error("percentage must be within 0% and 100%")]
    PercentageRange,
    #[error(transparent)]
    Quantity(#[from] crate::api::quantity::QuantityError),
    #[error("quantity must not be negative")]
    Negative,
}

/// A hard eviction threshold: an absolute amount or a fraction of capacity.
#[derive(Clone, Debug, PartialEq)]
pub enum Threshold {
    Quantity(Quantity),
    /// A fraction in `[0, 1]` (`10%` is `0.1`).
    Percentage(f64),
}

impl Threshold {
    /// The amount this threshold holds back of `capacity`.
    pub fn reservation(&self, capacity: &Quantity) -> Quantity {
        match self {
            Threshold::Quantity(q) => q.clone(),
            Threshold::Percentage(p) => {
                let bytes = (capacity.value() as f64 * p) as i64;
                Quantity::from_value(bytes, capacity.format())
            }
        }
    }
}

/// Everything the node and lease threads need to know, resolved.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The Node object's name (and the lease's, and the holder identity).
    pub node_name: String,
    /// The `kubernetes.io/hostname` label and the `Hostname` address.
    pub hostname: String,
    /// `--node-ip` as one address; `None` uses [`NodeConfig::node_ips`].
    pub node_ip: Option<IpAddr>,
    /// `--node-ip` as upstream parses it (a dual-stack pair, or `::` to detect an
    /// IPv6 address first); read through [`NodeConfig::node_ips`].
    pub node_ips: NodeIps,
    /// `--cloud-provider`: with `external` the Node registers tainted
    /// uninitialized and its addresses belong to the cloud controller manager.
    pub cloud_provider: CloudProvider,
    /// `--provider-id`: `spec.providerID` of the Node litelet creates (never changed
    /// later: the API server refuses to change a set providerID).
    pub provider_id: Option<String>,
    /// `--port`: published as `daemonEndpoints.kubeletEndpoint.Port`.
    pub port: u16,
    pub max_pods: u32,
    /// `--node-labels`, validated by [`parse_node_labels`].
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`: set when the node is created, never later.
    pub register_with_taints: Vec<Taint>,
    pub kube_reserved: BTreeMap<String, Quantity>,
    pub system_reserved: BTreeMap<String, Quantity>,
    /// By signal name (`memory.available`, `nodefs.available`, ...).
    pub eviction_hard: BTreeMap<String, Threshold>,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    /// Normally a quarter of the lease duration; tests shorten it.
    pub node_lease_renew_interval: Duration,
    /// First retry delay after a failed API request; doubles up to `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl NodeConfig {
    /// Upstream defaults for everything but the names.
    pub fn new(node_name: &str, hostname: &str) -> Self {
        let lease_secs = DEFAULT_NODE_LEASE_DURATION_SECONDS;
        Self {
            node_name: node_name.to_owned(),
            hostname: hostname.to_owned(),
            node_ip: None,
            node_ips: NodeIps::Detect,
            cloud_provider: CloudProvider::None,
            provider_id: None,
            port: 10250,
            max_pods: 110,
            labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: default_eviction_hard(),
            node_status_update_frequency: DEFAULT_NODE_STATUS_UPDATE_FREQUENCY,
            node_status_report_frequency: DEFAULT_NODE_STATUS_REPORT_FREQUENCY,
            node_lease_duration_seconds: lease_secs,
            node_lease_renew_interval: Duration::from_secs_f64(
                f64::from(lease_secs) * LEASE_RENEW_FRACTION,
            ),
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(7),
        }
    }
}

/// A `nodeLeaseDurationSeconds` that is not a positive number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("nodeLeaseDurationSeconds {0} must be greater than 0")]
pub struct LeaseDurationError(pub i32);

impl NodeConfig {
    /// The node's IP addresses: `node_ips`, or the single `node_ip` when only that
    /// is set.
    pub fn node_ips(&self) -> NodeIps {
        match (self.node_ips, self.node_ip) {
            (NodeIps::Detect, Some(ip)) => NodeIps::Single(ip),
            (ips, _) => ips,
        }
    }

    /// `nodeLeaseDurationSeconds`: the Lease's `leaseDurationSeconds`, renewed every
    /// quarter of it as upstream (`NodeLeaseRenewIntervalFraction`).
    pub fn set_lease_duration(&mut self, seconds: i32) -> Result<(), LeaseDurationError> {
        if seconds <= 0 {
            return Err(LeaseDurationError(seconds));
        }
        self.node_lease_duration_seconds = seconds;
        self.node_lease_renew_interval =
            Duration::from_secs_f64(f64::from(seconds) * LEASE_RENEW_FRACTION);
        Ok(())
    }
}

/// Upstream's defaults: `memory.available<100Mi`, `nodefs.available<10%`,
/// `nodefs.inodesFree<5%`, `imagefs.available<15%`.
pub fn default_eviction_hard() -> BTreeMap<String, Threshold> {
    let mut m = BTreeMap::new();
    if let Ok(q) = Quantity::parse("100Mi") {
        m.insert("memory.available".to_owned(), Threshold::Quantity(q));
    }
    m.insert("nodefs.available".to_owned(), Threshold::Percentage(0.10));
    m.insert("nodefs.inodesFree".to_owned(), Threshold::Percentage(0.05));
    m.insert("imagefs.available".to_owned(), Threshold::Percentage(0.15));
    m
}

/// Labels a node may set on itself inside `kubernetes.io` / `k8s.io`.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];
/// Label namespaces (and their subdomains) a node may use freely.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.ends_with(&format!(".{domain}"))
}

/// True for labels the NodeRestriction admission plugin lets a node set on itself.
pub fn is_kubelet_label(key: &str) -> bool {
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let namespace = key.split_once('/').map(|(ns, _)| ns).unwrap_or("");
    if KUBELET_LABEL_NAMESPACES
        .iter()
        .any(|d| in_namespace(namespace, d))
    {
        return true;
    }
    !(in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io"))
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn check_name_part(s: &str, what: &'static str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty { what });
    }
    if s.len() > 63 {
        return Err(NameError::TooLong { what });
    }
    let ok_inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ends_ok || !s.chars().all(ok_inner) {
        return Err(NameError::Characters {
            what,
            name: s.to_owned(),
        });
    }
    Ok(())
}

/// A DNS-1123 subdomain: lowercase labels joined by dots, at most 253 characters.
pub fn check_subdomain(s: &str) -> Result<(), NameError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if s.len() > 253 || !s.split('.').all(label_ok) {
        return Err(NameError::Subdomain(s.to_owned()));
    }
    Ok(())
}

/// A label key or taint key: `[prefix/]name`.
pub fn check_qualified_name(key: &str) -> Result<(), NameError> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_subdomain(prefix)?;
            check_name_part(name, "name")
        }
        None => check_name_part(key, "name"),
    }
}

/// A label value (or taint value): empty, or a name part.
pub fn check_label_value(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value, "value")
}

fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Parses `--node-labels` (`key=value,key2=value2`): valid keys and values, and only
/// labels a node may set on itself (upstream's rule: inside `kubernetes.io` and
/// `k8s.io` only the well-known labels and the `kubelet.kubernetes.io` /
/// `node.kubernetes.io` namespaces; so no `node-role.kubernetes.io/...`).
pub fn parse_node_labels(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut labels = BTreeMap::new();
    for item in items(text) {
        let err = |reason: String| ConfigError::Label {
            item: item.to_owned(),
            reason,
        };
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| err("expected key=value".into()))?;
        let name_err = |source| ConfigError::LabelName {
            item: item.to_owned(),
            source,
        };
        check_qualified_name(key).map_err(name_err)?;
        check_label_value(value).map_err(name_err)?;
        if !is_kubelet_label(key) {
            return Err(err(format!(
                "a node may not set labels in the kubernetes.io or k8s.io namespaces except \
                 under kubelet.kubernetes.io/ or node.kubernetes.io/ or the well-known set ({})",
                KUBELET_LABELS.join(", ")
            )));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// Parses `--register-with-taints`: a comma-separated list of `key=value:Effect` or
/// `key:Effect`, with Effect one of NoSchedule, PreferNoSchedule, NoExecute. The
/// same key and effect may appear once.
pub fn parse_taints(text: &str) -> Result<Vec<Taint>, ConfigError> {
    let mut taints: Vec<Taint> = Vec::new();
    for item in items(text) {
        let err = |reason: String| ConfigError::Taint {
            item: item.to_owned(),
            reason,
        };
        let (kv, effect) = item
            .rsplit_once(':')
            .ok_or_else(|| err("expected key=value:Effect or key:Effect".into()))?;
        let effect = match effect {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => {
                return Err(err(format!(
                    "effect {other:?} must be NoSchedule, PreferNoSchedule or NoExecute"
                )))
            }
        };
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        let name_err = |source| ConfigError::TaintName {
            item: item.to_owned(),
            source,
        };
        check_qualified_name(key).map_err(name_err)?;
        if let Some(v) = value {
            if v.contains('=') {
                return Err(err("more than one '=' in key=value".into()));
            }
            check_label_value(v).map_err(name_err)?;
        }
        if taints.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(err(format!(
                "duplicate taint with key {key:?} and effect {effect}"
            )));
        }
        taints.push(Taint {
            key: key.to_owned(),
            value: value.filter(|v| !v.is_empty()).map(str::to_owned),
            effect,
            time_added: None,
        });
    }
    Ok(taints)
}

/// Resources that `--kube-reserved` and `--system-reserved` may hold back.
const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// Parses `--kube-reserved` / `--system-reserved` (`cpu=100m,memory=100Mi,...`).
pub fn parse_reserved(text: &str) -> Result<BTreeMap<String, Quantity>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in items(text) {
        let err = |reason: String| ConfigError::Reserved {
            item: item.to_owned(),
            reason,
        };
        let (name, amount) = item
            .split_once('=')
            .ok_or_else(|| err("expected resource=quantity".into()))?;
        if !RESERVABLE.contains(&name) {
            return Err(err(format!(
                "resource must be one of {}",
                RESERVABLE.join(", ")
            )));
        }
        let q = Quantity::parse(amount).map_err(|e| err(e.to_string()))?;
        if q.is_negative() {
            return Err(err("quantity must not be negative".into()));
        }
        out.insert(name.to_owned(), q);
    }
    Ok(out)
}

/// Eviction signals upstream knows.
const SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

/// Parses `--eviction-hard` (`memory.available<100Mi,nodefs.available<10%`). As
/// upstream's flag, the result replaces the defaults rather than merging with them.
pub fn parse_eviction_hard(text: &str) -> Result<BTreeMap<String, Threshold>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in items(text) {
        let err = |reason: String| ConfigError::Eviction {
            item: item.to_owned(),
            reason,
        };
        let (signal, value) = item
            .split_once('<')
            .ok_or_else(|| err("expected signal<value".into()))?;
        if !SIGNALS.contains(&signal) {
            return Err(err(format!(
                "unknown signal {signal:?} (known: {})",
                SIGNALS.join(", ")
            )));
        }
        out.insert(
            signal.to_owned(),
            parse_threshold_value(value).map_err(|source| ConfigError::EvictionValue {
                item: item.to_owned(),
                source,
            })?,
        );
    }
    Ok(out)
}

/// One threshold amount: `10%` (within 0% and 100%) or a non-negative quantity
/// (eviction thresholds and minimum reclaims share the syntax).
pub fn parse_threshold_value(value: &str) -> Result<Threshold, ThresholdError> {
    match value.strip_suffix('%') {
        Some(pct) => {
            let p: f64 = pct
                .parse()
                .map_err(|_| ThresholdError::Percentage(value.to_owned()))?;
            if !(0.0..=100.0).contains(&p) {
                return Err(ThresholdError::PercentageRange);
            }
            Ok(Threshold::Percentage(p / 100.0))
        }
        None => {
            let q = Quantity::parse(value)?;
            if q.is_negative() {
                return Err(ThresholdError::Negative);
            }
            Ok(Threshold::Quantity(q))
        }
    }
}

/// Upstream's checks on `--node-ip` that need no syscall: an address pods and the
/// control plane can reach (see [`crate::node::addresses::unusable`]).
pub fn validate_node_ip(ip: IpAddr) -> Result<(), ConfigError> {
    match crate::node::addresses::unusable(ip) {
        Some(reason) => Err(ConfigError::NodeIp {
            ip,
            reason: reason.to_owned(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn node_labels() {
        let l = parse_node_labels(
            "site=berlin, node.kubernetes.io/role=edge,example.com/empty=,kubernetes.io/os=linux",
        )
        .unwrap();
        assert_eq!(l["site"], "berlin");
        assert_eq!(l["node.kubernetes.io/role"], "edge");
        assert_eq!(l["example.com/empty"], "");
        assert_eq!(l.len(), 4);
        assert!(parse_node_labels("").unwrap().is_empty());

        let bad = [
            ("node-role.kubernetes.io/worker=", "a node may not set"),
            ("foo.k8s.io/x=y", "a node may not set"),
            ("noequals", "expected key=value"),
            ("Bad_Prefix.COM/x=y", "lowercase DNS subdomain"),
            ("-x=y", "starting and ending"),
            ("x=bad value", "starting and ending"),
        ];
        for (text, want) in bad {
            let e = parse_node_labels(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        // Allowed subdomains of the kubelet namespaces.
        assert!(is_kubelet_label("a.node.kubernetes.io/x"));
        assert!(is_kubelet_label("kubelet.kubernetes.io/x"));
        assert!(is_kubelet_label("example.com/x"));
        assert!(!is_kubelet_label("kubernetes.io/role"));
    }

    #[test]
    fn taints() {
        let t =
            parse_taints("dedicated=gpu:NoSchedule, edge:NoExecute,k=:PreferNoSchedule").unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].key.as_str(), t[0].value.as_deref(), &t[0].effect),
            ("dedicated", Some("gpu"), &TaintEffect::NoSchedule)
        );
        assert_eq!((t[1].key.as_str(), t[1].value.as_deref()), ("edge", None));
        assert_eq!(t[1].effect, TaintEffect::NoExecute);
        assert_eq!(t[2].value, None);
        assert!(parse_taints("").unwrap().is_empty());

        let bad = [
            ("dedicated=gpu", "expected key=value:Effect"),
            ("k=v:NoDance", "effect \"NoDance\" must be"),
            ("k=v=w:NoSchedule", "more than one '='"),
            ("bad key:NoSchedule", "starting and ending"),
            ("k=v:NoSchedule,k=w:NoSchedule", "duplicate taint"),
            (":NoSchedule", "must not be empty"),
        ];
        for (text, want) in bad {
            let e = parse_taints(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.starts_with("taint \""), "{e}");
        }
        // Same key, different effect is fine.
        assert_eq!(parse_taints("k:NoSchedule,k:NoExecute").unwrap().len(), 2);
    }

    #[test]
    fn reserved() {
        let r = parse_reserved("cpu=100m,memory=256Mi,ephemeral-storage=1Gi,pid=100").unwrap();
        assert_eq!(r["cpu"], q("100m"));
        assert_eq!(r["memory"], q("256Mi"));
        assert_eq!(r.len(), 4);
        for (text, want) in [
            ("gpu=1", "must be one of"),
            ("cpu=-1", "must not be negative"),
            ("cpu=lots", "invalid quantity"),
            ("cpu", "expected resource=quantity"),
        ] {
            let e = parse_reserved(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn eviction_hard() {
        let e = parse_eviction_hard("memory.available<200Mi,nodefs.available<5%").unwrap();
        assert_eq!(e["memory.available"], Threshold::Quantity(q("200Mi")));
        assert_eq!(e["nodefs.available"], Threshold::Percentage(0.05));
        assert_eq!(e.len(), 2);
        for (text, want) in [
            ("memory.free<1Gi", "unknown signal"),
            ("memory.available<200%", "within 0% and 100%"),
            ("memory.available>1Gi", "expected signal<value"),
            ("nodefs.available<x%", "bad percentage"),
        ] {
            let err = parse_eviction_hard(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        let d = default_eviction_hard();
        assert_eq!(d["memory.available"], Threshold::Quantity(q("100Mi")));
        assert_eq!(Threshold::Percentage(0.1).reservation(&q("1000")), q("100"));
    }

    #[test]
    fn node_ip_checks() {
        assert!(validate_node_ip("192.168.1.20".parse().unwrap()).is_ok());
        assert!(validate_node_ip("2001:db8::1".parse().unwrap()).is_ok());
        for bad in [
            "0.0.0.0",
            "127.0.0.1",
            "169.254.1.1",
            "fe80::1",
            "::1",
            "224.0.0.1",
        ] {
            let e = validate_node_ip(bad.parse().unwrap()).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("node ip {bad}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn defaults() {
        let c = NodeConfig::new("edge-1", "edge-1");
        assert_eq!(c.node_lease_renew_interval, Duration::from_secs(10));
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(c.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(c.node_lease_duration_seconds, 40);
        assert_eq!(c.max_pods, 110);
    }

    #[test]
    fn lease_duration_sets_the_renew_interval_to_a_quarter() {
        let mut c = NodeConfig::new("edge-1", "edge-1");
        c.set_lease_duration(60).unwrap();
        assert_eq!(c.node_lease_duration_seconds, 60);
        assert_eq!(c.node_lease_renew_interval, Duration::from_secs(15));
        c.set_lease_duration(1).unwrap();
        assert_eq!(c.node_lease_renew_interval, Duration::from_millis(250));
        for bad in [0, -40] {
            let err = c.set_lease_duration(bad).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("nodeLeaseDurationSeconds {bad} must be greater than 0")
            );
        }
        assert_eq!(
            c.node_lease_duration_seconds, 1,
            "a refused value changes nothing"
        );
    }

    #[test]
    fn node_ips_fall_back_to_the_single_node_ip() {
        let mut c = NodeConfig::new("edge-1", "edge-1");
        assert_eq!(c.node_ips(), NodeIps::Detect);
        c.node_ip = Some("10.0.0.5".parse().unwrap());
        assert_eq!(c.node_ips(), NodeIps::Single("10.0.0.5".parse().unwrap()));
        c.node_ips = NodeIps::parse("10.0.0.5,2001:db8::5").unwrap();
        assert!(matches!(c.node_ips(), NodeIps::DualStack(..)));
    }
}
