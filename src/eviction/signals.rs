//! Signal observations from one stats sample (upstream `makeSignalObservations`), and
//! each pod's usage as the ranking and the eviction message see it (its `statsFunc`).
//! Pure: the `stats` thread's [`Sample`] in, numbers out.
//!
//! - `memory.available` = memory capacity − the node's working set;
//! - `nodefs.*` = statvfs of `--root-dir`'s filesystem; `imagefs.*` = the runtime's
//!   image filesystem (CRI ImageFsInfo); without a dedicated one, imagefs is nodefs;
//! - `pid.available` = `kernel.pid_max` − processes running.
//!
//! `allocatableMemory.available` and `containerfs.*` are accepted as upstream accepts
//! them but never observed (no allocatable cgroup reader, no split image filesystem):
//! such a threshold is never met, and the manager says so once at start.

use std::collections::BTreeMap;

use crate::stats::fs::FsUsage;
use crate::stats::sample::{PodSample, Sample};

use super::config::Signal;

/// What is available of a resource and its capacity, in bytes, inodes or PIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn fs_bytes(fs: Option<&FsUsage>) -> Option<Observation> {
    let fs = fs?;
    Some(Observation {
        available: int(fs.available_bytes?),
        capacity: int(fs.capacity_bytes?),
    })
}

fn fs_inodes(fs: Option<&FsUsage>) -> Option<Observation> {
    let fs = fs?;
    Some(Observation {
        available: int(fs.inodes_free?),
        capacity: int(fs.inodes?),
    })
}

/// The signals `sample` lets us observe; a number the sampler could not read leaves
/// its signal out (a threshold without an observation is not met).
pub fn observe(sample: &Sample) -> Observations {
    let node = &sample.node;
    let mut out = Observations::new();
    if let (Some(cap), Some(ws)) = (node.memory_capacity_bytes, node.usage.working_set_bytes) {
        out.insert(
            Signal::MemoryAvailable,
            Observation {
                available: int(cap.saturating_sub(ws)),
                capacity: int(cap),
            },
        );
    }
    let imagefs = node.imagefs.as_ref().or(node.nodefs.as_ref());
    let fs = [
        (Signal::NodeFsAvailable, fs_bytes(node.nodefs.as_ref())),
        (Signal::NodeFsInodesFree, fs_inodes(node.nodefs.as_ref())),
        (Signal::ImageFsAvailable, fs_bytes(imagefs)),
        (Signal::ImageFsInodesFree, fs_inodes(imagefs)),
    ];
    for (signal, obs) in fs {
        if let Some(obs) = obs {
            out.insert(signal, obs);
        }
    }
    if let (Some(max), Some(running)) = (node.max_pid, node.processes) {
        out.insert(
            Signal::PidAvailable,
            Observation {
                available: int(max.saturating_sub(running)),
                capacity: int(max),
            },
        );
    }
    out
}

/// One pod's usage of the resources eviction ranks on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub memory_working_set: Option<i64>,
    /// Writable layers + logs + local volumes (nodefs).
    pub disk_bytes: i64,
    pub disk_inodes: i64,
    /// Writable layers only (imagefs).
    pub rootfs_bytes: i64,
    pub rootfs_inodes: i64,
    pub processes: Option<i64>,
}

/// Usage of one container (for the eviction message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub memory_working_set: Option<i64>,
    /// Writable layer + logs.
    pub disk_bytes: i64,
}

fn used(fs: Option<&FsUsage>) -> (i64, i64) {
    fs.map_or((0, 0), |f| {
        (
            int(f.used_bytes.unwrap_or(0)),
            int(f.inodes_used.unwrap_or(0)),
        )
    })
}

/// A pod's usage from its sample.
pub fn pod_usage(pod: &PodSample) -> PodUsage {
    let mut u = PodUsage {
        memory_working_set: pod.usage.and_then(|u| u.working_set_bytes).map(int),
        processes: pod.usage.and_then(|u| u.pids).map(int),
        ..PodUsage::default()
    };
    for c in &pod.containers {
        let (rb, ri) = used(c.rootfs.as_ref());
        let (lb, li) = used(c.logs.as_ref());
        u.rootfs_bytes += rb;
        u.rootfs_inodes += ri;
        u.disk_bytes += rb + lb;
        u.disk_inodes += ri + li;
    }
    for (_, v) in &pod.volumes {
        let (b, i) = used(Some(v));
        u.disk_bytes += b;
        u.disk_inodes += i;
    }
    if u.memory_working_set.is_none() {
        // Without a pod cgroup, the containers' own numbers (ListContainerStats).
        let sum: Option<u64> = pod
            .containers
            .iter()
            .map(|c| c.usage.and_then(|u| u.working_set_bytes))
            .sum();
        u.memory_working_set = sum.map(int);
    }
    u
}

/// Each container's usage from the pod's sample.
pub fn container_usage(pod: &PodSample) -> Vec<ContainerUsage> {
    pod.containers
        .iter()
        .map(|c| ContainerUsage {
            name: c.name.clone(),
            memory_working_set: c.usage.and_then(|u| u.working_set_bytes).map(int),
            disk_bytes: used(c.rootfs.as_ref()).0 + used(c.logs.as_ref()).0,
        })
        .collect()
}
