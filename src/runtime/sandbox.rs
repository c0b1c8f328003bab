//! The CRI sandbox config for a pod (upstream generatePodSandboxConfig).
//!
//! Pure: everything the node decides (log root, cgroup parent, DNS) comes in as
//! [`SandboxContext`]. The sync path calls [`sandbox_config`] and hands the result to
//! RunPodSandbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use protobuf::{EnumOrUnknown, MessageField};

use super::dns::{sandbox_dns_config, DnsSettings};
use super::hosts::{sandbox_hostname, HostnameError};
use super::labels;
use super::profiles;
use crate::api::pod::{Pod, Protocol};
use crate::cri::pb;

/// Node-level inputs of sandbox creation.
#[derive(Clone, Debug, Default)]
pub struct SandboxContext {
    /// Root of pod log directories (`/var/log/pods` unless configured).
    pub pod_logs_dir: PathBuf,
    /// The pod's cgroup, e.g. `/kubepods/burstable/pod<uid>`; empty lets the runtime choose.
    pub cgroup_parent: String,
    pub dns: DnsSettings,
    /// Where Localhost seccomp profiles live (`<root-dir>/seccomp`).
    pub seccomp_root: PathBuf,
    /// `seccompDefault`: RuntimeDefault when the pod sets no seccomp profile.
    pub seccomp_default: bool,
    /// The pod's own user namespace (`hostUsers: false`, `userns.rs`); None: the host's.
    pub userns: Option<pb::UserNamespace>,
}

/// `<root>/<namespace>_<name>_<uid>`: where the runtime writes the pod's container logs.
pub fn pod_log_dir(root: &Path, pod: &Pod) -> PathBuf {
    root.join(format!("{}_{}_{}", pod.namespace(), pod.name(), pod.uid()))
}

fn protocol(p: Option<&Protocol>) -> pb::Protocol {
    match p {
        Some(Protocol::Udp) => pb::Protocol::UDP,
        Some(Protocol::Sctp) => pb::Protocol::SCTP,
        _ => pb::Protocol::TCP,
    }
}

fn port_mappings(pod: &Pod) -> Vec<pb::PortMapping> {
    pod.spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| pb::PortMapping {
            protocol: EnumOrUnknown::new(protocol(p.protocol.as_ref())),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
            ..Default::default()
        })
        .collect()
}

/// The namespace modes of a pod: network/PID/IPC shared with the node or private.
pub fn namespace_options(pod: &Pod) -> pb::NamespaceOption {
    let node_or = |host: Option<bool>, otherwise| {
        EnumOrUnknown::new(if host.unwrap_or(false) {
            pb::NamespaceMode::NODE
        } else {
            otherwise
        })
    };
    let pid_default = if pod.spec.share_process_namespace.unwrap_or(false) {
        pb::NamespaceMode::POD
    } else {
        pb::NamespaceMode::CONTAINER
    };
    pb::NamespaceOption {
        network: node_or(pod.spec.host_network, pb::NamespaceMode::POD),
        pid: node_or(pod.spec.host_pid, pid_default),
        ipc: node_or(pod.spec.host_ipc, pb::NamespaceMode::POD),
        ..Default::default()
    }
}

fn security_context(pod: &Pod, ctx: &SandboxContext) -> pb::LinuxSandboxSecurityContext {
    let seccomp_root = ctx.seccomp_root.as_path();
    let pod_security = pod.spec.security_context.clone().unwrap_or_default();
    // A bad pod-level profile leaves the sandbox to the runtime's default; the same
    // error stops every container that inherits it, where it is reported.
    let seccomp = profiles::seccomp(
        pod_security.seccomp_profile.as_ref(),
        None,
        seccomp_root,
        ctx.seccomp_default,
    )
    .ok()
    .into();
    let privileged = pod
        .spec
        .containers
        .iter()
        .chain(pod.spec.init_containers.iter())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let mut groups = pod_security.supplemental_groups.clone();
    if let Some(fs_group) = pod_security.fs_group {
        groups.push(fs_group);
    }
    let mut namespaces = namespace_options(pod);
    namespaces.userns_options = ctx.userns.clone().into();
    pb::LinuxSandboxSecurityContext {
        namespace_options: MessageField::some(namespaces),
        selinux_options: profiles::selinux(pod, None).into(),
        run_as_user: pod_security
            .run_as_user
            .map(|value| pb::Int64Value {
                value,
                ..Default::default()
            })
            .into(),
        run_as_group: pod_security
            .run_as_group
            .map(|value| pb::Int64Value {
                value,
                ..Default::default()
            })
            .into(),
        supplemental_groups: groups,
        privileged,
        seccomp,
        ..Default::default()
    }
}

