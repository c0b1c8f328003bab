//! The VM tier (`make vm`, and `make test` in CI): litelet's own `.deb` on a real host
//! of the kind its users run (Debian, systemd as PID 1, cgroup v2, containerd) in a
//! QEMU VM, joined with `kubeadm join` to the real control plane on this machine.
//!
//! One boot sequence per test keeps the emulated minutes few, and the two tests run
//! at the same time (an emulated VM mostly waits on its guest's timers, about half a
//! core each). The VM reaches the apiserver through a proxy the test can cut (for the
//! offline reboot), and the apiserver reaches the node's port through a proxy on the
//! node address (logs, exec, stats). See `tests/support/vm.rs` for how the test drives
//! the VM.
//!
//! The systemd-driver node boots Debian trixie (containerd 1.7, which streams CRI
//! container events, so the evented PLEG meets a real runtime there); the others
//! boot bookworm (containerd 1.6, relisting only) unless `VM_SUITE` says otherwise.
//!
//! Ignored by `cargo test`: `scripts/vm-tier.sh` runs it with the package built.

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use support::containerd::BUSYBOX;
use support::control_plane::ControlPlane;
use support::pod_data::{self, TOKEN};
use support::real_node::{condition, container_status};
use support::tcp_proxy::TcpProxy;
use support::vm::{Vm, VmImage};
use support::{free_port, wait_until};

/// Waits on the cluster: generous, the VM is emulated.
const SLOW: Duration = Duration::from_secs(600);
/// From power-on to the VM's agent: about a minute emulated; past this the guest is
/// taken as stalled and booted again.
const FIRST_BOOT: Duration = Duration::from_secs(300);

/// The package under test: `LITELET_DEB`, or the one `make deb` leaves in the target dir.
fn package() -> PathBuf {
    if let Some(deb) = std::env::var_os("LITELET_DEB") {
        return PathBuf::from(deb);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("packages");
    std::fs::read_dir(&dir)
        .ok()
        .and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "deb"))
        })
        .unwrap_or_else(|| panic!("no .deb in {} (make deb, or LITELET_DEB)", dir.display()))
}

/// The busybox and pause archives of the containerd tests (built once, whichever test
/// asks first; the other waits for them).
fn images() -> PathBuf {
    static IMAGES: OnceLock<PathBuf> = OnceLock::new();
    IMAGES.get_or_init(build_images).clone()
}

fn build_images() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("LITELET_IMAGES").unwrap_or_else(|_| "/tmp/litelet-test-images".into()),
    );
    if !dir.join("busybox.tar").exists() || !dir.join("pause.tar").exists() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let ok = std::process::Command::new("bash")
            .arg(repo.join("tests/containerd/build-images.sh"))
            .arg(&dir)
            .status()
            .expect("build-images.sh");
        assert!(ok.success(), "the test images did not build");
    }
    dir
}

/// The cluster side of `kubeadm init` a worker's `kubeadm join` needs: the
/// `kubeadm-config` and `kubelet-config` ConfigMaps and their RBAC, from kubeadm
/// itself; the bootstrap token and its RBAC come from the harness.
fn upload_kubeadm_config(cp: &ControlPlane, driver: &str, port: u16, api: &str, extra: &str) {
    let assets = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS").expect("assets"));
    let config = cp.dir().join(format!("kubeadm-{driver}.yaml"));
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n\
             nodeRegistration:\n  criSocket: unix:///run/containerd/containerd.sock\n---\n\
             apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
             kubernetesVersion: v1.36.3\ncontrolPlaneEndpoint: {api}\n\
             networking:\n  serviceSubnet: 10.0.0.0/24\n  podSubnet: 10.88.0.0/16\n---\n\
             apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupDriver: {driver}\nport: {port}\npodPidsLimit: 1024\n\
             kubeReserved: {{cpu: 100m, memory: 64Mi}}\n{extra}"
        ),
    )
    .expect("kubeadm config");
    // upload-config: the two ConfigMaps and the roles to read them; bootstrap-token:
    // the RBAC of joining nodes (CSRs, auto-approval, reading Nodes) and cluster-info.
    for phase in ["upload-config all", "bootstrap-token"] {
        let out = std::process::Command::new(assets.join("kubeadm"))
            .args(["init", "phase"])
            .args(phase.split(' '))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", cp.admin_kubeconfig().display()))
            .output()
            .expect("run kubeadm");
        assert!(
            out.status.success(),
            "kubeadm init phase {phase}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A pod bound to `node` with one busybox container `main` (the image the VM has
/// preloaded, never pulled) running `script`, given `grace` seconds to stop. No
/// service-account token (but the pod of `JoinedNode::run_data_reading_pod`).
fn vm_pod(name: &str, node: &str, grace: u32, script: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script]}]}})
}

/// A busybox pod bound to `node` that notes each start of its container in the
/// node's `/var/lib/vm-marks/<pod>` and then sleeps.
fn marking_pod(name: &str, node: &str, resources: Value) -> Value {
    let script = "echo started >> /marks/$POD; echo hello-from-$POD; exec sleep 1000000";
    let mut pod = vm_pod(name, node, 2, script);
    let main = &mut pod["spec"]["containers"][0];
    main["env"] =
        json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    main["resources"] = resources;
    main["volumeMounts"] = json!([{"name": "marks", "mountPath": "/marks"}]);
    pod["spec"]["volumes"] = json!([{"name": "marks",
        "hostPath": {"path": "/var/lib/vm-marks", "type": "DirectoryOrCreate"}}]);
    pod
}

