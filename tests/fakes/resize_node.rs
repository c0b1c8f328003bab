//! In-place resize through the whole kubelet, in process: the API pod source, the sync
//! loop, pod workers, the kubelet syncer, the status manager and the PLEG, against the
//! fake API server (real HTTP), the fake CRI (real gRPC) and a temp-dir cgroupfs
//! (the v1 model; the cgroup writes themselves are also checked on v2 and on the
//! kernel in `tests/fakes/resize.rs`). Names say the behaviour checked.
//! The same node shows the Burstable QoS cgroup's CPU shares following its pods, on
//! the model and (as root on a v1 machine, with a private containerd and cgroup root
//! `/sys/fs/cgroup/*/litelet-qos-<pid>`) on the kernel.
//!
//! `resize_latency_median_over_50_resizes` is a measurement, not a check: run it with
//! `cargo test --release --test fakes resize_node:: -- --ignored --nocapture`.

use crate::support;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::cgroup_model::CgroupModel;
use crate::support::containerd::{qos_cgroups_under, CgroupRoot, Containerd, BUSYBOX};
use crate::support::fake_api::FakeApi;
use crate::support::fake_cri::FakeCri;
use crate::support::runtime;
use crate::support::wait_until;
use crossbeam_channel::{bounded, never, unbounded, Sender};
use grpcio::RpcStatusCode;
use litelet::admission::NodeView;
use litelet::api::quantity::Quantity;
use litelet::cgroups::PodCgroupManager;
use litelet::cri::{ImageClient, RuntimeClient};
use litelet::events::{EventRecord, Recorder};
use litelet::kubelet::deps::{NoProbes, NoVolumes};
use litelet::kubelet::mirror::MirrorClient;
use litelet::kubelet::syncer::{KubeletSyncer, NodeFacts, SyncerDeps};
use litelet::kubelet::{Kubelet, KubeletDeps};
use litelet::pleg::{Pleg, EVENT_CHANNEL_CAPACITY};
use litelet::pod_workers::{PodWorkers, WorkQueue, WorkerTimings};
use litelet::runtime::cache::PodStatusCache;
use litelet::runtime::manager::RuntimeSettings;
use litelet::runtime::resize::{PodResize, ResizeConfig, ResizeManager};
use litelet::runtime::state::RuntimeState;
use litelet::sources::{self, SOURCE_API};
use litelet::status::manager::{PodHooks, StatusManager};
use serde_json::{json, Value};

const NODE: &str = "resize-node";
const WAIT: Duration = Duration::from_secs(60);
const MI: u64 = 1 << 20;
/// The pod workers' periodic resync in these nodes.
const RESYNC: Duration = Duration::from_secs(3);

/// One litelet, in process. Dropping it shuts every thread down (containers stay).
struct Node {
    shutdown: Option<Sender<()>>,
    kubelet: Option<JoinHandle<()>>,
    events: Arc<Mutex<Vec<EventRecord>>>,
    cgroups: Arc<PodCgroupManager>,
}

impl Node {
    fn start(api: &FakeApi, cri: &FakeCri, model: &CgroupModel, root: &Path, cpus: &str) -> Node {
        let (runtime, images) = cri.clients(Duration::from_secs(30));
        Node::start_on(api, (runtime, images), model.manager(), root, cpus)
    }

