//! The device manager against a fake device plugin (a real grpcio server on a unix
//! socket, `support/fake_device_plugin.rs`): registration at `kubelet.sock`, the
//! ListAndWatch stream into capacity and allocatable, a plugin going away and being
//! replaced, Allocate with the plugin's preference and PreStartContainer, and the
//! checkpoint read back by a new manager (a litelet restart).

use crate::support;

use std::path::Path;
use std::time::Duration;

use crate::support::fake_device_plugin::FakeDevicePlugin;
use crate::support::pods;
use crate::support::wait_until;
use litelet::api::pod::{Container, Pod, ResourceRequirements};
use litelet::api::quantity::Quantity;
use litelet::devicemanager::{pb, DeviceManager};

const R: &str = "example.com/resource";
const T: Duration = Duration::from_secs(10);

fn manager(dir: &Path) -> (DeviceManager, litelet::devicemanager::RegistrationServer) {
    let manager = DeviceManager::new(&dir.join("plugins"), &dir.join("state")).unwrap();
    let server = manager.serve().unwrap();
    (manager, server)
}

fn capacity_is(manager: &DeviceManager, want: (i64, i64)) -> bool {
    wait_until(T, || manager.capacity().get(R) == Some(&want))
}

fn pod(uid: &str, count: i64) -> Pod {
    let mut resources = ResourceRequirements::default();
    let q = Quantity::parse(&count.to_string()).unwrap();
    resources.limits.insert(R.into(), q.clone());
    resources.requests.insert(R.into(), q);
    let mut pod = pods::meta("default", uid, uid);
    pod.spec.containers.push(Container {
        name: "app".into(),
        resources: Some(resources),
        ..Default::default()
    });
    pod
}

fn two_devices(dir: &Path, endpoint: &str, options: pb::DevicePluginOptions) -> FakeDevicePlugin {
    FakeDevicePlugin::start(
        &dir.join("plugins"),
        endpoint,
        &[("Dev-1", true), ("Dev-2", true)],
        options,
    )
}

#[test]
fn a_registered_plugins_devices_become_capacity_and_healthy_ones_allocatable() {
    let dir = tempfile::tempdir().unwrap();
    let (manager, _server) = manager(dir.path());
    let changes = manager.changes();
    let plugin = two_devices(dir.path(), "dp.1", Default::default());
    plugin
        .register(&dir.path().join("plugins"), R, "v1beta1")
        .unwrap();
    assert!(capacity_is(&manager, (2, 2)), "{:?}", manager.capacity());
    // The node status is woken for each change rather than waiting its period.
    assert!(changes.recv_timeout(T).is_ok());
    plugin.set_devices(&[("Dev-1", true), ("Dev-2", false)]);
    assert!(changes.recv_timeout(T).is_ok());
    assert!(capacity_is(&manager, (2, 1)), "{:?}", manager.capacity());
    assert!(plugin.calls().starts_with(&[
        "GetDevicePluginOptions".to_owned(),
        "ListAndWatch".to_owned()
    ]));
}

#[test]
fn registration_with_another_version_or_a_bad_resource_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (manager, _server) = manager(dir.path());
    let plugin = two_devices(dir.path(), "dp.1", Default::default());
    let plugins = dir.path().join("plugins");
    let refused = plugin.register(&plugins, R, "v1alpha").unwrap_err();
    assert!(
        refused.to_string().contains(
            "requested API version \"v1alpha\" is not supported by kubelet. \
             Supported versions are [\"v1beta1\"]"
        ),
        "{refused}"
    );
    for bad in ["gpu", "kubernetes.io/gpu", "requests.example.com/x"] {
        assert!(plugin.register(&plugins, bad, "v1beta1").is_err(), "{bad}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(manager.capacity().is_empty());
    assert!(plugin.calls().is_empty());
}

#[test]
fn a_plugin_that_goes_away_leaves_allocatable_and_its_successor_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (manager, _server) = manager(dir.path());
    let plugins = dir.path().join("plugins");
    let mut first = two_devices(dir.path(), "dp.1", Default::default());
    first.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (2, 2)));
    first.stop();
    // Within the grace the devices still count in capacity, but none is usable.
    assert!(capacity_is(&manager, (2, 0)), "{:?}", manager.capacity());
    assert!(manager.admit(&pod("a", 1), &[]).is_err());
    let second = FakeDevicePlugin::start(
        &plugins,
        "dp.2",
        &[("Dev-1", true), ("Dev-2", true), ("Dev-3", true)],
        Default::default(),
    );
    second.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (3, 3)), "{:?}", manager.capacity());
    assert!(manager.admit(&pod("a", 1), &[]).is_ok());
}

