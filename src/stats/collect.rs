//! One round of sampling (the I/O shell of the `stats` thread): which pods and
//! containers exist (CRI ListPodSandbox + ListContainers, ready and running only),
//! their writable layers (CRI ListContainerStats), the image filesystem (CRI
//! ImageFsInfo + statvfs), then cgroupfs for CPU, memory and PIDs, statvfs for the
//! node's filesystem, the log directories and emptyDir volumes for disk.
//!
//! Usage of a pod comes from its pod cgroup (`kubepods/<qos>/pod<uid>`, or its slice
//! with the systemd driver, found by the [`PodCgroupManager`]); a container's from its
//! cgroup below (`<container id>`, or the runtime's `*-<id>.scope` with systemd).
//! Without that cgroup (no pod cgroups) a container's CPU and memory fall back to
//! what ListContainerStats reports. Nothing fails the round: every problem is named in `Sample::errors`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cgroups::{CgroupName, PodCgroupManager};
use crate::cri::{pb, ImageClient, RuntimeClient};
use crate::runtime::gc::pod_log_dir_of;
use crate::runtime::labels;

use super::cgroup::{parse_meminfo, working_set, CgroupUsage, UsageReader};
use super::fs::{dir_usage, statvfs, FsUsage};
use super::sample::{ContainerSample, NodeSample, PodSample, Sample};

/// The emptyDir plugin's directory name under a pod's `volumes/`: the same string as
/// `volumes::paths::PLUGIN_EMPTY_DIR` (a test pins it); spelled here because `volumes`
/// sits above this module.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// What a round of sampling reads from.
pub struct Collector {
    pub runtime: RuntimeClient,
    pub images: Option<ImageClient>,
    pub reader: Box<dyn UsageReader>,
    /// Finds pod cgroups; `None` when litelet manages none.
    pub cgroups: Option<Arc<PodCgroupManager>>,
    /// `--root-dir`: its filesystem is nodefs; pod volumes live below it.
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// `/proc` (injectable for tests).
    pub proc_root: PathBuf,
}

fn time_from_nanos(ns: i64) -> Option<SystemTime> {
    u64::try_from(ns)
        .ok()
        .filter(|n| *n > 0)
        .map(|n| UNIX_EPOCH + Duration::from_nanos(n))
}

/// Usage of a container as the runtime reports it (the fallback without cgroups).
fn from_cri(stats: &pb::ContainerStats) -> Option<CgroupUsage> {
    let v = |x: &protobuf::MessageField<pb::UInt64Value>| x.as_ref().map(|v| v.value);
    let cpu = stats.cpu.as_ref();
    let mem = stats.memory.as_ref();
    if cpu.is_none() && mem.is_none() {
        return None;
    }
    Some(CgroupUsage {
        cpu_usage_ns: cpu.and_then(|c| v(&c.usage_core_nano_seconds)),
        memory_usage_bytes: mem.and_then(|m| v(&m.usage_bytes)),
        working_set_bytes: mem.and_then(|m| v(&m.working_set_bytes)),
        rss_bytes: mem.and_then(|m| v(&m.rss_bytes)),
        page_faults: mem.and_then(|m| v(&m.page_faults)),
        major_page_faults: mem.and_then(|m| v(&m.major_page_faults)),
        pids: None,
    })
}

impl Collector {
    /// Samples everything once; `now` stamps the sample.
    pub fn collect(&self, now: SystemTime) -> Sample {
        let mut errors = Vec::new();
        let nodefs = statvfs(&self.root_dir)
            .map_err(|e| errors.push(format!("statvfs {}: {e}", self.root_dir.display())))
            .ok();
        let node = self.node(nodefs, &mut errors);
        let pods = self.pods(nodefs.as_ref(), &mut errors);
        Sample {
            time: now,
            node,
            pods,
            errors,
        }
    }

