//! `PodCgroupManager`: pod and QoS cgroups (upstream `pod_container_manager_linux.go`,
//! `qos_container_manager_linux.go` and `cgroup_manager_linux.go`), with either driver.
//!
//! Layout under `--cgroup-root` (default `/`), the same on v1 (in each managed
//! hierarchy) and v2. The cgroupfs driver:
//! ```text
//! <cgroup-root>/kubepods/pod<uid>              Guaranteed pods
//! <cgroup-root>/kubepods/burstable/pod<uid>    Burstable pods
//! <cgroup-root>/kubepods/besteffort/pod<uid>   BestEffort pods
//! ```
//! The systemd driver (see [`super::systemd`]): the same names as slices,
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, made
//! with `StartTransientUnit`, changed with `SetUnitProperties`, removed with
//! `StopUnit`; after systemd, the exact values are written through cgroupfs with the
//! same code as the cgroupfs driver, so a pod's files are the same with both.
//!
//! The pod cgroup's on-disk path (e.g. `/kubepods/burstable/pod<uid>`, or the slice
//! path) is the sandbox's `cgroup_parent`; the runtime creates the container cgroups
//! below it. v1 or v2 is detected once, at construction, from the injected mount
//! table and mount root.
//!
//! Threads: pod workers (create before the sandbox, remove after termination, resize
//! writes) and the `gc` thread (orphan listing and removal, the periodic QoS update)
//! call it concurrently; creation and removal are idempotent, so concurrent creates
//! of the QoS cgroups are harmless. Its only mutable state is the CPU requests of the
//! active Burstable pods (upstream's QoS manager asks the kubelet's active pods; here
//! pod workers tell it), behind a lock never held across I/O; a second lock keeps the
//! QoS writes in order, so the last one holds the latest sum. No channels. Pod UIDs are untrusted: each becomes one checked name
//! part (`pod<uid>`) or the call fails.
//!
//! Node allocatable: [`PodCgroupManager::update_kubepods`] and
//! [`PodCgroupManager::update_reserved_cgroup`] write what [`super::allocatable`]
//! decides; the kubelet calls them at start-up and retries from the `gc` thread.
//!
//! What it does not do (yet): memory QoS
//! (`memory.min`), hugepages, killing leftover processes before removal (removal
//! reports them as [`FsError::Busy`](super::FsError::Busy); [`PodCgroupManager::pod_processes`]
//! lists them).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use log::{debug, info};

use crate::api::pod::Pod;

use super::convert::{
    burstable_cpu_request, qos_cpu_shares, qos_cpu_shares_for, resource_config_for_pod,
    shares_to_weight, weight_to_shares, PodCgroupOptions, QosCpuShares, MAX_PERIOD_US,
    MIN_PERIOD_US, MIN_SHARES,
};
use super::detect::{detect, CgroupMode};
use super::name::{check_part, CgroupName};
use super::qos::{pod_qos, QosClass};
use super::resources::{CgroupResources, Limit};
use super::systemd::{
    parse_slice, pod_uid_of_slice, resource_properties, slice_path, slice_properties, SystemdUnits,
};
use super::v1::CgroupV1;
use super::v2::CgroupV2;
use super::{CgroupError, CgroupVersion, Cgroupfs, DEFAULT_MOUNT_ROOT, MOUNTINFO_PATH};

/// The top of the pods' hierarchy, below `--cgroup-root`.
pub const KUBEPODS: &str = "kubepods";
/// The Burstable QoS cgroup, below `kubepods`.
pub const BURSTABLE: &str = "burstable";
/// The BestEffort QoS cgroup, below `kubepods`.
pub const BEST_EFFORT: &str = "besteffort";
/// A pod cgroup's name is this prefix followed by the pod UID.
pub const POD_PREFIX: &str = "pod";

/// The kernel's page size (memory limits are kept in pages); 4 KiB when unknown.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(4096)
    })
}