#[test]
fn a_replaced_plugins_stream_is_closed_and_its_lists_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (manager, _server) = manager(dir.path());
    let plugins = dir.path().join("plugins");
    let old = two_devices(dir.path(), "dp.1", Default::default());
    old.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (2, 2)));
    let new = FakeDevicePlugin::start(&plugins, "dp.2", &[("Dev-9", true)], Default::default());
    new.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (1, 1)));
    // The old plugin's next list is dropped and its stream cancelled.
    assert!(wait_until(T, || {
        old.set_devices(&[("Dev-1", false)]);
        old.open_streams() == 0
    }));
    assert_eq!(manager.capacity()[R], (1, 1));
}

#[test]
fn allocate_follows_the_plugins_preference_and_a_restart_keeps_the_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let options = pb::DevicePluginOptions {
        pre_start_required: true,
        get_preferred_allocation_available: true,
        ..Default::default()
    };
    let (a, b, c) = (pod("uid-a", 1), pod("uid-b", 1), pod("uid-c", 1));
    {
        let (manager, _server) = manager(dir.path());
        let plugin = two_devices(dir.path(), "dp.1", options.clone());
        plugin.register(&plugins, R, "v1beta1").unwrap();
        assert!(capacity_is(&manager, (2, 2)));
        plugin.set_preferred(&["Dev-2"]);

        let got = manager
            .container_options(&a, &a.spec.containers[0])
            .unwrap();
        assert_eq!(got.envs["FAKE_DEVICES"], "Dev-2");
        assert_eq!(got.mounts[0].host_path, "/tmp/fake-Dev-2");
        assert_eq!(got.mounts[0].container_path, "/dev/fake/Dev-2");
        assert!(got.mounts[0].read_only);
        assert_eq!(got.devices[0].container_path, "/dev/Dev-2");
        assert_eq!(got.annotations["fake/devices"], "Dev-2");
        assert_eq!(got.cdi_devices, ["example.com/resource=Dev-2"]);
        // A restarted container gets the same devices without a second Allocate,
        // but PreStartContainer again.
        let again = manager
            .container_options(&a, &a.spec.containers[0])
            .unwrap();
        assert_eq!(again, got);
        let calls = plugin.calls();
        assert_eq!(
            calls[2..],
            [
                "GetPreferredAllocation Dev-1,Dev-2",
                "Allocate Dev-2",
                "PreStartContainer Dev-2",
                "PreStartContainer Dev-2"
            ]
        );

        let got_b = manager
            .container_options(&b, &b.spec.containers[0])
            .unwrap();
        assert_eq!(got_b.envs["FAKE_DEVICES"], "Dev-1");
        let refused = manager
            .container_options(&c, &c.spec.containers[0])
            .unwrap_err();
        assert!(
            refused.to_string().contains("Requested: 1, Available: 0"),
            "{refused}"
        );
        assert!(manager.admit(&c, &[&a, &b]).is_err());
    }

    // litelet restarts: the checkpoint says who holds what; the plugin registers
    // again when the registration socket comes back. A container restarting before
    // that gets its devices from the checkpoint.
    let (manager, _server) = manager(dir.path());
    assert_eq!(manager.held("uid-a", "app", R), ["Dev-2"]);
    assert_eq!(manager.held("uid-b", "app", R), ["Dev-1"]);
    assert_eq!(manager.capacity()[R], (0, 0));
    let early = manager
        .container_options(&a, &a.spec.containers[0])
        .unwrap();
    assert_eq!(early.envs["FAKE_DEVICES"], "Dev-2");
    let plugin = two_devices(dir.path(), "dp.2", options);
    plugin.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (2, 2)));
    let got = manager
        .container_options(&a, &a.spec.containers[0])
        .unwrap();
    assert_eq!(got.envs["FAKE_DEVICES"], "Dev-2");
    assert!(!plugin.calls().iter().any(|c| c.starts_with("Allocate")));
    assert!(manager
        .container_options(&c, &c.spec.containers[0])
        .is_err());
    // Pod b finished: its device goes back.
    manager.retain_pods(&["uid-a".to_owned(), "uid-c".to_owned()].into());
    let got_c = manager
        .container_options(&c, &c.spec.containers[0])
        .unwrap();
    assert_eq!(got_c.envs["FAKE_DEVICES"], "Dev-1");
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_plugins_folder_is_0750_and_the_registration_socket_0600_and_plugins_still_register() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    // A folder an earlier install made open to all is closed.
    std::fs::create_dir(&plugins).unwrap();
    std::fs::set_permissions(&plugins, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (manager, server) = manager(dir.path());
    assert_eq!(mode_of(&plugins), 0o750);
    assert_eq!(mode_of(&dir.path().join("state")), 0o750);
    assert_eq!(server.socket, plugins.join("kubelet.sock"));
    let kind = std::fs::symlink_metadata(&server.socket)
        .unwrap()
        .file_type();
    assert!(kind.is_socket());
    assert_eq!(mode_of(&server.socket), 0o600);
    // Bound under a temp name and renamed: nothing else is left in the folder.
    let names: Vec<_> = std::fs::read_dir(&plugins)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["kubelet.sock"]);
    let plugin = two_devices(dir.path(), "dp.1", Default::default());
    plugin.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (2, 2)), "{:?}", manager.capacity());
}

