//! cgroup v1 backend: one hierarchy per controller.
//!
//! Where litelet creates and writes: `cpu` (`cpu.shares`, `cpu.cfs_quota_us`,
//! `cpu.cfs_period_us`), `memory` (`memory.limit_in_bytes`, `memory.usage_in_bytes`),
//! `pids` (`pids.max`) and `cpuacct` (created only, for accounting). `cpu` and `memory`
//! are required; `pids` and `cpuacct` are used when mounted. Removal and listing cover
//! every v1 hierarchy (cpuset, devices, freezer, `name=systemd`, ...) and, on a hybrid
//! host, the cgroup2 hierarchy at `<root>/unified`, because runc creates the pod's
//! path in all of them when it starts the pod's containers (without this the
//! `unified` copy was left behind, one empty `pod<uid>` per pod ever run).
//!
//! **cpuset is never created by litelet.** A new v1 cpuset cgroup starts with empty
//! `cpuset.cpus`/`cpuset.mems`, and no task can join it until both are copied from the
//! parent. Litelet has no cpuset policy (no CPU manager), so it leaves the cpuset
//! hierarchy to runc, which creates each missing level and copies the parent's values
//! itself. Litelet only removes what runc left there.
//!
//! **Write order in [`CgroupV1::apply`]**: cpu, then memory, then pids; a failed write
//! stops the rest and names the file and value; earlier writes stay. Only this cgroup is
//! written, never its children, which matters for two kernel rules:
//! - CFS quota is hierarchical on v1: a cgroup's quota may not be below any child's
//!   (normalised to the period), and the kernel refuses such a write with `EINVAL`. So
//!   to **lower** a pod's quota, lower its containers first; to **raise** it, raise the
//!   pod first (the resize order). Changing the period changes the ratio too, so when
//!   the period changes apply goes through "no quota": `quota=-1` (always accepted, the
//!   cgroup then inherits its parent's bound), then the period, then the new quota. See
//!   [`cfs_writes`].
//! - a memory limit below the current usage makes the kernel reclaim and, failing that,
//!   refuse with `EBUSY`. Callers compare with [`CgroupV1::memory_usage`] first, as the
//!   upstream resize does. Children may have larger limits than the parent (the smaller
//!   one binds), so memory has no parent/child order. `memory.memsw.*` is left alone.

use std::path::{Path, PathBuf};

use super::detect::Layout;
use super::fs::{self, join_safely};
use super::name::CgroupName;
use super::resources::{CgroupResources, Limit};
use super::{CgroupError, CgroupVersion, Cgroupfs};

pub const CPU_SHARES: &str = "cpu.shares";
pub const CPU_CFS_QUOTA: &str = "cpu.cfs_quota_us";
pub const CPU_CFS_PERIOD: &str = "cpu.cfs_period_us";
pub const MEMORY_LIMIT: &str = "memory.limit_in_bytes";
pub const MEMORY_USAGE: &str = "memory.usage_in_bytes";
pub const PIDS_MAX: &str = "pids.max";

/// The kernel shows "no memory limit" as the largest page-aligned `i64`; anything at
/// or above 2^62 bytes is read as unlimited.
const UNLIMITED_MEMORY_FROM: u64 = 1 << 62;

/// The v1 hierarchies of one machine.
#[derive(Clone, Debug)]
pub struct CgroupV1 {
    mount_root: PathBuf,
    cpu: PathBuf,
    cpuacct: Option<PathBuf>,
    memory: PathBuf,
    pids: Option<PathBuf>,
    /// Every v1 hierarchy's mount point, each once, and the hybrid cgroup2 mount.
    all: Vec<PathBuf>,
}