    /// [`Node::start`] on any CRI endpoint's clients and pod cgroup manager.
    fn start_on(
        api: &FakeApi,
        (runtime, images): (RuntimeClient, ImageClient),
        cgroups: PodCgroupManager,
        root: &Path,
        cpus: &str,
    ) -> Node {
        let (shutdown_tx, shutdown) = bounded::<()>(0);
        let (event_tx, event_rx) = unbounded::<EventRecord>();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            for e in event_rx {
                sink.lock().unwrap().push(e);
            }
        });
        let recorder = Recorder::new(event_tx);
        let settings = RuntimeSettings {
            root_dir: root.to_owned(),
            ..runtime::settings(root)
        };
        let manager = Arc::new(runtime::manager(
            runtime.clone(),
            images,
            recorder.clone(),
            settings,
        ));
        let cgroups = Arc::new(cgroups);
        let mut node = NodeView {
            name: NODE.into(),
            ..Default::default()
        };
        for (k, v) in [("cpu", cpus), ("memory", "8Gi"), ("pods", "110")] {
            node.allocatable
                .insert(k.into(), Quantity::parse(v).unwrap());
        }
        let (resize, problem) = ResizeManager::open(root, ResizeConfig::new(node.clone()));
        assert!(problem.is_none(), "{problem:?}");
        let resize = Arc::new(resize);
        let cache = PodStatusCache::new();
        let (pleg_tx, pleg_rx) = bounded(EVENT_CHANNEL_CAPACITY);
        let pleg = Pleg::new(runtime.clone(), cache.clone(), pleg_tx);
        let last_relist = pleg.last_relist();
        let runtime_state = RuntimeState::new(pleg.health());
        pleg.spawn(shutdown.clone()).unwrap();
        runtime_state
            .spawn_updater(manager.clone(), shutdown.clone())
            .unwrap();
        let client = api.client();
        // The status thread starts once the workers its hooks ask exist.
        let unstarted = StatusManager::unstarted();
        let status = unstarted.handle();
        let (updates_tx, updates_rx) = unbounded();
        sources::apiserver::spawn(client.clone(), NODE.into(), updates_tx, shutdown.clone())
            .unwrap();
        let syncer = KubeletSyncer::new(SyncerDeps {
            runtime: manager.clone(),
            status: status.clone(),
            volumes: Arc::new(NoVolumes),
            probes: Arc::new(NoProbes),
            runtime_state: runtime_state.clone(),
            recorder: recorder.clone(),
            node: NodeFacts {
                name: NODE.into(),
                host_ips: vec!["10.0.0.1".into()],
                runtime_name: "fake".into(),
                root_dir: root.to_owned(),
            },
            resize: PodResize::new(resize.clone(), cache.clone(), recorder.clone()),
            allocatable: Default::default(),
            cgroups: Some(cgroups.clone()),
            mirrors: Some(MirrorClient::new(client.clone(), NODE.into())),
            services: None,
        });
        let queue = WorkQueue::new();
        let timings = WorkerTimings {
            resync: RESYNC,
            backoff: Duration::from_millis(300),
            network_backoff: Duration::from_millis(300),
            ..Default::default()
        };
        let workers = PodWorkers::new(
            Arc::new(syncer),
            queue.clone(),
            cache,
            recorder.clone(),
            timings,
        );
        let (w1, w2) = (workers.clone(), workers.clone());
        let hooks = PodHooks::new(
            Arc::new(move |uid: &str| w1.could_have_running_containers(uid)),
            Arc::new(move |uid: &str| {
                !w2.could_have_running_containers(uid) && w2.should_pod_be_finished(uid)
            }),
        );
        unstarted
            .spawn(client.clone(), hooks, Default::default(), shutdown.clone())
            .unwrap();
        let (deaths, _) = bounded(16);
        let kubelet = Kubelet::new(KubeletDeps {
            workers,
            queue,
            runtime: manager,
            runtime_state,
            status,
            probes: Arc::new(NoProbes),
            recorder,
            node,
            root_dir: root.to_owned(),
            expected_sources: HashSet::from([SOURCE_API]),
            resize,
            volumes: Arc::new(NoVolumes),
            deaths,
            last_relist,
            cgroups: Some(cgroups.clone()),
            mirrors: Some(MirrorClient::new(client, NODE.into())),
            node_lister: None,
            extra_admission: None,
            devices: None,
            reachable_again: crossbeam_channel::never(),
        });
        let thread = std::thread::Builder::new()
            .name("sync".into())
            .spawn(move || kubelet.run(updates_rx, pleg_rx, never(), shutdown))
            .unwrap();
        Node {
            shutdown: Some(shutdown_tx),
            kubelet: Some(thread),
            events,
            cgroups,
        }
    }

    fn event_reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.reason.clone())
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.shutdown.take());
        if let Some(t) = self.kubelet.take() {
            let _ = t.join();
        }
        // Let the other threads see the shutdown before the next node starts.
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn fake_cri() -> FakeCri {
    let cri = FakeCri::start();
    cri.state().images.insert(BUSYBOX.into(), 1_300_000);
    cri
}

fn res(cpu_req: &str, cpu_lim: &str, mem_req: &str, mem_lim: &str) -> Value {
    let mut r = json!({"requests": {}, "limits": {}});
    for (k, v) in [("cpu", cpu_req), ("memory", mem_req)] {
        if !v.is_empty() {
            r["requests"][k] = v.into();
        }
    }
    for (k, v) in [("cpu", cpu_lim), ("memory", mem_lim)] {
        if !v.is_empty() {
            r["limits"][k] = v.into();
        }
    }
    r
}

fn create_pod(api: &FakeApi, name: &str, resources: Value) -> String {
    let pod = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": BUSYBOX,
                "command": ["sh", "-c", "exec sleep 3600"],
                "resources": resources,
            }],
        },
    });
    let created = api.create("pods", "default", pod);
    created["metadata"]["uid"].as_str().unwrap().to_owned()
}

fn get(api: &FakeApi, name: &str) -> Value {
    api.get("pods", "default", name).unwrap_or(Value::Null)
}

/// Resizes `app` as `kubectl patch --subresource resize` would (the generation goes up).
fn resize(api: &FakeApi, name: &str, resources: Value) -> i64 {
    let pod = api.modify("pods", "default", name, |p| {
        p["spec"]["containers"][0]["resources"] = resources;
    });
    pod["metadata"]["generation"].as_i64().unwrap()
}