fn pod(cp: &ControlPlane, ns: &str, name: &str) -> Option<Value> {
    cp.get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
}

fn running_and_ready(cp: &ControlPlane, ns: &str, name: &str) -> bool {
    pod(cp, ns, name).is_some_and(|p| {
        p["status"]["phase"] == "Running" && condition(&p["status"], "Ready") == Some("True")
    })
}

/// Container id and restart count of each pod's `main`.
fn containers(cp: &ControlPlane, ns: &str, pods: &[&str]) -> Vec<(String, i64)> {
    pods.iter()
        .map(|name| {
            let p = pod(cp, ns, name).expect("pod");
            let c = container_status(&p, "main").cloned().unwrap_or(Value::Null);
            (
                c["containerID"].as_str().unwrap_or("").to_owned(),
                c["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Where a pod's cgroup is on the VM (cgroup v2), for the node's cgroup driver.
fn pod_cgroup(driver: &str, qos: &str, uid: &str) -> String {
    match (driver, qos) {
        ("systemd", "guaranteed") => format!(
            "/sys/fs/cgroup/kubepods.slice/kubepods-pod{}.slice",
            uid.replace('-', "_")
        ),
        ("systemd", other) => format!(
            "{}/kubepods-{other}-pod{}.slice",
            qos_cgroup(driver, other),
            uid.replace('-', "_")
        ),
        (_, "guaranteed") => format!("/sys/fs/cgroup/kubepods/pod{uid}"),
        (_, other) => format!("{}/pod{uid}", qos_cgroup(driver, other)),
    }
}

/// Where a QoS class's cgroup is on the VM (cgroup v2), for the node's cgroup driver.
fn qos_cgroup(driver: &str, qos: &str) -> String {
    match driver {
        "systemd" => format!("/sys/fs/cgroup/kubepods.slice/kubepods-{qos}.slice"),
        _ => format!("/sys/fs/cgroup/kubepods/{qos}"),
    }
}

/// litelet before the forged bus signals: its process, resident memory (KiB), the
/// time (for the journal since then) and the pods' containers.
struct Baseline {
    pid: String,
    rss_kib: u64,
    since: String,
    containers: Vec<(String, i64)>,
}

/// How much litelet's RSS may grow across the forgeries: generous (a new pod runs
/// meanwhile); decoding the 32 MiB forgery cost GiBs before.
const FORGERY_RSS_MARGIN_KIB: u64 = 64 * 1024;

/// As user `nobody`, to each of litelet's own bus connections (found with `busctl
/// list`): logind's PrepareForShutdown(true) with dbus-send, as the issue shows it;
/// the end, failed, of the next 30 systemd jobs (the next pod's slice among them);
/// and a signal of 32 MiB (the bus's limit) from forge-signal.pl. Prints
/// "baseline: <pid> <VmRSS kB> <epoch seconds>" first.
const FORGE_BUS_SIGNALS: &str = r#"set -eu
pid=$(systemctl show -p MainPID --value litelet)
echo "baseline: $pid $(awk '/^VmRSS/ {print $2}' /proc/$pid/status) $(date +%s)"
names=$(busctl list --unique --no-legend --no-pager | awk -v pid="$pid" '$2 == pid {print $1}')
[ -n "$names" ] || { echo "litelet ($pid) has no bus connection"; busctl list --no-pager; exit 1; }
echo "litelet's connections: $names"
job=$(busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1   org.freedesktop.systemd1.Manager StartUnit ss sysinit.target replace   | sed -n 's#^o ".*/job/\([0-9]*\)"$#\1#p')
[ -n "$job" ]
for name in $names; do
  runuser -u nobody -- dbus-send --system --type=signal --dest="$name" /org/freedesktop/login1     org.freedesktop.login1.Manager.PrepareForShutdown boolean:true
  runuser -u nobody -- sh -c 'i=$(($2 + 1)); while [ "$i" -le $(($2 + 30)) ]; do
      dbus-send --system --type=signal --dest="$1" /org/freedesktop/systemd1         org.freedesktop.systemd1.Manager.JobRemoved uint32:$i         objpath:/org/freedesktop/systemd1/job/$i string:forged.slice string:failed
      i=$((i + 1)); done' forge "$name" "$job"
  runuser -u nobody -- perl - /run/dbus/system_bus_socket "$name" /org/freedesktop/login1     org.freedesktop.login1.Manager PrepareForShutdown 33550336 < /task/forge-signal.pl
done
echo "forged to $names from job $job""#;

/// A VM joined to the control plane with `kubeadm join` as node `name`.
struct JoinedNode {
    cp: &'static ControlPlane,
    vm: Vm,
    name: String,
    driver: &'static str,
    /// The VM's way to the apiserver: cut it to play a lost uplink.
    api: TcpProxy,
    _to_node: TcpProxy,
}

impl JoinedNode {
    /// Boots a VM of the Debian `suite` (None: `VM_SUITE`, else bookworm), installs
    /// the package, configures containerd for `driver` and joins with kubeadm;
    /// `kubelet_config` is added to the cluster's KubeletConfiguration. None when this machine cannot run the tier (outside CI).
    fn join(
        test: &str,
        name: &str,
        driver: &'static str,
        kubelet_config: &str,
        swap: bool,
        suite: Option<&str>,
    ) -> Option<JoinedNode> {
        let cp = ControlPlane::shared(test)?;
        let image = VmImage::ensure(test, suite)?;
        cp.start_controllers(None).expect("controller-manager");
        cp.namespace(name);

        // The VM reaches the apiserver through a proxy the test can cut, and the
        // apiserver reaches the node's port through a proxy on the node address.
        let api = TcpProxy::start(cp.addr());
        let api_in_vm = format!("10.0.2.2:{}", api.addr.port());
        let kubelet_port = free_port();
        let forward = free_port();
        let to_node = TcpProxy::start_on(
            &format!("{}:{kubelet_port}", cp.node_ip),
            format!("127.0.0.1:{forward}").parse().expect("address"),
        );
        let token = cp.bootstrap_token();
        let discovery = cp.dir().join(format!("{name}-discovery.conf"));
        std::fs::write(
            &discovery,
            cp.bootstrap_kubeconfig_yaml(&token)
                .replace(&cp.url, &format!("https://{api_in_vm}")),
        )
        .expect("discovery file");

        let assets = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS").expect("assets"));
        let images = images();
        let deb = package();
        let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/node-setup.sh");
        let forger = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/forge-signal.pl");
        let vm = Vm::boot_until_up(
            &image,
            &[
                ("litelet.deb", &deb),
                ("kubeadm", &assets.join("kubeadm")),
                ("busybox.tar", &images.join("busybox.tar")),
                ("pause.tar", &images.join("pause.tar")),
                ("discovery.conf", &discovery),
                ("node-setup.sh", &setup),
                ("forge-signal.pl", &forger),
            ],
            &[("NODE_IP", cp.node_ip.to_string())],
            &[format!("tcp:127.0.0.1:{forward}-:{kubelet_port}")],
            FIRST_BOOT,
            2,
        );
        vm.on_failure(
            "systemctl status litelet --no-pager | head -20; \
             journalctl -u litelet --no-pager | tail -n 60",
        );
        let swap_arg = if swap { "swap" } else { "" };
        println!(
            "{}",
            vm.sh(&format!("sh /task/node-setup.sh {driver} {swap_arg}"))
        );
        if swap {
            // failSwapOn (upstream's default) refuses a host with swap on.
            let (rc, out) = vm
                .run(
                    "timeout 60 litelet --fail-swap-on=true --root-dir /tmp/swap-check 2>&1",
                    SLOW,
                )
                .expect("litelet with swap on");
            assert!(
                rc != 0 && out.contains("swap"),
                "litelet started with swap on: {rc} {out}"
            );
        }

        // kubeadm join, as an operator runs it on a node with the package: no preflight
        // check ignored (the package's `kubelet --version` answers upstream's form).
        // The cluster has one kubelet-config ConfigMap and the two tests (run at the
        // same time) want their own: each uploads its own and joins while it holds it.
        let joined = {
            static CLUSTER_CONFIG: Mutex<()> = Mutex::new(());
            let _held = CLUSTER_CONFIG.lock().unwrap_or_else(|e| e.into_inner());
            upload_kubeadm_config(cp, driver, kubelet_port, &api_in_vm, kubelet_config);
            vm.sh_within(
                &format!(
                    "kubeadm join --discovery-file /task/discovery.conf --tls-bootstrap-token \
                     {token} --node-name {name} 2>&1"
                ),
                SLOW,
            )
        };
        assert!(
            joined.contains("This node has joined the cluster"),
            "kubeadm join:\n{joined}"
        );
        let node = JoinedNode {
            cp,
            vm,
            name: name.to_owned(),
            driver,
            api,
            _to_node: to_node,
        };
        // Registration follows the client certificate within seconds, even emulated.
        assert!(
            wait_until(Duration::from_secs(300), || node.ready()),
            "the node never went Ready"
        );
        Some(node)
    }

    fn ready(&self) -> bool {
        self.cp
            .get(&format!("/api/v1/nodes/{}", self.name))
            .is_some_and(|n| condition(&n["status"], "Ready") == Some("True"))
    }

    /// The namespace of this node's pods (named after the node).
    fn ns(&self) -> &str {
        &self.name
    }

    fn pod(&self, name: &str) -> Option<Value> {
        pod(self.cp, self.ns(), name)
    }

    /// Creates the pod and waits until it runs and is ready; its uid.
    fn run_pod(&self, pod: Value) -> String {
        let name = pod["metadata"]["name"].as_str().expect("name").to_owned();
        let created = self
            .cp
            .create(&format!("/api/v1/namespaces/{}/pods", self.ns()), &pod);
        assert!(
            wait_until(SLOW, || running_and_ready(self.cp, self.ns(), &name)),
            "{name} never ran: {:?}",
            self.pod(&name).map(|p| p["status"].clone())
        );
        created["metadata"]["uid"].as_str().expect("uid").to_owned()
    }

    /// `kubectl exec <pod> -- cat <file>` through the apiserver.
    fn exec_cat(&self, pod: &str, file: &str) -> String {
        let out = self
            .cp
            .kubectl(&["exec", "-n", self.ns(), pod, "--", "cat", file]);
        assert!(
            out.status.success(),
            "kubectl exec {pod}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `kubectl exec <pod> -- cat <file>`, or None while exec fails.
    fn try_exec_cat(&self, pod: &str, file: &str) -> Option<String> {
        let out = self
            .cp
            .kubectl(&["exec", "-n", self.ns(), pod, "--", "cat", file]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The pod data (`support::pod_data`), then the pod `edgedata` reading it,
    /// running; its token.
    fn run_data_reading_pod(&self) -> String {
        pod_data::create_objects(self.cp, self.ns(), "s3cret-at-rest");
        let mut pod = marking_pod("edgedata", &self.name, json!({}));
        pod_data::read_by(&mut pod, "/marks/$POD");
        self.run_pod(pod);
        self.exec_cat("edgedata", TOKEN)
    }

    /// The node allocatable on `kubepods`, then one pod per QoS class: their pod
    /// cgroups hold the cgroup v2 values of their specs (weight = 1 + (shares - 2) *
    /// 9999 / 262142; podPidsLimit 1024), on the host side and, through exec, from
    /// inside the container. Returns the uids.
    fn check_qos_pods(&self) -> Vec<String> {
        self.check_kubepods_allocatable();
        let resources = [
            (
                "guaranteed",
                json!({"requests": {"cpu": "250m", "memory": "64Mi"},
                       "limits": {"cpu": "250m", "memory": "64Mi"}}),
            ),
            (
                "burstable",
                json!({"requests": {"cpu": "100m", "memory": "32Mi"},
                       "limits": {"cpu": "500m", "memory": "128Mi"}}),
            ),
            ("besteffort", json!({})),
        ];
        let uids: Vec<String> = resources
            .iter()
            .map(|(name, r)| self.run_pod(marking_pod(name, &self.name, r.clone())))
            .collect();
        let expected = [
            ("guaranteed", "25000 100000", "10", "67108864"),
            ("burstable", "50000 100000", "4", "134217728"),
            ("besteffort", "max 100000", "1", "max"),
        ];
        for ((qos, cpu_max, weight, memory_max), uid) in expected.iter().zip(&uids) {
            let dir = pod_cgroup(self.driver, qos, uid);
            let got = self.vm.sh(&format!(
                "cd {dir} && cat cpu.max cpu.weight memory.max pids.max"
            ));
            let want = format!("{cpu_max}\n{weight}\n{memory_max}\n1024\n");
            assert_eq!(got, want, "pod cgroup of {qos} ({dir})");
        }
        // The QoS cgroups' weights follow their pods: Burstable's from the sum of
        // its pods' CPU requests (100m: shares 102, weight 4), BestEffort's minimum.
        self.vm.sh_until(
            "the QoS cgroups' CPU weights follow the pods",
            &format!(
                "test \"$(cat {}/cpu.weight)\" = 4 && test \"$(cat {}/cpu.weight)\" = 1",
                qos_cgroup(self.driver, "burstable"),
                qos_cgroup(self.driver, "besteffort")
            ),
            SLOW,
        );
        assert_eq!(
            self.exec_cat("guaranteed", "/sys/fs/cgroup/cpu.max"),
            "25000 100000"
        );
        assert_eq!(
            self.exec_cat("guaranteed", "/sys/fs/cgroup/memory.max"),
            "67108864"
        );
        let logs = self.cp.kubectl(&["logs", "-n", self.ns(), "burstable"]);
        assert!(
            String::from_utf8_lossy(&logs.stdout).contains("hello-from-burstable"),
            "kubectl logs: {}",
            String::from_utf8_lossy(&logs.stderr)
        );
        uids
    }

    /// A container that exits on its own reaches the pod's status. On a runtime that
    /// streams container events (`streams`: containerd 1.7, trixie) the PLEG reads the
    /// stream (`kubelet_evented_pleg_connection_success_count` and events received on
    /// `/metrics`); on one that does not (containerd 1.6, bookworm) the relist alone
    /// brings it, and no stream was ever counted as open.
    fn check_container_exit_reaches_status(&self, streams: bool) {
        let mut pod = vm_pod("exits", &self.name, 2, "sleep 20; exit 3");
        pod["spec"]["restartPolicy"] = json!("Never");
        self.cp
            .create(&format!("/api/v1/namespaces/{}/pods", self.ns()), &pod);
        let exited = |p: &Value| {
            container_status(p, "main").is_some_and(|c| c["state"]["terminated"]["exitCode"] == 3)
        };
        assert!(
            wait_until(SLOW, || self
                .pod("exits")
                .is_some_and(|p| p["status"]["phase"] == "Running")),
            "exits never ran"
        );
        let relists_running = self.metric("kubelet_pleg_relist_duration_seconds_count");
        assert!(
            wait_until(SLOW, || self.pod("exits").is_some_and(|p| exited(&p))),
            "the exit never reached the status: {:?}",
            self.pod("exits").map(|p| p["status"].clone())
        );
        let relists_exited = self.metric("kubelet_pleg_relist_duration_seconds_count");
        println!("evented PLEG: relists {relists_running} while running, {relists_exited} after the exit");
        let connected = self.metric("kubelet_evented_pleg_connection_success_count");
        let events = self.metric("kubelet_evented_pleg_connection_latency_seconds_count");
        if streams {
            assert!(connected >= 1.0, "event stream connections: {connected}");
            assert!(events >= 1.0, "container events received: {events}");
        } else {
            assert_eq!(
                connected, 0.0,
                "a stream counted open on a runtime without events"
            );
            assert!(relists_exited > relists_running, "no relist saw the exit");
        }
        let deleted = self
            .cp
            .kubectl(&["delete", "pod", "-n", self.ns(), "exits", "--wait=false"]);
        assert!(deleted.status.success(), "kubectl delete pod exits");
    }

    /// A value of the node's `/metrics` (through the apiserver), 0 when absent.
    fn metric(&self, name: &str) -> f64 {
        let path = format!("/api/v1/nodes/{}/proxy/metrics", self.name);
        let out = self.cp.kubectl(&["get", "--raw", &path]);
        assert!(
            out.status.success(),
            "GET {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// `kubepods` holds the node's allocatable: capacity minus kubeReserved (100m,
    /// 64Mi), upstream's default `enforceNodeAllocatable: [pods]`.
    fn check_kubepods_allocatable(&self) {
        let dir = match self.driver {
            "systemd" => "/sys/fs/cgroup/kubepods.slice",
            _ => "/sys/fs/cgroup/kubepods",
        };
        let out = self.vm.sh(&format!(
            "nproc; echo $(( $(awk '/^MemTotal/ {{print $2}}' /proc/meminfo) * 1024 )); \
             cat {dir}/memory.max {dir}/cpu.weight"
        ));
        let numbers: Vec<u64> = out
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        let [cpus, memory, memory_max, weight] = numbers[..] else {
            panic!("nproc, MemTotal, kubepods memory.max and cpu.weight: {out}");
        };
        // The kernel keeps memory.max in whole pages.
        let want_max = (memory - 64 * 1024 * 1024) / 4096 * 4096;
        assert_eq!(memory_max, want_max, "kubepods memory.max ({out})");
        let shares = (cpus * 1000 - 100) * 1024 / 1000;
        let want_weight = 1 + (shares - 2) * 9999 / 262_142;
        assert_eq!(weight, want_weight, "kubepods cpu.weight ({out})");
    }

    /// In-place resize of the burstable pod's CPU reaches `cpu.max` and `cpu.weight`
    /// of its pod cgroup and the container's, and shows in the pod status.
    fn check_resize(&self, burstable_uid: &str) {
        let resize = self.cp.kubectl(&[
            "patch", "pod", "burstable", "-n", self.ns(), "--subresource", "resize", "-p",
            r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"200m"},"limits":{"cpu":"800m"}}}]}}"#,
        ]);
        assert!(
            resize.status.success(),
            "resize: {}",
            String::from_utf8_lossy(&resize.stderr)
        );
        let dir = pod_cgroup(self.driver, "burstable", burstable_uid);
        self.vm.sh_until(
            "the resize reached the pod cgroup",
            &format!(
                "test \"$(cat {dir}/cpu.max)\" = '80000 100000' && \
                 test \"$(cat {dir}/cpu.weight)\" = 8"
            ),
            SLOW,
        );
        // The Burstable QoS cgroup follows the new request (200m: shares 204, weight 8).
        self.vm.sh_until(
            "the resize reached the Burstable QoS cgroup",
            &format!(
                "test \"$(cat {}/cpu.weight)\" = 8",
                qos_cgroup(self.driver, "burstable")
            ),
            SLOW,
        );
        assert_eq!(
            self.exec_cat("burstable", "/sys/fs/cgroup/cpu.max"),
            "80000 100000"
        );
        assert!(
            wait_until(SLOW, || self.pod("burstable").is_some_and(|p| {
                container_status(&p, "main")
                    .is_some_and(|c| c["resources"]["limits"]["cpu"] == "800m")
                    && condition(&p["status"], "PodResizeInProgress").is_none()
            })),
            "the resize never showed in the pod status"
        );
    }

    /// A memory limit lowered below what the container uses is not applied: the
    /// limit stays, and the pod says why in its PodResizeInProgress condition.
    fn check_memory_decrease_below_usage_is_refused(&self, burstable_uid: &str) {
        let fill = self.cp.kubectl(&[
            "exec",
            "-n",
            self.ns(),
            "burstable",
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/shm/fill",
            "bs=1M",
            "count=48",
        ]);
        assert!(
            fill.status.success(),
            "filling /dev/shm: {}",
            String::from_utf8_lossy(&fill.stderr)
        );
        let resize = self.cp.kubectl(&[
            "patch",
            "pod",
            "burstable",
            "-n",
            self.ns(),
            "--subresource",
            "resize",
            "-p",
            r#"{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"40Mi"}}}]}}"#,
        ]);
        assert!(
            resize.status.success(),
            "resize: {}",
            String::from_utf8_lossy(&resize.stderr)
        );
        assert!(
            wait_until(SLOW, || self.pod("burstable").is_some_and(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "PodResizeInProgress"
                            && c["reason"] == "Error"
                            && c["message"].as_str().is_some_and(|m| m.contains("usage"))
                    })
                })
            })),
            "no resize error for a memory limit below usage: {:?}",
            self.pod("burstable")
                .map(|p| p["status"]["conditions"].clone())
        );
        let dir = pod_cgroup(self.driver, "burstable", burstable_uid);
        let limit = self.vm.sh(&format!("cat {dir}/memory.max"));
        assert_eq!(limit.trim(), "134217728", "the pod's memory limit changed");
    }

    /// `systemctl restart` (kubeadm's own command) keeps every container.
    fn check_restart_keeps_containers(&self, pods: &[&str]) {
        let before = containers(self.cp, self.ns(), pods);
        self.vm
            .sh("systemctl restart kubelet && systemctl is-active litelet");
        assert!(
            wait_until(SLOW, || self.ready()),
            "the node is not Ready after the restart"
        );
        std::thread::sleep(Duration::from_secs(20));
        assert_eq!(
            containers(self.cp, self.ns(), pods),
            before,
            "a restart of litelet restarted containers"
        );
    }

    /// logind's delay was raised to the shutdown period and litelet holds a delay lock.
    fn check_delay_lock(&self) {
        self.vm.sh_until(
            "a delay lock under logind's raised delay",
            "systemd-inhibit --list --no-pager | grep -q delay && \
             busctl get-property org.freedesktop.login1 /org/freedesktop/login1 \
             org.freedesktop.login1.Manager InhibitDelayMaxUSec | grep -qx 't 30000000'",
            SLOW,
        );
    }

    /// An unprivileged user forges bus signals to litelet ([`FORGE_BUS_SIGNALS`]);
    /// what to compare with once a new pod has run.
    fn forge_bus_signals(&self, pods: &[&str]) -> Baseline {
        let containers = containers(self.cp, self.ns(), pods);
        let out = self.vm.sh(FORGE_BUS_SIGNALS);
        println!("{out}");
        let fields: Vec<&str> = out
            .lines()
            .find_map(|l| l.strip_prefix("baseline: "))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        let [pid, rss, since] = fields[..] else {
            panic!("no baseline in:\n{out}");
        };
        Baseline {
            pid: pid.to_owned(),
            rss_kib: rss.parse().expect("VmRSS"),
            since: since.to_owned(),
            containers,
        }
    }

    /// None of the forgeries changed anything (a new pod, and its slice job, has run
    /// since): the same litelet process, Ready, the pods' containers as they were,
    /// the delay lock held, RSS within [`FORGERY_RSS_MARGIN_KIB`], no job failed; and
    /// litelet said it ignored them (so they did reach it).
    fn check_forgeries_changed_nothing(&self, before: &Baseline, pods: &[&str]) {
        let pid = self.vm.sh("systemctl show -p MainPID --value litelet");
        assert_eq!(
            pid.trim(),
            before.pid,
            "litelet restarted after the forgeries"
        );
        assert!(self.ready(), "the node is not Ready after the forgeries");
        assert_eq!(
            containers(self.cp, self.ns(), pods),
            before.containers,
            "the forgeries changed the pods' containers"
        );
        self.check_delay_lock();
        let journal = format!("journalctl -u litelet --no-pager --since @{}", before.since);
        let out = self.vm.sh(&format!(
            "awk '/^VmRSS/ {{print $2}}' /proc/{}/status; {journal} | grep -c 'dbus: ignored signal' || true;              {journal} | grep 'systemd job for' || true",
            before.pid
        ));
        let mut lines = out.lines();
        let rss: u64 = lines.next().and_then(|l| l.parse().ok()).expect("VmRSS");
        println!(
            "litelet's RSS: {} KiB before the forgeries, {rss} KiB after",
            before.rss_kib
        );
        assert!(
            rss <= before.rss_kib + FORGERY_RSS_MARGIN_KIB,
            "litelet's RSS grew from {} to {rss} KiB",
            before.rss_kib
        );
        let ignored: u32 = lines.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        assert!(ignored > 0, "litelet never said it ignored a forged signal");
        let failed: Vec<&str> = lines.collect();
        assert!(failed.is_empty(), "systemd jobs failed: {failed:?}");
    }

    /// Runs `shutdown` (a reboot or power-off of the VM) while watching the Node:
    /// whether its Ready condition turned False for the shutdown meanwhile.
    fn watching_for_shutdown_not_ready(&mut self, shutdown: impl FnOnce(&mut Self)) -> bool {
        let done = std::sync::atomic::AtomicBool::new(false);
        let (cp, name) = (self.cp, self.name.clone());
        std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let path = format!("/api/v1/nodes/{name}");
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let shutting_down = cp.get(&path).is_some_and(|n| {
                        n["status"]["conditions"].as_array().is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c["type"] == "Ready"
                                    && c["status"] == "False"
                                    && c["message"]
                                        .as_str()
                                        .is_some_and(|m| m.contains("node is shutting down"))
                            })
                        })
                    });
                    if shutting_down {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
                false
            });
            shutdown(self);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            watcher.join().unwrap_or(false)
        })
    }

    /// Each pod ended as upstream reports a node shutdown: Failed, reason Terminated,
    /// its message, and the DisruptionTarget condition.
    fn assert_shut_down(&self, pods: &[&str]) {
        for name in pods {
            let p = self.pod(name).expect("pod");
            let status = &p["status"];
            assert_eq!(status["phase"], "Failed", "{name}: {status}");
            assert_eq!(status["reason"], "Terminated", "{name}: {status}");
            assert_eq!(
                status["message"], "Pod was terminated in response to imminent node shutdown.",
                "{name}"
            );
            assert_eq!(
                condition(status, "DisruptionTarget"),
                Some("True"),
                "{name}: {status}"
            );
        }
    }
}