#[test]
fn a_damaged_checkpoint_leaves_the_device_manager_working_from_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("allocations.json"), b"\0\0garbage").unwrap();
    {
        let (manager, _server) = manager(dir.path());
        assert!(manager.capacity().is_empty());
        assert_eq!(
            std::fs::read(state.join("allocations.json.corrupt")).unwrap(),
            b"\0\0garbage"
        );
        let plugin = two_devices(dir.path(), "dp.1", Default::default());
        plugin
            .register(&dir.path().join("plugins"), R, "v1beta1")
            .unwrap();
        assert!(capacity_is(&manager, (2, 2)), "{:?}", manager.capacity());
        let a = pod("uid-a", 1);
        manager
            .container_options(&a, &a.spec.containers[0])
            .unwrap();
    }
    // A good checkpoint again, which the next start reads.
    let (again, _server) = manager(dir.path());
    assert_eq!(again.held("uid-a", "app", R), ["Dev-1"]);
}

#[test]
fn a_preference_naming_a_device_twice_or_unknown_ones_still_allocates_distinct_devices() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let options = pb::DevicePluginOptions {
        get_preferred_allocation_available: true,
        ..Default::default()
    };
    let (manager, _server) = manager(dir.path());
    let plugin = FakeDevicePlugin::start(
        &plugins,
        "dp.1",
        &[("Dev-1", true), ("Dev-2", true), ("Dev-3", true)],
        options,
    );
    plugin.register(&plugins, R, "v1beta1").unwrap();
    assert!(capacity_is(&manager, (3, 3)));
    plugin.set_preferred(&["Dev-3", "Dev-3", "Dev-9"]);
    let a = pod("uid-a", 2);
    manager
        .container_options(&a, &a.spec.containers[0])
        .unwrap();
    assert_eq!(manager.held("uid-a", "app", R), ["Dev-3", "Dev-1"]);
    assert!(plugin.calls().contains(&"Allocate Dev-3,Dev-1".to_owned()));
    // One device is left, and it is still free for the next pod.
    let b = pod("uid-b", 1);
    manager
        .container_options(&b, &b.spec.containers[0])
        .unwrap();
    assert_eq!(manager.held("uid-b", "app", R), ["Dev-2"]);
}

/// The litelet binary in standalone mode (static pods) on the fake CRI; stopped and
/// its cgroups removed on drop.
struct Agent {
    child: std::process::Child,
    cgroup_root: String,
    log: std::path::PathBuf,
}

impl Agent {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        let _ = kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            Signal::SIGTERM,
        );
        let _ = wait_until(T, || matches!(self.child.try_wait(), Ok(Some(_))));
        let _ = self.child.kill();
        let _ = self.child.wait();
        support::containerd::remove_cgroup_tree(&self.cgroup_root);
    }
}