/// What the manager needs from the kubelet configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// `--cgroup-root`: the parent of `kubepods` (`/` by default).
    pub cgroup_root: String,
    /// CFS quota enforcement and period.
    pub options: PodCgroupOptions,
    /// `podPidsLimit`: `pids.max` of every pod cgroup; `None` leaves it unlimited.
    pub pod_pids_limit: Option<u64>,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            cgroup_root: "/".to_owned(),
            options: PodCgroupOptions::default(),
            pod_pids_limit: None,
        }
    }
}

/// How the manager makes, changes and removes cgroups.
#[derive(Debug)]
pub enum Driver {
    /// Directly on cgroupfs.
    Cgroupfs,
    /// Through systemd's transient slices, then cgroupfs for the exact values.
    Systemd(Box<dyn SystemdUnits>),
}

/// Pod and QoS cgroups on one machine.
#[derive(Debug)]
pub struct PodCgroupManager {
    fs: Box<dyn Cgroupfs>,
    mode: CgroupMode,
    kubepods: CgroupName,
    config: ManagerConfig,
    driver: Driver,
    /// CPU requests (milli-CPU) of the active Burstable pods by UID, which set the
    /// Burstable QoS cgroup's shares. Held only to read or change the map.
    burstable_requests: Mutex<BTreeMap<String, i64>>,
    /// Held across one QoS write (compute and write), as upstream's `UpdateCgroups`.
    qos_write: Mutex<()>,
}

impl PodCgroupManager {
    /// Detects the layout from `mountinfo` (the text of a mountinfo file) and the mount
    /// root, and checks the configured cgroup root.
    pub fn new(
        mount_root: &Path,
        mountinfo: &str,
        config: ManagerConfig,
    ) -> Result<PodCgroupManager, CgroupError> {
        Self::with_driver(mount_root, mountinfo, config, Driver::Cgroupfs)
    }

