//! Persistent storage end to end: litelet as a node of the real kube-apiserver, on a
//! private real containerd, with the real CSI hostpath driver (`hostpathplugin`) and
//! `csi-node-driver-registrar` run as processes of the test, as a DaemonSet's
//! containers would run on a node (both from `KUBEBUILDER_ASSETS`).
//!
//! Proven here: the plugin watcher registers the driver (CSINode entry, nodeid
//! annotation, topology label); a PVC bound to a CSI PV waits for its
//! VolumeAttachment (attachRequired) while listed in the Node's
//! `status.volumesInUse` (until its pod is gone and it is unpublished), is staged and published for a pod, survives the pod (a second pod reads what the first wrote) and a litelet
//! restart in the middle, and is unpublished and unstaged when its pods are gone; an
//! inline CSI ephemeral volume lives and dies with its pod; the driver is
//! deregistered when its registrar goes; `local` and `hostPath` PVs and a generic
//! ephemeral volume's claim are mounted; an unbound claim, a local PV of another
//! node and an ephemeral claim the pod does not own keep their pods waiting with a
//! FailedMount event; pods with an `fsGroup` mounting a claim whose entries are
//! swapped with symlinks to host files all along never get a host file changed.
//! Nothing stays mounted under the node's root dir at the end. Skips loudly without
//! the assets or root unless CI=true.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::containerd::BUSYBOX;
use crate::support::control_plane::skip;
use crate::support::pods::ApiPod;
use crate::support::real_node::{bound_claim, owned_bound_claim, RealNode};
use crate::support::wait_until;
use litelet::volumes::csi::{grpc, pb};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const DRIVER: &str = "hostpath.csi.k8s.io";

/// A child process stopped with SIGTERM (then SIGKILL) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let _ = wait_until(Duration::from_secs(10), || {
            matches!(self.0.try_wait(), Ok(Some(_)))
        });
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The driver and its registrar for `node`, logging into the node's folder.
struct CsiPlugin {
    socket: PathBuf,
    state: PathBuf,
    registrar: Option<Proc>,
    _driver: Proc,
}

/// The hostpath driver's CSIDriver object is cluster-wide and two tests want it with
/// different specs: they take turns ([`hostpath_driver_turn`]), each writing its own.
fn hostpath_driver_turn() -> std::sync::MutexGuard<'static, ()> {
    support::exclusive("the hostpath CSIDriver")
}