fn app_status(pod: &Value) -> Value {
    pod["status"]["containerStatuses"][0].clone()
}

fn condition(pod: &Value, type_: &str) -> Option<Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn quantity(v: &Value) -> Option<Quantity> {
    v.as_str().and_then(|s| Quantity::parse(s).ok())
}

fn same(v: &Value, want: &str) -> bool {
    quantity(v).is_some_and(|q| q.cmp(&Quantity::parse(want).unwrap()).is_eq())
}

fn wait_running(api: &FakeApi, name: &str) {
    let ok = wait_until(WAIT, || {
        let p = get(api, name);
        p["status"]["phase"] == "Running" && !app_status(&p)["state"]["running"].is_null()
    });
    assert!(ok, "{name} never ran: {:#}", get(api, name));
}

fn pod_cgroup(node: &Node, uid: &str) -> String {
    let name = node.cgroups.find_pod(uid).unwrap().expect("pod cgroup");
    name.to_cgroupfs()
}

#[test]
fn resize_reaches_the_cgroups_and_the_api_status() {
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let node = Node::start(&api, &cri, &model, root.path(), "4");
    let uid = create_pod(&api, "web", res("500m", "500m", "128Mi", "128Mi"));
    wait_running(&api, "web");
    let before = app_status(&get(&api, "web"));
    assert!(
        same(&before["allocatedResources"]["cpu"], "500m"),
        "{before:#}"
    );
    assert!(
        same(&before["resources"]["limits"]["memory"], "128Mi"),
        "{before:#}"
    );
    let creates = cri.count("CreateContainer");

    let generation = resize(&api, "web", res("1", "1", "256Mi", "256Mi"));
    let done = wait_until(WAIT, || {
        let p = get(&api, "web");
        let app = app_status(&p);
        same(&app["allocatedResources"]["cpu"], "1")
            && same(&app["allocatedResources"]["memory"], "256Mi")
            && same(&app["resources"]["limits"]["cpu"], "1")
            && same(&app["resources"]["requests"]["cpu"], "1")
            && same(&app["resources"]["limits"]["memory"], "256Mi")
            && condition(&p, "PodResizeInProgress").is_none()
            && condition(&p, "PodResizePending").is_none()
            && p["status"]["observedGeneration"] == generation
    });
    assert!(
        done,
        "status never showed the resize: {:#}",
        get(&api, "web")
    );
    let cg = pod_cgroup(&node, &uid);
    assert_eq!(
        model.read("cpu", &cg, "cpu.cfs_quota_us").unwrap(),
        "100000"
    );
    assert_eq!(model.read("cpu", &cg, "cpu.shares").unwrap(), "1024");
    assert_eq!(
        model.read("memory", &cg, "memory.limit_in_bytes").unwrap(),
        (256 * MI).to_string()
    );
    assert_eq!(cri.count("CreateContainer"), creates, "resized in place");
    let checkpoint = std::fs::read_to_string(root.path().join("allocated_pods_state")).unwrap();
    assert!(
        checkpoint.contains(&uid) && checkpoint.contains("256Mi"),
        "{checkpoint}"
    );
    let reasons = node.event_reasons();
    assert!(
        reasons.iter().any(|r| r == "ResizeStarted")
            && reasons.iter().any(|r| r == "ResizeCompleted"),
        "{reasons:?}"
    );
}

#[test]
fn burstable_qos_cgroup_shares_follow_the_pods_synced_and_deleted() {
    for model in [CgroupModel::v1(), CgroupModel::v2()] {
        let (api, cri, root) = (FakeApi::start(), fake_cri(), tempfile::tempdir().unwrap());
        let node = Node::start(&api, &cri, &model, root.path(), "4");
        let qos = |dir: &str| {
            if model.v2 {
                model.read("", dir, "cpu.weight").unwrap_or_default()
            } else {
                model.read("cpu", dir, "cpu.shares").unwrap_or_default()
            }
        };
        // cpu.weight is shares mapped onto 1..=10000 (runc's formula).
        let want = |shares: u64| -> String {
            if model.v2 {
                (1 + (shares - 2) * 9999 / 262_142).to_string()
            } else {
                shares.to_string()
            }
        };
        let burstable = || qos("/kubepods/burstable");
        let settles = |shares: u64, after: &str| {
            let ok = wait_until(WAIT, || burstable() == want(shares));
            assert!(
                ok,
                "v2={}: burstable {} after {after}, want {}",
                model.v2,
                burstable(),
                want(shares)
            );
        };
        create_pod(&api, "a", res("500m", "", "64Mi", "1Gi"));
        wait_running(&api, "a");
        settles(512, "a (500m) ran");
        create_pod(&api, "b", res("250m", "", "64Mi", "1Gi"));
        // Guaranteed: its request is the pod cgroup's own share, not Burstable's.
        create_pod(&api, "g", res("1", "1", "64Mi", "64Mi"));
        wait_running(&api, "b");
        wait_running(&api, "g");
        settles(512 + 256, "b (250m) and g (Guaranteed) ran");
        assert_eq!(qos("/kubepods/besteffort"), want(2));
        // A resize counts at the allocated request.
        resize(&api, "b", res("500m", "", "64Mi", "1Gi"));
        settles(512 + 512, "b was resized to 500m");

        api.delete("pods", "default", "a", Some(0)).unwrap();
        settles(512, "a was deleted");
        api.delete("pods", "default", "b", Some(0)).unwrap();
        settles(2, "b was deleted");
        drop(node);
    }
}

