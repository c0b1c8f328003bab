//! What `/metrics/cadvisor` reports of a cgroup beyond the usage the summary API and
//! the eviction manager need: CPU user/system time and CFS throttling, page cache,
//! mapped files, swap, the memory limit hits and OOM kills, tasks and their limit,
//! the processes and one of their PIDs (its network namespace gives a pod's network
//! usage), the limits themselves (`container_spec_*`) and block I/O per device.
//!
//! One reader per cgroup version ([`v1`], [`v2`]) over the same mount points as the
//! usage readers, pure parsers for each file format; a missing file leaves its number
//! `None` (the root cgroup has no limits, `memory.peak` is new in Linux 5.19). Read by
//! the `stats` thread only while someone scrapes `/metrics/cadvisor`
//! (`StatsStore::want_detail`), so a node nobody monitors pays nothing for it.

use std::path::Path;

use super::{keyed, parse_single, read_file};

/// A cgroup's limits, as cAdvisor's `ContainerSpec` has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupSpec {
    pub cpu_shares: Option<u64>,
    /// Microseconds per period; `None` when unlimited.
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: Option<u64>,
    /// `None` when unlimited.
    pub memory_limit: Option<u64>,
    pub memory_swap_limit: Option<u64>,
    pub memory_reservation: Option<u64>,
}

/// Block I/O of a cgroup on one device (cumulative).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub major: u32,
    pub minor: u32,
    /// `/dev/<name>` when the device is known, else empty (filled by the collector).
    pub device: String,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

/// The detail of one cgroup at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupDetail {
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub cfs_periods: Option<u64>,
    pub cfs_throttled_periods: Option<u64>,
    pub cfs_throttled_ns: Option<u64>,
    pub memory_cache: Option<u64>,
    pub memory_mapped_file: Option<u64>,
    pub memory_swap: Option<u64>,
    /// Times usage hit the limit (v1 `memory.failcnt`, v2 `memory.events` max).
    pub memory_failcnt: Option<u64>,
    pub memory_max_usage: Option<u64>,
    /// Page faults of the cgroup's own tasks (the usage has the hierarchy's).
    pub local_pgfault: Option<u64>,
    pub local_pgmajfault: Option<u64>,
    pub oom_kills: Option<u64>,
    /// `pids.max`; `None` when unlimited.
    pub tasks_max: Option<u64>,
    pub processes: Option<u64>,
    /// One process of the cgroup (the first in `cgroup.procs`).
    pub first_pid: Option<u32>,
    pub spec: CgroupSpec,
    pub io: Vec<DeviceIo>,
}

/// The largest value the kernel writes for "no limit" on v1 (`PAGE_COUNTER_MAX`
/// rounded to pages), or anything near it.
const V1_UNLIMITED: u64 = 1 << 62;

/// A v1 byte limit: `None` when unlimited (pure).
pub fn v1_limit(text: &str) -> Option<u64> {
    parse_single(text).filter(|v| *v < V1_UNLIMITED)
}

/// A v2 limit file: `max` is unlimited (pure).
pub fn v2_limit(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        other => other.parse().ok(),
    }
}

/// v2 `cpu.weight` as the shares cAdvisor reports for it (its linear map, rounded
/// down; pure).
pub fn weight_as_shares(weight: u64) -> u64 {
    2 + (weight.clamp(1, 10_000) - 1) * 262_142 / 9_999
}

/// v2 `cpu.max`: `(quota, period)`, the quota `None` when `max` (pure).
pub fn parse_cpu_max(text: &str) -> (Option<u64>, Option<u64>) {
    let mut parts = text.split_whitespace();
    let quota = parts.next().and_then(|q| q.parse().ok());
    let period = parts.next().and_then(|p| p.parse().ok());
    (quota, period)
}

/// `cgroup.procs`: how many processes, and the first (pure).
pub fn parse_procs(text: &str) -> (u64, Option<u32>) {
    let mut pids = text.lines().filter_map(|l| l.trim().parse::<u32>().ok());
    let first = pids.next();
    (u64::from(first.is_some()) + pids.count() as u64, first)
}