/// Writes the CSIDriver object `driver`, replacing one of the same name.
fn replace_csi_driver(node: &RealNode, driver: Value) {
    let name = driver["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    node.cp
        .delete(&format!("/apis/storage.k8s.io/v1/csidrivers/{name}"));
    node.cp
        .create("/apis/storage.k8s.io/v1/csidrivers", &driver);
}

fn asset(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS")?).join(name);
    path.exists().then_some(path)
}

fn log_file(node: &RealNode, name: &str) -> std::fs::File {
    std::fs::File::create(node.dir().join(name)).expect("log file")
}

impl CsiPlugin {
    fn start(test: &str, node: &RealNode) -> Option<CsiPlugin> {
        let (Some(driver), Some(registrar)) =
            (asset("hostpathplugin"), asset("csi-node-driver-registrar"))
        else {
            return skip(
                test,
                "KUBEBUILDER_ASSETS has no hostpathplugin / csi-node-driver-registrar \
                 (../shared/k8s-assets/unpack.sh puts them there)",
            );
        };
        let plugin_dir = node.root().join("plugins/csi-hostpath");
        std::fs::create_dir_all(&plugin_dir).expect("plugin dir");
        let socket = plugin_dir.join("csi.sock");
        let state = node.dir().join("csi-state");
        let driver = Command::new(driver)
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--nodeid={}", node.name))
            .arg(format!("--drivername={DRIVER}"))
            .arg(format!("--statedir={}", state.display()))
            .arg("--v=5")
            .stdin(Stdio::null())
            .stdout(log_file(node, "hostpathplugin.log"))
            .stderr(log_file(node, "hostpathplugin.err"))
            .spawn()
            .expect("start hostpathplugin");
        let driver = Proc(driver);
        let mut plugin = CsiPlugin {
            socket,
            state,
            registrar: None,
            _driver: driver,
        };
        plugin.start_registrar(node, &registrar);
        Some(plugin)
    }

    fn start_registrar(&mut self, node: &RealNode, binary: &Path) {
        let registrar = Command::new(binary)
            .arg(format!("--csi-address={}", self.socket.display()))
            .arg(format!(
                "--kubelet-registration-path={}",
                self.socket.display()
            ))
            .arg(format!(
                "--plugin-registration-path={}",
                node.root().join("plugins_registry").display()
            ))
            .arg("--v=5")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(node, "registrar.log"))
            .spawn()
            .expect("start csi-node-driver-registrar");
        self.registrar = Some(Proc(registrar));
    }

    /// CreateVolume on the driver (the test plays the external-provisioner).
    fn create_volume(&self, name: &str) -> String {
        use pb::volume_capability::{access_mode::Mode, AccessMode, Access_type, MountVolume};
        let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
        let channel =
            grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", self.socket.display()));
        let controller = grpc::ControllerClient::new(channel);
        let capability = pb::VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SINGLE_NODE_WRITER.into(),
                ..Default::default()
            })
            .into(),
            access_type: Some(Access_type::Mount(MountVolume::default())),
            ..Default::default()
        };
        let req = pb::CreateVolumeRequest {
            name: name.to_owned(),
            capacity_range: Some(pb::CapacityRange {
                required_bytes: 1 << 20,
                ..Default::default()
            })
            .into(),
            volume_capabilities: vec![capability],
            ..Default::default()
        };
        let opt = grpcio::CallOption::default().timeout(Duration::from_secs(30));
        let resp = controller
            .create_volume_opt(&req, opt)
            .expect("CreateVolume on the hostpath driver");
        resp.volume.volume_id.clone()
    }
}

/// A pod bound to `node`, host network, one busybox container running `script`
/// with `volume` mounted at /data.
fn data_pod(ns: &str, name: &str, node: &str, script: &str, volume: Value) -> Value {
    ApiPod::new(ns, name, node, BUSYBOX)
        .host_network()
        .restart("Never")
        .grace(2)
        .stoppable(script)
        .volume(volume, "/data")
        .json()
}

fn claim_volume(claim: &str) -> Value {
    json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// Deletes `ns/name` and waits until litelet finished it (the object is gone).
fn delete_pod(node: &RealNode, ns: &str, name: &str) {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    node.cp.delete(&path);
    node.wait_for(&format!("{ns}/{name} deleted"), || {
        node.cp.get(&path).is_none()
    });
}

/// Mount points at or under `dir` in this (the node's) mount namespace.
fn mounts_under(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.display().to_string();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&dir))
        .map(str::to_owned)
        .collect()
}

