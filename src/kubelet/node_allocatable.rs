//! Node allocatable enforcement (upstream `enforceNodeAllocatableCgroups`): the
//! `kubepods` cgroup's limits, written at start-up and, while the kernel refuses them
//! (v1 answers `EBUSY` to a memory limit below what the pods already use), again
//! every minute from the `gc` thread until they hold; and the system-/kube-reserved
//! cgroups, written once at start-up, where a failure stops litelet.
//!
//! Node events as upstream: `NodeAllocatableEnforced` on success,
//! `FailedNodeAllocatableEnforcement` (warning) with the error on each failure.
//! Shared between the start-up thread and the `gc` thread: one flag, no lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::api::quantity::Quantity;
use crate::cgroups::allocatable::{reserved_resources, Enforcement, EnforcementConfig};
use crate::cgroups::{CgroupResources, PodCgroupManager};
use crate::events::{EventType, Recorder};

/// Reason of the events of a successful enforcement.
pub const ENFORCED: &str = "NodeAllocatableEnforced";
/// Reason of the events of a failed enforcement.
pub const FAILED: &str = "FailedNodeAllocatableEnforcement";

/// The `kubepods` limits to write, until written.
pub struct NodeAllocatable {
    cgroups: Arc<PodCgroupManager>,
    kubepods: CgroupResources,
    recorder: Recorder,
    node_name: String,
    pending: AtomicBool,
}

impl NodeAllocatable {
    /// `kubepods` is what [`crate::cgroups::allocatable::kubepods_resources`] decided.
    pub fn new(
        cgroups: Arc<PodCgroupManager>,
        kubepods: CgroupResources,
        recorder: Recorder,
        node_name: &str,
    ) -> NodeAllocatable {
        NodeAllocatable {
            cgroups,
            kubepods,
            recorder,
            node_name: node_name.to_owned(),
            pending: AtomicBool::new(true),
        }
    }

    /// Whether the `kubepods` limits still wait to be written.
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Writes the `kubepods` limits unless already written; true once they hold.
    pub fn enforce(&self) -> bool {
        if !self.pending() {
            return true;
        }
        match self.cgroups.update_kubepods(&self.kubepods) {
            Ok(()) => {
                self.pending.store(false, Ordering::Release);
                self.event(
                    EventType::Normal,
                    ENFORCED,
                    "Updated Node Allocatable limit across pods".to_owned(),
                );
                true
            }
            Err(err) => {
                let name = self
                    .cgroups
                    .kubepods()
                    .map_or_else(|_| "kubepods".to_owned(), |n| n.to_string());
                self.event(
                    EventType::Warning,
                    FAILED,
                    format!("Failed to update Node Allocatable Limits {name:?}: {err}"),
                );
                false
            }
        }
    }

    /// Writes systemReserved / kubeReserved to their cgroups as `config` asks (all of
    /// it, or only CPU for the `-compressible` keys). The first failure is returned
    /// after its event: litelet does not start, as upstream.
    pub fn enforce_reserved(
        &self,
        config: &EnforcementConfig,
        system_reserved: &BTreeMap<String, Quantity>,
        kube_reserved: &BTreeMap<String, Quantity>,
    ) -> Result<(), String> {
        let system = config.system_reserved_cgroup.as_deref();
        let kube = config.kube_reserved_cgroup.as_deref();
        let steps = [
            (
                Enforcement::SystemReserved,
                system,
                system_reserved,
                "System Reserved",
                "system reserved",
            ),
            (
                Enforcement::KubeReserved,
                kube,
                kube_reserved,
                "Kube Reserved",
                "kube reserved",
            ),
            (
                Enforcement::SystemReservedCompressible,
                system,
                system_reserved,
                "System Reserved Compressible",
                "system reserved",
            ),
            (
                Enforcement::KubeReservedCompressible,
                kube,
                kube_reserved,
                "Kube Reserved Compressible",
                "kube reserved",
            ),
        ];
        for (key, cgroup, reserved, title, lower) in steps {
            // Checked with the flags: an enforced key has its cgroup.
            let (true, Some(cgroup)) = (config.has(key), cgroup) else {
                continue;
            };
            let compressible = matches!(
                key,
                Enforcement::SystemReservedCompressible | Enforcement::KubeReservedCompressible
            );
            let resources = reserved_resources(reserved, compressible);
            match self.cgroups.update_reserved_cgroup(cgroup, &resources) {
                Ok(_) => self.event(
                    EventType::Normal,
                    ENFORCED,
                    format!("Updated limits on {lower} cgroup {cgroup}"),
                ),
                Err(err) => {
                    let message =
                        format!("Failed to enforce {title} Cgroup Limits on {cgroup:?}: {err}");
                    self.event(EventType::Warning, FAILED, message.clone());
                    return Err(message);
                }
            }
        }
        Ok(())
    }