/// v1 `blkio.*_recursive` files (`MAJ:MIN Read N` lines, plus a `Total N`), into
/// `io` by device: bytes when `bytes`, operations otherwise (pure).
pub fn parse_blkio_v1(text: &str, bytes: bool, io: &mut Vec<DeviceIo>) {
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(dev), Some(op), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Some((major, minor)), Ok(value)) = (major_minor(dev), value.parse::<u64>()) else {
            continue;
        };
        let entry = device_entry(io, major, minor);
        match (op, bytes) {
            ("Read", true) => entry.read_bytes = value,
            ("Write", true) => entry.write_bytes = value,
            ("Read", false) => entry.reads = value,
            ("Write", false) => entry.writes = value,
            _ => {}
        }
    }
}

/// v2 `io.stat` (`MAJ:MIN rbytes=N wbytes=N rios=N wios=N ...`) (pure).
pub fn parse_io_stat(text: &str) -> Vec<DeviceIo> {
    let mut io = Vec::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let Some((major, minor)) = parts.next().and_then(major_minor) else {
            continue;
        };
        let entry = device_entry(&mut io, major, minor);
        for field in parts {
            let Some((key, value)) = field.split_once('=') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            match key {
                "rbytes" => entry.read_bytes = value,
                "wbytes" => entry.write_bytes = value,
                "rios" => entry.reads = value,
                "wios" => entry.writes = value,
                _ => {}
            }
        }
    }
    io
}

fn major_minor(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn device_entry(io: &mut Vec<DeviceIo>, major: u32, minor: u32) -> &mut DeviceIo {
    let at = match io.iter().position(|d| d.major == major && d.minor == minor) {
        Some(at) => at,
        None => {
            io.push(DeviceIo {
                major,
                minor,
                ..Default::default()
            });
            io.len() - 1
        }
    };
    &mut io[at]
}

/// The files of one cgroup directory in each v1 hierarchy that has it.
#[derive(Clone, Copy, Debug, Default)]
pub struct V1Dirs<'a> {
    pub cpu: Option<&'a Path>,
    pub cpuacct: Option<&'a Path>,
    pub memory: Option<&'a Path>,
    pub pids: Option<&'a Path>,
    pub blkio: Option<&'a Path>,
}

/// The detail of a v1 cgroup from its directories.
pub fn v1(dirs: V1Dirs<'_>, clock_ticks: u64) -> CgroupDetail {
    let mut d = CgroupDetail::default();
    let file = |dir: Option<&Path>, name: &str| dir.and_then(|dir| read_file(dir, name));
    let single = |dir: Option<&Path>, name: &str| file(dir, name).and_then(|t| parse_single(&t));
    // cpuacct.usage_user/usage_sys are nanoseconds; older kernels only have
    // cpuacct.stat, in clock ticks.
    d.cpu_user_ns = single(dirs.cpuacct, "cpuacct.usage_user");
    d.cpu_system_ns = single(dirs.cpuacct, "cpuacct.usage_sys");
    if d.cpu_user_ns.is_none() {
        if let Some(stat) = file(dirs.cpuacct, "cpuacct.stat") {
            let ns = |ticks: u64| ticks.saturating_mul(1_000_000_000) / clock_ticks.max(1);
            d.cpu_user_ns = keyed(&stat, "user").map(ns);
            d.cpu_system_ns = keyed(&stat, "system").map(ns);
        }
    }
    if let Some(stat) = file(dirs.cpu, "cpu.stat") {
        d.cfs_periods = keyed(&stat, "nr_periods");
        d.cfs_throttled_periods = keyed(&stat, "nr_throttled");
        d.cfs_throttled_ns = keyed(&stat, "throttled_time");
    }
    d.spec.cpu_shares = single(dirs.cpu, "cpu.shares");
    d.spec.cpu_period_us = single(dirs.cpu, "cpu.cfs_period_us");
    d.spec.cpu_quota_us = file(dirs.cpu, "cpu.cfs_quota_us")
        .and_then(|t| t.trim().parse::<i64>().ok())
        .and_then(|q| u64::try_from(q).ok());
    if let Some(stat) = file(dirs.memory, "memory.stat") {
        d.memory_cache = keyed(&stat, "total_cache");
        d.memory_mapped_file = keyed(&stat, "total_mapped_file");
        d.memory_swap = keyed(&stat, "total_swap");
        d.local_pgfault = keyed(&stat, "pgfault");
        d.local_pgmajfault = keyed(&stat, "pgmajfault");
    }
    d.memory_failcnt = single(dirs.memory, "memory.failcnt");
    d.memory_max_usage = single(dirs.memory, "memory.max_usage_in_bytes");
    d.oom_kills = file(dirs.memory, "memory.oom_control").and_then(|t| keyed(&t, "oom_kill"));
    let limit = |name: &str| file(dirs.memory, name).and_then(|t| v1_limit(&t));
    d.spec.memory_limit = limit("memory.limit_in_bytes");
    d.spec.memory_swap_limit = limit("memory.memsw.limit_in_bytes");
    d.spec.memory_reservation = limit("memory.soft_limit_in_bytes");
    d.tasks_max = file(dirs.pids, "pids.max").and_then(|t| v2_limit(&t));
    if let Some(procs) = file(dirs.memory.or(dirs.cpuacct), "cgroup.procs") {
        let (count, first) = parse_procs(&procs);
        (d.processes, d.first_pid) = (Some(count), first);
    }
    let blkio = |throttle: &str, plain: &str| {
        file(dirs.blkio, throttle)
            .filter(|t| t.lines().count() > 1)
            .or_else(|| file(dirs.blkio, plain))
    };
    if let Some(t) = blkio(
        "blkio.throttle.io_service_bytes_recursive",
        "blkio.io_service_bytes_recursive",
    ) {
        parse_blkio_v1(&t, true, &mut d.io);
    }
    if let Some(t) = blkio(
        "blkio.throttle.io_serviced_recursive",
        "blkio.io_serviced_recursive",
    ) {
        parse_blkio_v1(&t, false, &mut d.io);
    }
    d
}

