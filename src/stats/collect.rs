//! One round of sampling (the I/O shell of the `stats` thread). Every round reads
//! the node: its root cgroup and `/proc` for CPU, memory and PIDs, statvfs for
//! nodefs, the image filesystem (CRI ImageFsInfo + statvfs) and mounted claims.
//! When someone wants them ([`Wanted::pods`]) it also reads which pods and
//! containers exist (CRI ListPodSandbox + ListContainers, ready and running only),
//! their writable layers (CRI ListContainerStats), image names (CRI ListImages),
//! their cgroups for CPU, memory and PIDs, and their log directories and emptyDir
//! volumes for disk: nearly all of a round's cost, which grows with the pods.
//!
//! Usage of a pod comes from its pod cgroup (`kubepods/<qos>/pod<uid>`, or its slice
//! with the systemd driver, found by the [`PodCgroupManager`]); a container's from its
//! cgroup below (`<container id>`, or the runtime's `*-<id>.scope` with systemd).
//! Without that cgroup (no pod cgroups) a container's CPU and memory fall back to
//! what ListContainerStats reports. With `detail` (someone scrapes
//! `/metrics/cadvisor`) each cgroup's [`CgroupDetail`] is read too, the sandbox's
//! cgroup and its network namespace's interfaces, and the node's interfaces,
//! filesystems by device and machine facts. Nothing fails the round: every problem
//! is named in `Sample::errors`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cgroups::{CgroupName, PodCgroupManager};
use crate::cri::{pb, ImageClient, RuntimeClient};
use crate::runtime::gc::pod_log_dir_of;
use crate::runtime::labels;

use super::cgroup::{parse_meminfo, working_set, CgroupDetail, CgroupUsage, UsageReader};
use super::claims::ClaimMounts;
use super::fs::{dir_usage, statvfs, FsUsage};
use super::net::{self, MachineInfo};
use super::sample::{
    ClaimSample, ContainerSample, DeviceFs, NodeSample, PodSample, Sample, SandboxSample,
};

