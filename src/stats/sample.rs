//! One sample of the node's usage: the value the `stats` thread publishes, the server
//! turns into `/stats/summary`, `/metrics/resource`, `/metrics/cadvisor` and the
//! volume series of `/metrics`, and the eviction manager reads (its signals —
//! memory.available, nodefs/imagefs available and inodes, pids — are all here). The
//! `detail` parts are filled only while `/metrics/cadvisor` is scraped. Plain data;
//! [`Sample::with_rates`] is the only logic, and is pure.

use std::time::SystemTime;

use super::cgroup::{CgroupDetail, CgroupUsage};
use super::fs::FsUsage;
use super::net::{MachineInfo, NetDev};

/// A container of a pod, as the runtime lists it, with its usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSample {
    pub name: String,
    pub id: String,
    /// When the runtime created it (upstream's CRI stats provider uses the same).
    pub start_time: Option<SystemTime>,
    pub usage: Option<CgroupUsage>,
    /// CPU rate over the last two samples, in nano-cores.
    pub usage_nano_cores: Option<u64>,
    /// Writable layer, from CRI ListContainerStats.
    pub rootfs: Option<FsUsage>,
    /// The container's log directory.
    pub logs: Option<FsUsage>,
    /// The image, by name where the runtime knows one.
    pub image: String,
    /// Its cgroup (`/kubepods/.../pod<uid>/<id>`), empty without one.
    pub cgroup: String,
    pub detail: Option<CgroupDetail>,
}

/// A pod's sandbox (its pause container): what cAdvisor reports the pod's network on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SandboxSample {
    pub id: String,
    pub cgroup: String,
    pub usage: Option<CgroupUsage>,
    pub detail: Option<CgroupDetail>,
    /// The interfaces of the pod's network namespace.
    pub network: Vec<NetDev>,
}

/// A persistent volume claim mounted for a pod, and its filesystem's usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimSample {
    pub namespace: String,
    pub claim: String,
    pub usage: FsUsage,
}

/// A filesystem the node reports as its own (nodefs, imagefs), by device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceFs {
    /// `/dev/<name>`, or the mount source when it is no block device.
    pub device: String,
    pub usage: FsUsage,
}

/// A pod (a ready sandbox) and its containers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSample {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub start_time: Option<SystemTime>,
    /// The pod cgroup's usage (containers and the sandbox together).
    pub usage: Option<CgroupUsage>,
    pub usage_nano_cores: Option<u64>,
    pub containers: Vec<ContainerSample>,
    /// Volumes litelet can measure cheaply (emptyDir on disk), by name.
    pub volumes: Vec<(String, FsUsage)>,
    /// The pod cgroup, empty without one.
    pub cgroup: String,
    pub detail: Option<CgroupDetail>,
    pub sandbox: Option<SandboxSample>,
}

/// The node as a whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSample {
    pub usage: CgroupUsage,
    pub usage_nano_cores: Option<u64>,
    /// Physical memory; available = capacity − working set.
    pub memory_capacity_bytes: Option<u64>,
    /// The filesystem of `--root-dir`.
    pub nodefs: Option<FsUsage>,
    /// The runtime's image filesystem (used = bytes of images, as CRI reports).
    pub imagefs: Option<FsUsage>,
    /// `kernel.pid_max` and the processes running now.
    pub max_pid: Option<u64>,
    pub processes: Option<u64>,
    pub detail: Option<CgroupDetail>,
    /// The host's interfaces.
    pub network: Vec<NetDev>,
    /// nodefs and imagefs by device (once each).
    pub filesystems: Vec<DeviceFs>,
    /// The device of imagefs (where containers' writable layers are).
    pub imagefs_device: String,
    pub machine: Option<MachineInfo>,
}

/// Everything one round of sampling saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub time: SystemTime,
    pub node: NodeSample,
    pub pods: Vec<PodSample>,
    /// Claims mounted for running pods (each once), for `kubelet_volume_stats_*`.
    pub claims: Vec<ClaimSample>,
    /// What failed this round (a pod's cgroup, a CRI call); a partial sample is still
    /// published, and any error sets `resource_scrape_error`.
    pub errors: Vec<String>,
    /// The round read the node only, because no one wanted pods' usage: `pods` is
    /// empty without the node being empty (see `StatsStore::want_pods`).
    pub pods_skipped: bool,
}

/// CPU rate between two cumulative readings, in nano-cores (ns of CPU per s).
pub fn rate(
    prev: Option<u64>,
    prev_at: SystemTime,
    cur: Option<u64>,
    at: SystemTime,
) -> Option<u64> {
    let elapsed = at.duration_since(prev_at).ok()?.as_nanos();
    let (prev, cur) = (prev?, cur?);
    if elapsed == 0 || cur < prev {
        // A restarted cgroup starts from 0: no rate until the next sample.
        return None;
    }
    u64::try_from(u128::from(cur - prev) * 1_000_000_000 / elapsed).ok()
}