fn static_pod(name: &str, count: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  hostNetwork: true\n  containers:\n  - name: app\n    image: busybox:1.0\n    env:\n    - name: OWN\n      value: pod\n    resources:\n      limits:\n        {R}: \"{count}\"\n"
    )
}

/// litelet on the fake CRI with its device plugins folder at `<dir>/plugins` and
/// static pods from `<dir>/manifests`; waits for the registration socket.
fn spawn_agent(dir: &Path, cri: &support::fake_cri::FakeCri, tag: &str) -> Agent {
    let (plugins, manifests) = (dir.join("plugins"), dir.join("manifests"));
    std::fs::create_dir_all(&manifests).unwrap();
    let cgroup_root = format!("/litelet-{tag}-{}", std::process::id());
    let log = dir.join("litelet.log");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_litelet"))
        .args(["--container-runtime-endpoint", &cri.endpoint()])
        .args(["--hostname-override", "dp-node"])
        .arg("--device-plugins-dir")
        .arg(&plugins)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--pod-logs-dir")
        .arg(dir.join("logs"))
        .arg("--pod-manifest-path")
        .arg(&manifests)
        .args(["--cgroup-root", &cgroup_root, "--eviction-hard="])
        .env("RUST_LOG", "info,litelet=debug")
        .env(
            litelet::kernel_tunables::TEST_ROOT_ENV,
            support::proc_sys(dir),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let agent = Agent {
        child,
        cgroup_root,
        log,
    };
    assert!(
        wait_until(T, || plugins.join("kubelet.sock").exists()),
        "{}",
        agent.log()
    );
    agent
}

#[test]
fn the_plugins_answer_reaches_create_container_and_a_pod_asking_too_much_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, manifests) = (dir.path().join("plugins"), dir.path().join("manifests"));
    let cri = support::fake_cri::FakeCri::start();
    let agent = spawn_agent(dir.path(), &cri, "dp");
    let plugin = FakeDevicePlugin::start(
        &plugins,
        "dp.fake",
        &[("Dev-1", true)],
        pb::DevicePluginOptions::default(),
    );
    plugin.register(&plugins, R, "v1beta1").unwrap();
    assert!(
        wait_until(T, || agent.log().contains("1 devices, 1 healthy")),
        "{}",
        agent.log()
    );

    std::fs::write(manifests.join("one.yaml"), static_pod("one", 1)).unwrap();
    let created = || {
        cri.state()
            .container_configs()
            .into_iter()
            .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "app"))
    };
    assert!(wait_until(T, || created().is_some()), "{}", agent.log());
    let config = created().unwrap();
    let envs: Vec<(&str, &str)> = config
        .envs
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(envs[0], ("FAKE_DEVICES", "Dev-1"), "{envs:?}");
    assert!(envs.contains(&("OWN", "pod")), "{envs:?}");
    assert_eq!(config.mounts[0].host_path, "/tmp/fake-Dev-1");
    assert_eq!(config.mounts[0].container_path, "/dev/fake/Dev-1");
    assert!(config.mounts[0].readonly);
    assert_eq!(config.devices.len(), 1);
    assert_eq!(config.devices[0].container_path, "/dev/Dev-1");
    assert_eq!(config.devices[0].host_path, "/dev/null");
    assert_eq!(config.devices[0].permissions, "rw");
    assert_eq!(config.annotations["fake/devices"], "Dev-1");
    let cdi: Vec<&str> = config.CDI_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(cdi, ["example.com/resource=Dev-1"]);
    assert!(plugin.calls().contains(&"Allocate Dev-1".to_owned()));

    // The only device is taken: a second pod is refused at admission.
    std::fs::write(manifests.join("two.yaml"), static_pod("two", 1)).unwrap();
    assert!(
        wait_until(T, || agent.log().contains(
            "UnexpectedAdmissionError: Allocate failed due to requested number of devices \
             unavailable for example.com/resource. Requested: 1, Available: 0, which is unexpected"
        )),
        "{}",
        agent.log()
    );
    assert_eq!(cri.state().container_configs().len(), 1);
}

