//! Node allocatable on cgroups (upstream `node_container_manager_linux.go`): which
//! enforcements `--enforce-node-allocatable` asks for, and what is written to the
//! `kubepods` cgroup and to the system-/kube-reserved cgroups.
//!
//! Pure decisions, no I/O: the manager writes ([`super::PodCgroupManager::update_kubepods`],
//! [`super::PodCgroupManager::update_reserved_cgroup`]); the kubelet sends the events.
//!
//! `kubepods` gets the machine's capacity minus systemReserved and kubeReserved when
//! `pods` is enforced (upstream's "internal absolute" allocatable: the hard eviction
//! thresholds are *not* subtracted, so pods can still reach them and be evicted), the
//! plain capacity otherwise (still written: the default CPU weight of a new cgroup
//! would starve the pods). Nothing is ever below zero.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::api::quantity::Quantity;

use super::convert::milli_cpu_to_shares;
use super::resources::{CgroupResources, Limit};

/// The reservation key of process IDs (`--kube-reserved=pid=1000`).
pub const PID: &str = "pid";

/// One value of `--enforce-node-allocatable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Enforcement {
    /// `pods`: limit `kubepods` to the allocatable.
    Pods,
    /// `system-reserved`: limit the system-reserved cgroup to systemReserved.
    SystemReserved,
    /// `kube-reserved`: limit the kube-reserved cgroup to kubeReserved.
    KubeReserved,
    /// `system-reserved-compressible`: CPU only on the system-reserved cgroup.
    SystemReservedCompressible,
    /// `kube-reserved-compressible`: CPU only on the kube-reserved cgroup.
    KubeReservedCompressible,
    /// `none`: nothing (must be alone).
    None,
}

/// Every key with its spelling, in the order error messages list them.
const KEYS: &[(Enforcement, &str)] = &[
    (Enforcement::Pods, "pods"),
    (Enforcement::SystemReserved, "system-reserved"),
    (Enforcement::KubeReserved, "kube-reserved"),
    (
        Enforcement::SystemReservedCompressible,
        "system-reserved-compressible",
    ),
    (
        Enforcement::KubeReservedCompressible,
        "kube-reserved-compressible",
    ),
    (Enforcement::None, "none"),
];

impl Enforcement {
    /// The key as the flag and the config file spell it.
    pub fn as_str(self) -> &'static str {
        KEYS.iter()
            .find(|(key, _)| *key == self)
            .map_or("none", |(_, text)| text)
    }
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key `--enforce-node-allocatable` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a node allocatable enforcement: use {list}", list = valid_keys())]
pub struct UnknownEnforcement(pub String);

fn valid_keys() -> String {
    let quoted: Vec<String> = KEYS.iter().map(|(_, t)| format!("{t:?}")).collect();
    quoted.join(", ")
}

impl FromStr for Enforcement {
    type Err = UnknownEnforcement;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        KEYS.iter()
            .find(|(_, spelled)| *spelled == text)
            .map(|(key, _)| *key)
            .ok_or_else(|| UnknownEnforcement(text.to_owned()))
    }
}

/// The checked enforcement settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnforcementConfig {
    /// Without `none`; empty when nothing is enforced.
    pub keys: BTreeSet<Enforcement>,
    /// `--system-reserved-cgroup`: an existing cgroup of the system daemons.
    pub system_reserved_cgroup: Option<String>,
    /// `--kube-reserved-cgroup`: an existing cgroup of the Kubernetes daemons.
    pub kube_reserved_cgroup: Option<String>,
}

