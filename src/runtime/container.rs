//! The CRI config of one container (upstream generateContainerConfig): command and
//! args with `$(VAR)` expansion, environment, mounts, log path, resources converted to
//! Linux cgroup values, security context, labels and annotations.
//!
//! Pure: the caller resolves the image, prepares the termination-log file, the
//! volume directories and the subPath mounts, and passes them in [`ContainerContext`].
//! A failure is the message of a CreateContainerConfigError. A subPath mount's host
//! path is never the volume path joined with the subPath (the pod could swap a
//! symlink in before the runtime mounts it): [`sub_path_requests`] lists the mounts
//! that need one, checked by spelling, and `runtime/subpath.rs` bind-mounts what it
//! opened without following symlinks; the config names that bind mount.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use protobuf::{EnumOrUnknown, MessageField};

use super::env::{container_env, expand, ConfigSource, EnvContext, EnvError};
use super::hash::ContainerHashes;
use super::labels;
use super::profiles;
use super::sandbox::namespace_options;
use super::subpath::{check_spelling, SubPathRequest};
use crate::api::pod::{Container, MountPropagationMode, Pod, RESOURCE_CPU, RESOURCE_MEMORY};
use crate::cgroups::convert::{milli_cpu_to_quota, milli_cpu_to_shares, DEFAULT_QUOTA_PERIOD_US};
use crate::cgroups::qos::container_oom_score_adj;
use crate::cgroups::resources::Limit;
use crate::cri::pb;

/// Where the runtime writes a container's termination message unless the spec says.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// /proc and /sys paths hidden from unprivileged containers (the runtime applies
/// none unless told).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Everything besides the pod that one container's config depends on.
pub struct ContainerContext<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// This instance's restart count (also its log file number and attempt).
    pub restart_count: i32,
    /// The resolved image to run.
    pub image_ref: &'a str,
    pub env: &'a EnvContext,
    pub config_source: &'a dyn ConfigSource,
    /// Host directories of the pod's volumes, by volume name.
    pub volumes: &'a BTreeMap<String, PathBuf>,
    /// The prepared subPath bind mounts of this container (`runtime/subpath.rs`), by
    /// the volumeMount's index.
    pub sub_paths: &'a BTreeMap<usize, PathBuf>,
    /// The host file mounted at the termination message path.
    pub termination_log: Option<&'a Path>,
    /// The pod's managed hosts file, mounted at `/etc/hosts` (`runtime/hosts.rs`).
    pub hosts_file: Option<&'a Path>,
    /// The machine's memory, for the Burstable oom_score_adj.
    pub memory_capacity: i64,
    /// False: no CFS quota is set for a CPU limit (see `RuntimeSettings`).
    pub enforce_cpu_limits: bool,
    /// For an ephemeral container: the container whose PID namespace it joins.
    pub target_container_id: Option<&'a str>,
    /// Where Localhost seccomp profiles live (`<root-dir>/seccomp`).
    pub seccomp_root: &'a Path,
    /// `seccompDefault`: RuntimeDefault for a container whose pod and own security
    /// context set no seccomp profile.
    pub seccomp_default: bool,
    /// The kernel enforces AppArmor: profiles a pod asks for can be applied.
    pub apparmor_enabled: bool,
    /// The node's swap policy and facts (`runtime/swap.rs`).
    pub swap: &'a super::swap::SwapSettings,
    /// The pod's own user namespace, as its sandbox has it (None: the host's).
    pub userns: Option<&'a pb::UserNamespace>,
}

/// The log file of a container instance, relative to the pod's log directory.
pub fn container_log_path(name: &str, restart_count: i32) -> String {
    format!("{name}/{restart_count}.log")
}

fn quantity_milli(map: &BTreeMap<String, crate::api::quantity::Quantity>, key: &str) -> i64 {
    map.get(key).map(|q| q.milli_value()).unwrap_or(0)
}

fn quantity_value(map: &BTreeMap<String, crate::api::quantity::Quantity>, key: &str) -> i64 {
    map.get(key).map(|q| q.value()).unwrap_or(0)
}