#[test]
#[ignore = "the VM tier, about 7 minutes of emulation: run it with make vm"]
fn a_packaged_node_joins_with_kubeadm_and_keeps_its_pods_through_restarts_and_an_offline_reboot() {
    let test = "a_packaged_node_joins_with_kubeadm_and_keeps_its_pods_through_restarts_and_an_offline_reboot";
    let Some(mut node) = JoinedNode::join(test, "vm-cgroupfs", "cgroupfs", "", false, None) else {
        return;
    };
    let modes = node
        .vm
        .sh("stat -L -c '%a %n' /etc/kubernetes/kubelet.conf \
         /var/lib/kubelet/pki/kubelet-client-current.pem");
    for line in modes.lines() {
        assert!(
            line.starts_with("600 "),
            "credentials must be 0600: {modes}"
        );
    }
    let uids = node.check_qos_pods();
    node.check_container_exit_reaches_status(false);
    node.check_resize(&uids[1]);
    node.check_memory_decrease_below_usage_is_refused(&uids[1]);

    // Stats from the v2 files, through the apiserver's node proxy. They are sampled
    // every 10 s, so the newest pod may be a sample away.
    let (cp, vm) = (node.cp, &node.vm);
    let summary_path = format!("/api/v1/nodes/{}/proxy/stats/summary", node.name);
    let pods_in = |s: &Value| s["pods"].as_array().map(Vec::len).unwrap_or(0);
    wait_until(SLOW, || {
        cp.get(&summary_path).is_some_and(|s| pods_in(&s) >= 3)
    });
    let summary = cp.get(&summary_path).expect("stats summary");
    assert!(
        summary["node"]["memory"]["availableBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no memory.available: {}",
        summary["node"]["memory"]
    );
    let pods_seen = pods_in(&summary);
    assert!(pods_seen >= 3, "summary lists {pods_seen} pods");

    // Restarts keep every container: systemctl restart, then a kill -9 of the main
    // process (systemd starts it again).
    let names = ["guaranteed", "burstable", "besteffort"];
    node.check_restart_keeps_containers(&names);
    let before = containers(cp, node.ns(), &names);
    let old_pid = vm.sh("systemctl show -p MainPID --value litelet");
    vm.sh(&format!("kill -9 {}", old_pid.trim()));
    vm.sh_until(
        "systemd started litelet again",
        &format!(
            "pid=$(systemctl show -p MainPID --value litelet); \
             test \"$pid\" != 0 && test \"$pid\" != {}",
            old_pid.trim()
        ),
        SLOW,
    );
    assert!(
        wait_until(SLOW, || node.ready()),
        "the node is not Ready after the kill"
    );
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(
        containers(cp, node.ns(), &names),
        before,
        "a kill -9 of litelet restarted containers"
    );
    let marks = vm.sh("wc -l < /var/lib/vm-marks/guaranteed");
    assert_eq!(marks.trim(), "1", "the container started again");

    // A deleted pod's cgroup goes.
    cp.delete(&format!("/api/v1/namespaces/{}/pods/besteffort", node.ns()));
    let gone = pod_cgroup(node.driver, "besteffort", &uids[2]);
    vm.sh_until(
        "the pod cgroup was removed",
        &format!("! test -e {gone}"),
        SLOW,
    );

    // A pod with the default token, a secret volume, env from the secret and
    // envFrom a configMap (edge autonomy: the node keeps their copy).
    let token = node.run_data_reading_pod();
    let first = vm.sh("cat /var/lib/vm-marks/edgedata");
    assert!(
        first.starts_with("pw=s3cret-at-rest env=s3cret-at-rest mode=edge tok="),
        "{first}"
    );

    // A reboot with the apiserver unreachable: the checkpointed pods come back, the
    // data reading pod with the same data from the node's copy.
    node.api.cut();
    vm.reboot();
    vm.wait_boot(2, SLOW);
    vm.sh_until(
        "the pods ran again after the reboot, offline",
        "test $(wc -l < /var/lib/vm-marks/guaranteed) -ge 2 && \
         test $(wc -l < /var/lib/vm-marks/burstable) -ge 2 && \
         test $(wc -l < /var/lib/vm-marks/edgedata) -ge 2",
        SLOW,
    );
    let starts = vm.sh("cat /var/lib/vm-marks/edgedata");
    assert!(
        starts.lines().all(|l| l == first.trim()),
        "edgedata saw other data after the reboot: {starts}"
    );
    let healthz = vm.sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:10248/healthz");
    assert_eq!(healthz.trim(), "200", "healthz after the reboot, offline");
    node.api.restore();
    assert!(
        wait_until(SLOW, || node.ready()
            && running_and_ready(cp, node.ns(), "guaranteed")
            && running_and_ready(cp, node.ns(), "burstable")
            && running_and_ready(cp, node.ns(), "edgedata")),
        "the node did not converge after the reboot: {:?}",
        node.pod("guaranteed").map(|p| p["status"].clone())
    );
    assert!(
        wait_until(SLOW, || node
            .try_exec_cat("edgedata", TOKEN)
            .is_some_and(|t| !t.is_empty() && t != token)),
        "edgedata's kept token was not replaced by a fresh one"
    );
    assert_eq!(node.vm.power_off(SLOW), 0, "the VM task failed");
}

/// A host-network pod whose preStop hook and SIGTERM handler report to the test
/// (`/mark` of the VM channel) before the container ends.
fn shutdown_reporting_pod(name: &str, node: &str, ctl_port: u16) -> Value {
    let mark = |what: &str| format!("wget -q -O- 'http://10.0.2.2:{ctl_port}/mark?{name}-{what}'");
    let script = format!(
        "trap '{}; exit 0' TERM; while true; do sleep 1; done",
        mark("term")
    );
    let mut pod = vm_pod(name, node, 20, &script);
    pod["spec"]["hostNetwork"] = json!(true);
    pod["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sh", "-c", mark("prestop")]}}});
    pod
}