/// The detail of a v2 cgroup from its directory.
pub fn v2(dir: &Path) -> CgroupDetail {
    let mut d = CgroupDetail::default();
    let file = |name: &str| read_file(dir, name);
    if let Some(stat) = file("cpu.stat") {
        let ns = |us: u64| us.saturating_mul(1000);
        d.cpu_user_ns = keyed(&stat, "user_usec").map(ns);
        d.cpu_system_ns = keyed(&stat, "system_usec").map(ns);
        d.cfs_periods = keyed(&stat, "nr_periods");
        d.cfs_throttled_periods = keyed(&stat, "nr_throttled");
        d.cfs_throttled_ns = keyed(&stat, "throttled_usec").map(ns);
    }
    d.spec.cpu_shares = file("cpu.weight")
        .and_then(|t| parse_single(&t))
        .map(weight_as_shares);
    if let Some(max) = file("cpu.max") {
        (d.spec.cpu_quota_us, d.spec.cpu_period_us) = parse_cpu_max(&max);
    }
    if let Some(stat) = file("memory.stat") {
        d.memory_cache = keyed(&stat, "file");
        d.memory_mapped_file = keyed(&stat, "file_mapped");
        d.local_pgfault = keyed(&stat, "pgfault");
        d.local_pgmajfault = keyed(&stat, "pgmajfault");
    }
    d.memory_swap = file("memory.swap.current").and_then(|t| parse_single(&t));
    if let Some(events) = file("memory.events") {
        d.memory_failcnt = keyed(&events, "max");
        d.oom_kills = keyed(&events, "oom_kill");
    }
    d.memory_max_usage = file("memory.peak").and_then(|t| parse_single(&t));
    d.spec.memory_limit = file("memory.max").and_then(|t| v2_limit(&t));
    d.spec.memory_swap_limit = file("memory.swap.max").and_then(|t| v2_limit(&t));
    d.spec.memory_reservation = file("memory.low")
        .and_then(|t| v2_limit(&t))
        .filter(|low| *low > 0);
    d.tasks_max = file("pids.max").and_then(|t| v2_limit(&t));
    if let Some(procs) = file("cgroup.procs") {
        let (count, first) = parse_procs(&procs);
        (d.processes, d.first_pid) = (Some(count), first);
    }
    if let Some(stat) = file("io.stat") {
        d.io = parse_io_stat(&stat);
    }
    d
}

#[cfg(test)]
mod tests;
