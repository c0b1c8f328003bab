//! A private containerd for tests that need a real runtime.
//!
//! Started by `tests/containerd/start-containerd.sh` under a fresh directory (own root,
//! state, sockets, runc root), with the locally built busybox and pause images. The
//! images are built once per machine into `$LITELET_IMAGES` (default
//! `/tmp/litelet-test-images`). Without root or containerd the tests are skipped
//! loudly, unless `CI=true`, where a missing runtime is a failure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use litelet::cri::{pb, RuntimeClient};
use protobuf::{EnumOrUnknown, MessageField};

use super::skip;

/// The busybox image every real-runtime test runs.
pub const BUSYBOX: &str = "localhost/litelet/busybox:1.0";

/// A running private containerd; stopped and cleaned up on drop.
pub struct Containerd {
    dir: PathBuf,
    socket: PathBuf,
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/containerd")
}

impl Containerd {
    /// Starts containerd for `test`, or returns None (after a loud message) when this
    /// machine cannot run it and we are not in CI.
    pub fn start(test: &str) -> Option<Containerd> {
        Self::start_with(test, None, None)
    }

    /// Like [`Containerd::start`], with a pod network: a private bridge and a /24 of
    /// `10.89.0.0/16` for this instance (so the runtime reports NetworkReady, as a
    /// node's runtime must for the node to be Ready). The bridge goes on drop.
    pub fn start_with_pod_network(test: &str) -> Option<Containerd> {
        Self::start_with_pod_network_and_registries(test, None)
    }

    /// Like [`Containerd::start_with_pod_network`]; the CRI plugin reaches registries
    /// as the containerd hosts directory `registry_hosts` says (a test registry's
    /// https endpoint and CA, see `support::registry`).
    pub fn start_with_pod_network_and_registries(
        test: &str,
        registry_hosts: Option<&Path>,
    ) -> Option<Containerd> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Offset by PID so test binaries run one after another rarely reuse a subnet
        // whose bridge a killed run left behind.
        let n = (std::process::id() * 7 + NEXT.fetch_add(1, Ordering::Relaxed)) % 250 + 1;
        Self::start_with(test, Some(n), registry_hosts)
    }

    fn start_with(
        test: &str,
        network: Option<u32>,
        registry_hosts: Option<&Path>,
    ) -> Option<Containerd> {
        if !nix::unistd::geteuid().is_root() {
            return skip(test, "needs root");
        }
        if Command::new("containerd")
            .arg("--version")
            .output()
            .is_err()
        {
            return skip(
                test,
                "containerd is not installed (apt-get install containerd runc)",
            );
        }
        let dir = std::env::temp_dir().join(format!(
            "litelet-ctd-{}-{}",
            std::process::id(),
            test.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        ));
        let images =
            std::env::var("LITELET_IMAGES").unwrap_or_else(|_| "/tmp/litelet-test-images".into());
        let mut cmd = Command::new(scripts().join("start-containerd.sh"));
        cmd.arg(&dir).env("LITELET_IMAGES", images);
        if let Some(n) = network {
            cmd.env("LITELET_CNI_SUBNET", format!("10.89.{n}.0/24"))
                .env(
                    "LITELET_CNI_BRIDGE",
                    format!("lt{}-{n}", std::process::id() % 100_000),
                );
        }
        if let Some(hosts) = registry_hosts {
            cmd.env("LITELET_REGISTRY_HOSTS", hosts);
        }
        let output = cmd.output().expect("run start-containerd.sh");
        if !output.status.success() {
            panic!(
                "{test}: starting containerd failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let socket = dir.join("containerd.sock");
        Some(Containerd { dir, socket })
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's own log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("stop-containerd.sh"))
            .arg(&self.dir)
            .status();
    }
}

/// Removes a test's cgroup parent and everything below it (bottom-up: runc's
/// containers, litelet's `kubepods/<qos>/pod<uid>`) from every hierarchy. Processes
/// that were just stopped may hold a cgroup a moment longer, so it tries again for a
/// few seconds; what is still busy after that stays, harmlessly.
pub fn remove_cgroup_tree(parent: &str) {
    fn remove(dir: &Path) -> bool {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                remove(&entry.path());
            }
        }
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    }
    let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let dirs: Vec<_> = controllers
        .flatten()
        .map(|c| c.path().join(parent.trim_start_matches('/')))
        .collect();
    for _ in 0..50 {
        // Every hierarchy gets its try each round.
        if dirs.iter().filter(|dir| !remove(dir)).count() == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A test's private cgroup parent, removed by [`remove_cgroup_tree`] when dropped.
/// Declare it before the [`Containerd`] so that it drops after: a failed check leaves
/// running containers, whose cgroups only go once containerd has stopped them.
pub struct CgroupRoot(pub String);

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        remove_cgroup_tree(&self.0);
    }
}