    /// [`PodCgroupManager::new`] with a chosen driver. With systemd, `--cgroup-root`
    /// may also be given as a slice (`/litelet.slice` is the name `/litelet`).
    pub fn with_driver(
        mount_root: &Path,
        mountinfo: &str,
        config: ManagerConfig,
        driver: Driver,
    ) -> Result<PodCgroupManager, CgroupError> {
        let period = config.options.cpu_period_us;
        if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period) {
            return Err(CgroupError::InvalidPeriod { value: period });
        }
        let layout = detect(mountinfo, mount_root)?;
        let fs: Box<dyn Cgroupfs> = match (&layout.mode, &layout.unified) {
            (CgroupMode::Unified, Some(point)) => Box::new(CgroupV2::new(point)),
            _ => Box::new(CgroupV1::new(&layout, mount_root)?),
        };
        let root = match &driver {
            Driver::Systemd(_) if config.cgroup_root.ends_with(super::systemd::SLICE_SUFFIX) => {
                parse_slice(&config.cgroup_root)?
            }
            _ => CgroupName::parse(&config.cgroup_root)?,
        };
        let kubepods = root.child(KUBEPODS)?;
        let manager = PodCgroupManager {
            fs,
            mode: layout.mode,
            kubepods,
            config,
            driver,
            burstable_requests: Mutex::new(BTreeMap::new()),
            qos_write: Mutex::new(()),
        };
        // A name systemd cannot spell fails here, not at the first pod.
        let on_disk = manager.on_disk(&manager.kubepods)?;
        info!(
            "cgroups: {:?} layout under {}, pods under {} ({} driver)",
            layout.mode,
            mount_root.display(),
            on_disk,
            manager.driver_name()
        );
        Ok(manager)
    }

    /// [`PodCgroupManager::new`] with this machine's mount table and `/sys/fs/cgroup`.
    pub fn from_system(config: ManagerConfig) -> Result<PodCgroupManager, CgroupError> {
        Self::from_system_with(config, Driver::Cgroupfs)
    }

    /// [`PodCgroupManager::from_system`] with a chosen driver.
    pub fn from_system_with(
        config: ManagerConfig,
        driver: Driver,
    ) -> Result<PodCgroupManager, CgroupError> {
        let mountinfo =
            std::fs::read_to_string(MOUNTINFO_PATH).map_err(|source| CgroupError::Mountinfo {
                path: MOUNTINFO_PATH.into(),
                source,
            })?;
        PodCgroupManager::with_driver(Path::new(DEFAULT_MOUNT_ROOT), &mountinfo, config, driver)
    }

    /// `cgroupfs` or `systemd`.
    pub fn driver_name(&self) -> &'static str {
        match self.driver {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd(_) => "systemd",
        }
    }

    /// Where a cgroup name lives on cgroupfs: the name itself with the cgroupfs
    /// driver, its slice path with systemd.
    pub fn on_disk(&self, name: &CgroupName) -> Result<CgroupName, CgroupError> {
        match self.driver {
            Driver::Cgroupfs => Ok(name.clone()),
            Driver::Systemd(_) => slice_path(name),
        }
    }

    /// Makes the cgroup `name` with `resources` (all ancestors too).
    fn make(
        &self,
        name: &CgroupName,
        resources: &CgroupResources,
        description: &str,
    ) -> Result<(), CgroupError> {
        let _timed = super::Timed::new(super::Operation::Create);
        let path = self.on_disk(name)?;
        if let Driver::Systemd(units) = &self.driver {
            let mut properties = slice_properties(name, description)?;
            properties.extend(resource_properties(
                resources,
                self.version(),
                self.config.options.cpu_period_us,
            ));
            units.start_slice(&unit_of(&path)?, properties)?;
        }
        // With systemd: only what systemd left out (a hierarchy it does not manage).
        self.fs.create(&path)?;
        self.fs.apply(&path, resources)
    }

    /// Writes the `Some` fields of `resources` to the existing cgroup at `path`.
    fn write(&self, path: &CgroupName, resources: &CgroupResources) -> Result<(), CgroupError> {
        let _timed = super::Timed::new(super::Operation::Update);
        if let Driver::Systemd(units) = &self.driver {
            let properties =
                resource_properties(resources, self.version(), self.config.options.cpu_period_us);
            if !properties.is_empty() {
                units.set_properties(&unit_of(path)?, properties)?;
            }
        }
        self.fs.apply(path, resources)
    }

    /// The interface version in use (hybrid machines use v1).
    pub fn version(&self) -> CgroupVersion {
        self.fs.version()
    }

    /// The detected layout.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }

    /// The QoS cgroup that holds pods of `class`.
    pub fn qos_cgroup(&self, class: QosClass) -> CgroupName {
        let child = match class {
            QosClass::Guaranteed => return self.kubepods.clone(),
            QosClass::Burstable => BURSTABLE,
            QosClass::BestEffort => BEST_EFFORT,
        };
        // Constant, valid parts: cannot fail, but stay total anyway.
        self.kubepods
            .child(child)
            .unwrap_or_else(|_| self.kubepods.clone())
    }

    /// Creates `kubepods`, `kubepods/burstable` and `kubepods/besteffort`, and gives
    /// BestEffort the minimum CPU shares. Idempotent; run at start-up.
    pub fn ensure_qos_hierarchy(&self) -> Result<(), CgroupError> {
        let best_effort = CgroupResources {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        };
        if let Driver::Systemd(_) = self.driver {
            // Each slice is its own unit: the parent first.
            let none = CgroupResources::default();
            self.make(&self.kubepods, &none, "pods")?;
            self.make(
                &self.qos_cgroup(QosClass::Burstable),
                &none,
                "Burstable pods",
            )?;
            return self.make(
                &self.qos_cgroup(QosClass::BestEffort),
                &best_effort,
                "BestEffort pods",
            );
        }
        for class in [QosClass::Burstable, QosClass::BestEffort] {
            self.fs.create(&self.qos_cgroup(class))?;
        }
        self.fs
            .apply(&self.qos_cgroup(QosClass::BestEffort), &best_effort)
    }

    /// The on-disk path of `kubepods` (`kubepods.slice` with systemd).
    pub fn kubepods(&self) -> Result<CgroupName, CgroupError> {
        self.on_disk(&self.kubepods)
    }

    /// Writes the node allocatable to `kubepods` (upstream
    /// `enforceNodeAllocatableCgroups`): through the slice's properties with systemd,
    /// then cgroupfs. A memory limit below the pods' usage is refused by v1 (`EBUSY`);
    /// the caller retries.
    pub fn update_kubepods(&self, resources: &CgroupResources) -> Result<(), CgroupError> {
        let path = self.kubepods()?;
        self.write(&path, &self.without_missing_pids(&path, resources))
    }

    /// `resources` without `pids.max` where the pids controller is missing (old
    /// kernels, a v2 tree without it): the other limits still hold.
    fn without_missing_pids(
        &self,
        path: &CgroupName,
        resources: &CgroupResources,
    ) -> CgroupResources {
        let mut out = resources.clone();
        if out.pids_max.is_some() && !self.fs.has_pids(path) {
            debug!("no pids controller for {path}: pids.max left alone");
            out.pids_max = None;
        }
        out
    }

    /// Writes `resources` to the existing cgroup `name` (`--system-reserved-cgroup`,
    /// `--kube-reserved-cgroup`), named as it is on cgroupfs with either driver
    /// (`/system.slice`); with systemd its unit is the last part. A cgroup that does
    /// not exist is an error: litelet never makes it. Returns the path written.
    pub fn update_reserved_cgroup(
        &self,
        name: &str,
        resources: &CgroupResources,
    ) -> Result<CgroupName, CgroupError> {
        let path = CgroupName::parse(name)?;
        if !self.fs.exists(&path) {
            return Err(CgroupError::ReservedCgroupMissing {
                name: name.to_owned(),
            });
        }
        self.write(&path, &self.without_missing_pids(&path, resources))?;
        Ok(path)
    }

    /// Sets the QoS cgroups' CPU shares from the active pods (upstream
    /// `UpdateQOSCgroups`, CPU part) and returns what was written.
    pub fn update_qos_cpu_shares(&self, active_pods: &[Pod]) -> Result<QosCpuShares, CgroupError> {
        let _writing = lock(&self.qos_write);
        self.write_qos_cpu_shares(qos_cpu_shares(active_pods))
    }

    fn requests(&self) -> MutexGuard<'_, BTreeMap<String, i64>> {
        lock(&self.burstable_requests)
    }

    /// Counts `pod` (pass it at its allocated resources) among the active pods whose
    /// requests set the QoS cgroups' CPU shares, replacing what it counted before (a
    /// resize). In memory only: [`PodCgroupManager::update_qos_cgroups`] writes.
    /// Returns whether the counted sum changed.
    pub fn note_active_pod(&self, pod: &Pod) -> bool {
        let request = burstable_cpu_request(pod);
        let mut requests = self.requests();
        let before = match request {
            Some(milli) => requests.insert(pod.uid().to_owned(), milli),
            None => requests.remove(pod.uid()),
        };
        before != request
    }

    /// Stops counting the pod of `uid` (it terminated). In memory only.
    pub fn forget_active_pod(&self, uid: &str) {
        self.requests().remove(uid);
    }

    /// Stops counting every pod for which `active` says no (a periodic check against
    /// the pod workers, should a pod have gone without a word). In memory only.
    pub fn retain_active_pods(&self, active: impl Fn(&str) -> bool) {
        // `active` may take other locks: asked with this one released.
        let counted: Vec<String> = self.requests().keys().cloned().collect();
        let gone: Vec<String> = counted.into_iter().filter(|uid| !active(uid)).collect();
        let mut requests = self.requests();
        for uid in gone {
            requests.remove(&uid);
        }
    }

    /// Writes the QoS cgroups' CPU shares from the pods counted so far (upstream
    /// `UpdateQOSCgroups`, CPU part): Burstable gets the sum of its pods' requests,
    /// BestEffort the minimum. Returns what was written.
    pub fn update_qos_cgroups(&self) -> Result<QosCpuShares, CgroupError> {
        let _writing = lock(&self.qos_write);
        let milli = self
            .requests()
            .values()
            .copied()
            .fold(0i64, i64::saturating_add);
        self.write_qos_cpu_shares(qos_cpu_shares_for(milli))
    }

    /// Writes `shares` to the QoS cgroups (through systemd too with that driver).
    fn write_qos_cpu_shares(&self, shares: QosCpuShares) -> Result<QosCpuShares, CgroupError> {
        for (class, value) in [
            (QosClass::Burstable, shares.burstable),
            (QosClass::BestEffort, shares.best_effort),
        ] {
            let config = CgroupResources {
                cpu_shares: Some(value),
                ..Default::default()
            };
            self.write(&self.on_disk(&self.qos_cgroup(class))?, &config)?;
        }
        Ok(shares)
    }

    /// `pod<uid>`, refusing a UID that is not a plain name by itself.
    fn pod_part(uid: &str) -> Result<String, CgroupError> {
        check_part(uid)?;
        Ok(format!("{POD_PREFIX}{uid}"))
    }

    /// The pod's cgroup, from its QoS class and UID.
    pub fn pod_cgroup(&self, pod: &Pod) -> Result<CgroupName, CgroupError> {
        self.qos_cgroup(pod_qos(pod))
            .child(&Self::pod_part(pod.uid())?)
    }

    /// The pod cgroup as the runtime takes it, the sandbox's `cgroup_parent`: its
    /// on-disk path, `/kubepods/burstable/pod<uid>` with the cgroupfs driver,
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` with
    /// systemd (upstream's `ToSystemd`; runtimes take the slice from its last part).
    pub fn pod_cgroup_name(&self, pod: &Pod) -> Result<String, CgroupError> {
        Ok(self.on_disk(&self.pod_cgroup(pod)?)?.to_cgroupfs())
    }

    /// What [`PodCgroupManager::create_or_update_pod`] writes for `pod` (pass the pod
    /// with its allocated resources).
    pub fn pod_resources(&self, pod: &Pod) -> CgroupResources {
        let mut config = resource_config_for_pod(pod, &self.config.options);
        config.pids_max = self.config.pod_pids_limit.map(Limit::Value);
        config
    }

    /// Creates the pod cgroup with the pod's settings if it does not exist yet
    /// (upstream `EnsureExists`); returns whether it was created. An existing cgroup is
    /// left as it is: changing it is the resize path's job, in its order.
    pub fn ensure_pod(&self, pod: &Pod) -> Result<bool, CgroupError> {
        let logical = self.pod_cgroup(pod)?;
        let name = self.on_disk(&logical)?;
        if self.fs.exists(&name) {
            return Ok(false);
        }
        self.make(&logical, &self.pod_resources(pod), &pod_description(pod))?;
        info!(
            "created pod cgroup {name} for pod {}/{} uid {}",
            pod.namespace(),
            pod.name(),
            pod.uid()
        );
        Ok(true)
    }

    /// Creates the pod cgroup if needed and writes all of the pod's settings.
    ///
    /// On an existing v1 cgroup, a lower CPU quota is refused by the kernel while a
    /// container still has a higher one; resize code lowers containers first and uses
    /// [`PodCgroupManager::update_pod_resources`] with only the fields it changes.
    pub fn create_or_update_pod(&self, pod: &Pod) -> Result<(), CgroupError> {
        let logical = self.pod_cgroup(pod)?;
        let name = self.on_disk(&logical)?;
        match self.driver {
            Driver::Systemd(_) if self.fs.exists(&name) => {
                self.write(&name, &self.pod_resources(pod))?
            }
            _ => self.make(&logical, &self.pod_resources(pod), &pod_description(pod))?,
        }
        debug!(
            "wrote pod cgroup {name} for pod {}/{} uid {}",
            pod.namespace(),
            pod.name(),
            pod.uid()
        );
        Ok(())
    }

    /// Every place on disk the pod cgroup of `uid` can be, Guaranteed first.
    fn candidates(&self, uid: &str) -> Result<Vec<CgroupName>, CgroupError> {
        let part = Self::pod_part(uid)?;
        [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .into_iter()
        .map(|class| self.on_disk(&self.qos_cgroup(class).child(&part)?))
        .collect()
    }

    /// The existing pod cgroup of `uid`, if any, as its on-disk path.
    pub fn find_pod(&self, uid: &str) -> Result<Option<CgroupName>, CgroupError> {
        Ok(self
            .candidates(uid)?
            .into_iter()
            .find(|name| self.fs.exists(name)))
    }

    /// [`Self::find_pod`] for a pod at hand: its own QoS class's place is looked at
    /// first (a pod's class never changes), so a periodic sync costs one lookup, not
    /// one per class passed.
    pub fn find_pod_of(&self, pod: &Pod) -> Result<Option<CgroupName>, CgroupError> {
        let expected = self.on_disk(&self.pod_cgroup(pod)?)?;
        if self.fs.exists(&expected) {
            return Ok(Some(expected));
        }
        self.find_pod(pod.uid())
    }

    /// The current settings of the pod cgroup found at `name` (by [`Self::find_pod`]).
    pub fn read_found(&self, name: &CgroupName) -> Result<CgroupResources, CgroupError> {
        self.fs.read(name)
    }

    /// The memory usage of the pod cgroup found at `name`, in bytes.
    pub fn memory_usage_found(&self, name: &CgroupName) -> Result<u64, CgroupError> {
        self.fs.memory_usage(name)
    }

    fn existing(&self, uid: &str) -> Result<CgroupName, CgroupError> {
        self.find_pod(uid)?.ok_or_else(|| CgroupError::PodNotFound {
            uid: uid.to_owned(),
        })
    }

    /// Whether a pod cgroup exists for `uid` (an invalid UID has none).
    pub fn exists(&self, uid: &str) -> bool {
        self.find_pod(uid).is_ok_and(|found| found.is_some())
    }

    /// Writes the `Some` fields to the pod cgroup of `uid`, in the order described in
    /// the v1/v2 backends; the caller orders pod and container updates.
    pub fn update_pod_resources(
        &self,
        uid: &str,
        resources: &CgroupResources,
    ) -> Result<(), CgroupError> {
        let name = self.existing(uid)?;
        self.write(&name, resources)
    }

    /// The pod cgroup's current settings, read from the kernel.
    pub fn read_pod_resources(&self, uid: &str) -> Result<CgroupResources, CgroupError> {
        self.fs.read(&self.existing(uid)?)
    }

    /// The pod cgroup's memory usage in bytes.
    pub fn memory_usage(&self, uid: &str) -> Result<u64, CgroupError> {
        self.fs.memory_usage(&self.existing(uid)?)
    }

    /// The cgroup of one container below its pod's (on disk), if there is one: named
    /// after the container ID with the cgroupfs driver, a scope ending in `-<id>.scope`
    /// with systemd (`cri-containerd-<id>.scope`, `crio-<id>.scope`).
    pub fn container_cgroup(
        &self,
        pod: &CgroupName,
        container_id: &str,
    ) -> Result<Option<CgroupName>, CgroupError> {
        let name = match self.driver {
            Driver::Cgroupfs => pod.child(container_id)?,
            Driver::Systemd(_) => {
                let suffix = format!("-{container_id}.scope");
                let found = self
                    .fs
                    .children(pod)?
                    .into_iter()
                    .find(|c| c.ends_with(&suffix));
                match found {
                    Some(scope) => pod.child(&scope)?,
                    None => return Ok(None),
                }
            }
        };
        Ok(self.fs.exists(&name).then_some(name))
    }

    /// Memory in use by one container of the pod, from its cgroup below the pod's;
    /// `None` when there is no such cgroup.
    pub fn container_memory_usage(
        &self,
        uid: &str,
        container_id: &str,
    ) -> Result<Option<u64>, CgroupError> {
        let Some(pod) = self.find_pod(uid)? else {
            return Ok(None);
        };
        match self.container_cgroup(&pod, container_id)? {
            Some(name) => self.fs.memory_usage(&name).map(Some),
            None => Ok(None),
        }
    }

    /// `resources` as the kernel keeps them, to compare what is with what would be
    /// written: memory limits in whole pages (the kernel rounds down), and on v2 the
    /// shares that `cpu.weight` can hold (weights are 38 times coarser).
    pub fn normalize(&self, resources: &CgroupResources) -> CgroupResources {
        let mut out = resources.clone();
        if self.version() == CgroupVersion::V2 {
            out.cpu_shares = out
                .cpu_shares
                .map(|s| weight_to_shares(shares_to_weight(s)));
        }
        let page = page_size();
        out.memory_limit = out.memory_limit.map(|limit| match limit {
            Limit::Value(bytes) => Limit::Value(bytes / page * page),
            Limit::Unlimited => Limit::Unlimited,
        });
        out
    }

    /// Processes still in the pod cgroup or below it; empty when there is no cgroup.
    pub fn pod_processes(&self, uid: &str) -> Result<Vec<i32>, CgroupError> {
        match self.find_pod(uid)? {
            Some(name) => self.fs.processes(&name),
            None => Ok(Vec::new()),
        }
    }

    /// Removes the pod cgroup of `uid` wherever it is (all QoS classes, all
    /// hierarchies), with any container cgroups left below it. Already removed is
    /// success. Processes still inside make it fail with `FsError::Busy` naming the
    /// cgroup; what could be removed is removed. With systemd, stopping the slice
    /// first ends what still runs in it (as upstream's `Destroy`, which kills the
    /// cgroup's processes before removing it).
    pub fn remove_pod(&self, uid: &str) -> Result<(), CgroupError> {
        let _timed = super::Timed::new(super::Operation::Destroy);
        let mut first_error = None;
        for name in self.candidates(uid)? {
            if let Driver::Systemd(units) = &self.driver {
                // Stopping the slice stops what runs in it and removes its cgroup;
                // cgroupfs then removes whatever systemd left.
                if let Err(e) = unit_of(&name).and_then(|u| Ok(units.stop_unit(&u)?)) {
                    first_error.get_or_insert(e);
                }
            }
            if let Err(e) = self.fs.remove(&name) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => {
                debug!("removed pod cgroup of uid {uid}");
                Ok(())
            }
        }
    }

    /// UIDs of all pod cgroups under the QoS hierarchy, sorted, each once (for
    /// housekeeping of orphaned pod cgroups).
    pub fn list_pod_uids(&self) -> Result<Vec<String>, CgroupError> {
        let mut uids = Vec::new();
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            for child in self.fs.children(&self.on_disk(&self.qos_cgroup(class))?)? {
                let uid = match self.driver {
                    Driver::Cgroupfs => child
                        .strip_prefix(POD_PREFIX)
                        .filter(|u| !u.is_empty())
                        .map(str::to_owned),
                    Driver::Systemd(_) => pod_uid_of_slice(&child, POD_PREFIX),
                };
                uids.extend(uid);
            }
        }
        uids.sort();
        uids.dedup();
        Ok(uids)
    }
}

/// A lock whose holder cannot leave the data half-changed: a poisoned one is taken.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The unit of a slice path: its last part.
fn unit_of(path: &CgroupName) -> Result<String, CgroupError> {
    Ok(path.base().unwrap_or(super::systemd::ROOT_SLICE).to_owned())
}

/// A pod slice's `Description`.
fn pod_description(pod: &Pod) -> String {
    format!("pod {}/{} uid {}", pod.namespace(), pod.name(), pod.uid())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod systemd_tests;
