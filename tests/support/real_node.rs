//! A litelet process as a node of the real control plane ([`ControlPlane`]), on a
//! private real containerd: its own node name, root dir, cgroup root, ports and node
//! kubeconfig (`system:node:<name>`), advertising the control plane's node address so
//! the apiserver reaches its port for logs, exec and port-forward. Stopped (SIGTERM,
//! then SIGKILL) and its cgroups removed on drop; the containerd goes with it.

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use super::containerd::{remove_cgroup_tree, Containerd, BUSYBOX};
use super::control_plane::ControlPlane;
use super::pods::ApiPod;
use super::wait_until;

/// How long any wait on the real cluster may take before it fails.
pub const WAIT: Duration = Duration::from_secs(90);

pub struct RealNode {
    pub name: String,
    pub cp: &'static ControlPlane,
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub containerd: Containerd,
    cgroup_root: String,
    pub port: u16,
    pub healthz_port: u16,
    extra: Vec<String>,
    /// Environment litelet starts with (e.g. libfaketime's, for a clock that is off).
    env: Vec<(String, String)>,
    program: Program,
}

/// Which kubelet the node runs.
#[derive(Clone, Debug)]
enum Program {
    /// This build's litelet (or `LITELET_TEST_BINARY`).
    Litelet,
    /// The upstream kubelet at this path, configured as litelet is (the side-by-side
    /// benchmark): same runtime, cgroup root, ports, node name and address.
    Upstream(PathBuf),
}

impl RealNode {
    /// Starts containerd and litelet as node `name` (skips loudly outside CI when
    /// this machine cannot).
    pub fn start(test: &str, name: &str, extra: &[&str]) -> Option<RealNode> {
        Self::start_with_registries(test, name, extra, None)
    }

    /// Like [`RealNode::start`] with `--root-dir` on a tmpfs of `size` (e.g. `64m`), so
    /// a test can fill nodefs for real.
    pub fn start_with_root_tmpfs(
        test: &str,
        name: &str,
        extra: &[&str],
        size: &str,
    ) -> Option<RealNode> {
        let mut node = Self::start_inner(test, name, extra, None, Some(size.to_owned()))?;
        node.spawn();
        Some(node)
    }

    /// Like [`RealNode::start`], the runtime reaching registries as the containerd
    /// hosts directory `registry_hosts` says (see `support::registry`).
    pub fn start_with_registries(
        test: &str,
        name: &str,
        extra: &[&str],
        registry_hosts: Option<&Path>,
    ) -> Option<RealNode> {
        let mut node = Self::start_inner(test, name, extra, registry_hosts, None)?;
        node.spawn();
        Some(node)
    }

    /// Like [`RealNode::start`], but the node has no kubeconfig of its own: only a
    /// bootstrap token (`--bootstrap-kubeconfig`), with which litelet asks the
    /// cluster for its client certificate into `--cert-dir <dir>/pki` (the control
    /// plane must run a controller-manager to approve and sign it).
    pub fn start_bootstrapping(
        test: &str,
        name: &str,
        token: &str,
        extra: &[&str],
    ) -> Option<RealNode> {
        Self::start_bootstrapping_with_env(test, name, token, extra, &[])
    }