/// The container's cgroup values as CRI wants them.
pub fn linux_resources(ctx: &ContainerContext<'_>) -> pb::LinuxContainerResources {
    let resources = ctx.container.resources.clone().unwrap_or_default();
    let cpu_request = quantity_milli(&resources.requests, RESOURCE_CPU);
    let cpu_limit = quantity_milli(&resources.limits, RESOURCE_CPU);
    // Without a request, the limit stands in for it (the API server defaults the
    // request to the limit; static pods never pass through it).
    let shares_from = if cpu_request == 0 {
        cpu_limit
    } else {
        cpu_request
    };
    let mut linux = pb::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(shares_from) as i64,
        memory_limit_in_bytes: quantity_value(&resources.limits, RESOURCE_MEMORY).max(0),
        oom_score_adj: container_oom_score_adj(ctx.pod, ctx.container, ctx.memory_capacity),
        ..Default::default()
    };
    if ctx.enforce_cpu_limits && cpu_limit > 0 {
        linux.cpu_period = DEFAULT_QUOTA_PERIOD_US as i64;
        if let Limit::Value(quota) = milli_cpu_to_quota(cpu_limit, DEFAULT_QUOTA_PERIOD_US) {
            linux.cpu_quota = i64::try_from(quota).unwrap_or(i64::MAX);
        }
    }
    let swap = super::swap::container_swap(ctx.swap, ctx.pod, ctx.container);
    super::swap::apply(swap, &mut linux);
    linux
}

/// Why a container's CreateContainer config cannot be built (the container's
/// `CreateContainerConfigError`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContainerConfigError {
    /// An env var's source cannot be resolved (configMap, secret, field, resource).
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The seccomp or AppArmor profile is invalid or unavailable.
    #[error("{0}")]
    Profile(#[source] super::profiles::ProfileError),
    /// A volumeMount names a volume that was not set up.
    #[error("volume {name:?} is not available (unsupported type or not set up)")]
    VolumeNotReady { name: String },
    /// A subPath climbs out by its spelling.
    #[error("subPath {sub_path:?} must be relative and must not contain '..'")]
    SubPathNotRelative { sub_path: String },
    /// A subPath mount was not prepared before the config was built (a caller bug).
    #[error("subPath {sub_path:?} of volume mount {index} was not prepared")]
    SubPathNotPrepared { index: usize, sub_path: String },
}

fn security_context(
    ctx: &ContainerContext<'_>,
) -> Result<pb::LinuxContainerSecurityContext, ContainerConfigError> {
    let pod_sc = ctx.pod.spec.security_context.clone().unwrap_or_default();
    let sc = ctx.container.security_context.clone().unwrap_or_default();
    let run_as_user = sc.run_as_user.or(pod_sc.run_as_user);
    let run_as_group = sc.run_as_group.or(pod_sc.run_as_group);
    // runAsNonRoot is checked before, against the image's user (`nonroot.rs`).
    let privileged = sc.privileged.unwrap_or(false);
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let (masked, readonly) = if privileged || unmasked {
        (Vec::new(), Vec::new())
    } else {
        (
            MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
            READONLY_PATHS.iter().map(|s| s.to_string()).collect(),
        )
    };
    let mut namespaces = namespace_options(ctx.pod);
    namespaces.userns_options = ctx.userns.cloned().into();
    if let Some(target) = ctx.target_container_id {
        namespaces.pid = EnumOrUnknown::new(pb::NamespaceMode::TARGET);
        namespaces.target_id = target.to_owned();
    }
    let mut groups = pod_sc.supplemental_groups.clone();
    groups.extend(pod_sc.fs_group);
    let capabilities = sc.capabilities.as_ref().map(|c| pb::Capability {
        add_capabilities: c.add.clone(),
        drop_capabilities: c.drop.clone(),
        ..Default::default()
    });
    let int64 = |value: i64| pb::Int64Value {
        value,
        ..Default::default()
    };
    let seccomp = profiles::seccomp(
        pod_sc.seccomp_profile.as_ref(),
        sc.seccomp_profile.as_ref(),
        ctx.seccomp_root,
        ctx.seccomp_default,
    )
    .map_err(ContainerConfigError::Profile)?;
    let apparmor = profiles::apparmor(
        ctx.pod,
        &ctx.container.name,
        ctx.container.security_context.as_ref().map(|s| &s.extra),
        ctx.apparmor_enabled,
    )
    .map_err(ContainerConfigError::Profile)?;
    let (apparmor, apparmor_profile) = match apparmor {
        Some(a) => (MessageField::some(a.profile), a.legacy),
        None => (MessageField::none(), String::new()),
    };
    let selinux = profiles::selinux(
        ctx.pod,
        ctx.container.security_context.as_ref().map(|s| &s.extra),
    );
    Ok(pb::LinuxContainerSecurityContext {
        selinux_options: selinux.into(),
        capabilities: capabilities.into(),
        privileged,
        namespace_options: MessageField::some(namespaces),
        run_as_user: run_as_user.map(int64).into(),
        run_as_group: run_as_group.map(int64).into(),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: groups,
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: masked,
        readonly_paths: readonly,
        seccomp: MessageField::some(seccomp),
        apparmor,
        apparmor_profile,
        ..Default::default()
    })
}