impl EnforcementConfig {
    /// Checks the keys and the cgroups they need, as upstream's validation does:
    /// `none` stands alone, a reserved key needs its cgroup, unknown keys are refused.
    /// Empty strings (an empty flag) count as no key. Every problem is returned.
    pub fn new(
        keys: &[String],
        system_reserved_cgroup: Option<&str>,
        kube_reserved_cgroup: Option<&str>,
    ) -> Result<EnforcementConfig, Vec<String>> {
        let system = system_reserved_cgroup.filter(|c| !c.is_empty());
        let kube = kube_reserved_cgroup.filter(|c| !c.is_empty());
        let mut problems = Vec::new();
        let mut parsed = BTreeSet::new();
        let given: Vec<&str> = keys
            .iter()
            .map(|k| k.trim())
            .filter(|k| !k.is_empty())
            .collect();
        for text in &given {
            let key = match text.parse::<Enforcement>() {
                Ok(key) => key,
                Err(e) => {
                    problems.push(format!(
                        "enforceNodeAllocatable (--enforce-node-allocatable): {e}"
                    ));
                    continue;
                }
            };
            let needs = match key {
                Enforcement::SystemReserved | Enforcement::SystemReservedCompressible => system
                    .is_none()
                    .then_some("systemReservedCgroup (--system-reserved-cgroup)"),
                Enforcement::KubeReserved | Enforcement::KubeReservedCompressible => kube
                    .is_none()
                    .then_some("kubeReservedCgroup (--kube-reserved-cgroup)"),
                Enforcement::None if given.len() > 1 => {
                    problems.push(
                        "enforceNodeAllocatable (--enforce-node-allocatable): \"none\" must be \
                         the only value"
                            .to_owned(),
                    );
                    None
                }
                Enforcement::Pods | Enforcement::None => None,
            };
            if let Some(field) = needs {
                problems.push(format!(
                    "{field} must be given when enforceNodeAllocatable \
                     (--enforce-node-allocatable) contains {key:?}",
                    key = key.as_str()
                ));
            }
            if key != Enforcement::None {
                parsed.insert(key);
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(EnforcementConfig {
            keys: parsed,
            system_reserved_cgroup: system.map(str::to_owned),
            kube_reserved_cgroup: kube.map(str::to_owned),
        })
    }

    /// Whether `key` is enforced.
    pub fn has(&self, key: Enforcement) -> bool {
        self.keys.contains(&key)
    }
}

/// What the machine has, as `kubepods` is sized from it (`None`: could not be read,
/// and that setting is left alone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCapacity {
    pub milli_cpu: Option<i64>,
    pub memory_bytes: Option<u64>,
    /// The most tasks the kernel allows (upstream's internal `pid` capacity).
    pub pids: Option<u64>,
}

/// The reservation of `resource` over all of `reserved`, in whole units (milli-units
/// for cpu).
fn reserved_sum(reserved: &[&BTreeMap<String, Quantity>], resource: &str, milli: bool) -> i64 {
    reserved
        .iter()
        .filter_map(|list| list.get(resource))
        .map(|q| if milli { q.milli_value() } else { q.value() })
        .fold(0i64, |sum, v| sum.saturating_add(v.max(0)))
}

fn minus(capacity: u64, reserved: i64) -> u64 {
    capacity.saturating_sub(u64::try_from(reserved).unwrap_or(0))
}

/// The `kubepods` settings: capacity minus `reserved` (systemReserved, kubeReserved)
/// when `pods` is enforced, the capacity otherwise; CPU as shares, memory in bytes,
/// pids as `pids.max`.
pub fn kubepods_resources(
    capacity: &MachineCapacity,
    reserved: &[&BTreeMap<String, Quantity>],
    enforce_pods: bool,
) -> CgroupResources {
    let subtract = |resource: &str, milli: bool| {
        if enforce_pods {
            reserved_sum(reserved, resource, milli)
        } else {
            0
        }
    };
    CgroupResources {
        cpu_shares: capacity
            .milli_cpu
            .map(|cpu| milli_cpu_to_shares(cpu.saturating_sub(subtract("cpu", true)).max(0))),
        memory_limit: capacity
            .memory_bytes
            .map(|bytes| Limit::Value(minus(bytes, subtract("memory", false)))),
        pids_max: capacity
            .pids
            .map(|pids| Limit::Value(minus(pids, subtract(PID, false)))),
        ..Default::default()
    }
}

/// The settings of a system-/kube-reserved cgroup from its reservation: only CPU
/// shares when `compressible_only`, else also memory and pids (upstream
/// `getCgroupConfig`). Resources not reserved are left alone.
pub fn reserved_resources(
    reserved: &BTreeMap<String, Quantity>,
    compressible_only: bool,
) -> CgroupResources {
    let cpu_shares = reserved
        .get("cpu")
        .map(|q| milli_cpu_to_shares(q.milli_value()));
    if compressible_only {
        return CgroupResources {
            cpu_shares,
            ..Default::default()
        };
    }
    let whole = |resource: &str| {
        reserved
            .get(resource)
            .map(|q| Limit::Value(u64::try_from(q.value()).unwrap_or(0)))
    };
    CgroupResources {
        cpu_shares,
        memory_limit: whole("memory"),
        pids_max: whole(PID),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::config::parse_reserved;

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn enforcement_keys_parse_and_none_means_nothing() {
        let c = EnforcementConfig::new(&keys(&["pods"]), None, None).unwrap();
        assert!(c.has(Enforcement::Pods));
        let none = EnforcementConfig::new(&keys(&["none"]), None, None).unwrap();
        assert!(none.keys.is_empty());
        let empty = EnforcementConfig::new(&keys(&[""]), None, None).unwrap();
        assert!(empty.keys.is_empty());
        let all = EnforcementConfig::new(
            &keys(&["pods", "system-reserved", "kube-reserved-compressible"]),
            Some("/system.slice"),
            Some("/kube.slice"),
        )
        .unwrap();
        assert_eq!(all.keys.len(), 3);
        assert_eq!(all.system_reserved_cgroup.as_deref(), Some("/system.slice"));
    }

    #[test]
    fn enforcement_refuses_none_with_others_unknown_keys_and_missing_cgroups() {
        let e = EnforcementConfig::new(&keys(&["none", "pods"]), None, None).unwrap_err();
        assert!(e[0].contains("\"none\" must be the only value"), "{e:?}");
        let e = EnforcementConfig::new(&keys(&["pod"]), None, None).unwrap_err();
        assert!(
            e[0].contains("\"pod\" is not a node allocatable enforcement"),
            "{e:?}"
        );
        assert!(e[0].contains("\"kube-reserved-compressible\""), "{e:?}");
        for (key, field) in [
            (
                "system-reserved",
                "systemReservedCgroup (--system-reserved-cgroup)",
            ),
            ("system-reserved-compressible", "systemReservedCgroup"),
            (
                "kube-reserved",
                "kubeReservedCgroup (--kube-reserved-cgroup)",
            ),
            ("kube-reserved-compressible", "kubeReservedCgroup"),
        ] {
            let e = EnforcementConfig::new(&keys(&[key]), Some(""), None).unwrap_err();
            assert!(e[0].starts_with(field) && e[0].contains(key), "{e:?}");
        }
    }

    #[test]
    fn kubepods_gets_capacity_minus_reservations_when_pods_are_enforced() {
        let kube = parse_reserved("cpu=500m,memory=1Gi,pid=1000").unwrap();
        let system = parse_reserved("cpu=250m,memory=512Mi,ephemeral-storage=1Gi").unwrap();
        let capacity = MachineCapacity {
            milli_cpu: Some(2000),
            memory_bytes: Some(4 << 30),
            pids: Some(32768),
        };
        let r = kubepods_resources(&capacity, &[&system, &kube], true);
        assert_eq!(r.cpu_shares, Some(1250 * 1024 / 1000));
        assert_eq!(r.memory_limit, Some(Limit::Value((4 << 30) - (3 << 29))));
        assert_eq!(r.pids_max, Some(Limit::Value(31768)));
        // Not enforced: the capacity itself (CPU shares still written).
        let plain = kubepods_resources(&capacity, &[&system, &kube], false);
        assert_eq!(plain.cpu_shares, Some(2048));
        assert_eq!(plain.memory_limit, Some(Limit::Value(4 << 30)));
        assert_eq!(plain.pids_max, Some(Limit::Value(32768)));
        // Never below zero; unknown capacity is left alone.
        let huge = parse_reserved("cpu=8,memory=16Gi,pid=100000").unwrap();
        let r = kubepods_resources(&capacity, &[&huge], true);
        assert_eq!(r.cpu_shares, Some(2));
        assert_eq!(r.memory_limit, Some(Limit::Value(0)));
        assert_eq!(r.pids_max, Some(Limit::Value(0)));
        let unknown = kubepods_resources(&MachineCapacity::default(), &[&kube], true);
        assert!(unknown.is_empty());
    }

    #[test]
    fn reserved_cgroups_get_their_reservation_and_compressible_only_cpu() {
        let kube = parse_reserved("cpu=500m,memory=1Gi,pid=1000").unwrap();
        let full = reserved_resources(&kube, false);
        assert_eq!(full.cpu_shares, Some(512));
        assert_eq!(full.memory_limit, Some(Limit::Value(1 << 30)));
        assert_eq!(full.pids_max, Some(Limit::Value(1000)));
        let cpu = reserved_resources(&kube, true);
        assert_eq!(
            cpu,
            CgroupResources {
                cpu_shares: Some(512),
                ..Default::default()
            }
        );
    }
}
