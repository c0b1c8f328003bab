//! The VM tier (`make vm`, and `make test` in CI): litelet's own `.deb` on a real host
//! of the kind its users run (Debian, systemd as PID 1, cgroup v2, containerd) in a
//! QEMU VM, joined with `kubeadm join` to the real control plane on this machine.
//!
//! One boot sequence per test keeps the emulated minutes few. The VM reaches the
//! apiserver through a proxy the test can cut (for the offline reboot), and the
//! apiserver reaches the node's port through a proxy on the node address (logs, exec,
//! stats). See `tests/support/vm.rs` for how the test drives the VM.
//!
//! Ignored by `cargo test`: `scripts/vm-tier.sh` runs it with the package built.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::control_plane::ControlPlane;
use support::real_node::{condition, container_status};
use support::tcp_proxy::TcpProxy;
use support::vm::{Vm, VmImage};
use support::{free_port, wait_until};

/// Waits on the cluster: generous, the VM is emulated.
const SLOW: Duration = Duration::from_secs(600);

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

/// The busybox and pause archives of the containerd tests.
fn images() -> PathBuf {
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
fn upload_kubeadm_config(cp: &ControlPlane, driver: &str, port: u16, api: &str) {
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
             cgroupDriver: {driver}\nport: {port}\npodPidsLimit: 1024\n"
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

/// A busybox pod bound to `node` that notes each start of its container in the
/// node's `/var/lib/vm-marks/<pod>` and then sleeps.
fn marking_pod(name: &str, node: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        // No service-account token: after a reboot cut off from the API server a
        // pod that needs one waits for it (README, edge autonomy).
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "localhost/litelet/busybox:1.0",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "echo started >> /marks/$POD; echo hello-from-$POD; exec sleep 1000000"],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": resources,
                "volumeMounts": [{"name": "marks", "mountPath": "/marks"}]}],
            "volumes": [{"name": "marks",
                "hostPath": {"path": "/var/lib/vm-marks", "type": "DirectoryOrCreate"}}]}})
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

fn node_ready(cp: &ControlPlane, node: &str) -> bool {
    cp.get(&format!("/api/v1/nodes/{node}"))
        .is_some_and(|n| condition(&n["status"], "Ready") == Some("True"))
}

/// The pod's cgroup directory on the VM for the cgroupfs driver.
fn pod_cgroup(qos: &str, uid: &str) -> String {
    match qos {
        "guaranteed" => format!("/sys/fs/cgroup/kubepods/pod{uid}"),
        other => format!("/sys/fs/cgroup/kubepods/{other}/pod{uid}"),
    }
}

