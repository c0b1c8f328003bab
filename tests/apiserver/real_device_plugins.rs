//! Device plugins for real: a real kube-apiserver, litelet on a private containerd,
//! and upstream's sample device plugin (`sample-device-plugin` from
//! `KUBEBUILDER_ASSETS`: resource `example.com/resource`, devices Dev-1 and Dev-2;
//! `Allocate` creates `/tmp/Dev-N` on the host and mounts it at the same path). The
//! plugin registers at the fixed `/var/lib/kubelet/device-plugins/kubelet.sock`, so
//! it runs in its own mount namespace with the node's `--device-plugins-dir` bound
//! over that path. The PodResources API is read as monitoring agents do. Skips
//! loudly without the assets or root unless CI=true.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::control_plane::skip;
use crate::support::real_node::{busybox_pod, container_status, RealNode};
use serde_json::{json, Value};

const R: &str = "example.com/resource";
const FIXED_DIR: &str = "/var/lib/kubelet/device-plugins";

/// The sample plugin in its own mount namespace; killed on drop.
struct SamplePlugin(Child);

impl SamplePlugin {
    fn start(binary: &Path, plugins_dir: &Path, log: &Path) -> SamplePlugin {
        // The mount point must exist on the host; it stays an empty folder there.
        std::fs::create_dir_all(FIXED_DIR).expect("mount point");
        let script = format!(
            "mount --bind {} {FIXED_DIR} && exec {}",
            plugins_dir.display(),
            binary.display()
        );
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log).expect("plugin log"))
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(log)
                    .expect("plugin log"),
            )
            .spawn()
            .expect("start the sample device plugin");
        SamplePlugin(child)
    }
}

impl Drop for SamplePlugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sample_plugin(test: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS")?).join("sample-device-plugin");
    if path.exists() {
        Some(path)
    } else {
        skip(test, "KUBEBUILDER_ASSETS has no sample-device-plugin")
    }
}

fn pod(ns: &str, name: &str, node: &str) -> Value {
    let script = "trap 'exit 0' TERM; sleep 3600 & wait";
    let mut pod = busybox_pod(ns, name, node, 2, script);
    pod["spec"]["containers"][0]["resources"] = json!({"limits": {R: "1"}, "requests": {R: "1"}});
    pod
}

fn pods_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods")
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && container_status(p, "main").is_some_and(|c| c["ready"] == true)
}

/// The node's (capacity, allocatable) of the resource as the API server has them.
fn published(node: &RealNode) -> (String, String) {
    let n = node.node_object().unwrap_or(Value::Null);
    let get = |k: &str| n["status"][k][R].as_str().unwrap_or("").to_owned();
    (get("capacity"), get("allocatable"))
}