    /// [`RealNode::start_bootstrapping`], litelet started with `env` added to its
    /// environment (every start).
    pub fn start_bootstrapping_with_env(
        test: &str,
        name: &str,
        token: &str,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Option<RealNode> {
        let mut node = Self::start_inner(test, name, extra, None, None)?;
        node.env = env.to_vec();
        let d = node.dir.path().to_owned();
        std::fs::remove_file(d.join("kubeconfig")).expect("remove kubeconfig");
        std::fs::write(
            d.join("bootstrap.conf"),
            node.cp.bootstrap_kubeconfig_yaml(token),
        )
        .expect("write bootstrap kubeconfig");
        node.extra.extend([
            "--bootstrap-kubeconfig".to_owned(),
            d.join("bootstrap.conf").display().to_string(),
            "--cert-dir".to_owned(),
            d.join("pki").display().to_string(),
        ]);
        node.spawn();
        Some(node)
    }

    fn start_inner(
        test: &str,
        name: &str,
        extra: &[&str],
        registry_hosts: Option<&Path>,
        root_tmpfs: Option<String>,
    ) -> Option<RealNode> {
        let cp = ControlPlane::shared(test)?;
        // The node name keeps the socket path short (unix sockets allow 108 bytes).
        let containerd = Containerd::start_with_pod_network_and_registries(name, registry_hosts)?;
        let dir = tempfile::tempdir().expect("node temp dir");
        std::fs::create_dir_all(dir.path().join("manifests")).expect("manifests dir");
        cp.write_node_kubeconfig(name, &dir.path().join("kubeconfig"));
        std::fs::write(dir.path().join("ca.crt"), &cp.ca_pem).expect("write ca");
        if let Some(size) = &root_tmpfs {
            let root = dir.path().join("root");
            std::fs::create_dir_all(&root).expect("root dir");
            nix::mount::mount(
                Some("tmpfs"),
                &root,
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                Some(format!("size={size}").as_str()),
            )
            .expect("tmpfs root dir");
        }
        let node = RealNode {
            name: name.to_owned(),
            cp,
            child: None,
            dir,
            containerd,
            cgroup_root: format!("/litelet-real-{}-{name}", std::process::id()),
            port: free_port(),
            healthz_port: free_port(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            program: Program::Litelet,
        };
        Some(node)
    }

    /// Like [`RealNode::start`] without starting the kubelet: the caller may point it
    /// elsewhere first ([`RealNode::set_api_server`], [`RealNode::use_upstream_kubelet`])
    /// and then calls [`RealNode::start_again`].
    pub fn prepare(test: &str, name: &str, extra: &[&str]) -> Option<RealNode> {
        Self::start_inner(test, name, extra, None, None)
    }

    /// Runs the upstream kubelet at `binary` instead of litelet, from the next start.
    pub fn use_upstream_kubelet(&mut self, binary: &Path) {
        self.program = Program::Upstream(binary.to_owned());
    }

    fn spawn(&mut self) {
        if let Program::Upstream(binary) = self.program.clone() {
            return self.spawn_upstream(&binary);
        }
        let binary = std::env::var_os("LITELET_TEST_BINARY")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_litelet").into());
        let d = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("litelet.log"))
            .expect("litelet log");
        let child = Command::new(binary)
            .env(litelet::kernel_tunables::TEST_ROOT_ENV, super::proc_sys(d))
            .args(["--container-runtime-endpoint", &self.containerd.endpoint()])
            .args(["--hostname-override", &self.name])
            .args(["--node-ip", &self.cp.node_ip.to_string()])
            .arg("--kubeconfig")
            .arg(d.join("kubeconfig"))
            .arg("--client-ca-file")
            .arg(d.join("ca.crt"))
            .arg("--device-plugins-dir")
            .arg(d.join("device-plugins"))
            .arg("--root-dir")
            .arg(d.join("root"))
            .arg("--pod-logs-dir")
            .arg(d.join("logs"))
            .arg("--pod-manifest-path")
            .arg(d.join("manifests"))
            .args(["--cgroup-root", &self.cgroup_root])
            .args(["--port", &self.port.to_string()])
            .args(["--healthz-port", &self.healthz_port.to_string()])
            .args(
                // Tests resync often; a caller that sets its own frequency wins.
                (!self.extra.iter().any(|a| a.starts_with("--sync-frequency")))
                    .then_some(["--sync-frequency", "10s"])
                    .into_iter()
                    .flatten(),
            )
            .args(&self.extra)
            .args(
                // No eviction thresholds unless the test sets its own: upstream's defaults
                // (imagefs.available<15%, nodefs.available<10%) judge the test machine's own disk,
                // which a busy build machine can be past; `tests/apiserver/real_eviction.rs` sets its own.
                (!self.extra.iter().any(|a| a.starts_with("--eviction-hard")))
                    .then_some("--eviction-hard="),
            )
            // The benchmark (`benches/litelet/real.rs`) measures CPU with less logging.
            .env(
                "RUST_LOG",
                std::env::var("LITELET_REAL_NODE_LOG")
                    .unwrap_or_else(|_| "info,litelet=debug".to_owned()),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start litelet");
        self.child = Some(child);
    }

    /// The upstream kubelet with what litelet gets on its command line, in a
    /// KubeletConfiguration file (upstream's defaults otherwise; cgroup v1 allowed, as
    /// this machine has it; no eviction thresholds, as for litelet). Extra arguments
    /// are passed on as they are.
    fn spawn_upstream(&mut self, binary: &Path) {
        make_cgroup_root(&self.cgroup_root);
        let d = self.dir.path();
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             containerRuntimeEndpoint: {endpoint}\n\
             cgroupDriver: cgroupfs\n\
             cgroupRoot: {cgroup_root}\n\
             failCgroupV1: false\n\
             failSwapOn: false\n\
             staticPodPath: {manifests}\n\
             podLogsDir: {logs}\n\
             port: {port}\n\
             healthzPort: {healthz}\n\
             healthzBindAddress: 127.0.0.1\n\
             readOnlyPort: 0\n\
             evictionHard: {{}}\n\
             authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true}}\n  \
             x509: {{clientCAFile: {ca}}}\n\
             authorization: {{mode: Webhook}}\n",
            endpoint = self.containerd.endpoint(),
            cgroup_root = self.cgroup_root,
            manifests = d.join("manifests").display(),
            logs = d.join("logs").display(),
            port = self.port,
            healthz = self.healthz_port,
            ca = d.join("ca.crt").display(),
        );
        std::fs::write(d.join("kubelet-config.yaml"), config).expect("write kubelet config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("litelet.log"))
            .expect("kubelet log");
        let child = Command::new(binary)
            .arg("--config")
            .arg(d.join("kubelet-config.yaml"))
            .arg("--kubeconfig")
            .arg(d.join("kubeconfig"))
            .args(["--hostname-override", &self.name])
            .args(["--node-ip", &self.cp.node_ip.to_string()])
            .arg("--root-dir")
            .arg(d.join("root"))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the upstream kubelet");
        self.child = Some(child);
    }