#[test]
#[ignore = "the VM tier, about 15 minutes of emulation: run it with make vm"]
fn a_packaged_node_joins_with_kubeadm_and_keeps_its_pods_through_restarts_and_an_offline_reboot() {
    let test = "a_packaged_node_joins_with_kubeadm_and_keeps_its_pods_through_restarts_and_an_offline_reboot";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    let Some(image) = VmImage::ensure(test) else {
        return;
    };
    cp.start_controllers(None).expect("controller-manager");
    let node = "vm-cgroupfs";
    let ns = "vm-cgroupfs";
    cp.namespace(ns);

    // The VM reaches the apiserver through a proxy the test can cut, and the
    // apiserver reaches the node's port through a proxy on the node address.
    let api = TcpProxy::start(cp.addr());
    let api_in_vm = format!("10.0.2.2:{}", api.addr.port());
    let kubelet_port = free_port();
    let forward = free_port();
    let _to_node = TcpProxy::start_on(
        &format!("{}:{kubelet_port}", cp.node_ip),
        format!("127.0.0.1:{forward}").parse().expect("address"),
    );
    upload_kubeadm_config(cp, "cgroupfs", kubelet_port, &api_in_vm);
    let token = cp.bootstrap_token();
    let discovery = cp.dir().join("vm-discovery.conf");
    std::fs::write(
        &discovery,
        cp.bootstrap_kubeconfig_yaml(&token)
            .replace(&cp.url, &format!("https://{api_in_vm}")),
    )
    .expect("discovery file");

    let assets = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS").expect("assets"));
    let images = images();
    let deb = package();
    let mut vm = Vm::boot(
        &image,
        &[
            ("litelet.deb", &deb),
            ("kubeadm", &assets.join("kubeadm")),
            ("busybox.tar", &images.join("busybox.tar")),
            ("pause.tar", &images.join("pause.tar")),
            ("discovery.conf", &discovery),
            (
                "node-setup.sh",
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/node-setup.sh"),
            ),
        ],
        &[("NODE_IP", cp.node_ip.to_string())],
        &[format!("tcp:127.0.0.1:{forward}-:{kubelet_port}")],
    );
    vm.wait_boot(1, SLOW);
    vm.on_failure(
        "systemctl status litelet --no-pager | head -20; journalctl -u litelet --no-pager | tail -n 60",
    );
    println!("{}", vm.sh("sh /task/node-setup.sh cgroupfs"));

    // kubeadm join, as an operator runs it on a node with the package.
    let joined = vm.sh_within(
        &format!(
            "kubeadm join --discovery-file /task/discovery.conf --tls-bootstrap-token {token} \
             --node-name {node} --ignore-preflight-errors=all 2>&1"
        ),
        SLOW,
    );
    assert!(
        joined.contains("This node has joined the cluster"),
        "kubeadm join:\n{joined}"
    );
    assert!(
        wait_until(SLOW, || node_ready(cp, node)),
        "the node never went Ready"
    );
    let modes = vm.sh("stat -L -c '%a %n' /etc/kubernetes/kubelet.conf \
         /var/lib/litelet/pki/kubelet-client-current.pem");
    for line in modes.lines() {
        assert!(
            line.starts_with("600 "),
            "credentials must be 0600: {modes}"
        );
    }

    // One pod per QoS class.
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
    let mut uids = Vec::new();
    for (name, r) in &resources {
        let created = cp.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &marking_pod(name, node, r.clone()),
        );
        uids.push(created["metadata"]["uid"].as_str().expect("uid").to_owned());
    }
    let names = ["guaranteed", "burstable", "besteffort"];
    for name in names {
        assert!(
            wait_until(SLOW, || running_and_ready(cp, ns, name)),
            "{name} never ran: {:?}",
            pod(cp, ns, name).map(|p| p["status"].clone())
        );
    }

    // The pod cgroups on the host side: cgroup v2 files from the pods' specs
    // (weight = 1 + (shares - 2) * 9999 / 262142; podPidsLimit 1024).
    let expected = [
        ("guaranteed", "25000 100000", "10", "67108864"),
        ("burstable", "50000 100000", "4", "134217728"),
        ("besteffort", "max 100000", "1", "max"),
    ];
    for ((qos, cpu_max, weight, memory_max), uid) in expected.iter().zip(&uids) {
        let dir = pod_cgroup(qos, uid);
        let got = vm.sh(&format!(
            "cd {dir} && cat cpu.max cpu.weight memory.max pids.max"
        ));
        let want = format!("{cpu_max}\n{weight}\n{memory_max}\n1024\n");
        assert_eq!(got, want, "pod cgroup of {qos} ({dir})");
    }
    // ... and from inside the container (its own cgroup namespace), through exec.
    let exec = |name: &str, file: &str| -> String {
        let out = cp.kubectl(&["exec", "-n", ns, name, "--", "cat", file]);
        assert!(
            out.status.success(),
            "kubectl exec {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(exec("guaranteed", "/sys/fs/cgroup/cpu.max"), "25000 100000");
    assert_eq!(exec("guaranteed", "/sys/fs/cgroup/memory.max"), "67108864");
    let logs = cp.kubectl(&["logs", "-n", ns, "burstable"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello-from-burstable"),
        "kubectl logs: {}",
        String::from_utf8_lossy(&logs.stderr)
    );

    // In-place resize on cgroup v2: the CPU limit and request of the burstable pod.
    let resize = cp.kubectl(&[
        "patch", "pod", "burstable", "-n", ns, "--subresource", "resize", "-p",
        r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"200m"},"limits":{"cpu":"800m"}}}]}}"#,
    ]);
    assert!(
        resize.status.success(),
        "resize: {}",
        String::from_utf8_lossy(&resize.stderr)
    );
    let dir = pod_cgroup("burstable", &uids[1]);
    vm.sh_until(
        "the resize reached the pod cgroup",
        &format!("test \"$(cat {dir}/cpu.max)\" = '80000 100000' && test \"$(cat {dir}/cpu.weight)\" = 8"),
        SLOW,
    );
    assert_eq!(exec("burstable", "/sys/fs/cgroup/cpu.max"), "80000 100000");
    assert!(
        wait_until(SLOW, || pod(cp, ns, "burstable").is_some_and(|p| {
            container_status(&p, "main").is_some_and(|c| c["resources"]["limits"]["cpu"] == "800m")
                && condition(&p["status"], "PodResizeInProgress").is_none()
        })),
        "the resize never showed in the pod status"
    );

    // Stats from the v2 files, through the apiserver's node proxy.
    let summary = cp
        .get(&format!("/api/v1/nodes/{node}/proxy/stats/summary"))
        .expect("stats summary");
    assert!(
        summary["node"]["memory"]["availableBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no memory.available: {}",
        summary["node"]["memory"]
    );
    let pods_seen = summary["pods"].as_array().map(Vec::len).unwrap_or(0);
    assert!(pods_seen >= 3, "summary lists {pods_seen} pods");

    // Restarts of the agent keep every container: systemctl restart (kubeadm's own
    // command), then a kill -9 of the main process (systemd starts it again).
    let before = containers(cp, ns, &names);
    vm.sh("systemctl restart kubelet && systemctl is-active litelet");
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
        wait_until(SLOW, || node_ready(cp, node)),
        "the node is not Ready after the restarts"
    );
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(
        containers(cp, ns, &names),
        before,
        "a restart of litelet restarted containers"
    );
    let marks = vm.sh("wc -l < /var/lib/vm-marks/guaranteed");
    assert_eq!(marks.trim(), "1", "the container started again");

    // A deleted pod's cgroup goes.
    cp.delete(&format!("/api/v1/namespaces/{ns}/pods/besteffort"));
    let gone = pod_cgroup("besteffort", &uids[2]);
    vm.sh_until(
        "the pod cgroup was removed",
        &format!("! test -e {gone}"),
        SLOW,
    );

    // A reboot with the apiserver unreachable: the checkpointed pods come back.
    api.cut();
    vm.reboot();
    vm.wait_boot(2, SLOW);
    vm.sh_until(
        "the pods ran again after the reboot, offline",
        "test $(wc -l < /var/lib/vm-marks/guaranteed) -ge 2 && \
         test $(wc -l < /var/lib/vm-marks/burstable) -ge 2",
        SLOW,
    );
    api.restore();
    assert!(
        wait_until(SLOW, || node_ready(cp, node)
            && running_and_ready(cp, ns, "guaranteed")
            && running_and_ready(cp, ns, "burstable")),
        "the node did not converge after the reboot: {:?}",
        pod(cp, ns, "guaranteed").map(|p| p["status"].clone())
    );
    assert_eq!(vm.power_off(SLOW), 0, "the VM task failed");
}
