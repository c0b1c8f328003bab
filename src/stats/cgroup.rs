//! Usage from cgroupfs, one reader per interface version (upstream gets the same numbers
//! through cAdvisor; litelet reads the files itself).
//!
//! - v1 ([`V1Reader`]): `cpuacct.usage` (ns), `memory.usage_in_bytes`, `memory.stat`
//!   (`total_inactive_file`, `total_rss`, `total_pgfault`, `total_pgmajfault`: the
//!   hierarchical totals, so a pod counts its containers), `pids.current`;
//! - v2 ([`V2Reader`]): `cpu.stat` (`usage_usec`), `memory.current`, `memory.stat`
//!   (`inactive_file`, `anon`, `pgfault`, `pgmajfault`; v2 is always hierarchical),
//!   `pids.current`.
//!
//! Working set = usage − inactive file (never below 0), as cAdvisor and the eviction
//! manager define it. The parsers are pure; the readers only open files under the
//! mount points they were given. A missing controller or file leaves that number
//! `None` rather than failing the whole cgroup: the root cgroup has no
//! `memory.current` on v2, and `pids` may not be mounted. Called from the `stats`
//! thread only. What cAdvisor reports besides (throttling, limits, block I/O, ...) is
//! [`detail`], read through [`UsageReader::detail`].

use std::path::{Path, PathBuf};

use crate::cgroups::detect::Layout;
use crate::cgroups::fs::join_safely;
use crate::cgroups::CgroupName;

use super::StatsError;

pub mod detail;
pub use detail::{CgroupDetail, CgroupSpec, DeviceIo};

/// What one cgroup has used, as the kernel counts it at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// Cumulative CPU time of all tasks, in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory charged, page cache included.
    pub memory_usage_bytes: Option<u64>,
    /// Usage minus inactive file pages.
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory (v1 `rss`, v2 `anon`).
    pub rss_bytes: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// Tasks in the cgroup and below.
    pub pids: Option<u64>,
}

/// The fields of a `memory.stat` that usage needs, under either version's names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStat {
    pub inactive_file: Option<u64>,
    pub rss: Option<u64>,
    pub pgfault: Option<u64>,
    pub pgmajfault: Option<u64>,
}

/// Parses `key value` lines (memory.stat, cpu.stat), taking the named keys. Unknown
/// keys and malformed lines are skipped: the kernel adds keys between versions.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next() == Some(key))
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

/// v1 `memory.stat`: the hierarchical `total_*` keys.
pub fn parse_memory_stat_v1(text: &str) -> MemoryStat {
    MemoryStat {
        inactive_file: keyed(text, "total_inactive_file"),
        rss: keyed(text, "total_rss"),
        pgfault: keyed(text, "total_pgfault"),
        pgmajfault: keyed(text, "total_pgmajfault"),
    }
}

/// v2 `memory.stat` (already hierarchical).
pub fn parse_memory_stat_v2(text: &str) -> MemoryStat {
    MemoryStat {
        inactive_file: keyed(text, "inactive_file"),
        rss: keyed(text, "anon"),
        pgfault: keyed(text, "pgfault"),
        pgmajfault: keyed(text, "pgmajfault"),
    }
}

/// v2 `cpu.stat` `usage_usec`, in nanoseconds.
pub fn parse_cpu_stat_v2(text: &str) -> Option<u64> {
    keyed(text, "usage_usec").map(|us| us.saturating_mul(1000))
}

/// A file holding one number (`cpuacct.usage`, `memory.current`, `pids.current`).
pub fn parse_single(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Usage minus inactive file, floored at 0 (inactive file can briefly exceed usage).
pub fn working_set(usage: u64, inactive_file: Option<u64>) -> u64 {
    usage.saturating_sub(inactive_file.unwrap_or(0))
}

/// Fills the memory fields from usage and a parsed `memory.stat`.
fn memory_fields(usage: &mut CgroupUsage, memory_usage: Option<u64>, stat: MemoryStat) {
    usage.memory_usage_bytes = memory_usage;
    usage.working_set_bytes = memory_usage.map(|u| working_set(u, stat.inactive_file));
    usage.rss_bytes = stat.rss;
    usage.page_faults = stat.pgfault;
    usage.major_page_faults = stat.pgmajfault;
}

/// Reads the usage of one cgroup, whatever the version.
pub trait UsageReader: Send + Sync + std::fmt::Debug {
    /// The usage of `name`; `Err` only when the cgroup does not exist at all.
    fn read(&self, name: &CgroupName) -> Result<CgroupUsage, StatsError>;

    /// What `/metrics/cadvisor` adds for `name` (empty where nothing is known).
    fn detail(&self, _name: &CgroupName) -> CgroupDetail {
        CgroupDetail::default()
    }
}

/// Clock ticks per second, the unit of v1 `cpuacct.stat`.
fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(100)
}