    /// Stops litelet (SIGTERM; containers keep running) and starts it again.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let _ = wait_until(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Points litelet's kubeconfig at `url` (e.g. a [`super::tcp_proxy::TcpProxy`]);
    /// takes effect at the next (re)start.
    pub fn set_api_server(&self, url: &str) {
        let path = self.dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&path).expect("read node kubeconfig");
        let text: Vec<String> = text
            .lines()
            .map(|l| match l.trim_start().strip_prefix("server: ") {
                Some(_) => format!("    server: {url}"),
                None => l.to_owned(),
            })
            .collect();
        std::fs::write(&path, text.join("\n") + "\n").expect("write node kubeconfig");
    }

    /// Starts litelet again after [`RealNode::stop`].
    pub fn start_again(&mut self) {
        if self.child.is_none() {
            self.spawn();
        }
    }

    /// The node API's loopback `/healthz` status code (None when it does not answer).
    pub fn healthz(&self) -> Option<u16> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.healthz_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.split(' ').nth(1)?.parse().ok()
    }

    /// The litelet process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The node's `--cgroup-root` (e.g. `/litelet-real-<pid>-<name>`).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("litelet.log")).unwrap_or_default()
    }

    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(80)..].join("\n")
    }

    fn is_dead(&self) -> bool {
        let Some(child) = &self.child else {
            return true;
        };
        std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
            .map(|stat| {
                let state = stat.rsplit(')').next().unwrap_or("");
                state.trim_start().starts_with('Z')
            })
            .unwrap_or(true)
    }

    /// Waits for `check`; fails at once, with litelet's log, if litelet dies.
    pub fn wait_for(&self, what: &str, mut check: impl FnMut() -> bool) {
        let mut died = false;
        let done = wait_until(WAIT, || {
            died = self.is_dead();
            died || check()
        });
        let why = if died { "litelet died" } else { "timed out" };
        assert!(
            done && !died,
            "{why} waiting for {what} on node {}; litelet log:\n{}\ncontainerd log:\n{}",
            self.name,
            self.tail(),
            self.containerd.log_tail()
        );
    }

    /// The Node object as the apiserver has it.
    pub fn node_object(&self) -> Option<Value> {
        self.cp.get(&format!("/api/v1/nodes/{}", self.name))
    }

    /// Waits until the Node is Ready.
    pub fn wait_ready(&self) {
        self.wait_for("node Ready", || {
            self.node_object()
                .is_some_and(|n| condition(&n["status"], "Ready") == Some("True"))
        });
    }

    /// Waits until `ns/name` satisfies `check`; returns the pod as it was then.
    pub fn wait_pod(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        self.wait_for(&format!("{ns}/{name}: {what}"), || {
            match self.cp.get(&format!("/api/v1/namespaces/{ns}/pods/{name}")) {
                Some(pod) => {
                    let ok = check(&pod);
                    last = pod;
                    ok
                }
                None => false,
            }
        });
        last
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
        // The benchmark's `LITELET_BENCH_KEEP_LOGS=DIR`: the node's log, by node name.
        if let Ok(dir) = std::env::var("LITELET_BENCH_KEEP_LOGS") {
            let _ = std::fs::copy(
                self.dir.path().join("litelet.log"),
                Path::new(&dir).join(format!("{}.log", self.name)),
            );
        }
        // Stop the sandboxes litelet left running (it leaves containers alone when it
        // exits), so the runtime tears their networks down before it goes.
        self.remove_sandboxes();
        remove_cgroup_tree(&self.cgroup_root);
        // litelet leaves pods running when it stops, so their volume mounts (projected
        // token volumes are tmpfs) and the optional root tmpfs are still there.
        super::unmount_everything_below(self.dir.path());
    }
}

