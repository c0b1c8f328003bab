//! The kubelet-managed `/etc/hosts`, the pod hostname (`spec.hostnameOverride`) and
//! host-network pod IPs (issue 16 items 4, 5 and 8), through SyncPod.
//!
//! Pod-network pods run on the fake CRI, whose sandboxes get an IP (the private test
//! containerd has no CNI network); host-network pods also run on a real containerd,
//! where the container prints its `/etc/hosts` and `$POD_IP`. The real test needs root
//! and containerd and skips loudly otherwise unless CI=true.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::fake_cri::FakeCri;
use crate::support::pods;
use crate::support::runtime::{self, fake_with_busybox, sh_container};
use crate::support::wait_until;
use litelet::api::pod::{EnvVar, EnvVarSource, HostAlias, ObjectFieldSelector, Pod, VolumeMount};
use litelet::events::Recorder;
use litelet::runtime::actions::ProbeResults;
use litelet::runtime::dns::DnsSettings;
use litelet::runtime::env::EnvContext;
use litelet::runtime::manager::{RuntimeManager, RuntimeSettings};
use litelet::runtime::model::{ContainerState, PodRuntimeStatus};
use litelet::runtime::result::{SyncAction, SyncOutcome};

const NODE_IP: &str = "192.0.2.77";

struct Harness {
    manager: RuntimeManager,
    dir: tempfile::TempDir,
    /// Host paths of the pod's volumes, by name.
    volumes: BTreeMap<String, PathBuf>,
}

impl Harness {
    fn new(endpoint: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let node_hosts = dir.path().join("node-hosts");
        std::fs::write(
            &node_hosts,
            "127.0.0.1 localhost\n192.0.2.77 injected-node\n",
        )
        .unwrap();
        let (runtime, images) = runtime::connect(endpoint, Duration::from_secs(30));
        let settings = RuntimeSettings {
            dns: DnsSettings {
                cluster_domain: "cluster.local".into(),
                ..Default::default()
            },
            node_hosts_file: node_hosts,
            ..runtime::settings(dir.path())
        };
        let manager = runtime::manager(runtime, images, Recorder::log_only(), settings);
        let own_hosts = dir.path().join("own-hosts");
        std::fs::create_dir_all(&own_hosts).unwrap();
        let volumes = BTreeMap::from([("own".to_string(), own_hosts)]);
        Harness {
            manager,
            dir,
            volumes,
        }
    }

    fn status(&self, pod: &Pod) -> PodRuntimeStatus {
        self.manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status")
    }

    /// One SyncPod as a pod worker runs it, with the node's IP known.
    fn sync(&self, pod: &Pod) -> SyncOutcome {
        let env = EnvContext {
            node_name: "node-1".into(),
            host_ips: vec![NODE_IP.into()],
            ..Default::default()
        };
        let inputs = runtime::inputs(String::new(), &self.volumes, &env);
        self.manager
            .sync_pod(pod, &self.status(pod), &ProbeResults::default(), &inputs)
    }

    fn sync_until(&self, pod: &Pod, what: &str, done: impl Fn(&PodRuntimeStatus) -> bool) {
        let ok = wait_until(Duration::from_secs(30), || {
            let outcome = self.sync(pod);
            if !outcome.is_ok() {
                eprintln!("sync outcome: {outcome}");
            }
            std::thread::sleep(Duration::from_millis(30));
            done(&self.status(pod))
        });
        assert!(ok, "never reached: {what}; status: {:#?}", self.status(pod));
    }

    fn hosts_file(&self, pod: &Pod) -> PathBuf {
        self.dir
            .path()
            .join("root/pods")
            .join(pod.uid())
            .join("etc-hosts")
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(uid: &str) -> Pod {
    let mut pod = pods::meta("shop", "web-0", uid);
    pod.spec.termination_grace_period_seconds = Some(1);
    pod.spec.host_aliases = vec![HostAlias {
        ip: "1.2.3.4".into(),
        hostnames: vec!["foo.local".into(), "bar.local".into()],
    }];
    pod
}

/// The host path mounted at `/etc/hosts` in container `name`, if any.
fn etc_hosts_mount(fake: &FakeCri, name: &str) -> Option<String> {
    let configs = fake.state().container_configs();
    let config = configs
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .unwrap_or_else(|| panic!("no container {name}"));
    config
        .mounts
        .iter()
        .find(|m| m.container_path == "/etc/hosts")
        .map(|m| m.host_path.clone())
}

fn env_of(fake: &FakeCri, name: &str, key: &str) -> Option<String> {
    let configs = fake.state().container_configs();
    let config = configs
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))?;
    config
        .envs
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.value.clone())
}