#[test]
fn burstable_qos_cgroup_shares_follow_real_pods_on_the_kernel() {
    const TEST: &str = "burstable_qos_cgroup_shares_follow_real_pods_on_the_kernel";
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() {
        let _: Option<()> = support::skip(TEST, "needs cgroup v1 at /sys/fs/cgroup");
        return;
    }
    let top = format!("litelet-qos-{}", std::process::id());
    let _cleanup = CgroupRoot(top.clone());
    let Some(ctd) = Containerd::start(TEST) else {
        return;
    };
    let cgroups = qos_cgroups_under(&format!("/{top}"));
    let (api, root) = (FakeApi::start(), tempfile::tempdir().unwrap());
    let clients = runtime::connect(&ctd.endpoint(), Duration::from_secs(60));
    let node = Node::start_on(&api, clients, cgroups, root.path(), "4");
    let shares = |qos: &str| {
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/cpu/{top}/kubepods/{qos}/cpu.shares"
        ))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("<{e}>"))
    };
    let settles = |want: &str, after: &str| {
        let ok = wait_until(WAIT, || shares("burstable") == want);
        assert!(
            ok,
            "burstable cpu.shares {} after {after}, want {want}\n{}",
            shares("burstable"),
            ctd.log_tail()
        );
    };
    create_pod(&api, "a", res("500m", "", "32Mi", "256Mi"));
    create_pod(&api, "b", res("250m", "", "32Mi", "256Mi"));
    wait_running(&api, "a");
    wait_running(&api, "b");
    settles("768", "a (500m) and b (250m) ran");
    assert_eq!(shares("besteffort"), "2");
    api.delete("pods", "default", "a", Some(0)).unwrap();
    settles("256", "a was deleted");
    api.delete("pods", "default", "b", Some(0)).unwrap();
    settles("2", "b was deleted");
    // The pod cgroups went with the pods: only the QoS cgroups stay.
    assert_eq!(node.cgroups.list_pod_uids().unwrap(), Vec::<String>::new());
    drop(node);
}

#[test]
fn infeasible_then_deferred_then_admitted_when_a_pod_leaves() {
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let node = Node::start(&api, &cri, &model, root.path(), "2");
    let uid = create_pod(&api, "a", res("500m", "", "64Mi", "1Gi"));
    create_pod(&api, "b", res("1", "", "64Mi", "1Gi"));
    wait_running(&api, "a");
    wait_running(&api, "b");
    let cg = pod_cgroup(&node, &uid);
    let shares = || model.read("cpu", &cg, "cpu.shares").unwrap_or_default();
    assert_eq!(shares(), "512");
    // A resize not admitted changes nothing on the node, not even in the
    // syncs that judge it again (the periodic resync, every 3 s here).
    let untouched = |state: &str| {
        assert_eq!(
            cri.count("UpdateContainerResources"),
            0,
            "container updated while {state}"
        );
        assert_eq!(shares(), "512", "pod cgroup written while {state}");
    };

    resize(&api, "a", res("4", "", "64Mi", "1Gi"));
    let pending = |reason: &str| {
        condition(&get(&api, "a"), "PodResizePending")
            .is_some_and(|c| c["reason"] == reason && c["status"] == "True")
    };
    assert!(
        wait_until(WAIT, || pending("Infeasible")),
        "{:#}",
        get(&api, "a")
    );
    let c = condition(&get(&api, "a"), "PodResizePending").unwrap();
    assert_eq!(
        c["message"],
        "Node didn't have enough capacity: cpu, requested: 4, capacity: 2"
    );
    assert!(same(
        &app_status(&get(&api, "a"))["allocatedResources"]["cpu"],
        "500m"
    ));
    std::thread::sleep(Duration::from_millis(500));
    untouched("Infeasible");

    resize(&api, "a", res("1500m", "", "64Mi", "1Gi"));
    assert!(
        wait_until(WAIT, || pending("Deferred")),
        "{:#}",
        get(&api, "a")
    );
    assert!(same(
        &app_status(&get(&api, "a"))["allocatedResources"]["cpu"],
        "500m"
    ));
    std::thread::sleep(RESYNC + Duration::from_millis(500));
    untouched("Deferred");

    // b leaves: a's resize is judged again at once and fits.
    api.delete("pods", "default", "b", Some(0)).unwrap();
    let admitted = wait_until(WAIT, || {
        let p = get(&api, "a");
        same(&app_status(&p)["allocatedResources"]["cpu"], "1500m")
            && condition(&p, "PodResizePending").is_none()
    });
    assert!(admitted, "{:#}", get(&api, "a"));
    // Now it is carried out: 1500m is 1536 shares, in the pod cgroup (first: it
    // goes up) and then in the container.
    let container_shares = || {
        let state = cri.state();
        let ids = state.container_ids(litelet::cri::pb::ContainerState::CONTAINER_RUNNING);
        ids.iter()
            .filter(|id| state.pod_of_container(id).as_deref() == Some("a"))
            .filter_map(|id| state.container_resources(id))
            .map(|r| r.cpu_shares)
            .collect::<Vec<_>>()
    };
    let carried_out = wait_until(WAIT, || shares() == "1536" && container_shares() == [1536]);
    assert!(carried_out, "{} {:?}", shares(), container_shares());
    assert_eq!(cri.count("UpdateContainerResources"), 1);
    let reasons = node.event_reasons();
    for r in ["ResizeInfeasible", "ResizeDeferred", "ResizeStarted"] {
        assert!(
            reasons.iter().any(|x| x == r),
            "{r} missing from {reasons:?}"
        );
    }
}