impl RealNode {
    /// How many sandboxes the runtime has for the pod with this UID (any state).
    pub fn sandbox_count(&self, pod_uid: &str) -> usize {
        self.sandboxes(pod_uid).len()
    }

    /// The runtime's sandboxes of the pod with this UID (any state).
    pub fn sandboxes(&self, pod_uid: &str) -> Vec<litelet::cri::pb::PodSandbox> {
        let all = self.all_sandboxes().into_iter();
        all.filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == pod_uid))
            .collect()
    }

    /// Every sandbox the node's runtime holds (any pod, any state).
    pub fn all_sandboxes(&self) -> Vec<litelet::cri::pb::PodSandbox> {
        use litelet::cri::{self, pb, ConnectOptions, Endpoint};
        let endpoint = Endpoint::parse(&self.containerd.endpoint()).expect("endpoint");
        let (runtime, _) = cri::connect(&endpoint, &ConnectOptions::default());
        let list = runtime
            .list_pod_sandbox(&pb::ListPodSandboxRequest::default())
            .expect("list sandboxes");
        list.items
    }

    /// Stops and removes every sandbox of the node's runtime (its containers go with
    /// them), as a reboot leaves the runtime.
    pub fn remove_sandboxes(&self) {
        use litelet::cri::{self, pb, ConnectOptions, Endpoint};
        let Ok(endpoint) = Endpoint::parse(&self.containerd.endpoint()) else {
            return;
        };
        let (runtime, _) = cri::connect(&endpoint, &ConnectOptions::default());
        let Ok(list) = runtime.list_pod_sandbox(&pb::ListPodSandboxRequest::default()) else {
            return;
        };
        for sandbox in list.items {
            let _ = runtime.stop_pod_sandbox(&pb::StopPodSandboxRequest {
                pod_sandbox_id: sandbox.id.clone(),
                ..Default::default()
            });
            let _ = runtime.remove_pod_sandbox(&pb::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox.id,
                ..Default::default()
            });
        }
    }
}