/// litelet's cgroup manager on this host's hierarchy with its pods under
/// `cgroup_root` (e.g. `/litelet-resize-<pid>`), the QoS cgroups already made. Pair
/// it with a [`CgroupRoot`] of the same folder so that the tree goes afterwards.
pub fn qos_cgroups_under(cgroup_root: &str) -> litelet::cgroups::PodCgroupManager {
    let cgroups =
        litelet::cgroups::PodCgroupManager::from_system(litelet::cgroups::ManagerConfig {
            cgroup_root: cgroup_root.to_owned(),
            ..Default::default()
        })
        .expect("cgroup manager");
    cgroups.ensure_qos_hierarchy().expect("qos cgroups");
    cgroups
}

/// The namespaces of a host-network pod's sandbox and containers: the node's network,
/// a PID namespace per container, the pod's IPC.
pub fn host_network() -> MessageField<pb::NamespaceOption> {
    MessageField::some(pb::NamespaceOption {
        network: EnumOrUnknown::new(pb::NamespaceMode::NODE),
        pid: EnumOrUnknown::new(pb::NamespaceMode::CONTAINER),
        ipc: EnumOrUnknown::new(pb::NamespaceMode::POD),
        ..Default::default()
    })
}

/// The sandbox of host-network pod `default/<name>` under `cgroup_parent`, labelled as
/// litelet labels its pods, its container logs below `log_dir`. No hostname: runc
/// refuses one without a private UTS namespace.
pub fn host_network_sandbox(
    name: &str,
    uid: &str,
    log_dir: &Path,
    cgroup_parent: &str,
) -> pb::PodSandboxConfig {
    let labels = HashMap::from([
        ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
        ("io.kubernetes.pod.name".to_owned(), name.to_owned()),
        (
            "io.kubernetes.pod.namespace".to_owned(),
            "default".to_owned(),
        ),
    ]);
    pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        log_directory: log_dir.display().to_string(),
        labels,
        linux: MessageField::some(pb::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.to_owned(),
            security_context: MessageField::some(pb::LinuxSandboxSecurityContext {
                namespace_options: host_network(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Busybox container `name` of `sandbox`'s pod running `command`, labelled with the
/// pod's labels and its own name, logging to `<name>/0.log`.
pub fn busybox_container(
    sandbox: &pb::PodSandboxConfig,
    name: &str,
    command: &[&str],
) -> pb::ContainerConfig {
    let mut labels = sandbox.labels.clone();
    labels.insert("io.kubernetes.container.name".into(), name.into());
    pb::ContainerConfig {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        log_path: format!("{name}/0.log"),
        linux: MessageField::some(pb::LinuxContainerConfig {
            security_context: MessageField::some(pb::LinuxContainerSecurityContext {
                namespace_options: host_network(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..super::fake_cri::container_config(name, BUSYBOX, labels)
    }
}

impl Containerd {
    /// Runs `sandbox`; returns its ID. A failure shows containerd's log.
    pub fn run_sandbox(&self, runtime: &RuntimeClient, sandbox: &pb::PodSandboxConfig) -> String {
        runtime
            .run_pod_sandbox(&pb::RunPodSandboxRequest {
                config: MessageField::some(sandbox.clone()),
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", self.log_tail()))
            .pod_sandbox_id
    }

    /// Creates and starts `config` in the running sandbox; returns the container's ID.
    /// A failure shows containerd's log.
    pub fn run_container(
        &self,
        runtime: &RuntimeClient,
        sandbox_id: &str,
        sandbox: &pb::PodSandboxConfig,
        config: pb::ContainerConfig,
    ) -> String {
        let id = runtime
            .create_container(&pb::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: MessageField::some(config),
                sandbox_config: MessageField::some(sandbox.clone()),
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", self.log_tail()))
            .container_id;
        runtime
            .start_container(&pb::StartContainerRequest {
                container_id: id.clone(),
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", self.log_tail()));
        id
    }
}

impl Containerd {
    /// Runs `sandbox` with one busybox container `main` running `command`; returns
    /// (sandbox ID, container ID).
    pub fn run_busybox_pod(
        &self,
        runtime: &RuntimeClient,
        sandbox: &pb::PodSandboxConfig,
        command: &[&str],
    ) -> (String, String) {
        let sandbox_id = self.run_sandbox(runtime, sandbox);
        let main = busybox_container(sandbox, "main", command);
        let id = self.run_container(runtime, &sandbox_id, sandbox, main);
        (sandbox_id, id)
    }
}

/// Stops and removes a sandbox with its containers; either step failing fails the test.
pub fn remove_sandbox(runtime: &RuntimeClient, sandbox_id: &str) {
    runtime
        .stop_pod_sandbox(&pb::StopPodSandboxRequest {
            pod_sandbox_id: sandbox_id.into(),
            ..Default::default()
        })
        .expect("stop sandbox");
    runtime
        .remove_pod_sandbox(&pb::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox_id.into(),
            ..Default::default()
        })
        .expect("remove sandbox");
}