#[test]
#[ignore = "the VM tier, about 7 minutes of emulation: run it with make vm"]
fn a_systemd_driver_node_runs_pods_in_slices_ignores_forged_bus_signals_and_shuts_down_gracefully()
{
    let test =
        "a_systemd_driver_node_runs_pods_in_slices_ignores_forged_bus_signals_and_shuts_down_gracefully";
    let Some(mut node) = JoinedNode::join(
        test,
        "vm-systemd",
        "systemd",
        "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n\
         failSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n",
        true,
        // trixie's containerd 1.7 streams container events: the evented PLEG's real runtime.
        Some("trixie"),
    ) else {
        return;
    };
    // The QoS slices are systemd units.
    let slices = node.vm.sh(
        "systemctl is-active kubepods.slice kubepods-burstable.slice kubepods-besteffort.slice",
    );
    assert_eq!(slices, "active\nactive\nactive\n", "QoS slices");
    let uids = node.check_qos_pods();
    node.check_container_exit_reaches_status(true);
    node.check_resize(&uids[1]);
    node.check_restart_keeps_containers(&["guaranteed", "burstable", "besteffort"]);
    // LimitedSwap on a host with a swap file: a Burstable container gets the share of
    // the node's swap its memory request has of the node's memory (32Mi here); a
    // Guaranteed one none. Each container is a scope in its pod's slice, as
    // containerd's systemd driver puts it (the sandbox's is there too).
    let scope = |qos: &str, uid: &str| {
        let id = containers(node.cp, node.ns(), &[qos])[0].0.clone();
        let id = id.trim_start_matches("containerd://").to_owned();
        format!(
            "{}/cri-containerd-{id}.scope",
            pod_cgroup(node.driver, qos, uid)
        )
    };
    let swap = node.vm.sh(&format!(
        "cat {}/memory.swap.max; awk '/^MemTotal|^SwapTotal/ {{print $2 * 1024}}' /proc/meminfo",
        scope("burstable", &uids[1])
    ));
    let numbers: Vec<f64> = swap
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [limit, memory, swap_total] = numbers[..] else {
        panic!("swap figures (memory.swap.max, MemTotal, SwapTotal): {swap}");
    };
    let share = 32.0 * 1024.0 * 1024.0 / memory * swap_total;
    assert!(
        swap_total > 0.0 && (limit - share).abs() <= share * 0.01,
        "burstable memory.swap.max {limit}, expected about {share}"
    );
    let none = node.vm.sh(&format!(
        "cat {}/memory.swap.max",
        scope("guaranteed", &uids[0])
    ));
    assert_eq!(none.trim(), "0", "a Guaranteed container gets no swap");

    // Graceful shutdown: logind's delay was raised to the period and litelet holds a
    // delay lock. `systemctl reboot`, then `systemctl poweroff`, each give the pods
    // their preStop hooks and SIGTERM, the node turns NotReady, and the final
    // statuses reach the apiserver before the VM goes down.
    node.check_delay_lock();
    // But first a local user forges logind's and systemd's signals to litelet: the
    // next pod is admitted and its slice starts, and nothing else changes.
    let qos_pods = ["guaranteed", "burstable", "besteffort"];
    let before = node.forge_bus_signals(&qos_pods);
    node.run_pod(shutdown_reporting_pod(
        "on-reboot",
        &node.name,
        node.vm.ctl_port(),
    ));
    node.check_forgeries_changed_nothing(&before, &qos_pods);
    let went_not_ready = node.watching_for_shutdown_not_ready(|node| {
        node.vm.reboot();
        node.vm.wait_boot(2, SLOW);
    });
    assert!(went_not_ready, "the node never said it was shutting down");
    assert_eq!(
        node.vm.marks(),
        ["on-reboot-prestop", "on-reboot-term"],
        "the preStop hook, then SIGTERM, before the reboot"
    );
    node.assert_shut_down(&["on-reboot", "guaranteed", "burstable", "besteffort"]);
    assert!(
        wait_until(SLOW, || node.ready()),
        "the node is not Ready after the reboot"
    );
    // The lock is taken again at the next start.
    node.check_delay_lock();

    node.run_pod(shutdown_reporting_pod(
        "on-poweroff",
        &node.name,
        node.vm.ctl_port(),
    ));
    let went_not_ready = node.watching_for_shutdown_not_ready(|node| {
        assert_eq!(node.vm.power_off(SLOW), 0, "the VM task failed");
    });
    assert!(went_not_ready, "the node never said it was shutting down");
    assert_eq!(
        node.vm.marks()[2..],
        ["on-poweroff-prestop", "on-poweroff-term"],
        "the preStop hook, then SIGTERM, before power-off"
    );
    node.assert_shut_down(&["on-poweroff"]);
}
