//! `/stats/summary`: the kubelet stats API (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`),
//! its JSON names kept exactly (`podRef`, `usageNanoCores`, `ephemeral-storage`,
//! `process_stats`, ...), and [`summary`], the pure mapping from a [`Sample`].
//!
//! These types live here rather than in `api/`: they are the node's own API, not an
//! API-server object, and only the node server serialises them. Optional numbers are
//! omitted when unknown, as upstream's pointers are. Network, accelerators and
//! user-defined metrics are not reported.

use std::time::SystemTime;

use serde::Serialize;

use crate::api::meta::Time;

use super::cgroup::CgroupUsage;
use super::fs::FsUsage;
use super::sample::{ContainerSample, PodSample, Sample};

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// Where writable layers live; the image filesystem unless the runtime splits them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RlimitStats {
    pub time: Time,
    #[serde(rename = "maxpid", skip_serializing_if = "Option::is_none")]
    pub max_pid: Option<u64>,
    #[serde(rename = "curproc", skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProcessStats {
    #[serde(rename = "process_count", skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
}

fn time(t: Option<SystemTime>) -> Time {
    t.map(Time::from_system_time).unwrap_or_default()
}

fn cpu(at: Time, usage: &CgroupUsage, rate: Option<u64>) -> Option<CpuStats> {
    usage.cpu_usage_ns.map(|total| CpuStats {
        time: at,
        usage_nano_cores: rate,
        usage_core_nano_seconds: Some(total),
    })
}

/// Memory numbers; `limit` gives `availableBytes` (limit − working set), as upstream.
fn memory(at: Time, usage: &CgroupUsage, limit: Option<u64>) -> Option<MemoryStats> {
    usage.memory_usage_bytes?;
    Some(MemoryStats {
        time: at,
        available_bytes: limit
            .zip(usage.working_set_bytes)
            .map(|(l, w)| l.saturating_sub(w)),
        usage_bytes: usage.memory_usage_bytes,
        working_set_bytes: usage.working_set_bytes,
        rss_bytes: usage.rss_bytes,
        page_faults: usage.page_faults,
        major_page_faults: usage.major_page_faults,
    })
}

fn fs(at: Time, f: &FsUsage) -> FsStats {
    FsStats {
        time: at,
        available_bytes: f.available_bytes,
        capacity_bytes: f.capacity_bytes,
        used_bytes: f.used_bytes,
        inodes_free: f.inodes_free,
        inodes: f.inodes,
        inodes_used: f.inodes_used,
    }
}

fn container(at: Time, c: &ContainerSample) -> ContainerStats {
    let usage = c.usage.unwrap_or_default();
    ContainerStats {
        name: c.name.clone(),
        start_time: time(c.start_time),
        cpu: cpu(at, &usage, c.usage_nano_cores),
        memory: memory(at, &usage, None),
        rootfs: c.rootfs.as_ref().map(|f| fs(at, f)),
        logs: c.logs.as_ref().map(|f| fs(at, f)),
    }
}

/// Writable layers + logs + disk volumes: what the pod has written to the node.
fn ephemeral(at: Time, pod: &PodSample) -> Option<FsStats> {
    let parts: Vec<&FsUsage> = pod
        .containers
        .iter()
        .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
        .flatten()
        .chain(pod.volumes.iter().map(|(_, v)| v))
        .collect();
    let first = parts.first()?;
    let sum = |f: fn(&FsUsage) -> Option<u64>| parts.iter().filter_map(|p| f(p)).sum::<u64>();
    Some(FsStats {
        used_bytes: Some(sum(|p| p.used_bytes)),
        inodes_used: Some(sum(|p| p.inodes_used)),
        ..fs(at, first)
    })
}

fn pod(at: Time, p: &PodSample) -> PodStats {
    let usage = p.usage.unwrap_or_default();
    PodStats {
        pod_ref: PodReference {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            uid: p.uid.clone(),
        },
        start_time: time(p.start_time),
        containers: p.containers.iter().map(|c| container(at, c)).collect(),
        cpu: cpu(at, &usage, p.usage_nano_cores),
        memory: memory(at, &usage, None),
        volume_stats: p
            .volumes
            .iter()
            .map(|(name, v)| VolumeStats {
                fs: fs(at, v),
                name: name.clone(),
            })
            .collect(),
        ephemeral_storage: ephemeral(at, p),
        process_stats: p.usage.and_then(|u| u.pids).map(|n| ProcessStats {
            process_count: Some(n),
        }),
    }
}

/// The summary of `sample` for node `node_name`, which started collecting at
/// `started`.
pub fn summary(node_name: &str, started: SystemTime, sample: &Sample) -> Summary {
    let at = Time::from_system_time(sample.time);
    let n = &sample.node;
    let imagefs = n.imagefs.as_ref().map(|f| fs(at, f));
    Summary {
        node: NodeStats {
            node_name: node_name.to_owned(),
            system_containers: Vec::new(),
            start_time: Time::from_system_time(started),
            cpu: cpu(at, &n.usage, n.usage_nano_cores),
            memory: memory(at, &n.usage, n.memory_capacity_bytes),
            fs: n.nodefs.as_ref().map(|f| fs(at, f)),
            runtime: imagefs.map(|i| RuntimeStats {
                image_fs: Some(i.clone()),
                container_fs: Some(i),
            }),
            rlimit: (n.max_pid.is_some() || n.processes.is_some()).then_some(RlimitStats {
                time: at,
                max_pid: n.max_pid,
                processes: n.processes,
            }),
        },
        pods: sample.pods.iter().map(|p| pod(at, p)).collect(),
    }
}

#[cfg(test)]
mod tests;