/// The emptyDir plugin's directory name under a pod's `volumes/`: the same string as
/// `volumes::paths::PLUGIN_EMPTY_DIR` (a test pins it); spelled here because `volumes`
/// sits above this module.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// What a round reads beyond the node's own figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Pods' and containers' usage (CRI lists, their cgroups, disk walks).
    pub pods: bool,
    /// The cAdvisor detail (only with `pods`).
    pub detail: bool,
}

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
    /// `/proc`, `/sys` and `/etc` (injectable for tests).
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub etc_root: PathBuf,
    /// Claims mounted for pods, measured each round.
    pub claims: ClaimMounts,
    /// Read once: CPUs and the machine's IDs do not change while litelet runs.
    pub machine: OnceLock<MachineInfo>,
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
    /// A collector over the machine's own `/proc`, `/sys` and `/etc`.
    pub fn new(
        runtime: RuntimeClient,
        images: Option<ImageClient>,
        reader: Box<dyn UsageReader>,
        cgroups: Option<Arc<PodCgroupManager>>,
        root_dir: PathBuf,
        pod_logs_dir: PathBuf,
    ) -> Collector {
        Collector {
            runtime,
            images,
            reader,
            cgroups,
            root_dir,
            pod_logs_dir,
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
            etc_root: "/etc".into(),
            claims: ClaimMounts::default(),
            machine: OnceLock::new(),
        }
    }

    /// Samples the node and every pod once; `now` stamps the sample.
    pub fn collect(&self, now: SystemTime) -> Sample {
        self.collect_with(
            now,
            Wanted {
                pods: true,
                detail: false,
            },
        )
    }

    /// Samples usage once: the node always, pods and the cAdvisor detail as `wanted`.
    pub fn collect_with(&self, now: SystemTime, wanted: Wanted) -> Sample {
        let mut errors = Vec::new();
        let nodefs = statvfs(&self.root_dir)
            .map_err(|e| errors.push(format!("statvfs {}: {e}", self.root_dir.display())))
            .ok();
        let mut node = self.node(nodefs, &mut errors);
        let detail = wanted.detail && wanted.pods;
        if detail {
            self.node_detail(&mut node);
        }
        let pods = if wanted.pods {
            self.pods(nodefs.as_ref(), detail, &mut errors)
        } else {
            Vec::new()
        };
        Sample {
            time: now,
            node,
            pods,
            claims: self.claims(),
            errors,
            pods_skipped: !wanted.pods,
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
            memory_capacity_bytes: meminfo.map(|m| m.0),
            nodefs,
            imagefs: self.imagefs(errors),
            max_pid: self
                .proc_file("sys/kernel/pid_max")
                .and_then(|t| t.trim().parse().ok()),
            processes,
            ..Default::default()
        }
    }

    /// The node's cAdvisor detail: the root cgroup's, the host's interfaces, nodefs
    /// and imagefs by device, the machine.
    fn node_detail(&self, node: &mut NodeSample) {
        node.detail = Some(self.detail_of(&CgroupName::root()));
        node.network = net::read_net_dev(&self.proc_root, None);
        let mut filesystems: Vec<DeviceFs> = Vec::new();
        let imagefs_dir = self.imagefs_mountpoint();
        let places = [
            (Some(self.root_dir.clone()), node.nodefs),
            (imagefs_dir, node.imagefs),
        ];
        for (path, usage) in places {
            let (Some(path), Some(usage)) = (path, usage) else {
                continue;
            };
            let device = self.device_of(&path);
            node.imagefs_device = device.clone();
            if !filesystems.iter().any(|f| f.device == device) {
                filesystems.push(DeviceFs { device, usage });
            }
        }
        node.filesystems = filesystems;
        let machine = self
            .machine
            .get_or_init(|| net::read_machine(&self.proc_root, &self.sys_root, &self.etc_root));
        node.machine = Some(machine.clone());
    }

    /// A cgroup's detail with its block devices named.
    fn detail_of(&self, name: &CgroupName) -> CgroupDetail {
        let mut detail = self.reader.detail(name);
        for io in &mut detail.io {
            io.device = net::device_name(&self.sys_root, io.major, io.minor);
        }
        detail
    }

    /// `/dev/<name>` of the block device holding `path`, else its major:minor.
    fn device_of(&self, path: &Path) -> String {
        let Ok(st) = nix::sys::stat::stat(path) else {
            return String::new();
        };
        let (major, minor) = (
            nix::sys::stat::major(st.st_dev),
            nix::sys::stat::minor(st.st_dev),
        );
        let (major, minor) = (major as u32, minor as u32);
        let name = net::device_name(&self.sys_root, major, minor);
        if name.is_empty() {
            format!("{major}:{minor}")
        } else {
            name
        }
    }

    fn image_fs(&self, errors: &mut Vec<String>) -> Option<pb::FilesystemUsage> {
        let images = self.images.as_ref()?;
        let info = images
            .image_fs_info(&pb::ImageFsInfoRequest::default())
            .map_err(|e| errors.push(format!("ImageFsInfo: {e}")))
            .ok()?;
        info.image_filesystems.into_iter().next()
    }

    fn imagefs_mountpoint(&self) -> Option<PathBuf> {
        let fs = self.image_fs(&mut Vec::new())?;
        fs.fs_id.as_ref().map(|f| PathBuf::from(&f.mountpoint))
    }

    /// The image filesystem: statvfs of the mountpoint the runtime names, with the
    /// runtime's count of bytes and inodes used by images.
    fn imagefs(&self, errors: &mut Vec<String>) -> Option<FsUsage> {
        let fs = self.image_fs(errors)?;
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

    /// The mounted claims, each measured with statvfs.
    fn claims(&self) -> Vec<ClaimSample> {
        self.claims
            .mounted()
            .into_iter()
            .filter_map(|m| {
                let usage = statvfs(&m.path).ok()?;
                Some(ClaimSample {
                    namespace: m.namespace,
                    claim: m.claim,
                    usage,
                })
            })
            .collect()
    }

    /// Image IDs to the name cAdvisor would report (the first tag, else digest).
    fn image_names(&self, errors: &mut Vec<String>) -> HashMap<String, String> {
        let Some(images) = &self.images else {
            return HashMap::new();
        };
        let list = match images.list_images(&pb::ListImagesRequest::default()) {
            Ok(r) => r.images,
            Err(e) => {
                errors.push(format!("ListImages: {e}"));
                return HashMap::new();
            }
        };
        list.into_iter()
            .filter_map(|i| {
                let name = i.repo_tags.first().or(i.repo_digests.first())?.clone();
                Some((i.id, name))
            })
            .collect()
    }

    fn pods(
        &self,
        nodefs: Option<&FsUsage>,
        detail: bool,
        errors: &mut Vec<String>,
    ) -> Vec<PodSample> {
        let Some(listed) = self.list(errors) else {
            return Vec::new();
        };
        let images = self.image_names(errors);
        let mut pods = Vec::with_capacity(listed.sandboxes.len());
        for sandbox in &listed.sandboxes {
            let Some(mut pod) = self.pod(sandbox, detail, errors) else {
                continue;
            };
            let pod_cgroup = CgroupName::parse(&pod.cgroup)
                .ok()
                .filter(|_| !pod.cgroup.is_empty());
            let log_dir = pod_log_dir_of(&self.pod_logs_dir, &pod.namespace, &pod.name, &pod.uid);
            for c in listed
                .containers
                .iter()
                .filter(|c| c.pod_sandbox_id == sandbox.id)
            {
                let ctx = ContainerContext {
                    pod_cgroup: pod_cgroup.as_ref(),
                    stats: listed.stats.get(&c.id),
                    images: &images,
                    log_dir: log_dir.as_deref(),
                    nodefs,
                    detail,
                };
                if let Some(sample) = self.container(c, &ctx) {
                    pod.containers.push(sample);
                }
            }
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            pod.volumes = self.empty_dirs(&pod.uid, nodefs);
            pods.push(pod);
        }
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Ready sandboxes, running containers and the runtime's container stats; None
    /// when the sandboxes cannot be listed.
    fn list(&self, errors: &mut Vec<String>) -> Option<Listed> {
        let sandboxes = self
            .runtime
            .list_pod_sandbox(&pb::ListPodSandboxRequest {
                filter: protobuf::MessageField::some(pb::PodSandboxFilter {
                    state: protobuf::MessageField::some(pb::PodSandboxStateValue {
                        state: pb::PodSandboxState::SANDBOX_READY.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .map_err(|e| errors.push(format!("ListPodSandbox: {e}")))
            .ok()?
            .items;
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
        let stats = self
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
        Some(Listed {
            sandboxes,
            containers,
            stats,
        })
    }

    /// A sandbox's pod: names from its labels, usage from its pod cgroup, and with
    /// `detail` the sandbox's own cgroup and network.
    fn pod(
        &self,
        sandbox: &pb::PodSandbox,
        detail: bool,
        errors: &mut Vec<String>,
    ) -> Option<PodSample> {
        let meta = sandbox.metadata.as_ref();
        let label = |k: &str| sandbox.labels.get(k).cloned();
        let name = label(labels::POD_NAME).or_else(|| meta.map(|m| m.name.clone()))?;
        let namespace =
            label(labels::POD_NAMESPACE).or_else(|| meta.map(|m| m.namespace.clone()))?;
        let uid = label(labels::POD_UID).or_else(|| meta.map(|m| m.uid.clone()))?;
        let pod_cgroup = self
            .cgroups
            .as_ref()
            .and_then(|m| m.find_pod(&uid).ok().flatten());
        let usage = pod_cgroup.as_ref().and_then(|cg| {
            self.reader
                .read(cg)
                .map_err(|e| errors.push(format!("pod {namespace}/{name}: {e}")))
                .ok()
        });
        let mut pod = PodSample {
            start_time: time_from_nanos(sandbox.created_at),
            usage,
            cgroup: pod_cgroup
                .as_ref()
                .map(|c| c.to_cgroupfs())
                .unwrap_or_default(),
            name,
            namespace,
            uid,
            ..Default::default()
        };
        if let (true, Some(cg)) = (detail, pod_cgroup.as_ref()) {
            pod.detail = Some(self.detail_of(cg));
            pod.sandbox = self.sandbox(cg, &sandbox.id);
        }
        Some(pod)
    }

    /// The sandbox (pause) container's cgroup below the pod's, and the interfaces of
    /// its network namespace.
    fn sandbox(&self, pod_cgroup: &CgroupName, id: &str) -> Option<SandboxSample> {
        let manager = self.cgroups.as_ref()?;
        let cgroup = manager.container_cgroup(pod_cgroup, id).ok().flatten()?;
        let usage = self.reader.read(&cgroup).ok()?;
        let detail = self.detail_of(&cgroup);
        let network = detail
            .first_pid
            .map(|pid| net::read_net_dev(&self.proc_root, Some(pid)))
            .unwrap_or_default();
        Some(SandboxSample {
            id: id.to_owned(),
            cgroup: cgroup.to_cgroupfs(),
            usage: Some(usage),
            detail: Some(detail),
            network,
        })
    }

    fn container(&self, c: &pb::Container, ctx: &ContainerContext<'_>) -> Option<ContainerSample> {
        let name = c
            .labels
            .get(labels::CONTAINER_NAME)
            .cloned()
            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))?;
        let cgroup = ctx
            .pod_cgroup
            .zip(self.cgroups.as_ref())
            .and_then(|(p, m)| m.container_cgroup(p, &c.id).ok().flatten());
        let cgroup_usage = cgroup.as_ref().and_then(|n| self.reader.read(n).ok());
        let rootfs = ctx.stats.and_then(|s| s.writable_layer.as_ref()).map(|w| {
            FsUsage::tenant(
                ctx.nodefs,
                w.used_bytes.as_ref().map(|v| v.value).unwrap_or(0),
                w.inodes_used.as_ref().map(|v| v.value),
            )
        });
        let logs = ctx
            .log_dir
            .and_then(|d| dir_usage(&d.join(&name)))
            .map(|(bytes, inodes)| FsUsage::tenant(ctx.nodefs, bytes, Some(inodes)));
        Some(ContainerSample {
            id: c.id.clone(),
            start_time: time_from_nanos(c.created_at),
            usage: cgroup_usage.or_else(|| ctx.stats.and_then(from_cri)),
            usage_nano_cores: None,
            rootfs,
            logs,
            image: image_name(c, ctx.images),
            cgroup: cgroup.as_ref().map(|n| n.to_cgroupfs()).unwrap_or_default(),
            detail: cgroup
                .as_ref()
                .filter(|_| ctx.detail)
                .map(|n| self.detail_of(n)),
            name,
        })
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

/// What one round listed from the runtime.
struct Listed {
    sandboxes: Vec<pb::PodSandbox>,
    containers: Vec<pb::Container>,
    stats: HashMap<String, pb::ContainerStats>,
}

/// What a container's sample needs from its pod and the round.
struct ContainerContext<'a> {
    pod_cgroup: Option<&'a CgroupName>,
    stats: Option<&'a pb::ContainerStats>,
    images: &'a HashMap<String, String>,
    log_dir: Option<&'a Path>,
    nodefs: Option<&'a FsUsage>,
    detail: bool,
}

/// The image a container runs, by name (pure): the name the pod asked for when the
/// runtime echoes it, else the tag of the image ID it runs, else what it says.
fn image_name(c: &pb::Container, names: &HashMap<String, String>) -> String {
    let spec = c.image.as_ref();
    let asked = spec.map(|i| i.user_specified_image.as_str()).unwrap_or("");
    if !asked.is_empty() {
        return asked.to_owned();
    }
    let image = spec.map(|i| i.image.as_str()).unwrap_or("");
    names
        .get(image)
        .or_else(|| names.get(&c.image_ref))
        .cloned()
        .unwrap_or_else(|| image.to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_names_prefer_what_the_pod_asked_for() {
        use super::*;
        let names: HashMap<String, String> =
            [("sha256:abc".to_owned(), "busybox:1.0".to_owned())].into();
        let container = |image: &str, asked: &str| pb::Container {
            image: protobuf::MessageField::some(pb::ImageSpec {
                image: image.into(),
                user_specified_image: asked.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            image_name(&container("sha256:abc", ""), &names),
            "busybox:1.0"
        );
        assert_eq!(
            image_name(&container("sha256:abc", "busybox"), &names),
            "busybox"
        );
        assert_eq!(image_name(&container("nginx:1", ""), &names), "nginx:1");
    }

    #[test]
    fn empty_dir_plugin_name_matches_the_volume_manager() {
        assert_eq!(
            super::EMPTY_DIR_PLUGIN,
            crate::volumes::paths::PLUGIN_EMPTY_DIR
        );
    }
}