    fn event(&self, kind: EventType, reason: &str, message: String) {
        self.recorder.node(&self.node_name, kind, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::allocatable::{kubepods_resources, MachineCapacity};
    use crate::cgroups::testfs::Model;
    use crate::cgroups::ManagerConfig;
    use crate::events::EventRecord;
    use crate::node::config::parse_reserved;
    use crossbeam_channel::{unbounded, Receiver};

    fn setup(model: &Model) -> Arc<PodCgroupManager> {
        for name in ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"] {
            model.populate(name);
        }
        Arc::new(
            PodCgroupManager::new(model.root(), &model.mountinfo, ManagerConfig::default())
                .unwrap(),
        )
    }

    fn recorder() -> (Recorder, Receiver<EventRecord>) {
        let (tx, rx) = unbounded();
        (Recorder::new(tx), rx)
    }

    fn events(rx: &Receiver<EventRecord>) -> Vec<(EventType, String, String)> {
        rx.try_iter()
            .map(|e| (e.kind, e.reason, e.message))
            .collect()
    }

    const CAPACITY: MachineCapacity = MachineCapacity {
        milli_cpu: Some(2000),
        memory_bytes: Some(4 << 30),
        pids: Some(32768),
    };

    #[test]
    fn kubepods_gets_capacity_minus_reserved_on_v1_and_v2() {
        let kube = parse_reserved("cpu=500m,memory=1Gi,pid=768").unwrap();
        let system = parse_reserved("memory=512Mi").unwrap();
        let wanted = kubepods_resources(&CAPACITY, &[&system, &kube], true);
        for model in [Model::v1(), Model::v2("cpu memory pids")] {
            let cgroups = setup(&model);
            let (recorder, rx) = recorder();
            let enforcer = NodeAllocatable::new(cgroups, wanted.clone(), recorder, "edge-1");
            assert!(enforcer.enforce());
            let memory = ((4u64 << 30) - (3 << 29)).to_string();
            if model.is_v2() {
                assert_eq!(model.read("", "/kubepods", "memory.max"), memory);
                // 1536 shares as a v2 weight.
                assert_eq!(model.read("", "/kubepods", "cpu.weight"), "59");
                assert_eq!(model.read("", "/kubepods", "pids.max"), "32000");
            } else {
                assert_eq!(
                    model.read("memory", "/kubepods", "memory.limit_in_bytes"),
                    memory
                );
                assert_eq!(model.read("cpu", "/kubepods", "cpu.shares"), "1536");
                assert_eq!(model.read("pids", "/kubepods", "pids.max"), "32000");
            }
            assert_eq!(
                events(&rx),
                [(
                    EventType::Normal,
                    ENFORCED.to_owned(),
                    "Updated Node Allocatable limit across pods".to_owned()
                )]
            );
            assert!(!enforcer.pending());
        }
    }

    #[test]
    fn a_refused_kubepods_limit_is_retried_until_it_holds() {
        let model = Model::v1();
        let cgroups = setup(&model);
        // The kernel refuses the first write: the file cannot be written, as a v1
        // memory limit below the usage is refused.
        let file = model
            .path("memory", "/kubepods")
            .join("memory.limit_in_bytes");
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        let (recorder, rx) = recorder();
        let wanted = kubepods_resources(&CAPACITY, &[], true);
        let enforcer = NodeAllocatable::new(cgroups, wanted, recorder, "edge-1");
        assert!(!enforcer.enforce());
        let first = events(&rx);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].0, first[0].1.as_str()),
            (EventType::Warning, FAILED)
        );
        assert!(
            first[0]
                .2
                .starts_with("Failed to update Node Allocatable Limits \"/kubepods\": ")
                && first[0].2.contains("memory.limit_in_bytes"),
            "{first:?}"
        );
        assert!(enforcer.pending());
        // The next minute the kernel accepts it.
        std::fs::remove_dir(&file).unwrap();
        std::fs::write(&file, "9223372036854771712").unwrap();
        assert!(enforcer.enforce());
        assert_eq!(
            model.read("memory", "/kubepods", "memory.limit_in_bytes"),
            (4u64 << 30).to_string()
        );
        let second = events(&rx);
        assert_eq!(second.len(), 1);
        assert_eq!(
            (second[0].0, second[0].1.as_str()),
            (EventType::Normal, ENFORCED)
        );
        // Done: nothing more is written or said.
        assert!(enforcer.enforce());
        assert!(events(&rx).is_empty());
    }

    #[test]
    fn reserved_cgroups_get_their_reservations_and_a_missing_one_stops_start() {
        let model = Model::v1();
        let cgroups = setup(&model);
        model.populate("/system.slice");
        let (recorder, rx) = recorder();
        let enforcer = NodeAllocatable::new(cgroups, CgroupResources::default(), recorder, "n");
        let system = parse_reserved("cpu=250m,memory=256Mi,pid=500").unwrap();
        let kube = parse_reserved("cpu=1").unwrap();
        let config = EnforcementConfig::new(
            &["pods".to_owned(), "system-reserved".to_owned()],
            Some("/system.slice"),
            None,
        )
        .unwrap();
        enforcer.enforce_reserved(&config, &system, &kube).unwrap();
        assert_eq!(
            model.read("memory", "/system.slice", "memory.limit_in_bytes"),
            (256u64 << 20).to_string()
        );
        assert_eq!(model.read("cpu", "/system.slice", "cpu.shares"), "256");
        assert_eq!(model.read("pids", "/system.slice", "pids.max"), "500");
        assert_eq!(
            events(&rx)[0].2,
            "Updated limits on system reserved cgroup /system.slice"
        );

        // Compressible: CPU only.
        model.populate("/kube.slice");
        let config = EnforcementConfig::new(
            &["kube-reserved-compressible".to_owned()],
            None,
            Some("/kube.slice"),
        )
        .unwrap();
        enforcer.enforce_reserved(&config, &system, &kube).unwrap();
        assert_eq!(model.read("cpu", "/kube.slice", "cpu.shares"), "1024");
        assert_eq!(
            model.read("memory", "/kube.slice", "memory.limit_in_bytes"),
            crate::cgroups::testfs::V1_NO_MEMORY_LIMIT
        );
        assert_eq!(
            events(&rx)[0].2,
            "Updated limits on kube reserved cgroup /kube.slice"
        );

        let config =
            EnforcementConfig::new(&["kube-reserved".to_owned()], None, Some("/daemons.slice"))
                .unwrap();
        let err = enforcer
            .enforce_reserved(&config, &system, &kube)
            .unwrap_err();
        assert!(
            err.starts_with("Failed to enforce Kube Reserved Cgroup Limits on \"/daemons.slice\"")
                && err.contains("does not exist"),
            "{err}"
        );
        let sent = events(&rx);
        assert_eq!(
            (sent[0].0, sent[0].1.as_str()),
            (EventType::Warning, FAILED)
        );
    }
}