/// Reads a file below `dir`, `None` when it is missing or unreadable.
fn read_file(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn cgroup_dir(root: &Path, name: &CgroupName) -> Result<PathBuf, StatsError> {
    join_safely(root, name.to_cgroupfs()).map_err(|e| StatsError::Cgroup {
        cgroup: name.to_string(),
        reason: e.to_string(),
    })
}

/// The v1 hierarchies usage comes from.
#[derive(Clone, Debug)]
pub struct V1Reader {
    /// `cpuacct` (often co-mounted with `cpu`).
    pub cpuacct: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    /// For the detail only: CFS throttling and limits, block I/O.
    pub cpu: Option<PathBuf>,
    pub blkio: Option<PathBuf>,
}

impl V1Reader {
    pub fn new(layout: &Layout) -> V1Reader {
        let points = layout.v1_mount_points();
        V1Reader {
            cpuacct: points.get("cpuacct").cloned(),
            memory: points.get("memory").cloned(),
            pids: points.get("pids").cloned(),
            cpu: points.get("cpu").cloned(),
            blkio: points.get("blkio").cloned(),
        }
    }
}

impl UsageReader for V1Reader {
    fn read(&self, name: &CgroupName) -> Result<CgroupUsage, StatsError> {
        let mut usage = CgroupUsage::default();
        let mut found = false;
        if let Some(root) = &self.memory {
            let dir = cgroup_dir(root, name)?;
            found |= dir.is_dir();
            let stat = read_file(&dir, "memory.stat")
                .map(|t| parse_memory_stat_v1(&t))
                .unwrap_or_default();
            let current = read_file(&dir, "memory.usage_in_bytes").and_then(|t| parse_single(&t));
            memory_fields(&mut usage, current, stat);
        }
        if let Some(root) = &self.cpuacct {
            let dir = cgroup_dir(root, name)?;
            found |= dir.is_dir();
            usage.cpu_usage_ns = read_file(&dir, "cpuacct.usage").and_then(|t| parse_single(&t));
        }
        if let Some(root) = &self.pids {
            let dir = cgroup_dir(root, name)?;
            usage.pids = read_file(&dir, "pids.current").and_then(|t| parse_single(&t));
        }
        if found {
            Ok(usage)
        } else {
            Err(StatsError::NoCgroup {
                cgroup: name.to_string(),
            })
        }
    }

    fn detail(&self, name: &CgroupName) -> CgroupDetail {
        let dir = |root: &Option<PathBuf>| {
            root.as_ref()
                .and_then(|r| cgroup_dir(r, name).ok())
                .filter(|d| d.is_dir())
        };
        let (cpu, cpuacct, memory) = (dir(&self.cpu), dir(&self.cpuacct), dir(&self.memory));
        let (pids, blkio) = (dir(&self.pids), dir(&self.blkio));
        let dirs = detail::V1Dirs {
            cpu: cpu.as_deref(),
            cpuacct: cpuacct.as_deref(),
            memory: memory.as_deref(),
            pids: pids.as_deref(),
            blkio: blkio.as_deref(),
        };
        detail::v1(dirs, clock_ticks())
    }
}

/// The unified hierarchy usage comes from.
#[derive(Clone, Debug)]
pub struct V2Reader {
    pub root: PathBuf,
}

impl UsageReader for V2Reader {
    fn read(&self, name: &CgroupName) -> Result<CgroupUsage, StatsError> {
        let dir = cgroup_dir(&self.root, name)?;
        if !dir.is_dir() {
            return Err(StatsError::NoCgroup {
                cgroup: name.to_string(),
            });
        }
        let mut usage = CgroupUsage {
            cpu_usage_ns: read_file(&dir, "cpu.stat").and_then(|t| parse_cpu_stat_v2(&t)),
            pids: read_file(&dir, "pids.current").and_then(|t| parse_single(&t)),
            ..Default::default()
        };
        let stat = read_file(&dir, "memory.stat")
            .map(|t| parse_memory_stat_v2(&t))
            .unwrap_or_default();
        let current = read_file(&dir, "memory.current").and_then(|t| parse_single(&t));
        memory_fields(&mut usage, current, stat);
        Ok(usage)
    }

    fn detail(&self, name: &CgroupName) -> CgroupDetail {
        match cgroup_dir(&self.root, name) {
            Ok(dir) if dir.is_dir() => detail::v2(&dir),
            _ => CgroupDetail::default(),
        }
    }
}

/// The reader for a detected layout: v2 when unified, else v1 (hybrid counts as v1).
pub fn reader_for(layout: &Layout) -> Box<dyn UsageReader> {
    match (&layout.mode, &layout.unified) {
        (crate::cgroups::CgroupMode::Unified, Some(root)) => {
            Box::new(V2Reader { root: root.clone() })
        }
        _ => Box::new(V1Reader::new(layout)),
    }
}

/// The reader for this machine (`/proc/self/mountinfo` under `/sys/fs/cgroup`).
pub fn reader_from_system() -> Result<Box<dyn UsageReader>, StatsError> {
    use crate::cgroups::{detect::detect, DEFAULT_MOUNT_ROOT, MOUNTINFO_PATH};
    let fail = |reason: String| StatsError::Cgroup {
        cgroup: "/".into(),
        reason,
    };
    let mountinfo = std::fs::read_to_string(MOUNTINFO_PATH)
        .map_err(|e| fail(format!("reading {MOUNTINFO_PATH}: {e}")))?;
    let layout =
        detect(&mountinfo, Path::new(DEFAULT_MOUNT_ROOT)).map_err(|e| fail(e.to_string()))?;
    Ok(reader_for(&layout))
}

/// `/proc/meminfo` in bytes: (MemTotal, MemTotal − MemFree, Inactive(file)). The node's
/// memory when the root cgroup has no usage file (v2).
pub fn parse_meminfo(text: &str) -> Option<(u64, u64, Option<u64>)> {
    let kib = |key: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let total = kib("MemTotal")?.saturating_mul(1024);
    let free = kib("MemFree")?.saturating_mul(1024);
    Some((
        total,
        total.saturating_sub(free),
        kib("Inactive(file)").map(|k| k.saturating_mul(1024)),
    ))
}

#[cfg(test)]
mod tests;