/// Node events about `pod` whose reason starts with `reason` (volume set-up failures
/// are `FailedMount`, as upstream).
fn events(node: &RealNode, ns: &str, pod: &str, reason: &str) -> Vec<String> {
    let list = node
        .cp
        .get(&format!("/api/v1/namespaces/{ns}/events"))
        .unwrap_or_default();
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| {
                    e["involvedObject"]["name"] == pod
                        && e["reason"].as_str().is_some_and(|r| r.starts_with(reason))
                })
                .filter_map(|e| e["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn csi_driver_registers_and_serves_claims_and_inline_volumes_across_a_restart() {
    let test = "csi_driver_registers_and_serves_claims_and_inline_volumes_across_a_restart";
    let _turn = hostpath_driver_turn();
    let Some(mut node) = RealNode::start(test, "csi1", &[]) else {
        return;
    };
    // litelet makes plugins_registry at start-up; the registrar needs it to listen.
    node.wait_ready();
    let Some(plugin) = CsiPlugin::start(test, &node) else {
        return;
    };
    let cp = node.cp;
    let ns = "storage-csi";
    cp.namespace(ns);
    replace_csi_driver(
        &node,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": DRIVER},
                "spec": {"attachRequired": true, "podInfoOnMount": true,
                         "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                         "fsGroupPolicy": "File"}}),
    );
    node.wait_ready();

    // Registration: CSINode entry, the nodeid annotation, the topology label.
    let csi_node = format!("/apis/storage.k8s.io/v1/csinodes/{}", node.name);
    node.wait_for("CSINode lists the hostpath driver", || {
        cp.get(&csi_node).is_some_and(|c| {
            c["spec"]["drivers"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["name"] == DRIVER))
        })
    });
    let c = cp.get(&csi_node).expect("CSINode");
    let entry = &c["spec"]["drivers"][0];
    assert_eq!(entry["nodeID"], node.name.as_str());
    assert_eq!(entry["topologyKeys"], json!(["topology.hostpath.csi/node"]));
    assert_eq!(c["metadata"]["ownerReferences"][0]["kind"], "Node");
    let n = node.node_object().expect("node");
    let ids: Value = serde_json::from_str(
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            .as_str()
            .expect("nodeid annotation"),
    )
    .expect("annotation is JSON");
    assert_eq!(ids[DRIVER], node.name.as_str());
    assert_eq!(
        n["metadata"]["labels"]["topology.hostpath.csi/node"],
        node.name.as_str()
    );

    // A claim bound to a CSI PV: the first pod writes, stays running.
    let volume_id = plugin.create_volume("pv-csi-1");
    bound_claim(
        &node,
        ns,
        "data",
        "pv-csi-1",
        json!({"csi": {"driver": DRIVER, "volumeHandle": volume_id}}),
    );
    cp.create(
        &format!("/api/v1/namespaces/{ns}/pods"),
        &data_pod(
            ns,
            "writer",
            &node.name,
            "echo persisted > /data/hello; sleep 3600 & wait",
            claim_volume("data"),
        ),
    );
    // attachRequired: the pod waits until the VolumeAttachment says attached (the
    // test plays the external-attacher).
    node.wait_for("a FailedMount event: not attached yet", || {
        events(&node, ns, "writer", "FailedMount")
            .iter()
            .any(|m| m.contains("is not attached to this node yet"))
    });
    // Before waiting for the attachment, the volume is in the node's volumesInUse
    // (so an attach/detach controller would never detach it while mounted).
    let unique = litelet::volumes::csi::plan::unique_volume_name(DRIVER, &volume_id);
    let in_use = |node: &RealNode| -> Vec<String> {
        node.node_object()
            .and_then(|n| serde_json::from_value(n["status"]["volumesInUse"].clone()).ok())
            .unwrap_or_default()
    };
    assert_eq!(in_use(&node), [unique.as_str()]);
    let attachment = litelet::volumes::csi::plan::attachment_name(&volume_id, DRIVER, &node.name);
    cp.create(
        "/apis/storage.k8s.io/v1/volumeattachments",
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": attachment},
                "spec": {"attacher": DRIVER, "nodeName": node.name,
                         "source": {"persistentVolumeName": "pv-csi-1"}}}),
    );
    cp.patch(
        &format!("/apis/storage.k8s.io/v1/volumeattachments/{attachment}/status"),
        &json!({"status": {"attached": true}}),
    );
    let writer = node.wait_pod(ns, "writer", "Running", |p| phase(p) == "Running");
    let on_driver = plugin.state.join(&volume_id).join("hello");
    node.wait_for("the file written through the CSI mount", || {
        std::fs::read_to_string(&on_driver).is_ok_and(|s| s.trim() == "persisted")
    });
    let uid = writer["metadata"]["uid"].as_str().expect("uid").to_owned();
    let pod_volume = node
        .root()
        .join(format!("pods/{uid}/volumes/kubernetes.io~csi/pv-csi-1"));
    assert!(pod_volume.join("vol_data.json").is_file());
    let target = pod_volume.join("mount");
    assert!(mounts_under(&node.root()).contains(&target.display().to_string()));

    // An inline CSI ephemeral volume.
    cp.create(
        &format!("/api/v1/namespaces/{ns}/pods"),
        &data_pod(
            ns,
            "scratch",
            &node.name,
            "echo here > /data/f; sleep 3600 & wait",
            json!({"name": "data", "csi": {"driver": DRIVER}}),
        ),
    );
    let scratch = node.wait_pod(ns, "scratch", "Running", |p| phase(p) == "Running");
    let scratch_uid = scratch["metadata"]["uid"].as_str().expect("uid").to_owned();
    let scratch_target = node.root().join(format!(
        "pods/{scratch_uid}/volumes/kubernetes.io~csi/data/mount"
    ));
    node.wait_for("the inline volume's file", || {
        std::fs::read_to_string(scratch_target.join("f")).is_ok_and(|s| s.trim() == "here")
    });

    // litelet restarts with both pods running: nothing is unmounted under them.
    node.restart();
    node.wait_ready();
    std::thread::sleep(Duration::from_secs(5));
    let mounted = mounts_under(&node.root());
    assert!(
        mounted.contains(&target.display().to_string()),
        "{mounted:?}"
    );
    assert!(mounted.contains(&scratch_target.display().to_string()));
    // Still in use after the restart (read back from vol_data.json); the inline
    // volume never is (it is not attached).
    assert_eq!(in_use(&node), [unique.as_str()]);

    // After the restart, the pods go: volumes found again from vol_data.json.
    delete_pod(&node, ns, "writer");
    delete_pod(&node, ns, "scratch");
    node.wait_for("pod volumes unpublished", || {
        !pod_volume.exists() && mounts_under(&node.root()).is_empty()
    });
    node.wait_for("volumesInUse without the unmounted volume", || {
        in_use(&node).is_empty()
    });
    let staging = node.root().join(format!(
        "plugins/kubernetes.io/csi/{DRIVER}/{}/globalmount",
        litelet::volumes::csi::plan::sha256_hex(&volume_id)
    ));
    assert!(!staging.exists(), "unstaged: {}", staging.display());
    assert!(
        std::fs::read_dir(&plugin.state)
            .expect("state dir")
            .flatten()
            .filter(|e| e.path().is_dir())
            .count()
            == 1,
        "the inline volume's data is gone, the PV's is kept"
    );

    // A new pod on the same claim reads what the first wrote.
    cp.create(
        &format!("/api/v1/namespaces/{ns}/pods"),
        &data_pod(
            ns,
            "reader",
            &node.name,
            "test \"$(cat /data/hello)\" = persisted",
            claim_volume("data"),
        ),
    );
    let reader = node.wait_pod(ns, "reader", "finished", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    });
    assert_eq!(phase(&reader), "Succeeded", "{reader}");
    delete_pod(&node, ns, "reader");
    node.wait_for("nothing mounted under the root dir", || {
        mounts_under(&node.root()).is_empty()
    });

    // The registrar goes (SIGTERM removes its socket): the driver is deregistered.
    let mut plugin = plugin;
    plugin.registrar = None;
    node.wait_for("CSINode without the driver", || {
        cp.get(&csi_node).is_some_and(|c| {
            c["spec"]["drivers"]
                .as_array()
                .is_none_or(|d| d.iter().all(|d| d["name"] != DRIVER))
        })
    });
    let n = node.node_object().expect("node");
    assert!(
        n["metadata"]["annotations"]
            .get("csi.volume.kubernetes.io/nodeid")
            .is_none(),
        "nodeid annotation removed: {}",
        n["metadata"]["annotations"]
    );
}