/// The full sandbox config for attempt `attempt` of `pod`; fails only on a hostname
/// the kernel cannot take (`runtime/hosts.rs`).
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    ctx: &SandboxContext,
) -> Result<pb::PodSandboxConfig, HostnameError> {
    let sysctls: HashMap<String, String> = pod
        .spec
        .security_context
        .as_ref()
        .map(|s| {
            s.sysctls
                .iter()
                // Sysctl names may use '/' as separator; the runtime wants dots.
                .map(|s| (s.name.replace('/', "."), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    let linux = pb::LinuxPodSandboxConfig {
        cgroup_parent: ctx.cgroup_parent.clone(),
        security_context: MessageField::some(security_context(pod, ctx)),
        sysctls,
        ..Default::default()
    };
    Ok(pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: pod.name().to_owned(),
            uid: pod.uid().to_owned(),
            namespace: pod.namespace().to_owned(),
            attempt,
            ..Default::default()
        }),
        hostname: sandbox_hostname(pod, &ctx.dns.cluster_domain)?,
        log_directory: pod_log_dir(&ctx.pod_logs_dir, pod).display().to_string(),
        dns_config: MessageField::some(sandbox_dns_config(pod, &ctx.dns)),
        port_mappings: port_mappings(pod),
        labels: labels::sandbox_labels(pod).into_iter().collect(),
        annotations: labels::sandbox_annotations(pod).into_iter().collect(),
        linux: MessageField::some(linux),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{Container, ContainerPort};

    fn pod() -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.uid = Some("1234".into());
        pod.spec.containers.push(Container {
            name: "app".into(),
            ports: vec![
                ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 9090,
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        pod
    }

    fn ctx() -> SandboxContext {
        SandboxContext {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            cgroup_parent: "/kubepods/besteffort/pod1234".into(),
            dns: DnsSettings::default(),
            seccomp_root: PathBuf::from("/var/lib/litelet/seccomp"),
            seccomp_default: false,
            userns: None,
        }
    }

    #[test]
    fn seccomp_default_gives_the_sandbox_runtime_default() {
        use pb::security_profile::ProfileType;
        let seccomp = |ctx: &SandboxContext| {
            let cfg = sandbox_config(&pod(), 0, ctx).unwrap();
            cfg.linux
                .security_context
                .seccomp
                .profile_type
                .enum_value_or_default()
        };
        assert_eq!(seccomp(&ctx()), ProfileType::Unconfined);
        let on = SandboxContext {
            seccomp_default: true,
            ..ctx()
        };
        assert_eq!(seccomp(&on), ProfileType::RuntimeDefault);
    }

    /// hostNetwork, hostPID, hostIPC and shareProcessNamespace pick the sandbox's
    /// namespace modes; the field audit names this test.
    #[test]
    fn namespace_modes_follow_host_network_pid_ipc_and_share_process_namespace() {
        use pb::NamespaceMode::{CONTAINER, NODE, POD};
        let modes = |p: &Pod| {
            let ns = namespace_options(p);
            (
                ns.network.enum_value_or_default(),
                ns.pid.enum_value_or_default(),
                ns.ipc.enum_value_or_default(),
            )
        };
        let mut p = pod();
        assert_eq!(modes(&p), (POD, CONTAINER, POD));
        p.spec.share_process_namespace = Some(true);
        assert_eq!(modes(&p), (POD, POD, POD));
        p.spec.host_network = Some(true);
        p.spec.host_pid = Some(true);
        p.spec.host_ipc = Some(true);
        assert_eq!(modes(&p), (NODE, NODE, NODE));
        let cfg = sandbox_config(&p, 0, &ctx()).unwrap();
        let ns = &cfg.linux.security_context.namespace_options;
        assert_eq!(ns.network.enum_value_or_default(), NODE);
    }

    #[test]
    fn config_identifies_the_pod() {
        let cfg = sandbox_config(&pod(), 2, &ctx()).unwrap();
        let meta = cfg.metadata.as_ref().unwrap();
        assert_eq!(
            (
                meta.name.as_str(),
                meta.namespace.as_str(),
                meta.uid.as_str(),
                meta.attempt
            ),
            ("web", "shop", "1234", 2)
        );
        assert_eq!(cfg.log_directory, "/var/log/pods/shop_web_1234");
        assert_eq!(cfg.hostname, "web");
        assert_eq!(
            cfg.port_mappings.len(),
            1,
            "only ports with a hostPort are mapped"
        );
        assert_eq!(cfg.port_mappings[0].host_port, 8080);
        assert_eq!(cfg.linux.cgroup_parent, "/kubepods/besteffort/pod1234");
        let ns = cfg
            .linux
            .security_context
            .namespace_options
            .as_ref()
            .unwrap();
        assert_eq!(ns.network.enum_value_or_default(), pb::NamespaceMode::POD);
        assert_eq!(ns.pid.enum_value_or_default(), pb::NamespaceMode::CONTAINER);
    }

    #[test]
    fn host_network_pods_get_no_hostname() {
        let mut p = pod();
        p.spec.host_network = Some(true);
        let cfg = sandbox_config(&p, 0, &ctx()).unwrap();
        assert_eq!(cfg.hostname, "");
        let ns = cfg
            .linux
            .security_context
            .namespace_options
            .as_ref()
            .unwrap();
        assert_eq!(ns.network.enum_value_or_default(), pb::NamespaceMode::NODE);
    }

    #[test]
    fn hostname_override_names_the_sandbox_and_bad_names_fail_it() {
        let mut p = pod();
        p.spec.hostname = Some("db".into());
        p.spec.hostname_override = Some("my.host.example".into());
        assert_eq!(
            sandbox_config(&p, 0, &ctx()).unwrap().hostname,
            "my.host.example"
        );
        p.spec.hostname_override = Some("Bad_Name".into());
        assert_eq!(
            sandbox_config(&p, 0, &ctx()).unwrap_err(),
            HostnameError::InvalidOverride("Bad_Name".into())
        );
    }
}