/// The subPath of `mount`, subPathExpr expanded by `lookup`; `None` mounts the
/// whole volume.
fn mount_sub_path(
    mount: &crate::api::pod::VolumeMount,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    match (&mount.sub_path, &mount.sub_path_expr) {
        (Some(p), _) if !p.is_empty() => Some(p.clone()),
        (_, Some(expr)) if !expr.is_empty() => Some(expand(expr, lookup)),
        _ => None,
    }
    .filter(|p| !p.is_empty())
}

fn volume_path<'a>(
    ctx: &'a ContainerContext<'_>,
    name: &str,
) -> Result<&'a PathBuf, ContainerConfigError> {
    ctx.volumes
        .get(name)
        .ok_or_else(|| ContainerConfigError::VolumeNotReady {
            name: name.to_owned(),
        })
}

/// The container's mounts that need a prepared subPath, checked by spelling (an
/// absolute subPath or one with `..` is refused here). The environment is computed
/// only when a subPathExpr needs it.
pub fn sub_path_requests(
    ctx: &ContainerContext<'_>,
) -> Result<Vec<SubPathRequest>, ContainerConfigError> {
    let mounts = &ctx.container.volume_mounts;
    let needs_env = mounts.iter().any(|m| {
        m.sub_path.as_deref().unwrap_or("").is_empty()
            && !m.sub_path_expr.as_deref().unwrap_or("").is_empty()
    });
    let env = match needs_env {
        true => container_env(ctx.pod, ctx.container, ctx.env, ctx.config_source)?,
        false => Vec::new(),
    };
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut requests = Vec::new();
    for (index, mount) in mounts.iter().enumerate() {
        let Some(sub_path) = mount_sub_path(mount, &lookup) else {
            continue;
        };
        let volume_path = volume_path(ctx, &mount.name)?;
        if check_spelling(&sub_path).is_err() {
            return Err(ContainerConfigError::SubPathNotRelative { sub_path });
        }
        requests.push(SubPathRequest {
            index,
            volume: mount.name.clone(),
            volume_path: volume_path.clone(),
            sub_path,
        });
    }
    Ok(requests)
}

fn mounts(
    ctx: &ContainerContext<'_>,
    env: &[(String, String)],
) -> Result<Vec<pb::Mount>, ContainerConfigError> {
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut mounts = Vec::new();
    for (index, mount) in ctx.container.volume_mounts.iter().enumerate() {
        let base = volume_path(ctx, &mount.name)?;
        let host_path = match mount_sub_path(mount, &lookup) {
            Some(sub_path) => {
                if check_spelling(&sub_path).is_err() {
                    return Err(ContainerConfigError::SubPathNotRelative { sub_path });
                }
                ctx.sub_paths
                    .get(&index)
                    .ok_or(ContainerConfigError::SubPathNotPrepared { index, sub_path })?
                    .clone()
            }
            None => base.clone(),
        };
        // Volumes the kubelet writes (configMap, secret, ...) are never writable.
        let forced_read_only = ctx
            .pod
            .spec
            .volumes
            .iter()
            .any(|v| v.name == mount.name && v.forces_read_only());
        let propagation = match mount.mount_propagation {
            Some(MountPropagationMode::HostToContainer) => {
                pb::MountPropagation::PROPAGATION_HOST_TO_CONTAINER
            }
            Some(MountPropagationMode::Bidirectional) => {
                pb::MountPropagation::PROPAGATION_BIDIRECTIONAL
            }
            _ => pb::MountPropagation::PROPAGATION_PRIVATE,
        };
        mounts.push(pb::Mount {
            container_path: mount.mount_path.clone(),
            host_path: host_path.display().to_string(),
            readonly: mount.read_only.unwrap_or(false) || forced_read_only,
            propagation: EnumOrUnknown::new(propagation),
            ..Default::default()
        });
    }
    if let Some(log) = ctx.termination_log {
        let path = ctx
            .container
            .termination_message_path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.to_owned());
        mounts.push(pb::Mount {
            container_path: path,
            host_path: log.display().to_string(),
            ..Default::default()
        });
    }
    mounts.extend(super::hosts::hosts_mount(ctx.container, ctx.hosts_file));
    Ok(mounts)
}