impl CgroupV1 {
    /// Uses the hierarchies found by detection; `cpu` and `memory` must be mounted.
    pub fn new(layout: &Layout, mount_root: &Path) -> Result<CgroupV1, CgroupError> {
        let points = layout.v1_mount_points();
        let required = |controller: &'static str| {
            points
                .get(controller)
                .cloned()
                .ok_or_else(|| CgroupError::ControllerMissing {
                    controller,
                    root: mount_root.to_path_buf(),
                })
        };
        let mut all: Vec<PathBuf> = layout.v1.iter().map(|m| m.mount_point.clone()).collect();
        // Hybrid: runc mirrors every cgroup into the cgroup2 mount as well.
        all.extend(layout.unified.iter().cloned());
        all.dedup();
        Ok(CgroupV1 {
            mount_root: mount_root.to_path_buf(),
            cpu: required("cpu")?,
            cpuacct: points.get("cpuacct").cloned(),
            memory: required("memory")?,
            pids: points.get("pids").cloned(),
            all,
        })
    }

    /// The hierarchies litelet creates in, each once (cpu and cpuacct may share one).
    fn managed(&self) -> Vec<&Path> {
        let mut dirs: Vec<&Path> = vec![&self.cpu];
        for dir in [
            self.cpuacct.as_deref(),
            Some(&self.memory),
            self.pids.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }

    fn dir(hierarchy: &Path, name: &CgroupName) -> Result<PathBuf, CgroupError> {
        Ok(join_safely(hierarchy, name.to_cgroupfs())?)
    }

    fn pids_dir(&self, name: &CgroupName) -> Result<PathBuf, CgroupError> {
        let hierarchy = self.pids.as_deref().ok_or(CgroupError::ControllerMissing {
            controller: "pids",
            root: self.mount_root.clone(),
        })?;
        Self::dir(hierarchy, name)
    }

    fn read_quota(path: &Path) -> Result<Limit, CgroupError> {
        let quota = fs::read_i64(path)?;
        match quota {
            -1 => Ok(Limit::Unlimited),
            q => u64::try_from(q).map(Limit::Value).map_err(|_| {
                fs::FsError::Parse {
                    path: path.to_path_buf(),
                    value: q.to_string(),
                }
                .into()
            }),
        }
    }
}

/// v1 spelling of a quota or memory limit: a number or `-1`.
fn signed(limit: Limit) -> String {
    match limit {
        Limit::Value(v) => v.to_string(),
        Limit::Unlimited => "-1".to_owned(),
    }
}

/// The writes, in order, that take a v1 cgroup's CFS bandwidth from `current` (quota,
/// period; `None` when not read) to the wanted `quota`/`period` (`None`: keep).
///
/// With an unchanged period only the quota is written. A new period passes through an
/// unlimited quota so that no intermediate quota/period ratio can fall below a child's
/// or rise above the parent's (either would be `EINVAL`).
pub fn cfs_writes(
    current: Option<(Limit, u64)>,
    quota: Option<Limit>,
    period: Option<u64>,
) -> Vec<(&'static str, String)> {
    let quota_write = |q: Limit| (CPU_CFS_QUOTA, signed(q));
    let Some(period) = period else {
        return quota.map(quota_write).into_iter().collect();
    };
    if let Some((_, current_period)) = current {
        if current_period == period {
            return quota.map(quota_write).into_iter().collect();
        }
    }
    let current_quota = current.map(|(q, _)| q);
    let target = quota.or(current_quota);
    let mut writes = Vec::new();
    if current_quota != Some(Limit::Unlimited) {
        writes.push(quota_write(Limit::Unlimited));
    }
    writes.push((CPU_CFS_PERIOD, period.to_string()));
    if let Some(q @ Limit::Value(_)) = target {
        writes.push(quota_write(q));
    }
    writes
}