#[test]
fn qos_class_change_is_infeasible_and_the_pod_keeps_running() {
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let _node = Node::start(&api, &cri, &model, root.path(), "4");
    create_pod(&api, "be", json!({}));
    wait_running(&api, "be");
    api.modify("pods", "default", "be", |p| {
        p["status"]["qosClass"] = "BestEffort".into()
    });
    resize(&api, "be", res("100m", "", "", ""));
    let refused = wait_until(WAIT, || {
        condition(&get(&api, "be"), "PodResizePending").is_some_and(|c| {
            c["reason"] == "Infeasible" && c["message"].as_str().unwrap_or("").contains("QoS class")
        })
    });
    assert!(refused, "{:#}", get(&api, "be"));
    let app = app_status(&get(&api, "be"));
    assert!(app["allocatedResources"].is_null(), "{app:#}");
    assert!(!app["state"]["running"].is_null());
    assert_eq!(cri.count("UpdateContainerResources"), 0);
}

#[test]
fn resize_errors_are_reported_and_a_restart_mid_resize_finishes_it() {
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let node = Node::start(&api, &cri, &model, root.path(), "4");
    let uid = create_pod(&api, "web", res("500m", "500m", "128Mi", "128Mi"));
    wait_running(&api, "web");
    let creates = cri.count("CreateContainer");
    for n in 1..=200 {
        cri.fail_nth(
            "UpdateContainerResources",
            n,
            RpcStatusCode::UNAVAILABLE,
            "runtime busy",
        );
    }
    resize(&api, "web", res("500m", "500m", "256Mi", "256Mi"));
    // The error is in the status, not only in a log (quirk 1).
    let reported = wait_until(WAIT, || {
        condition(&get(&api, "web"), "PodResizeInProgress").is_some_and(|c| {
            c["reason"] == "Error" && c["message"].as_str().unwrap_or("").contains("runtime busy")
        })
    });
    assert!(reported, "{:#}", get(&api, "web"));
    assert!(node.event_reasons().iter().any(|r| r == "ResizeError"));
    // The pod cgroup went up first; the container is still at 128Mi.
    let cg = pod_cgroup(&node, &uid);
    assert_eq!(
        model.read("memory", &cg, "memory.limit_in_bytes").unwrap(),
        (256 * MI).to_string()
    );
    drop(node);

    // litelet comes back: the checkpoint says 256Mi; the resize finishes in place.
    cri.clear_faults();
    let _node = Node::start(&api, &cri, &model, root.path(), "4");
    let done = wait_until(WAIT, || {
        let p = get(&api, "web");
        same(&app_status(&p)["resources"]["limits"]["memory"], "256Mi")
            && condition(&p, "PodResizeInProgress").is_none()
    });
    assert!(done, "{:#}", get(&api, "web"));
    assert_eq!(cri.count("CreateContainer"), creates, "resized in place");
}

/// Calls that make up one runtime GetPodStatus of a pod (besides the lists).
fn pod_status_reads(cri: &FakeCri) -> (usize, usize) {
    (cri.count("PodSandboxStatus"), cri.count("ContainerStatus"))
}