#[test]
fn local_and_host_path_volumes_mount_and_unbound_claims_wait() {
    let test = "local_and_host_path_volumes_mount_and_unbound_claims_wait";
    let Some(node) = RealNode::start(test, "pv1", &[]) else {
        return;
    };
    let cp = node.cp;
    let ns = "storage-pv";
    cp.namespace(ns);
    node.wait_ready();
    let local_dir = node.dir().join("local-disk");
    let host_dir = node.dir().join("host-dir");
    std::fs::create_dir_all(&local_dir).expect("local dir");
    bound_claim(
        &node,
        ns,
        "local",
        "pv-local-1",
        json!({"local": {"path": local_dir},
               "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                   {"key": "kubernetes.io/hostname", "operator": "In", "values": [node.name]}]}]}}}),
    );
    bound_claim(
        &node,
        ns,
        "hostpath",
        "pv-hostpath-1",
        json!({"hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}}),
    );
    // A local PV pinned to another node must not be used here.
    bound_claim(
        &node,
        ns,
        "elsewhere",
        "pv-local-2",
        json!({"local": {"path": local_dir},
               "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                   {"key": "kubernetes.io/hostname", "operator": "In", "values": ["other"]}]}]}}}),
    );
    // A claim that is not bound.
    cp.create(
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
        &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "pending"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                         "resources": {"requests": {"storage": "1Mi"}}}}),
    );
    // Generic ephemeral volumes: the claim `<pod>-<volume>` must be controlled by
    // the pod (the test plays the ephemeral-volume controller and the binder).
    let template = json!({"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "resources": {"requests": {"storage": "1Mi"}}}}}});
    let eph_dir = node.dir().join("eph-dir");
    for name in ["eph", "not-mine"] {
        let created = cp.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &data_pod(
                ns,
                name,
                &node.name,
                &format!("echo {name} > /data/{name}; sleep 3600 & wait"),
                template.clone(),
            ),
        );
        let owners = match name {
            "eph" => json!([{"apiVersion": "v1", "kind": "Pod", "name": name,
                             "uid": created["metadata"]["uid"], "controller": true}]),
            _ => json!([]),
        };
        owned_bound_claim(
            &node,
            ns,
            &format!("{name}-data"),
            &format!("pv-{name}"),
            json!({"hostPath": {"path": eph_dir, "type": "DirectoryOrCreate"}}),
            owners,
        );
    }
    for (name, claim) in [
        ("on-local", "local"),
        ("on-hostpath", "hostpath"),
        ("wrong-node", "elsewhere"),
        ("unbound", "pending"),
    ] {
        cp.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &data_pod(
                ns,
                name,
                &node.name,
                &format!("echo {name} > /data/{name}; sleep 3600 & wait"),
                claim_volume(claim),
            ),
        );
    }
    node.wait_pod(ns, "on-local", "Running", |p| phase(p) == "Running");
    node.wait_pod(ns, "on-hostpath", "Running", |p| phase(p) == "Running");
    node.wait_pod(ns, "eph", "Running", |p| phase(p) == "Running");
    node.wait_for("files on the local, hostPath and ephemeral volumes", || {
        local_dir.join("on-local").is_file()
            && host_dir.join("on-hostpath").is_file()
            && eph_dir.join("eph").is_file()
    });
    node.wait_for("FailedMount events for the waiting pods", || {
        events(&node, ns, "unbound", "FailedMount")
            .iter()
            .any(|m| m.contains("is not bound"))
            && events(&node, ns, "wrong-node", "FailedMount")
                .iter()
                .any(|m| m.contains("node affinity does not match"))
            && events(&node, ns, "not-mine", "FailedMount")
                .iter()
                .any(|m| m.contains("was not created for pod"))
    });
    for name in ["wrong-node", "unbound", "not-mine"] {
        let p = cp
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .expect("pod");
        assert_eq!(phase(&p), "Pending", "{name}: {p}");
    }
    for name in [
        "on-local",
        "on-hostpath",
        "wrong-node",
        "unbound",
        "eph",
        "not-mine",
    ] {
        delete_pod(&node, ns, name);
    }
    assert!(
        local_dir.join("on-local").is_file(),
        "a local PV keeps its data"
    );
    assert!(
        mounts_under(&node.root()).is_empty(),
        "{:?}",
        mounts_under(&node.root())
    );
}

/// An inline CSI volume is set up only for a driver whose CSIDriver object lists the
/// `Ephemeral` lifecycle mode (upstream csi_plugin.go); otherwise the pod waits with
/// upstream's reason in a FailedMount event, and the driver is never asked.
#[test]
fn inline_csi_volume_needs_a_csi_driver_listing_ephemeral() {
    let test = "inline_csi_volume_needs_a_csi_driver_listing_ephemeral";
    let Some(node) = RealNode::start(test, "csi-modes", &[]) else {
        return;
    };
    let cp = node.cp;
    let ns = "storage-csi-modes";
    cp.namespace(ns);
    let persistent_only = format!("persistent-only-{}.example", std::process::id());
    cp.create(
        "/apis/storage.k8s.io/v1/csidrivers",
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": persistent_only},
                "spec": {"attachRequired": false}}),
    );
    let no_object = format!("no-object-{}.example", std::process::id());
    node.wait_ready();
    for (name, driver) in [
        ("persistent-only", &persistent_only),
        ("no-object", &no_object),
    ] {
        cp.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &data_pod(
                ns,
                name,
                &node.name,
                "sleep 3600 & wait",
                json!({"name": "data", "csi": {"driver": driver}}),
            ),
        );
    }
    node.wait_for("FailedMount: the driver serves only Persistent", || {
        events(&node, ns, "persistent-only", "FailedMount")
            .iter()
            .any(|m| {
                m.contains(&format!(
                    r#"volume mode "Ephemeral" not supported by driver {persistent_only} (only supports ["Persistent"])"#
                ))
            })
    });
    node.wait_for("FailedMount: the driver has no CSIDriver object", || {
        events(&node, ns, "no-object", "FailedMount").iter().any(|m| {
            m.contains(&format!(
                r#"volume mode "Ephemeral" not supported by driver {no_object} (no CSIDriver object)"#
            ))
        })
    });
    for name in ["persistent-only", "no-object"] {
        let p = cp
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .expect("pod");
        assert_eq!(phase(&p), "Pending", "{p}");
    }
    cp.delete(&format!(
        "/apis/storage.k8s.io/v1/csidrivers/{persistent_only}"
    ));
}

