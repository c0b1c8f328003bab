//! cgroup v2 backend: the single unified hierarchy.
//!
//! Files: `cpu.weight` (from v1 shares, see [`super::convert::shares_to_weight`]),
//! `cpu.max` (`"<quota> <period>"` or `"max <period>"`), `memory.max`, `memory.min`
//! (memory QoS, optional), `pids.max`, `memory.current`.
//!
//! Creating a cgroup first makes sure every ancestor, from the mount root down, lists
//! `cpu`, `memory` and `pids` in `cgroup.subtree_control` (the ones its
//! `cgroup.controllers` offers); without that a child has no such interface files. The
//! file is read first and only missing controllers are written, so repeated creates
//! write nothing. Controllers are enabled top-down, as the kernel requires.
//!
//! **Write order in [`CgroupV2::apply`]**: cpu, memory, pids; a failed write stops the
//! rest and names the file and value. `cpu.max` takes quota and period in one write, and
//! v2 never refuses a child's bound for being above its parent's (the smaller one
//! binds), so no intermediate state can be rejected. A `memory.max` below the current
//! usage is accepted but makes the kernel reclaim and then OOM-kill inside the cgroup:
//! callers compare with [`CgroupV2::memory_usage`] first, as the upstream resize does.

use std::path::{Path, PathBuf};

use super::convert::{shares_to_weight, weight_to_shares};
use super::fs::{self, join_safely, FsError};
use super::name::CgroupName;
use super::resources::{CgroupResources, Limit};
use super::v1::read_max;
use super::{CgroupError, CgroupVersion, Cgroupfs};

pub const CGROUP_CONTROLLERS: &str = "cgroup.controllers";
pub const CGROUP_SUBTREE_CONTROL: &str = "cgroup.subtree_control";
pub const CPU_WEIGHT: &str = "cpu.weight";
pub const CPU_MAX: &str = "cpu.max";
pub const MEMORY_MAX: &str = "memory.max";
pub const MEMORY_MIN: &str = "memory.min";
pub const MEMORY_CURRENT: &str = "memory.current";
pub const PIDS_MAX: &str = "pids.max";

/// The controllers litelet enables for pod cgroups.
const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// The unified hierarchy of one machine.
#[derive(Clone, Debug)]
pub struct CgroupV2 {
    root: PathBuf,
}

impl CgroupV2 {
    /// `root` is the cgroup2 mount point (normally the mount root itself).
    pub fn new(root: &Path) -> CgroupV2 {
        CgroupV2 {
            root: root.to_path_buf(),
        }
    }

    fn dir(&self, name: &CgroupName) -> Result<PathBuf, CgroupError> {
        Ok(join_safely(&self.root, name.to_cgroupfs())?)
    }

    /// Enables litelet's controllers for the children of `dir`, where offered and not
    /// yet enabled.
    fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
        let offered = fs::read_string(&dir.join(CGROUP_CONTROLLERS))?;
        let offered: Vec<&str> = offered.split_whitespace().collect();
        let enabled = fs::read_string(&dir.join(CGROUP_SUBTREE_CONTROL))?;
        let enabled: Vec<&str> = enabled
            .split_whitespace()
            .map(|c| c.trim_start_matches('+'))
            .collect();
        let missing: Vec<String> = CONTROLLERS
            .iter()
            .filter(|c| offered.contains(c) && !enabled.contains(c))
            .map(|c| format!("+{c}"))
            .collect();
        for c in CONTROLLERS.iter().filter(|c| !offered.contains(c)) {
            log::debug!(
                "cgroup v2 controller {c} is not offered in {}",
                dir.display()
            );
        }
        if !missing.is_empty() {
            fs::write(&dir.join(CGROUP_SUBTREE_CONTROL), &missing.join(" "))?;
        }
        Ok(())
    }

    /// `cpu.max` as (quota, period).
    fn read_cpu_max(path: &Path) -> Result<(Limit, u64), CgroupError> {
        let text = fs::read_string(path)?;
        let parse_error = || FsError::Parse {
            path: path.to_path_buf(),
            value: text.clone(),
        };
        let mut fields = text.split_whitespace();
        let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(parse_error().into());
        };
        let quota = match quota {
            "max" => Limit::Unlimited,
            q => Limit::Value(q.parse().map_err(|_| parse_error())?),
        };
        let period = period.parse().map_err(|_| parse_error())?;
        Ok((quota, period))
    }
}