#[test]
fn resize_quirk10_no_extra_pod_status_read_per_sync() {
    // Upstream's computePodActions read the pod's runtime status again (GetPodStatus)
    // in every sync once resize was enabled. litelet syncs from the PLEG's cache and
    // reads the runtime once only after a sync that resized (to report the new values
    // at once): none in a periodic resync, exactly one for a resize. The pod is the
    // only one on the node, so every PodSandboxStatus / ContainerStatus is about it.
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let _node = Node::start(&api, &cri, &model, root.path(), "4");
    create_pod(&api, "web", res("500m", "500m", "128Mi", "128Mi"));
    wait_running(&api, "web");
    // Settle: the PLEG has seen the container start and the status is out.
    std::thread::sleep(Duration::from_millis(1500));

    let before = pod_status_reads(&cri);
    std::thread::sleep(RESYNC + Duration::from_millis(700));
    assert_eq!(
        pod_status_reads(&cri),
        before,
        "periodic syncs read the pod status"
    );

    let updates = cri.count("UpdateContainerResources");
    resize(&api, "web", res("500m", "500m", "256Mi", "256Mi"));
    let done = wait_until(WAIT, || {
        let p = get(&api, "web");
        same(&app_status(&p)["resources"]["limits"]["memory"], "256Mi")
            && condition(&p, "PodResizeInProgress").is_none()
    });
    assert!(done, "{:#}", get(&api, "web"));
    // One sync carried the resize (memory only: one container update).
    assert_eq!(cri.count("UpdateContainerResources"), updates + 1);
    // And a periodic resync after it reads nothing either.
    std::thread::sleep(RESYNC + Duration::from_millis(700));
    assert_eq!(
        pod_status_reads(&cri),
        (before.0 + 1, before.1 + 1),
        "one GetPodStatus (1 sandbox, 1 container) for the sync that resized, none else"
    );
}

/// Pod cgroup and container values at one instant: (pod memory, pod CPU quota,
/// container memory, container CPU quota), all with a 100 ms CFS period.
type Sample = (i64, i64, i64, i64);

/// A consistent sample: the container's values read before and after the pod
/// cgroup's are equal, so the pod values were read while the container had them.
fn sample(model: &CgroupModel, cri: &FakeCri, cg: &str, id: &str) -> Option<Sample> {
    let ctr = || {
        let r = cri.state().container_resources(id)?;
        Some((r.memory_limit_in_bytes, r.cpu_quota))
    };
    let first = ctr()?;
    let memory = model.read("memory", cg, "memory.limit_in_bytes")?;
    let quota = model.read("cpu", cg, "cpu.cfs_quota_us")?;
    (ctr()? == first).then_some(())?;
    Some((memory.parse().ok()?, quota.parse().ok()?, first.0, first.1))
}