/// The device files the pod's container sees under /tmp (kubectl exec).
fn devices_seen(node: &RealNode, ns: &str, name: &str) -> String {
    let out = node.cp.kubectl(&[
        "exec",
        "-n",
        ns,
        name,
        "--",
        "sh",
        "-c",
        "ls /tmp | grep Dev-",
    ]);
    assert!(
        out.status.success(),
        "exec in {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The devices the checkpoint says `pod_uid` holds.
fn checkpointed(node: &RealNode, pod_uid: &str) -> Vec<String> {
    let path = node.root().join("device-plugins/allocations.json");
    let data: Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_default()).unwrap_or(Value::Null);
    data["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["podUID"] == pod_uid)
        .flat_map(|e| e["deviceIDs"].as_array().cloned().unwrap_or_default())
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect()
}

/// `List` on the node's PodResources socket: "pod/container" → the devices of the
/// resource it holds, for the pods of `ns`.
fn pod_resources(node: &RealNode, ns: &str) -> BTreeMap<String, Vec<String>> {
    use litelet::podresources::grpc::PodResourcesListerClient;
    let socket = node.root().join("pod-resources/kubelet.sock");
    let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let channel = grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", socket.display()));
    let list = PodResourcesListerClient::new(channel)
        .list_opt(
            &Default::default(),
            grpcio::CallOption::default().timeout(Duration::from_secs(10)),
        )
        .unwrap_or_else(|e| panic!("List on {}: {e}", socket.display()));
    let mut held = BTreeMap::new();
    for p in list.pod_resources.iter().filter(|p| p.namespace == ns) {
        for c in &p.containers {
            let ids = c
                .devices
                .iter()
                .filter(|d| d.resource_name == R)
                .flat_map(|d| d.device_ids.iter().cloned())
                .collect();
            held.insert(format!("{}/{}", p.name, c.name), ids);
        }
    }
    held
}

#[test]
fn sample_device_plugin_devices_are_published_allocated_admitted_and_survive_restarts() {
    let test = "sample_device_plugin_devices_are_published_allocated_admitted_and_survive_restarts";
    let Some(binary) = sample_plugin(test) else {
        return;
    };
    let Some(mut node) = RealNode::start(test, "rs-devices", &[]) else {
        return;
    };
    let ns = node.name.clone();
    node.cp.namespace(&ns);
    node.wait_ready();
    let plugins_dir = node.dir().join("device-plugins");
    let plugin_log = node.dir().join("plugin.log");
    let mut plugin = Some(SamplePlugin::start(&binary, &plugins_dir, &plugin_log));

    let two = ("2".to_owned(), "2".to_owned());
    node.wait_for("capacity and allocatable example.com/resource = 2", || {
        published(&node) == two
    });

    // Two pods get one device each, different ones.
    let mut uids = Vec::new();
    for name in ["dev-a", "dev-b"] {
        let created = node.cp.create(&pods_path(&ns), &pod(&ns, name, &node.name));
        uids.push(created["metadata"]["uid"].as_str().unwrap().to_owned());
        node.wait_pod(&ns, name, "running", running);
    }
    let seen_a = devices_seen(&node, &ns, "dev-a");
    let seen_b = devices_seen(&node, &ns, "dev-b");
    assert!(
        seen_a == "Dev-1" || seen_a == "Dev-2",
        "dev-a sees {seen_a:?}"
    );
    assert!(
        seen_b == "Dev-1" || seen_b == "Dev-2",
        "dev-b sees {seen_b:?}"
    );
    assert_ne!(seen_a, seen_b, "both pods got the same device");
    assert_eq!(checkpointed(&node, &uids[0]), std::slice::from_ref(&seen_a));
    assert_eq!(checkpointed(&node, &uids[1]), std::slice::from_ref(&seen_b));

    // A third is refused at admission, with upstream's reason and message.
    node.cp
        .create(&pods_path(&ns), &pod(&ns, "dev-c", &node.name));
    let refused = node.wait_pod(&ns, "dev-c", "rejected", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(refused["status"]["reason"], "UnexpectedAdmissionError");
    assert_eq!(
        refused["status"]["message"],
        "Pod was rejected: Allocate failed due to requested number of devices unavailable \
         for example.com/resource. Requested: 1, Available: 0, which is unexpected"
    );

    // The PodResources API names the device each container holds; the refused pod
    // is not active, so not listed.
    assert_eq!(
        pod_resources(&node, &ns),
        BTreeMap::from([
            ("dev-a/main".to_owned(), vec![seen_a.clone()]),
            ("dev-b/main".to_owned(), vec![seen_b.clone()]),
        ])
    );

    let ids = |node: &RealNode| -> Vec<String> {
        ["dev-a", "dev-b"]
            .iter()
            .map(|name| {
                let p = node
                    .cp
                    .get(&format!("{}/{name}", pods_path(&ns)))
                    .unwrap_or(Value::Null);
                let c = container_status(&p, "main").cloned().unwrap_or(Value::Null);
                format!("{} {}", c["containerID"], c["restartCount"])
            })
            .collect()
    };
    let before = ids(&node);

    // litelet restarts: the allocations come back from the checkpoint, no container
    // restarts, and the plugin registers again when kubelet.sock is back.
    node.restart();
    node.wait_for("the plugin registers again after a litelet restart", || {
        node.log()
            .matches("example.com/resource: registered at")
            .count()
            >= 2
    });
    node.wait_for("capacity back at 2 after the restart", || {
        published(&node) == two
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ids(&node), before, "a container was restarted");
    for name in ["dev-a", "dev-b"] {
        let p = node.cp.get(&format!("{}/{name}", pods_path(&ns))).unwrap();
        assert!(running(&p), "{name} after the restart: {}", p["status"]);
    }
    let device_log = || -> String {
        node.log()
            .lines()
            .filter(|l| l.contains("device"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        checkpointed(&node, &uids[0]),
        std::slice::from_ref(&seen_a),
        "{}",
        device_log()
    );
    assert_eq!(
        checkpointed(&node, &uids[1]),
        std::slice::from_ref(&seen_b),
        "{}",
        device_log()
    );
    assert_eq!(devices_seen(&node, &ns, "dev-a"), seen_a);

    // The plugin restarts: its new socket registers and replaces the old endpoint.
    drop(plugin.take());
    node.wait_for("allocatable 0 once the plugin is gone", || {
        published(&node) == ("2".to_owned(), "0".to_owned())
    });
    std::thread::sleep(Duration::from_secs(1)); // a new socket name (dp.<unix time>)
    plugin = Some(SamplePlugin::start(&binary, &plugins_dir, &plugin_log));
    node.wait_for("allocatable back at 2 after the plugin restarts", || {
        published(&node) == two
    });

    // dev-b goes: its device goes back, and a new pod gets exactly that one (dev-a's
    // device is still held, as the checkpoint said across the restart).
    node.cp.delete(&format!("{}/dev-b", pods_path(&ns)));
    node.wait_for("dev-b gone", || {
        node.cp.get(&format!("{}/dev-b", pods_path(&ns))).is_none()
    });
    node.cp
        .create(&pods_path(&ns), &pod(&ns, "dev-d", &node.name));
    node.wait_pod(&ns, "dev-d", "running", running);
    assert_eq!(devices_seen(&node, &ns, "dev-d"), seen_b);
    drop(plugin);
}