/// The full CreateContainer config.
pub fn container_config(
    ctx: &ContainerContext<'_>,
) -> Result<pb::ContainerConfig, ContainerConfigError> {
    let container = ctx.container;
    let env = container_env(ctx.pod, container, ctx.env, ctx.config_source)?;
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let command = container
        .command
        .iter()
        .map(|c| expand(c, &lookup))
        .collect();
    let args = container.args.iter().map(|a| expand(a, &lookup)).collect();
    let linux = pb::LinuxContainerConfig {
        resources: MessageField::some(linux_resources(ctx)),
        security_context: MessageField::some(security_context(ctx)?),
        ..Default::default()
    };
    let hashes = ContainerHashes::of(container);
    Ok(pb::ContainerConfig {
        metadata: MessageField::some(pb::ContainerMetadata {
            name: container.name.clone(),
            attempt: u32::try_from(ctx.restart_count).unwrap_or(0),
            ..Default::default()
        }),
        image: MessageField::some(pb::ImageSpec {
            image: ctx.image_ref.to_owned(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: env
            .iter()
            .map(|(key, value)| pb::KeyValue {
                key: key.clone(),
                value: value.clone(),
                ..Default::default()
            })
            .collect(),
        mounts: mounts(ctx, &env)?,
        labels: labels::container_labels(ctx.pod, &container.name)
            .into_iter()
            .collect(),
        annotations: labels::container_annotations(ctx.pod, container, ctx.restart_count, hashes)
            .into_iter()
            .collect(),
        log_path: container_log_path(&container.name, ctx.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: MessageField::some(linux),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{ResourceRequirements, SecurityContext, VolumeMount};
    use crate::api::quantity::Quantity;
    use crate::runtime::env::NoConfigSource;

    fn pod_with(container: Container) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some("uid-1".into());
        pod.spec.containers.push(container);
        pod
    }

    fn build(
        pod: &Pod,
        volumes: &BTreeMap<String, PathBuf>,
    ) -> Result<pb::ContainerConfig, ContainerConfigError> {
        build_with(pod, volumes, &BTreeMap::new())
    }

    fn build_with(
        pod: &Pod,
        volumes: &BTreeMap<String, PathBuf>,
        sub_paths: &BTreeMap<usize, PathBuf>,
    ) -> Result<pb::ContainerConfig, ContainerConfigError> {
        let env = EnvContext::default();
        let ctx = ContainerContext {
            pod,
            container: &pod.spec.containers[0],
            restart_count: 2,
            image_ref: "sha256:abc",
            env: &env,
            config_source: &NoConfigSource,
            volumes,
            sub_paths,
            termination_log: Some(Path::new("/var/lib/litelet/pods/uid-1/containers/app/0a")),
            hosts_file: None,
            memory_capacity: 8 << 30,
            enforce_cpu_limits: true,
            target_container_id: None,
            seccomp_root: Path::new("/var/lib/litelet/seccomp"),
            seccomp_default: false,
            apparmor_enabled: false,
            swap: &crate::runtime::swap::SwapSettings::UNTOUCHED,
            userns: None,
        };
        container_config(&ctx)
    }

    fn resources(cpu_req: &str, cpu_lim: &str, mem_lim: &str) -> Option<ResourceRequirements> {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut r = ResourceRequirements::default();
        if !cpu_req.is_empty() {
            r.requests.insert("cpu".into(), q(cpu_req));
        }
        if !cpu_lim.is_empty() {
            r.limits.insert("cpu".into(), q(cpu_lim));
        }
        if !mem_lim.is_empty() {
            r.limits.insert("memory".into(), q(mem_lim));
        }
        Some(r)
    }

    #[test]
    fn command_env_log_path_and_identity() {
        let pod = pod_with(Container {
            name: "app".into(),
            image: Some("busybox:1.0".into()),
            command: vec!["sh".into(), "-c".into()],
            args: vec!["echo $(GREETING) $$(GREETING)".into()],
            env: vec![crate::api::pod::EnvVar {
                name: "GREETING".into(),
                value: Some("hi".into()),
                value_from: None,
            }],
            ..Default::default()
        });
        let cfg = build(&pod, &BTreeMap::new()).unwrap();
        assert_eq!(cfg.args, ["echo hi $(GREETING)"]);
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.attempt, 2);
        assert_eq!(cfg.image.image, "sha256:abc");
        assert_eq!(cfg.labels[labels::POD_UID], "uid-1");
        assert_eq!(cfg.annotations[labels::CONTAINER_RESTART_COUNT], "2");
        let term = cfg
            .mounts
            .iter()
            .find(|m| m.container_path == DEFAULT_TERMINATION_MESSAGE_PATH);
        assert!(term.is_some(), "termination log is mounted");
        assert_eq!(
            cfg.linux.security_context.masked_paths.len(),
            MASKED_PATHS.len()
        );
    }

    #[test]
    fn seccomp_reaches_the_cri_and_unenforceable_apparmor_stops_the_container() {
        use crate::api::pod::{SeccompProfile, SeccompProfileType};
        let mut pod = pod_with(Container {
            name: "app".into(),
            image: Some("busybox:1.0".into()),
            ..Default::default()
        });
        let sc = SecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: SeccompProfileType::RuntimeDefault,
                localhost_profile: None,
            }),
            ..Default::default()
        };
        pod.spec.containers[0].security_context = Some(sc);
        let cfg = build(&pod, &BTreeMap::new()).unwrap();
        let seccomp = &cfg.linux.security_context.seccomp;
        assert_eq!(
            seccomp.profile_type.enum_value_or_default(),
            pb::security_profile::ProfileType::RuntimeDefault
        );
        assert!(cfg.linux.security_context.apparmor.is_none());

        // This test host has no AppArmor (the context says so): asking for a profile
        // fails the container instead of running it unconfined.
        pod.metadata.annotations.insert(
            "container.apparmor.security.beta.kubernetes.io/app".into(),
            "runtime/default".into(),
        );
        let err = build(&pod, &BTreeMap::new()).unwrap_err();
        assert!(
            matches!(&err, ContainerConfigError::Profile(m) if m.to_string().contains("AppArmor is not enabled")),
            "{err}"
        );
    }

    /// Every Linux field of a container's securityContext (and the pod's identity
    /// fields it inherits) lands in the CRI config; the field audit names this test.
    #[test]
    fn container_security_stdio_and_working_dir_reach_the_cri_config() {
        use crate::api::pod::{Capabilities, PodSecurityContext};
        let mut pod = pod_with(Container {
            name: "app".into(),
            image: Some("busybox:1.0".into()),
            stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(true),
            working_dir: Some("/work".into()),
            ..Default::default()
        });
        let mut pod_sc = PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            supplemental_groups: vec![4000],
            fs_group: Some(2000),
            ..Default::default()
        };
        pod_sc.extra.insert(
            "seLinuxOptions".into(),
            serde_json::json!({"level": "s0:c7"}),
        );
        pod.spec.security_context = Some(pod_sc);
        let cfg = build(&pod, &BTreeMap::new()).unwrap();
        let sc = &cfg.linux.security_context;
        assert_eq!(
            sc.selinux_options.level, "s0:c7",
            "pod seLinuxOptions inherited"
        );
        assert_eq!(sc.run_as_user.value, 1000, "pod runAsUser inherited");
        assert_eq!(sc.run_as_group.value, 3000, "pod runAsGroup inherited");
        assert_eq!(sc.supplemental_groups, [4000, 2000], "groups then fsGroup");
        assert!(!sc.privileged && !sc.readonly_rootfs && !sc.no_new_privs);
        assert!(!sc.masked_paths.is_empty() && !sc.readonly_paths.is_empty());
        assert!(cfg.stdin && cfg.stdin_once && cfg.tty);
        assert_eq!(cfg.working_dir, "/work");

        pod.spec.containers[0].security_context = Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: vec!["NET_ADMIN".into()],
                drop: vec!["ALL".into()],
            }),
            run_as_user: Some(1),
            run_as_group: Some(2),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            proc_mount: Some("Unmasked".into()),
            ..Default::default()
        });
        let cfg = build(&pod, &BTreeMap::new()).unwrap();
        let sc = &cfg.linux.security_context;
        assert_eq!(sc.capabilities.add_capabilities, ["NET_ADMIN"]);
        assert_eq!(sc.capabilities.drop_capabilities, ["ALL"]);
        assert_eq!(
            (sc.run_as_user.value, sc.run_as_group.value),
            (1, 2),
            "container wins"
        );
        assert!(sc.readonly_rootfs && sc.no_new_privs);
        assert!(
            sc.masked_paths.is_empty() && sc.readonly_paths.is_empty(),
            "procMount Unmasked"
        );

        pod.spec.containers[0].security_context = Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        let cfg = build(&pod, &BTreeMap::new()).unwrap();
        let sc = &cfg.linux.security_context;
        assert!(sc.privileged && sc.masked_paths.is_empty());
    }

    /// An ephemeral container's targetContainerName: it joins that container's PID
    /// namespace (CRI `TARGET` mode with the target's runtime ID).
    #[test]
    fn target_container_name_joins_the_targets_pid_namespace() {
        let pod = pod_with(Container {
            name: "debug".into(),
            image: Some("busybox:1.0".into()),
            ..Default::default()
        });
        let env = EnvContext::default();
        let volumes = BTreeMap::new();
        let mut ctx = context(&pod, &volumes, &env);
        ctx.target_container_id = Some("abc123");
        let cfg = container_config(&ctx).unwrap();
        let ns = &cfg.linux.security_context.namespace_options;
        assert_eq!(ns.pid.enum_value_or_default(), pb::NamespaceMode::TARGET);
        assert_eq!(ns.target_id, "abc123");
    }

    #[test]
    fn resources_convert_to_cgroup_values() {
        let mut container = Container {
            name: "app".into(),
            resources: resources("250m", "500m", "128Mi"),
            ..Default::default()
        };
        let cfg = build(&pod_with(container.clone()), &BTreeMap::new()).unwrap();
        let linux = cfg.linux.resources.as_ref().unwrap();
        assert_eq!(linux.cpu_shares, 256);
        assert_eq!(linux.cpu_quota, 50_000);
        assert_eq!(linux.cpu_period, 100_000);
        assert_eq!(linux.memory_limit_in_bytes, 128 << 20);

        // A limit without a request: shares follow the limit.
        container.resources = resources("", "1", "");
        let cfg = build(&pod_with(container.clone()), &BTreeMap::new()).unwrap();
        assert_eq!(cfg.linux.resources.cpu_shares, 1024);
        assert_eq!(cfg.linux.resources.memory_limit_in_bytes, 0);

        // BestEffort: minimum shares, no quota.
        container.resources = None;
        let cfg = build(&pod_with(container), &BTreeMap::new()).unwrap();
        assert_eq!(cfg.linux.resources.cpu_shares, 2);
        assert_eq!(cfg.linux.resources.cpu_quota, 0);
        assert_eq!(cfg.linux.resources.oom_score_adj, 1000);
    }

    fn context<'a>(
        pod: &'a Pod,
        volumes: &'a BTreeMap<String, PathBuf>,
        env: &'a EnvContext,
    ) -> ContainerContext<'a> {
        ContainerContext {
            pod,
            container: &pod.spec.containers[0],
            restart_count: 0,
            image_ref: "sha256:abc",
            env,
            config_source: &NoConfigSource,
            volumes,
            sub_paths: &NO_SUB_PATHS,
            termination_log: None,
            hosts_file: None,
            memory_capacity: 8 << 30,
            enforce_cpu_limits: true,
            target_container_id: None,
            seccomp_root: Path::new("/var/lib/litelet/seccomp"),
            seccomp_default: false,
            apparmor_enabled: false,
            swap: &crate::runtime::swap::SwapSettings::UNTOUCHED,
            userns: None,
        }
    }

    static NO_SUB_PATHS: BTreeMap<usize, PathBuf> = BTreeMap::new();

    #[test]
    fn sub_path_mounts_name_the_prepared_bind_mount_never_the_joined_path() {
        let volumes = BTreeMap::from([(
            "data".to_owned(),
            PathBuf::from("/var/lib/litelet/pods/uid-1/volumes/data"),
        )]);
        let container = Container {
            name: "app".into(),
            env: vec![crate::api::pod::EnvVar {
                name: "POD".into(),
                value: Some("web-0".into()),
                value_from: None,
            }],
            volume_mounts: vec![
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/whole".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    sub_path: Some("cache".into()),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/logs".into(),
                    sub_path_expr: Some("logs/$(POD)".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let pod = pod_with(container);
        let env = EnvContext::default();
        let requests = sub_path_requests(&context(&pod, &volumes, &env)).unwrap();
        let volume_path = volumes["data"].clone();
        assert_eq!(
            requests,
            [
                SubPathRequest {
                    index: 1,
                    volume: "data".into(),
                    volume_path: volume_path.clone(),
                    sub_path: "cache".into(),
                },
                SubPathRequest {
                    index: 2,
                    volume: "data".into(),
                    volume_path,
                    sub_path: "logs/web-0".into(),
                },
            ]
        );

        let prepared = BTreeMap::from([
            (1, PathBuf::from("/r/pods/uid-1/volume-subpaths/data/app/1")),
            (2, PathBuf::from("/r/pods/uid-1/volume-subpaths/data/app/2")),
        ]);
        let cfg = build_with(&pod, &volumes, &prepared).unwrap();
        let hosts: Vec<&str> = cfg.mounts[..3]
            .iter()
            .map(|m| m.host_path.as_str())
            .collect();
        assert_eq!(
            hosts,
            [
                "/var/lib/litelet/pods/uid-1/volumes/data",
                "/r/pods/uid-1/volume-subpaths/data/app/1",
                "/r/pods/uid-1/volume-subpaths/data/app/2",
            ]
        );
        assert!(cfg.mounts[1].readonly, "read-only stays with the mount");
        assert!(!cfg.mounts[2].readonly);

        // Not prepared: refused, never the joined path.
        let err = build(&pod, &volumes).unwrap_err();
        assert!(
            matches!(
                err,
                ContainerConfigError::SubPathNotPrepared { index: 1, .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_sub_path_with_dot_dot_or_an_absolute_path_is_refused_before_any_io() {
        let volumes = BTreeMap::from([(
            "data".to_owned(),
            PathBuf::from("/var/lib/litelet/pods/uid-1/volumes/data"),
        )]);
        let mut container = Container {
            name: "app".into(),
            volume_mounts: vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let env = EnvContext::default();
        for bad in ["../../etc", "/etc", "a/../..", "a/.."] {
            container.volume_mounts[0].sub_path = Some(bad.into());
            let pod = pod_with(container.clone());
            for err in [
                sub_path_requests(&context(&pod, &volumes, &env)).unwrap_err(),
                build(&pod, &volumes).unwrap_err(),
            ] {
                assert!(
                    matches!(err, ContainerConfigError::SubPathNotRelative { .. }),
                    "{bad}: {err}"
                );
                assert!(err.to_string().contains("must not contain '..'"), "{err}");
            }
        }
        // subPathExpr is checked after expansion.
        container.volume_mounts[0].sub_path = None;
        container.volume_mounts[0].sub_path_expr = Some("$(UP)/x".into());
        container.env = vec![crate::api::pod::EnvVar {
            name: "UP".into(),
            value: Some("..".into()),
            value_from: None,
        }];
        let pod = pod_with(container.clone());
        let err = sub_path_requests(&context(&pod, &volumes, &env)).unwrap_err();
        assert!(
            matches!(&err, ContainerConfigError::SubPathNotRelative { sub_path } if sub_path == "../x"),
            "{err}"
        );

        container.volume_mounts[0].name = "missing".into();
        let err = build(&pod_with(container), &volumes).unwrap_err();
        assert!(
            matches!(&err, ContainerConfigError::VolumeNotReady { name } if name == "missing"),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("volume \"missing\" is not available"));
    }

    #[test]
    fn kubelet_written_volumes_mount_read_only() {
        let volumes = BTreeMap::from([
            ("cfg".to_owned(), PathBuf::from("/v/cfg")),
            ("scratch".to_owned(), PathBuf::from("/v/scratch")),
        ]);
        let mut pod = pod_with(Container {
            name: "app".into(),
            volume_mounts: vec![
                VolumeMount {
                    name: "cfg".into(),
                    mount_path: "/etc/cfg".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/tmp".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        pod.spec.volumes = vec![
            crate::api::pod::Volume {
                name: "cfg".into(),
                config_map: Some(Default::default()),
                ..Default::default()
            },
            crate::api::pod::Volume {
                name: "scratch".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            },
        ];
        let cfg = build(&pod, &volumes).unwrap();
        assert!(cfg.mounts[0].readonly, "configMap is read-only");
        assert!(!cfg.mounts[1].readonly, "emptyDir stays writable");
    }
}