impl Cgroupfs for CgroupV2 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V2
    }

    fn has_pids(&self, name: &CgroupName) -> bool {
        self.dir(name).is_ok_and(|d| d.join(PIDS_MAX).is_file())
    }

    fn create(&self, name: &CgroupName) -> Result<(), CgroupError> {
        let mut dir = self.root.clone();
        for part in name.parts() {
            Self::enable_controllers(&dir)?;
            dir = join_safely(&dir, part)?;
            fs::create_dir(&dir)?;
        }
        Ok(())
    }

    fn exists(&self, name: &CgroupName) -> bool {
        self.dir(name).is_ok_and(|d| d.is_dir())
    }

    fn apply(&self, name: &CgroupName, r: &CgroupResources) -> Result<(), CgroupError> {
        let dir = self.dir(name)?;
        if let Some(shares) = r.cpu_shares {
            fs::write(&dir.join(CPU_WEIGHT), &shares_to_weight(shares).to_string())?;
        }
        if r.cpu_quota.is_some() || r.cpu_period.is_some() {
            let path = dir.join(CPU_MAX);
            let (quota, period) = match (r.cpu_quota, r.cpu_period) {
                (Some(q), Some(p)) => (q, p),
                (q, p) => {
                    let (current_q, current_p) = Self::read_cpu_max(&path)?;
                    (q.unwrap_or(current_q), p.unwrap_or(current_p))
                }
            };
            fs::write(&path, &format!("{quota} {period}"))?;
        }
        if let Some(limit) = r.memory_limit {
            fs::write(&dir.join(MEMORY_MAX), &limit.to_string())?;
        }
        if let Some(min) = r.memory_min {
            fs::write(&dir.join(MEMORY_MIN), &min.to_string())?;
        }
        if let Some(limit) = r.pids_max {
            fs::write(&dir.join(PIDS_MAX), &limit.to_string())?;
        }
        Ok(())
    }

    fn read(&self, name: &CgroupName) -> Result<CgroupResources, CgroupError> {
        let dir = self.dir(name)?;
        let (quota, period) = Self::read_cpu_max(&dir.join(CPU_MAX))?;
        Ok(CgroupResources {
            cpu_shares: Some(weight_to_shares(fs::read_u64(&dir.join(CPU_WEIGHT))?)),
            cpu_quota: Some(quota),
            cpu_period: Some(period),
            memory_limit: Some(read_max(&dir.join(MEMORY_MAX))?),
            memory_min: Some(fs::read_u64(&dir.join(MEMORY_MIN))?),
            pids_max: Some(read_max(&dir.join(PIDS_MAX))?),
        })
    }

    fn memory_usage(&self, name: &CgroupName) -> Result<u64, CgroupError> {
        Ok(fs::read_u64(&self.dir(name)?.join(MEMORY_CURRENT))?)
    }

    fn processes(&self, name: &CgroupName) -> Result<Vec<i32>, CgroupError> {
        Ok(fs::processes(&self.dir(name)?)?)
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>, CgroupError> {
        Ok(fs::child_dirs(&self.dir(name)?)?)
    }

    fn remove(&self, name: &CgroupName) -> Result<(), CgroupError> {
        Ok(fs::remove_tree(&self.dir(name)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::testfs::Model;
    use proptest::prelude::*;

    const POD: &str = "/kubepods/burstable/pod1";

    fn setup() -> (Model, CgroupV2, CgroupName) {
        let model = Model::v2("cpu memory pids io");
        let v2 = CgroupV2::new(model.root());
        model.populate(POD);
        (model, v2, CgroupName::parse(POD).unwrap())
    }

    #[test]
    fn apply_writes_each_file_and_reads_back() {
        let (model, v2, pod) = setup();
        let wanted = CgroupResources {
            cpu_shares: Some(262_144),
            cpu_quota: Some(Limit::Value(50_000)),
            cpu_period: Some(100_000),
            memory_limit: Some(Limit::Value(256 << 20)),
            memory_min: Some(128 << 20),
            pids_max: Some(Limit::Value(1024)),
        };
        v2.apply(&pod, &wanted).unwrap();
        assert_eq!(model.read("", POD, CPU_WEIGHT), "10000");
        assert_eq!(model.read("", POD, CPU_MAX), "50000 100000");
        assert_eq!(model.read("", POD, MEMORY_MAX), "268435456");
        assert_eq!(model.read("", POD, MEMORY_MIN), "134217728");
        assert_eq!(model.read("", POD, PIDS_MAX), "1024");
        assert_eq!(v2.read(&pod).unwrap(), wanted);
    }

    #[test]
    fn unlimited_is_max_and_shares_map_to_weight() {
        let (model, v2, pod) = setup();
        v2.apply(
            &pod,
            &CgroupResources {
                cpu_shares: Some(1024),
                cpu_quota: Some(Limit::Unlimited),
                cpu_period: Some(100_000),
                memory_limit: Some(Limit::Unlimited),
                pids_max: Some(Limit::Unlimited),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.read("", POD, CPU_WEIGHT), "39");
        assert_eq!(model.read("", POD, CPU_MAX), "max 100000");
        assert_eq!(model.read("", POD, MEMORY_MAX), "max");
        assert_eq!(model.read("", POD, PIDS_MAX), "max");
        // Weight → shares is lossy: 39 reads back as 999 (the smallest shares of weight
        // 39), not 1024.
        assert_eq!(v2.read(&pod).unwrap().cpu_shares, Some(999));
    }

    #[test]
    fn a_missing_half_of_cpu_max_is_kept() {
        let (model, v2, pod) = setup();
        model.set("", POD, CPU_MAX, "20000 50000\n");
        v2.apply(
            &pod,
            &CgroupResources {
                cpu_quota: Some(Limit::Value(10_000)),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.read("", POD, CPU_MAX), "10000 50000");
        v2.apply(
            &pod,
            &CgroupResources {
                cpu_period: Some(100_000),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.read("", POD, CPU_MAX), "10000 100000");
        model.set("", POD, CPU_MAX, "garbage");
        let err = v2
            .apply(
                &pod,
                &CgroupResources {
                    cpu_period: Some(1),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(
            matches!(err, CgroupError::Fs(FsError::Parse { .. })),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_fails_apply_with_path_and_value() {
        let (model, v2, pod) = setup();
        model.delete("", POD, PIDS_MAX);
        let err = v2
            .apply(
                &pod,
                &CgroupResources {
                    pids_max: Some(Limit::Value(7)),
                    ..Default::default()
                },
            )
            .unwrap_err();
        match err {
            CgroupError::Fs(FsError::MissingFile { path, value }) => {
                assert!(path.ends_with("kubepods/burstable/pod1/pids.max"));
                assert_eq!(value, "7");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn create_enables_controllers_top_down_once() {
        let model = Model::v2("cpuset cpu io memory pids");
        let v2 = CgroupV2::new(model.root());
        // The model's kernel: populate each level as it would appear.
        let kubepods = CgroupName::parse("/kubepods").unwrap();
        v2.create(&kubepods).unwrap();
        assert_eq!(
            model.read("", "/", CGROUP_SUBTREE_CONTROL),
            "+cpu +memory +pids"
        );
        model.populate("/kubepods");
        model.set("", "/kubepods", CGROUP_CONTROLLERS, "cpu memory pids");

        let pod = CgroupName::parse("/kubepods/pod1").unwrap();
        v2.create(&pod).unwrap();
        assert!(v2.exists(&pod));
        assert_eq!(
            model.read("", "/kubepods", CGROUP_SUBTREE_CONTROL),
            "+cpu +memory +pids"
        );

        // Already enabled (the kernel lists them without '+'): nothing is written.
        model.set("", "/", CGROUP_SUBTREE_CONTROL, "cpu memory pids\n");
        model.set("", "/kubepods", CGROUP_SUBTREE_CONTROL, "cpu memory pids\n");
        v2.create(&CgroupName::parse("/kubepods/pod2").unwrap())
            .unwrap();
        assert_eq!(
            model.read("", "/", CGROUP_SUBTREE_CONTROL),
            "cpu memory pids\n"
        );
        assert_eq!(
            model.read("", "/kubepods", CGROUP_SUBTREE_CONTROL),
            "cpu memory pids\n"
        );
    }

    #[test]
    fn create_enables_only_offered_controllers() {
        let model = Model::v2("memory io");
        let v2 = CgroupV2::new(model.root());
        v2.create(&CgroupName::parse("/kubepods").unwrap()).unwrap();
        assert_eq!(model.read("", "/", CGROUP_SUBTREE_CONTROL), "+memory");
    }

    #[test]
    fn usage_processes_children_remove() {
        let (model, v2, pod) = setup();
        model.set("", POD, MEMORY_CURRENT, "8192\n");
        assert_eq!(v2.memory_usage(&pod).unwrap(), 8192);
        model.set("", POD, "cgroup.procs", "42\n");
        assert_eq!(v2.processes(&pod).unwrap(), vec![42]);
        let burstable = CgroupName::parse("/kubepods/burstable").unwrap();
        assert_eq!(v2.children(&burstable).unwrap(), vec!["pod1"]);
        std::fs::create_dir_all(model.path("", POD).join("container-a")).unwrap();
        model.strip_files();
        v2.remove(&pod).unwrap();
        assert!(!v2.exists(&pod));
        v2.remove(&pod).unwrap();
        assert!(v2.exists(&burstable));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn apply_then_read_round_trips(
            shares in 2u64..=262_144,
            quota in proptest::option::of(1000u64..10_000_000),
            period in 1000u64..=1_000_000,
            memory in proptest::option::of(4096u64..(1 << 40)),
        ) {
            let (_model, v2, pod) = setup();
            let wanted = CgroupResources {
                cpu_shares: Some(shares),
                cpu_quota: Some(quota.map_or(Limit::Unlimited, Limit::Value)),
                cpu_period: Some(period),
                memory_limit: Some(memory.map_or(Limit::Unlimited, Limit::Value)),
                memory_min: Some(0),
                pids_max: Some(Limit::Unlimited),
            };
            v2.apply(&pod, &wanted).unwrap();
            // Shares come back through the coarser weight.
            let back = CgroupResources {
                cpu_shares: Some(weight_to_shares(shares_to_weight(shares))),
                ..wanted
            };
            prop_assert_eq!(v2.read(&pod).unwrap(), back);
        }
    }
}