#[test]
fn repeated_resizes_in_flight_end_at_the_last_request() {
    // Three resizes, each sent while the previous one is being carried out (every
    // UpdateContainerResources answers after 300 ms): up (1 CPU, 256Mi), then down
    // (250m, 64Mi) once the first container update is in flight, then (750m, 192Mi)
    // once the second resize's first container update is. The pod ends at the last
    // request (cgroups, runtime, API status), and no step ever put the container's
    // memory or CPU limit above its pod's.
    //
    // The check of every step: the container's values only change at an
    // UpdateContainerResources, and while one is answered (300 ms) the kubelet writes
    // nothing, so polling sees every (pod, container) state between two calls. The
    // one state it may miss, the pod cgroup written before the next call arrives,
    // pairs the pod values of the next sample with the container values of the one
    // before: checked too.
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let node = Node::start(&api, &cri, &model, root.path(), "4");
    let uid = create_pod(&api, "web", res("500m", "500m", "128Mi", "128Mi"));
    wait_running(&api, "web");
    let cg = pod_cgroup(&node, &uid);
    let ids = cri
        .state()
        .container_ids(litelet::cri::pb::ContainerState::CONTAINER_RUNNING);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0].clone();
    let creates = cri.count("CreateContainer");
    cri.delay("UpdateContainerResources", Duration::from_millis(300));

    let mut samples: Vec<Sample> = Vec::new();
    let mut stage = 0;
    let mut last_generation = 0;
    let started = Instant::now();
    let finished = |p: &Value| {
        let app = app_status(p);
        same(&app["allocatedResources"]["cpu"], "750m")
            && same(&app["allocatedResources"]["memory"], "192Mi")
            && same(&app["resources"]["limits"]["cpu"], "750m")
            && same(&app["resources"]["limits"]["memory"], "192Mi")
            && condition(p, "PodResizeInProgress").is_none()
            && condition(p, "PodResizePending").is_none()
    };
    loop {
        assert!(started.elapsed() < WAIT, "never finished: {samples:?}");
        if let Some(s) = sample(&model, &cri, &cg, &id) {
            if samples.last() != Some(&s) {
                samples.push(s);
            }
        }
        let updates = cri.count("UpdateContainerResources");
        match stage {
            0 => {
                resize(&api, "web", res("1", "1", "256Mi", "256Mi"));
                stage = 1;
            }
            1 if updates >= 1 => {
                resize(&api, "web", res("250m", "250m", "64Mi", "64Mi"));
                stage = 2;
            }
            // The second resize has begun: its first write lowers the container.
            2 if samples.last().is_some_and(|s| s.2 == 64 * MI as i64) => {
                last_generation = resize(&api, "web", res("750m", "750m", "192Mi", "192Mi"));
                stage = 3;
            }
            3 if finished(&get(&api, "web")) => break,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    cri.clear_faults();
    eprintln!("(pod memory, pod quota, container memory, container quota): {samples:?}");

    // Every state, and every state between two samples, kept the container within
    // its pod.
    for s in &samples {
        assert!(
            s.0 >= s.2 && s.1 >= s.3,
            "container above its pod: {s:?} in {samples:?}"
        );
    }
    for w in samples.windows(2) {
        let (before, after) = (w[0], w[1]);
        assert!(
            after.0 >= before.2 && after.1 >= before.3,
            "container above its pod between {before:?} and {after:?} in {samples:?}"
        );
    }
    // The first resize was under way, and the second one started, before the next
    // request came: they overlapped.
    assert!(
        samples.iter().any(|s| s.2 == 256 * MI as i64),
        "{samples:?}"
    );

    // The last request, everywhere.
    assert_eq!(
        samples.last().copied(),
        Some((192 * MI as i64, 75_000, 192 * MI as i64, 75_000))
    );
    assert_eq!(model.read("cpu", &cg, "cpu.shares").unwrap(), "768");
    let applied = cri.state().container_resources(&id).unwrap();
    assert_eq!(
        (
            applied.cpu_shares,
            applied.cpu_quota,
            applied.memory_limit_in_bytes
        ),
        (768, 75_000, 192 * MI as i64)
    );
    let p = get(&api, "web");
    assert_eq!(p["status"]["observedGeneration"], last_generation, "{p:#}");
    assert_eq!(cri.count("CreateContainer"), creates, "resized in place");
    let checkpoint = std::fs::read_to_string(root.path().join("allocated_pods_state")).unwrap();
    assert!(checkpoint.contains("192Mi"), "{checkpoint}");
}

/// Requested CPU of the pods on the node that count: admitted and not terminal.
fn admitted_cpu_milli(api: &FakeApi, names: &[&str]) -> i64 {
    names
        .iter()
        .map(|n| get(api, n))
        .filter(|p| p["status"]["phase"] == "Running")
        .map(|p| {
            quantity(&app_status(&p)["allocatedResources"]["cpu"])
                .map(|q| q.milli_value())
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn resize_and_pod_addition_share_one_admission() {
    // A resize admission (on the pod's worker thread) and a pod addition (on the
    // sync loop) take the same admission lock and see each other's outcome: on a
    // 2-CPU node with `a` at 500m, `a` asking for 1500m and a new 1-CPU pod cannot
    // both be admitted. Each round ends with one of them refused: the resize
    // Deferred, or the new pod rejected with OutOfcpu.
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let _node = Node::start(&api, &cri, &model, root.path(), "2");
    create_pod(&api, "a", res("500m", "", "64Mi", "1Gi"));
    wait_running(&api, "a");
    let pending = |reason: &str| {
        condition(&get(&api, "a"), "PodResizePending")
            .is_some_and(|c| c["reason"] == reason && c["status"] == "True")
    };
    let allocated = |want: &str| {
        same(
            &app_status(&get(&api, "a"))["allocatedResources"]["cpu"],
            want,
        )
    };
    let rejected = |b: &str| {
        get(&api, b)["status"]["phase"] == "Failed"
            && get(&api, b)["status"]["reason"] == "OutOfcpu"
    };

    // Round 1, in order: the resize is admitted first; the addition sees it.
    resize(&api, "a", res("1500m", "", "64Mi", "1Gi"));
    assert!(
        wait_until(WAIT, || allocated("1500m")),
        "{:#}",
        get(&api, "a")
    );
    create_pod(&api, "b1", res("1", "", "64Mi", "64Mi"));
    assert!(wait_until(WAIT, || rejected("b1")), "{:#}", get(&api, "b1"));

    // Round 2, in order: the addition first; the resize sees it and waits.
    resize(&api, "a", res("500m", "", "64Mi", "1Gi"));
    assert!(
        wait_until(WAIT, || allocated("500m")),
        "{:#}",
        get(&api, "a")
    );
    create_pod(&api, "b2", res("1", "", "64Mi", "64Mi"));
    wait_running(&api, "b2");
    resize(&api, "a", res("1500m", "", "64Mi", "1Gi"));
    assert!(
        wait_until(WAIT, || pending("Deferred")),
        "{:#}",
        get(&api, "a")
    );
    assert!(allocated("500m"));

    // Rounds 3–5, racing: the resize and the addition sent together, the addition
    // a little later each round. Whoever wins, the other is refused.
    let all = ["a", "b1", "b2", "b3", "b4", "b5"];
    let mut admitted_b = Some("b2");
    for (b, gap) in [("b3", 0), ("b4", 30), ("b5", 120)] {
        // Back to `a` at 500m with nothing pending, and no other pod admitted.
        if let Some(old) = admitted_b.take() {
            api.delete("pods", "default", old, Some(0)).unwrap();
        }
        resize(&api, "a", res("500m", "", "64Mi", "1Gi"));
        let settled = wait_until(WAIT, || {
            allocated("500m")
                && condition(&get(&api, "a"), "PodResizePending").is_none()
                && admitted_cpu_milli(&api, &all) == 500
        });
        assert!(settled, "before {b}: {:#}", get(&api, "a"));
        // Let the deletion reach the node (its CPU is free again).
        std::thread::sleep(Duration::from_millis(1500));

        resize(&api, "a", res("1500m", "", "64Mi", "1Gi"));
        std::thread::sleep(Duration::from_millis(gap));
        create_pod(&api, b, res("1", "", "64Mi", "64Mi"));
        let resize_won = || allocated("1500m") && rejected(b);
        let addition_won = || pending("Deferred") && get(&api, b)["status"]["phase"] == "Running";
        let decided = wait_until(WAIT, || resize_won() || addition_won());
        assert!(decided, "{b}: {:#}\n{:#}", get(&api, "a"), get(&api, b));
        // And it stays decided: never both.
        std::thread::sleep(Duration::from_millis(500));
        let used = admitted_cpu_milli(&api, &all);
        assert!(used <= 2000, "{b}: {used}m admitted on a 2-CPU node");
        if addition_won() {
            admitted_b = Some(b);
        }
        eprintln!(
            "{b} sent {gap} ms after the resize: {} won",
            if admitted_b.is_some() {
                "the addition"
            } else {
                "the resize"
            }
        );
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Medians (to the cgroup write, to the status PATCH) over 50 resizes spaced `gap`.
fn measure(gap: Duration) -> (Duration, Duration, Duration, Duration) {
    let (api, cri, model, root) = (
        FakeApi::start(),
        fake_cri(),
        CgroupModel::v1(),
        tempfile::tempdir().unwrap(),
    );
    let node = Node::start(&api, &cri, &model, root.path(), "4");
    let uid = create_pod(&api, "web", res("500m", "500m", "128Mi", "128Mi"));
    wait_running(&api, "web");
    let cg = pod_cgroup(&node, &uid);
    let (mut to_cgroup, mut to_patch) = (Vec::new(), Vec::new());
    for i in 0..50 {
        let mi = if i % 2 == 0 { 192 } else { 128 };
        let want = (mi * MI).to_string();
        let quantity = format!("{mi}Mi");
        std::thread::sleep(gap);
        let t0 = Instant::now();
        resize(&api, "web", res("500m", "500m", &quantity, &quantity));
        let mut cgroup_at = None;
        while t0.elapsed() < WAIT {
            if model
                .read("memory", &cg, "memory.limit_in_bytes")
                .as_deref()
                == Some(want.as_str())
            {
                cgroup_at = Some(Instant::now());
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let cgroup_at = cgroup_at.expect("cgroup write");
        let seen = wait_until(WAIT, || {
            let p = get(&api, "web");
            same(&app_status(&p)["resources"]["limits"]["memory"], &quantity)
                && condition(&p, "PodResizeInProgress").is_none()
        });
        assert!(seen);
        let seen_at = Instant::now();
        let patch_at = api
            .requests()
            .iter()
            .filter(|r| {
                r.verb == "patch" && r.path.ends_with("/status") && r.at >= t0 && r.at <= seen_at
            })
            .map(|r| r.at)
            .max()
            .expect("a status patch");
        to_cgroup.push(cgroup_at - t0);
        to_patch.push(patch_at - t0);
    }
    let max_cg = *to_cgroup.iter().max().unwrap();
    let max_patch = *to_patch.iter().max().unwrap();
    (median(to_cgroup), median(to_patch), max_cg, max_patch)
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn resize_latency_median_over_50_resizes() {
    // Spaced 1.5 s: the PLEG has relisted since the pod's last sync, so the pod worker
    // starts at once. Spaced 0.3 s: the worker first waits for the next relist (1 s
    // period), as every kubelet sync does after a recent one.
    for gap in [Duration::from_millis(1500), Duration::from_millis(300)] {
        let (cg, patch, max_cg, max_patch) = measure(gap);
        println!(
            "resizes spaced {gap:?}: median to cgroup write {cg:?}, to status PATCH {patch:?} \
             (max {max_cg:?} / {max_patch:?})"
        );
    }
}