/// Makes `root` in every cgroup v1 hierarchy, as the upstream kubelet wants its
/// `cgroupRoot` to exist (litelet makes it itself); the cpuset one gets its parent's
/// CPUs and memory nodes, which a new cpuset lacks.
fn make_cgroup_root(root: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for h in hierarchies.flatten().filter(|h| h.file_name() != "unified") {
        let dir = h.path().join(root.trim_start_matches('/'));
        let _ = std::fs::create_dir_all(&dir);
        if h.file_name() == "cpuset" {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(h.path().join(file)) {
                    let _ = std::fs::write(dir.join(file), value.trim());
                }
            }
        }
    }
}

/// A pod bound to `node` with one busybox container `main` running `script` under
/// `sh -c`, on the host network (the test containerd has no CNI), given `grace`
/// seconds to stop. Tests add what else they need (resources, volumes) to the JSON.
pub fn busybox_pod(ns: &str, name: &str, node: &str, grace: u32, script: &str) -> Value {
    ApiPod::new(ns, name, node, BUSYBOX)
        .host_network()
        .grace(grace)
        .script(script)
        .json()
}

/// `file` of the first `pod<uid>` cgroup at most `depth` levels below `root`, trimmed.
pub fn find_pod_cgroup_file(root: &Path, uid: &str, depth: usize, file: &str) -> Option<String> {
    fn find(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
        if depth == 0 {
            return None;
        }
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name().to_string_lossy() == name {
                return Some(path);
            }
            if let Some(found) = find(&path, name, depth - 1) {
                return Some(found);
            }
        }
        None
    }
    let dir = find(root, &format!("pod{uid}"), depth)?;
    std::fs::read_to_string(dir.join(file))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The status of condition `kind` in an object's `status.conditions`.
pub fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
}

/// The status of container `name` in a pod's `status.containerStatuses`.
pub fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// Creates PV `pv` (with `source`, e.g. `{"csi": {...}}`) and PVC `claim` and binds
/// them as the PV controller would: claimRef with the claim's UID, phase Bound.
pub fn bound_claim(node: &RealNode, ns: &str, claim: &str, pv: &str, source: Value) {
    owned_bound_claim(node, ns, claim, pv, source, json!([]));
}

/// [`bound_claim`] with the claim's `ownerReferences` (a generic ephemeral volume's
/// claim is controlled by its pod).
pub fn owned_bound_claim(
    node: &RealNode,
    ns: &str,
    claim: &str,
    pv: &str,
    source: Value,
    owners: Value,
) {
    let cp = node.cp;
    let pvc = cp.create(
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
        &json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "ownerReferences": owners},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv,
                     "storageClassName": "",
                     "resources": {"requests": {"storage": "1Mi"}}},
        }),
    );
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "1Mi"},
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "namespace": ns, "name": claim, "uid": pvc["metadata"]["uid"]},
    });
    for (k, v) in source.as_object().expect("source object") {
        spec[k] = v.clone();
    }
    cp.create(
        "/api/v1/persistentvolumes",
        &json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv}, "spec": spec}),
    );
    cp.patch(
        &format!("/api/v1/persistentvolumes/{pv}/status"),
        &json!({"status": {"phase": "Bound"}}),
    );
    cp.patch(
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}/status"),
        &json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                           "capacity": {"storage": "1Mi"}}}),
    );
}