/// Swaps each (real, link) pair in `dir` with `renameat2(RENAME_EXCHANGE)`, round
/// after round, until `stop`: what a pod looping renames in a shared claim does.
fn swap_pairs(
    dir: &Path,
    pairs: Vec<(String, String)>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    use nix::fcntl::{renameat2, RenameFlags};
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(dir).expect("volume dir");
    std::thread::spawn(move || {
        let fd = Some(dir.as_raw_fd());
        let mut swaps = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (a, b) in &pairs {
                if renameat2(fd, a.as_str(), fd, b.as_str(), RenameFlags::RENAME_EXCHANGE).is_ok() {
                    swaps += 1;
                }
            }
        }
        swaps
    })
}

/// (mode, owner, group) of each path, symlinks not followed.
fn owners(paths: &[PathBuf]) -> Vec<(u32, u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    paths
        .iter()
        .map(|p| {
            let m = std::fs::symlink_metadata(p).expect("stat");
            (m.mode(), m.uid(), m.gid())
        })
        .collect()
}

/// The fsGroup attack on real parts: a claim another pod writes (played by the test,
/// on the driver's backing folder, as that pod's loop would through its mount)
/// holds files and folders swapped all the time with symlinks to a host file and a
/// host folder, while pods with an `fsGroup` mount it (each publish walks the whole
/// volume as root). The host file and folder keep their mode, owner and group; the
/// volume's own files get the group.
#[test]
fn fs_group_walks_of_a_claim_under_symlink_swaps_never_touch_a_host_file() {
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
    let test = "fs_group_walks_of_a_claim_under_symlink_swaps_never_touch_a_host_file";
    let _turn = hostpath_driver_turn();
    let Some(node) = RealNode::start(test, "csi3", &[]) else {
        return;
    };
    node.wait_ready();
    let Some(plugin) = CsiPlugin::start(test, &node) else {
        return;
    };
    let cp = node.cp;
    let ns = "storage-swap";
    cp.namespace(ns);
    replace_csi_driver(
        &node,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": DRIVER},
                "spec": {"attachRequired": false, "volumeLifecycleModes": ["Persistent"],
                         "fsGroupPolicy": "File"}}),
    );
    let csi_node = format!("/apis/storage.k8s.io/v1/csinodes/{}", node.name);
    node.wait_for("CSINode lists the hostpath driver", || {
        cp.get(&csi_node).is_some_and(|c| {
            c["spec"]["drivers"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["name"] == DRIVER))
        })
    });

    // The host: a file standing in for /etc/shadow, a folder for /etc.
    let host = node.dir().join("host");
    std::fs::create_dir_all(host.join("etc")).expect("host dir");
    std::fs::write(host.join("shadow"), "root:*:1:0:::").expect("host file");
    std::fs::write(host.join("etc/passwd"), "root:x:0:0").expect("host file");
    let set_mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    set_mode(&host.join("shadow"), 0o600);
    set_mode(&host.join("etc"), 0o700);
    set_mode(&host.join("etc/passwd"), 0o604);
    let outside = [
        host.join("shadow"),
        host.join("etc"),
        host.join("etc/passwd"),
    ];
    let before = owners(&outside);

    let volume_id = plugin.create_volume("pv-swap");
    bound_claim(
        &node,
        ns,
        "shared",
        "pv-swap",
        json!({"csi": {"driver": DRIVER, "volumeHandle": volume_id}}),
    );
    let backing = plugin.state.join(&volume_id);
    let mut pairs = Vec::new();
    for i in 0..500 {
        std::fs::write(backing.join(format!("file-{i}")), "data").expect("file");
        symlink(host.join("shadow"), backing.join(format!("link-{i}"))).expect("link");
        pairs.push((format!("file-{i}"), format!("link-{i}")));
    }
    for i in 0..20 {
        std::fs::create_dir(backing.join(format!("dir-{i}"))).expect("dir");
        std::fs::write(backing.join(format!("dir-{i}/inner")), "data").expect("file");
        symlink(host.join("etc"), backing.join(format!("dirlink-{i}"))).expect("link");
        pairs.push((format!("dir-{i}"), format!("dirlink-{i}")));
    }
    // No swapper touches this one: every walk reaches it.
    std::fs::write(backing.join("steady"), "data").expect("file");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = swap_pairs(&backing, pairs, std::sync::Arc::clone(&stop));

    for round in 0..3u32 {
        let name = format!("grouped-{round}");
        let mut spec = data_pod(
            ns,
            &name,
            &node.name,
            "sleep 3600 & wait",
            claim_volume("shared"),
        );
        spec["spec"]["securityContext"] = json!({"fsGroup": 4000 + round});
        cp.create(&format!("/api/v1/namespaces/{ns}/pods"), &spec);
        node.wait_pod(ns, &name, "Running", |p| phase(p) == "Running");
        assert_eq!(owners(&outside), before, "round {round}");
        delete_pod(&node, ns, &name);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    eprintln!("{test}: {swaps} swaps");
    assert!(swaps > 0);
    assert_eq!(owners(&outside), before);
    // The walks did run: the volume's own file has the last pod's group. (A swapped
    // file may be a symlink each time a walk passes its two names, so it proves
    // nothing either way.)
    let steady = std::fs::metadata(backing.join("steady")).expect("stat");
    assert_eq!(steady.gid(), 4002);
    node.wait_for("nothing mounted under the root dir", || {
        mounts_under(&node.root()).is_empty()
    });
}