/// The threads of a running process, by name (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn pod_resources_lists_each_containers_devices_the_allocatable_ones_and_gets_one_pod() {
    use litelet::podresources::grpc::PodResourcesListerClient;
    use litelet::podresources::pb as podres;
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let (plugins, manifests) = (dir.path().join("plugins"), dir.path().join("manifests"));
    let cri = support::fake_cri::FakeCri::start();
    let agent = spawn_agent(dir.path(), &cri, "podres");
    let socket = dir.path().join("root/pod-resources/kubelet.sock");
    assert!(wait_until(T, || socket.exists()), "{}", agent.log());
    let mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    assert_eq!(mode_of(&socket), 0o600);
    let idle = thread_names(agent.child.id());

    let plugin = FakeDevicePlugin::start(
        &plugins,
        "dp.fake",
        &[("Dev-1", true), ("Dev-2", true), ("Dev-3", false)],
        pb::DevicePluginOptions::default(),
    );
    plugin.register(&plugins, R, "v1beta1").unwrap();
    assert!(
        wait_until(T, || agent.log().contains("3 devices, 2 healthy")),
        "{}",
        agent.log()
    );
    let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let client = PodResourcesListerClient::new(
        grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", socket.display())),
    );
    let ids = |devices: &[podres::ContainerDevices]| -> Vec<(String, String, Vec<i64>)> {
        devices
            .iter()
            .map(|d| {
                let numa = d.topology.nodes.iter().map(|n| n.ID).collect();
                (d.resource_name.clone(), d.device_ids.join(","), numa)
            })
            .collect()
    };
    let allocatable = client
        .get_allocatable_resources(&Default::default())
        .unwrap();
    assert_eq!(
        ids(&allocatable.devices),
        vec![
            (R.to_owned(), "Dev-1".to_owned(), vec![0]),
            (R.to_owned(), "Dev-2".to_owned(), vec![0]),
        ]
    );
    assert!(allocatable.cpu_ids.is_empty() && allocatable.memory.is_empty());

    std::fs::write(manifests.join("one.yaml"), static_pod("one", 1)).unwrap();
    let held = || {
        let config = cri.state().container_configs().into_iter().next()?;
        let env = config.envs.iter().find(|e| e.key == "FAKE_DEVICES")?;
        Some(env.value.clone())
    };
    assert!(wait_until(T, || held().is_some()), "{}", agent.log());
    let held = held().unwrap();
    let listed = || {
        let list = client.list(&Default::default()).ok()?;
        let pod = list
            .pod_resources
            .into_iter()
            .find(|p| p.name == "one-dp-node")?;
        (!pod.containers.is_empty() && !pod.containers[0].devices.is_empty()).then_some(pod)
    };
    assert!(wait_until(T, || listed().is_some()), "{}", agent.log());
    let pod = listed().unwrap();
    assert_eq!(pod.namespace, "default");
    assert_eq!(pod.containers.len(), 1);
    assert_eq!(pod.containers[0].name, "app");
    assert_eq!(
        ids(&pod.containers[0].devices),
        vec![(R.to_owned(), held.clone(), vec![0])]
    );
    assert!(pod.containers[0].cpu_ids.is_empty() && pod.containers[0].memory.is_empty());

    let get = |name: &str| {
        client.get(&podres::GetPodResourcesRequest {
            pod_name: name.into(),
            pod_namespace: "default".into(),
            ..Default::default()
        })
    };
    let one = get("one-dp-node").unwrap();
    assert_eq!(ids(&one.pod_resources.containers[0].devices)[0].1, held);
    match get("nope") {
        Err(grpcio::Error::RpcFailure(status)) => {
            assert_eq!(status.code(), grpcio::RpcStatusCode::NOT_FOUND);
            assert_eq!(status.message(), "pod nope in namespace default not found");
        }
        other => panic!("Get of an unknown pod: {other:?}"),
    }

    // Past the burst of 10, calls are refused until the bucket refills.
    let refused = (0..40)
        .filter_map(|_| client.list(&Default::default()).err())
        .find_map(|e| match e {
            grpcio::Error::RpcFailure(s) => Some(s),
            _ => None,
        })
        .expect("a burst of 40 calls is rate limited");
    assert_eq!(refused.code(), grpcio::RpcStatusCode::RESOURCE_EXHAUSTED);
    assert_eq!(refused.message(), "rejected by rate limit");

    eprintln!(
        "litelet threads at idle before the plugin: {} {:?}",
        idle.len(),
        idle
    );
}