impl Cgroupfs for CgroupV1 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V1
    }

    fn has_pids(&self, _name: &CgroupName) -> bool {
        self.pids.is_some()
    }

    fn create(&self, name: &CgroupName) -> Result<(), CgroupError> {
        for hierarchy in self.managed() {
            fs::create_dir(&Self::dir(hierarchy, name)?)?;
        }
        Ok(())
    }

    fn exists(&self, name: &CgroupName) -> bool {
        self.managed()
            .into_iter()
            .all(|h| Self::dir(h, name).is_ok_and(|d| d.is_dir()))
    }

    fn apply(&self, name: &CgroupName, r: &CgroupResources) -> Result<(), CgroupError> {
        // Refuse what cannot be done before writing anything.
        if let Some(min) = r.memory_min {
            return Err(CgroupError::Unsupported {
                setting: "memory.min",
                value: min.to_string(),
                version: CgroupVersion::V1,
            });
        }
        let pids_dir = match r.pids_max {
            Some(_) => Some(self.pids_dir(name)?),
            None => None,
        };

        let cpu = Self::dir(&self.cpu, name)?;
        if let Some(shares) = r.cpu_shares {
            fs::write(&cpu.join(CPU_SHARES), &shares.to_string())?;
        }
        let current = match r.cpu_period {
            Some(_) => Some((
                Self::read_quota(&cpu.join(CPU_CFS_QUOTA))?,
                fs::read_u64(&cpu.join(CPU_CFS_PERIOD))?,
            )),
            None => None,
        };
        for (file, value) in cfs_writes(current, r.cpu_quota, r.cpu_period) {
            fs::write(&cpu.join(file), &value)?;
        }

        if let Some(limit) = r.memory_limit {
            let memory = Self::dir(&self.memory, name)?;
            fs::write(&memory.join(MEMORY_LIMIT), &signed(limit))?;
        }
        if let (Some(limit), Some(dir)) = (r.pids_max, pids_dir) {
            fs::write(&dir.join(PIDS_MAX), &limit.to_string())?;
        }
        Ok(())
    }

    fn read(&self, name: &CgroupName) -> Result<CgroupResources, CgroupError> {
        let cpu = Self::dir(&self.cpu, name)?;
        let memory = Self::dir(&self.memory, name)?;
        let memory_limit = read_memory_limit(&memory.join(MEMORY_LIMIT))?;
        let pids_max = match &self.pids {
            Some(_) => {
                let path = self.pids_dir(name)?.join(PIDS_MAX);
                Some(read_max(&path)?)
            }
            None => None,
        };
        Ok(CgroupResources {
            cpu_shares: Some(fs::read_u64(&cpu.join(CPU_SHARES))?),
            cpu_quota: Some(Self::read_quota(&cpu.join(CPU_CFS_QUOTA))?),
            cpu_period: Some(fs::read_u64(&cpu.join(CPU_CFS_PERIOD))?),
            memory_limit: Some(memory_limit),
            memory_min: None,
            pids_max,
        })
    }

    fn memory_usage(&self, name: &CgroupName) -> Result<u64, CgroupError> {
        let memory = Self::dir(&self.memory, name)?;
        Ok(fs::read_u64(&memory.join(MEMORY_USAGE))?)
    }

    fn processes(&self, name: &CgroupName) -> Result<Vec<i32>, CgroupError> {
        let mut pids = Vec::new();
        for hierarchy in self.managed() {
            pids.extend(fs::processes(&Self::dir(hierarchy, name)?)?);
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>, CgroupError> {
        let mut names = Vec::new();
        for hierarchy in &self.all {
            names.extend(fs::child_dirs(&Self::dir(hierarchy, name)?)?);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn remove(&self, name: &CgroupName) -> Result<(), CgroupError> {
        // Try every hierarchy, so that one busy hierarchy does not leave the others.
        let mut first_error = None;
        for hierarchy in &self.all {
            let result = Self::dir(hierarchy, name).and_then(|d| Ok(fs::remove_tree(&d)?));
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// `memory.limit_in_bytes`: the kernel shows "no limit" as a huge number; `-1` (what
/// was written) is accepted too.
fn read_memory_limit(path: &Path) -> Result<Limit, CgroupError> {
    let text = fs::read_string(path)?;
    match text.trim() {
        "-1" => Ok(Limit::Unlimited),
        v => match v.parse::<u64>() {
            Ok(v) if v >= UNLIMITED_MEMORY_FROM => Ok(Limit::Unlimited),
            Ok(v) => Ok(Limit::Value(v)),
            Err(_) => Err(fs::FsError::Parse {
                path: path.to_path_buf(),
                value: text.clone(),
            }
            .into()),
        },
    }
}

/// A `pids.max`-style file: a number or `max`.
pub(crate) fn read_max(path: &Path) -> Result<Limit, CgroupError> {
    let text = fs::read_string(path)?;
    match text.trim() {
        "max" => Ok(Limit::Unlimited),
        v => v.parse().map(Limit::Value).map_err(|_| {
            fs::FsError::Parse {
                path: path.to_path_buf(),
                value: text.clone(),
            }
            .into()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::fs::FsError;
    use crate::cgroups::testfs::{Model, V1_NO_MEMORY_LIMIT};
    use proptest::prelude::*;

    const POD: &str = "/kubepods/burstable/pod1";

    fn setup() -> (Model, CgroupV1, CgroupName) {
        let model = Model::v1();
        let v1 = CgroupV1::new(&model.layout(), model.root()).unwrap();
        model.populate(POD);
        (model, v1, CgroupName::parse(POD).unwrap())
    }

    #[test]
    fn apply_writes_each_file_and_reads_back() {
        let (model, v1, pod) = setup();
        let wanted = CgroupResources {
            cpu_shares: Some(512),
            cpu_quota: Some(Limit::Value(50_000)),
            cpu_period: Some(100_000),
            memory_limit: Some(Limit::Value(256 << 20)),
            memory_min: None,
            pids_max: Some(Limit::Value(1024)),
        };
        v1.apply(&pod, &wanted).unwrap();
        assert_eq!(model.read("cpu", POD, CPU_SHARES), "512");
        assert_eq!(model.read("cpu", POD, CPU_CFS_QUOTA), "50000");
        assert_eq!(model.read("cpu", POD, CPU_CFS_PERIOD), "100000");
        assert_eq!(model.read("memory", POD, MEMORY_LIMIT), "268435456");
        assert_eq!(model.read("pids", POD, PIDS_MAX), "1024");
        assert_eq!(v1.read(&pod).unwrap(), wanted);
    }

    #[test]
    fn unlimited_values_use_v1_spellings() {
        let (model, v1, pod) = setup();
        model.set("cpu", POD, CPU_CFS_QUOTA, "20000");
        let wanted = CgroupResources {
            cpu_quota: Some(Limit::Unlimited),
            memory_limit: Some(Limit::Unlimited),
            pids_max: Some(Limit::Unlimited),
            ..Default::default()
        };
        v1.apply(&pod, &wanted).unwrap();
        assert_eq!(model.read("cpu", POD, CPU_CFS_QUOTA), "-1");
        assert_eq!(model.read("memory", POD, MEMORY_LIMIT), "-1");
        assert_eq!(model.read("pids", POD, PIDS_MAX), "max");
        // The kernel shows no memory limit as a huge number.
        model.set("memory", POD, MEMORY_LIMIT, V1_NO_MEMORY_LIMIT);
        let read = v1.read(&pod).unwrap();
        assert_eq!(read.memory_limit, Some(Limit::Unlimited));
        assert_eq!(read.cpu_quota, Some(Limit::Unlimited));
        assert_eq!(read.pids_max, Some(Limit::Unlimited));
    }

    #[test]
    fn none_fields_are_not_written() {
        let (model, v1, pod) = setup();
        // Files that must not be touched are removed: a write would fail.
        model.delete("cpu", POD, CPU_CFS_QUOTA);
        model.delete("cpu", POD, CPU_CFS_PERIOD);
        model.delete("pids", POD, PIDS_MAX);
        let wanted = CgroupResources {
            cpu_shares: Some(2),
            memory_limit: Some(Limit::Value(4096)),
            ..Default::default()
        };
        v1.apply(&pod, &wanted).unwrap();
        assert_eq!(model.read("cpu", POD, CPU_SHARES), "2");
        assert_eq!(model.read("memory", POD, MEMORY_LIMIT), "4096");
    }

    #[test]
    fn a_missing_file_fails_apply_with_path_and_value() {
        let (model, v1, pod) = setup();
        model.delete("memory", POD, MEMORY_LIMIT);
        let err = v1
            .apply(
                &pod,
                &CgroupResources {
                    memory_limit: Some(Limit::Value(1 << 20)),
                    ..Default::default()
                },
            )
            .unwrap_err();
        match &err {
            CgroupError::Fs(FsError::MissingFile { path, value }) => {
                assert!(path.ends_with("memory/kubepods/burstable/pod1/memory.limit_in_bytes"));
                assert_eq!(value, "1048576");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(!model.path("memory", POD).join(MEMORY_LIMIT).exists());
    }

    #[test]
    fn apply_on_a_missing_cgroup_fails() {
        let (_model, v1, _) = setup();
        let gone = CgroupName::parse("/kubepods/pod-gone").unwrap();
        let err = v1
            .apply(
                &gone,
                &CgroupResources {
                    cpu_shares: Some(2),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(
            matches!(err, CgroupError::Fs(FsError::MissingFile { .. })),
            "{err}"
        );
    }

    #[test]
    fn memory_min_is_refused_before_any_write() {
        let (model, v1, pod) = setup();
        let err = v1
            .apply(
                &pod,
                &CgroupResources {
                    cpu_shares: Some(300),
                    memory_min: Some(1),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(
            err,
            CgroupError::Unsupported {
                setting: "memory.min",
                ..
            }
        ));
        assert_eq!(model.read("cpu", POD, CPU_SHARES), "1024");
    }

    #[test]
    fn cfs_write_order() {
        let q = |v| Some(Limit::Value(v));
        let w = |f: &'static str, v: &str| (f, v.to_owned());
        type Writes = Vec<(&'static str, String)>;
        /// (name, current, quota, period) → writes
        type Case = (
            &'static str,
            Option<(Limit, u64)>,
            Option<Limit>,
            Option<u64>,
            Writes,
        );
        let cases: Vec<Case> = vec![
            ("nothing", None, None, None, vec![]),
            (
                "quota only",
                None,
                q(5000),
                None,
                vec![w(CPU_CFS_QUOTA, "5000")],
            ),
            (
                "same period: quota only",
                Some((Limit::Value(20_000), 100_000)),
                q(5000),
                Some(100_000),
                vec![w(CPU_CFS_QUOTA, "5000")],
            ),
            (
                "same period, no quota: nothing",
                Some((Limit::Value(20_000), 100_000)),
                None,
                Some(100_000),
                vec![],
            ),
            (
                "new period passes through no quota",
                Some((Limit::Value(50_000), 100_000)),
                q(5000),
                Some(10_000),
                vec![
                    w(CPU_CFS_QUOTA, "-1"),
                    w(CPU_CFS_PERIOD, "10000"),
                    w(CPU_CFS_QUOTA, "5000"),
                ],
            ),
            (
                "new period from no quota",
                Some((Limit::Unlimited, 100_000)),
                q(5000),
                Some(10_000),
                vec![w(CPU_CFS_PERIOD, "10000"), w(CPU_CFS_QUOTA, "5000")],
            ),
            (
                "new period to no quota",
                Some((Limit::Value(50_000), 100_000)),
                Some(Limit::Unlimited),
                Some(10_000),
                vec![w(CPU_CFS_QUOTA, "-1"), w(CPU_CFS_PERIOD, "10000")],
            ),
            (
                "new period keeps the current quota",
                Some((Limit::Value(50_000), 100_000)),
                None,
                Some(200_000),
                vec![
                    w(CPU_CFS_QUOTA, "-1"),
                    w(CPU_CFS_PERIOD, "200000"),
                    w(CPU_CFS_QUOTA, "50000"),
                ],
            ),
            (
                "unknown current: conservative",
                None,
                q(5000),
                Some(10_000),
                vec![
                    w(CPU_CFS_QUOTA, "-1"),
                    w(CPU_CFS_PERIOD, "10000"),
                    w(CPU_CFS_QUOTA, "5000"),
                ],
            ),
        ];
        for (name, current, quota, period, want) in cases {
            assert_eq!(cfs_writes(current, quota, period), want, "{name}");
        }
    }

    #[test]
    fn period_change_on_the_model() {
        let (model, v1, pod) = setup();
        model.set("cpu", POD, CPU_CFS_QUOTA, "50000");
        v1.apply(
            &pod,
            &CgroupResources {
                cpu_quota: Some(Limit::Value(5000)),
                cpu_period: Some(10_000),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.read("cpu", POD, CPU_CFS_PERIOD), "10000");
        assert_eq!(model.read("cpu", POD, CPU_CFS_QUOTA), "5000");
    }

    #[test]
    fn create_makes_managed_hierarchies_only() {
        let model = Model::v1();
        let v1 = CgroupV1::new(&model.layout(), model.root()).unwrap();
        let name = CgroupName::parse("/kubepods/besteffort/pod9").unwrap();
        assert!(!v1.exists(&name));
        v1.create(&name).unwrap();
        v1.create(&name).unwrap();
        assert!(v1.exists(&name));
        for hierarchy in ["cpu", "cpuacct", "memory", "pids"] {
            assert!(
                model.path(hierarchy, "/kubepods/besteffort/pod9").is_dir(),
                "{hierarchy}"
            );
        }
        for hierarchy in ["cpuset", "systemd"] {
            assert!(!model.path(hierarchy, "/kubepods").exists(), "{hierarchy}");
        }
        // Just made, not populated by a kernel: applying fails on the missing file.
        let err = v1
            .apply(
                &name,
                &CgroupResources {
                    cpu_shares: Some(2),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(err, CgroupError::Fs(FsError::MissingFile { .. })));
    }

    #[test]
    fn remove_covers_every_hierarchy_and_tolerates_missing() {
        let model = Model::v1();
        let v1 = CgroupV1::new(&model.layout(), model.root()).unwrap();
        for hierarchy in ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"] {
            std::fs::create_dir_all(model.path(hierarchy, "/kubepods/pod1/container-a")).unwrap();
        }
        let pod = CgroupName::parse("/kubepods/pod1").unwrap();
        assert_eq!(
            v1.children(&CgroupName::parse("/kubepods").unwrap())
                .unwrap(),
            vec!["pod1"]
        );
        v1.remove(&pod).unwrap();
        for hierarchy in ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"] {
            assert!(
                !model.path(hierarchy, "/kubepods/pod1").exists(),
                "{hierarchy}"
            );
            assert!(model.path(hierarchy, "/kubepods").exists(), "{hierarchy}");
        }
        v1.remove(&pod).unwrap();
    }

    #[test]
    fn issue_18_remove_covers_the_hybrid_unified_hierarchy() {
        let model = Model::v1();
        let v1 = CgroupV1::new(&model.layout(), model.root()).unwrap();
        // What runc leaves in the cgroup2 mount of a hybrid host.
        let unified = model.root().join("unified/kubepods/burstable/pod7");
        std::fs::create_dir_all(unified.join("container-a")).unwrap();
        let kubepods = CgroupName::parse("/kubepods/burstable").unwrap();
        assert_eq!(v1.children(&kubepods).unwrap(), vec!["pod7"]);
        v1.remove(&CgroupName::parse("/kubepods/burstable/pod7").unwrap())
            .unwrap();
        assert!(!unified.exists());
        assert!(model.root().join("unified/kubepods/burstable").is_dir());
    }

    #[test]
    fn usage_and_processes() {
        let (model, v1, pod) = setup();
        model.set("memory", POD, MEMORY_USAGE, "123456\n");
        assert_eq!(v1.memory_usage(&pod).unwrap(), 123_456);
        model.set("cpu", POD, "cgroup.procs", "10\n11\n");
        model.set("memory", POD, "cgroup.procs", "11\n12\n");
        assert_eq!(v1.processes(&pod).unwrap(), vec![10, 11, 12]);
    }

    #[test]
    fn cpu_and_memory_are_required_pids_is_not() {
        let model = Model::v1();
        let without_memory: String = model
            .mountinfo
            .lines()
            .filter(|l| !l.ends_with(",memory"))
            .map(|l| format!("{l}\n"))
            .collect();
        let layout = crate::cgroups::detect::detect(&without_memory, model.root()).unwrap();
        assert!(matches!(
            CgroupV1::new(&layout, model.root()),
            Err(CgroupError::ControllerMissing {
                controller: "memory",
                ..
            })
        ));
        let without_pids: String = model
            .mountinfo
            .lines()
            .filter(|l| !l.ends_with(",pids"))
            .map(|l| format!("{l}\n"))
            .collect();
        let layout = crate::cgroups::detect::detect(&without_pids, model.root()).unwrap();
        let v1 = CgroupV1::new(&layout, model.root()).unwrap();
        model.populate(POD);
        let pod = CgroupName::parse(POD).unwrap();
        assert_eq!(v1.read(&pod).unwrap().pids_max, None);
        let err = v1
            .apply(
                &pod,
                &CgroupResources {
                    pids_max: Some(Limit::Value(5)),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(
            err,
            CgroupError::ControllerMissing {
                controller: "pids",
                ..
            }
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn apply_then_read_round_trips(
            shares in 2u64..=262_144,
            quota in proptest::option::of(1000u64..10_000_000),
            memory in proptest::option::of(4096u64..(1 << 40)),
            pids in proptest::option::of(1u64..100_000),
        ) {
            let (_model, v1, pod) = setup();
            let wanted = CgroupResources {
                cpu_shares: Some(shares),
                cpu_quota: Some(quota.map_or(Limit::Unlimited, Limit::Value)),
                cpu_period: Some(100_000),
                memory_limit: Some(memory.map_or(Limit::Unlimited, Limit::Value)),
                memory_min: None,
                pids_max: Some(pids.map_or(Limit::Unlimited, Limit::Value)),
            };
            v1.apply(&pod, &wanted).unwrap();
            prop_assert_eq!(v1.read(&pod).unwrap(), wanted);
        }
    }
}