    fn proc_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(name)).ok()
    }

    fn node(&self, nodefs: Option<FsUsage>, errors: &mut Vec<String>) -> NodeSample {
        let mut usage = self
            .reader
            .read(&CgroupName::root())
            .map_err(|e| errors.push(format!("node cgroup: {e}")))
            .unwrap_or_default();
        let meminfo = self.proc_file("meminfo").and_then(|t| parse_meminfo(&t));
        if usage.memory_usage_bytes.is_none() {
            // The v2 root cgroup has no memory.current: the kernel's totals instead.
            if let Some((_, used, inactive_file)) = meminfo {
                usage.memory_usage_bytes = Some(used);
                usage.working_set_bytes = Some(working_set(used, inactive_file));
            }
        }
        let processes = self
            .proc_file("loadavg")
            .and_then(|t| t.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok());
        NodeSample {
            usage,
            usage_nano_cores: None,
            memory_capacity_bytes: meminfo.map(|m| m.0),
            nodefs,
            imagefs: self.imagefs(errors),
            max_pid: self
                .proc_file("sys/kernel/pid_max")
                .and_then(|t| t.trim().parse().ok()),
            processes,
        }
    }

    /// The image filesystem: statvfs of the mountpoint the runtime names, with the
    /// runtime's count of bytes and inodes used by images.
    fn imagefs(&self, errors: &mut Vec<String>) -> Option<FsUsage> {
        let images = self.images.as_ref()?;
        let info = images
            .image_fs_info(&pb::ImageFsInfoRequest::default())
            .map_err(|e| errors.push(format!("ImageFsInfo: {e}")))
            .ok()?;
        let fs = info.image_filesystems.first()?;
        let mountpoint = fs.fs_id.as_ref().map(|f| f.mountpoint.clone())?;
        let whole = statvfs(Path::new(&mountpoint))
            .map_err(|e| errors.push(format!("statvfs {mountpoint}: {e}")))
            .ok();
        Some(FsUsage {
            used_bytes: fs.used_bytes.as_ref().map(|v| v.value),
            inodes_used: fs.inodes_used.as_ref().map(|v| v.value),
            ..whole.unwrap_or_default()
        })
    }

    fn pods(&self, nodefs: Option<&FsUsage>, errors: &mut Vec<String>) -> Vec<PodSample> {
        let sandboxes = match self.runtime.list_pod_sandbox(&pb::ListPodSandboxRequest {
            filter: protobuf::MessageField::some(pb::PodSandboxFilter {
                state: protobuf::MessageField::some(pb::PodSandboxStateValue {
                    state: pb::PodSandboxState::SANDBOX_READY.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }) {
            Ok(r) => r.items,
            Err(e) => {
                errors.push(format!("ListPodSandbox: {e}"));
                return Vec::new();
            }
        };
        let containers = self
            .runtime
            .list_containers(&pb::ListContainersRequest {
                filter: protobuf::MessageField::some(pb::ContainerFilter {
                    state: protobuf::MessageField::some(pb::ContainerStateValue {
                        state: pb::ContainerState::CONTAINER_RUNNING.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .map(|r| r.containers)
            .map_err(|e| errors.push(format!("ListContainers: {e}")))
            .unwrap_or_default();
        let cri_stats: HashMap<String, pb::ContainerStats> = self
            .runtime
            .list_container_stats(&Default::default())
            .map(|r| {
                r.stats
                    .into_iter()
                    .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                    .collect()
            })
            .map_err(|e| errors.push(format!("ListContainerStats: {e}")))
            .unwrap_or_default();

        let mut pods = Vec::with_capacity(sandboxes.len());
        for sandbox in &sandboxes {
            let meta = sandbox.metadata.as_ref();
            let label = |k: &str| sandbox.labels.get(k).cloned();
            let (Some(name), Some(namespace), Some(uid)) = (
                label(labels::POD_NAME).or_else(|| meta.map(|m| m.name.clone())),
                label(labels::POD_NAMESPACE).or_else(|| meta.map(|m| m.namespace.clone())),
                label(labels::POD_UID).or_else(|| meta.map(|m| m.uid.clone())),
            ) else {
                continue;
            };
            let pod_cgroup = self
                .cgroups
                .as_ref()
                .and_then(|m| m.find_pod(&uid).ok().flatten());
            let usage = pod_cgroup.as_ref().and_then(|name| {
                self.reader
                    .read(name)
                    .map_err(|e| errors.push(format!("pod {namespace}/{name}: {e}")))
                    .ok()
            });
            let log_dir = pod_log_dir_of(&self.pod_logs_dir, &namespace, &name, &uid);
            let mut pod = PodSample {
                name,
                namespace,
                uid,
                start_time: time_from_nanos(sandbox.created_at),
                usage,
                ..Default::default()
            };
            for c in containers.iter().filter(|c| c.pod_sandbox_id == sandbox.id) {
                let Some(cname) = c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                else {
                    continue;
                };
                let stats = cri_stats.get(&c.id);
                let cgroup_usage = pod_cgroup
                    .as_ref()
                    .zip(self.cgroups.as_ref())
                    .and_then(|(p, m)| m.container_cgroup(p, &c.id).ok().flatten())
                    .and_then(|n| self.reader.read(&n).ok());
                let rootfs = stats.and_then(|s| s.writable_layer.as_ref()).map(|w| {
                    FsUsage::tenant(
                        nodefs,
                        w.used_bytes.as_ref().map(|v| v.value).unwrap_or(0),
                        w.inodes_used.as_ref().map(|v| v.value),
                    )
                });
                let logs = log_dir
                    .as_ref()
                    .and_then(|d| dir_usage(&d.join(&cname)))
                    .map(|(bytes, inodes)| FsUsage::tenant(nodefs, bytes, Some(inodes)));
                pod.containers.push(ContainerSample {
                    name: cname,
                    id: c.id.clone(),
                    start_time: time_from_nanos(c.created_at),
                    usage: cgroup_usage.or_else(|| stats.and_then(from_cri)),
                    usage_nano_cores: None,
                    rootfs,
                    logs,
                });
            }
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            pod.volumes = self.empty_dirs(&pod.uid, nodefs);
            pods.push(pod);
        }
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Disk emptyDir volumes of a pod (tmpfs ones are memory and count there).
    fn empty_dirs(&self, uid: &str, nodefs: Option<&FsUsage>) -> Vec<(String, FsUsage)> {
        if uid.is_empty() || uid.contains(['/', '\0']) || uid == ".." {
            return Vec::new();
        }
        let dir = self
            .root_dir
            .join("pods")
            .join(uid)
            .join("volumes")
            .join(EMPTY_DIR_PLUGIN);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<(String, FsUsage)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (bytes, inodes) = dir_usage(&e.path())?;
                Some((name, FsUsage::tenant(nodefs, bytes, Some(inodes))))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_dir_plugin_name_matches_the_volume_manager() {
        assert_eq!(
            super::EMPTY_DIR_PLUGIN,
            crate::volumes::paths::PLUGIN_EMPTY_DIR
        );
    }
}