#[test]
fn pod_network_containers_get_the_managed_hosts_file_unless_they_mount_their_own() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint());
    let mut pod = pod("uid-hosts-1");
    pod.spec.subdomain = Some("backend".into());
    pod.spec.init_containers.push(sh_container("setup", "true"));
    pod.spec.containers.push(sh_container("app", "sleep 3600"));
    let mut own = sh_container("own", "sleep 3600");
    own.volume_mounts.push(VolumeMount {
        name: "own".into(),
        mount_path: "/etc/hosts".into(),
        ..Default::default()
    });
    pod.spec.containers.push(own);
    fake.exit_after_start("setup", 0, Duration::from_millis(20));

    h.sync_until(&pod, "app and own running", |s| {
        ["app", "own"].iter().all(|n| {
            s.newest(n)
                .is_some_and(|c| c.state == ContainerState::Running)
        })
    });
    let file = h.hosts_file(&pod);
    let want = Some(file.display().to_string());
    assert_eq!(etc_hosts_mount(&fake, "setup"), want, "init container");
    assert_eq!(etc_hosts_mount(&fake, "app"), want, "regular container");
    let own_mount = etc_hosts_mount(&fake, "own");
    assert_eq!(
        own_mount.as_deref().map(Path::new),
        Some(h.volumes["own"].as_path()),
        "a container mounting /etc/hosts itself keeps its own"
    );

    let ip = h.status(&pod).ips[0].clone();
    let text = std::fs::read_to_string(&file).unwrap();
    let want = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
         {ip}\tweb-0.backend.shop.svc.cluster.local\tweb-0\n\
         \n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\tbar.local\n"
    );
    assert_eq!(text, want);
}

#[test]
fn hostname_override_names_the_sandbox_and_its_hosts_entry() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint());
    let mut pod = pod("uid-hosts-2");
    pod.spec.hostname = Some("ignored".into());
    pod.spec.subdomain = Some("backend".into());
    pod.spec.hostname_override = Some("my.host.example".into());
    pod.spec.containers.push(sh_container("app", "sleep 3600"));
    h.sync_until(&pod, "app running", |s| {
        s.newest("app")
            .is_some_and(|c| c.state == ContainerState::Running)
    });
    let sandboxes = fake.state().sandbox_configs();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].hostname, "my.host.example");
    let ip = h.status(&pod).ips[0].clone();
    let text = std::fs::read_to_string(h.hosts_file(&pod)).unwrap();
    assert!(
        text.contains(&format!("\n{ip}\tmy.host.example\n")),
        "override, no FQDN column: {text}"
    );
}

#[test]
fn invalid_hostname_override_fails_sandbox_creation_before_the_runtime() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint());
    let mut pod = pod("uid-hosts-3");
    pod.spec.hostname_override = Some("Not_A_Host".into());
    pod.spec.containers.push(sh_container("app", "sleep 3600"));
    let outcome = h.sync(&pod);
    let failed: Vec<_> = outcome.failures().collect();
    assert_eq!(failed.len(), 1, "{outcome}");
    assert_eq!(failed[0].0.action, SyncAction::CreatePodSandbox);
    assert!(
        failed[0].1.message.contains("hostnameOverride"),
        "{outcome}"
    );
    assert_eq!(fake.count("RunPodSandbox"), 0);
}

#[test]
fn host_network_containers_see_the_node_ip_as_pod_ip_and_the_node_hosts_file() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint());
    let mut pod = pod("uid-hosts-4");
    pod.spec.host_network = Some(true);
    let mut app = sh_container("app", "sleep 3600");
    app.env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_IPS", "status.podIPs"),
        field_env("HOST_IP", "status.hostIP"),
    ];
    pod.spec.containers.push(app);
    h.sync_until(&pod, "app running", |s| {
        s.newest("app")
            .is_some_and(|c| c.state == ContainerState::Running)
    });
    for key in ["POD_IP", "POD_IPS", "HOST_IP"] {
        assert_eq!(env_of(&fake, "app", key).as_deref(), Some(NODE_IP), "{key}");
    }
    assert_eq!(fake.state().sandbox_configs()[0].hostname, "");
    let text = std::fs::read_to_string(h.hosts_file(&pod)).unwrap();
    assert_eq!(
        text,
        "# Kubernetes-managed hosts file (host network).\n\
         127.0.0.1 localhost\n192.0.2.77 injected-node\n\
         \n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\tbar.local\n"
    );
}

#[test]
fn host_network_pod_reads_its_hosts_file_and_pod_ip_on_real_containerd() {
    let Some(containerd) = support::containerd::Containerd::start("pod_hosts") else {
        return;
    };
    let h = Harness::new(&containerd.endpoint());
    let mut pod = pod(&format!("uid-hosts-real-{}", std::process::id()));
    pod.spec.host_network = Some(true);
    let mut app = sh_container(
        "app",
        "cat /etc/hosts; echo POD_IP=$POD_IP; echo HOST_IP=$HOST_IP; echo done",
    );
    app.env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("HOST_IP", "status.hostIP"),
    ];
    pod.spec.containers.push(app);
    h.sync_until(&pod, "app ran", |s| {
        s.newest("app")
            .is_some_and(|c| c.state == ContainerState::Exited)
    });
    let log = h.status(&pod).newest("app").unwrap().log_path.clone();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for want in [
        "# Kubernetes-managed hosts file (host network).",
        "192.0.2.77 injected-node",
        "# Entries added by HostAliases.",
        "1.2.3.4\tfoo.local\tbar.local",
        "POD_IP=192.0.2.77",
        "HOST_IP=192.0.2.77",
    ] {
        assert!(text.contains(want), "{want:?} missing from {log}:\n{text}");
    }
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), Some(1));
    assert!(killed.is_ok(), "{killed}");
    drop(containerd);
}