impl Sample {
    /// Estimated heap bytes this sample holds (its vectors and strings), for the
    /// `litelet_stats_sample_bytes` gauge; the inline struct itself is not counted.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let detail = |d: &Option<CgroupDetail>| {
            d.as_ref().map_or(0, |d| {
                d.io.capacity() * size_of::<super::cgroup::DeviceIo>()
            })
        };
        let container = |c: &ContainerSample| {
            c.name.capacity()
                + c.id.capacity()
                + c.image.capacity()
                + c.cgroup.capacity()
                + detail(&c.detail)
        };
        let sandbox = |s: &SandboxSample| {
            size_of::<SandboxSample>()
                + s.id.capacity()
                + s.cgroup.capacity()
                + detail(&s.detail)
                + s.network.capacity() * size_of::<NetDev>()
        };
        let pod = |p: &PodSample| {
            p.name.capacity()
                + p.namespace.capacity()
                + p.uid.capacity()
                + p.containers.capacity() * size_of::<ContainerSample>()
                + p.containers.iter().map(container).sum::<usize>()
                + p.volumes.capacity() * size_of::<(String, FsUsage)>()
                + p.volumes.iter().map(|(n, _)| n.capacity()).sum::<usize>()
                + p.cgroup.capacity()
                + detail(&p.detail)
                + p.sandbox.as_ref().map_or(0, sandbox)
        };
        self.pods.capacity() * size_of::<PodSample>()
            + self.pods.iter().map(pod).sum::<usize>()
            + self.claims.capacity() * size_of::<ClaimSample>()
            + self.node.network.capacity() * size_of::<NetDev>()
            + self
                .errors
                .iter()
                .map(|e| e.capacity() + size_of::<String>())
                .sum::<usize>()
    }

    /// Fills the CPU rates from the previous sample: the node's, each pod's by UID and
    /// each container's by ID. Things new since `prev` get none.
    pub fn with_rates(mut self, prev: &Sample) -> Sample {
        let (t0, t1) = (prev.time, self.time);
        let cpu = |u: &Option<CgroupUsage>| u.and_then(|u| u.cpu_usage_ns);
        self.node.usage_nano_cores = rate(
            prev.node.usage.cpu_usage_ns,
            t0,
            self.node.usage.cpu_usage_ns,
            t1,
        );
        for pod in &mut self.pods {
            let Some(old) = prev.pods.iter().find(|p| p.uid == pod.uid) else {
                continue;
            };
            pod.usage_nano_cores = rate(cpu(&old.usage), t0, cpu(&pod.usage), t1);
            for c in &mut pod.containers {
                if let Some(oc) = old.containers.iter().find(|oc| oc.id == c.id) {
                    c.usage_nano_cores = rate(cpu(&oc.usage), t0, cpu(&c.usage), t1);
                }
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn rate_table() {
        // (name, previous reading, its time, current reading, its time, rate)
        type Case = (
            &'static str,
            Option<u64>,
            u64,
            Option<u64>,
            u64,
            Option<u64>,
        );
        let cases: &[Case] = &[
            (
                "one core for 10 s",
                Some(0),
                100,
                Some(10_000_000_000),
                110,
                Some(1_000_000_000),
            ),
            (
                "quarter core",
                Some(5_000_000_000),
                100,
                Some(7_500_000_000),
                110,
                Some(250_000_000),
            ),
            (
                "counter went back (restart)",
                Some(9),
                100,
                Some(1),
                110,
                None,
            ),
            ("no time passed", Some(0), 100, Some(5), 100, None),
            ("clock went back", Some(0), 110, Some(5), 100, None),
            ("no previous reading", None, 100, Some(5), 110, None),
        ];
        for (name, p, t0, c, t1, want) in cases {
            assert_eq!(rate(*p, at(*t0), *c, at(*t1)), *want, "{name}");
        }
    }

    #[test]
    fn rates_follow_pods_by_uid_and_containers_by_id() {
        let usage = |ns| {
            Some(CgroupUsage {
                cpu_usage_ns: Some(ns),
                ..Default::default()
            })
        };
        let pod = |uid: &str, pod_ns, cid: &str, c_ns| PodSample {
            uid: uid.into(),
            usage: usage(pod_ns),
            containers: vec![ContainerSample {
                id: cid.into(),
                usage: usage(c_ns),
                ..Default::default()
            }],
            ..Default::default()
        };
        let prev = Sample {
            time: at(100),
            node: NodeSample {
                usage: usage(0).unwrap(),
                ..Default::default()
            },
            pods: vec![pod("a", 0, "c1", 0)],
            claims: vec![],
            errors: vec![],
            pods_skipped: false,
        };
        let cur = Sample {
            time: at(102),
            node: NodeSample {
                usage: usage(4_000_000_000).unwrap(),
                ..Default::default()
            },
            pods: vec![
                pod("a", 2_000_000_000, "c2", 1_000_000_000),
                pod("b", 9, "c3", 9),
            ],
            claims: vec![],
            errors: vec![],
            pods_skipped: false,
        }
        .with_rates(&prev);
        assert_eq!(cur.node.usage_nano_cores, Some(2_000_000_000));
        assert_eq!(cur.pods[0].usage_nano_cores, Some(1_000_000_000));
        // c2 replaced c1 (a restart): no rate yet.
        assert_eq!(cur.pods[0].containers[0].usage_nano_cores, None);
        assert_eq!(cur.pods[1].usage_nano_cores, None);
    }
}
