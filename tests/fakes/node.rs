//! The `node` and `lease` threads (`litelet::node::start`) against the fake API server
//! over real HTTP: registration (labels, taints, allocatable in the create), adopting
//! and reconciling an existing Node, status PATCHes only on change or after the report
//! frequency, the lease (owner reference, renewals, 409s, an outage, deletion), a
//! deleted Node registered again, and prompt shutdown even with a request in flight.
//!
//! Periods are shortened through `NodeConfig`; nothing asserts on timing: tests wait
//! (generously) for counts and states, and count requests only in the directions that
//! cannot flake (e.g. "no PATCH while nothing changed", however long that was).

use crate::support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::wait_until;
use crossbeam_channel::Sender;
use litelet::api::meta::MicroTime;
use litelet::events::Recorder;
use litelet::node::config::{parse_node_labels, parse_taints};
use litelet::node::{self, Health, MachineInfo, NodeConfig, NodeHandles, NodeInputs};
use serde_json::{json, Value};

const NODE: &str = "edge-1";
const LONG: Duration = Duration::from_secs(20);
const NODE_PATH: &str = "/api/v1/nodes/edge-1";
const STATUS_PATH: &str = "/api/v1/nodes/edge-1/status";
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";

fn machine() -> MachineInfo {
    MachineInfo {
        num_cpus: Some(4),
        memory_bytes: Some(8 << 30),
        swap_bytes: Some(0),
        hugepages: Vec::new(),
        ephemeral_storage_bytes: Some(100 << 30),
        machine_id: "m1".into(),
        system_uuid: "s1".into(),
        boot_id: "boot-2".into(),
        kernel_version: "6.6.20".into(),
        os_image: "Edge OS".into(),
        architecture: "arm64".into(),
        // A documentation address: only ever a string in the Node's status.
        node_ip: Some("192.0.2.10".parse().unwrap()),
    }
}

/// Short periods; `report` is the status report frequency.
fn config(update: Duration, report: Duration, renew: Duration) -> NodeConfig {
    let mut c = NodeConfig::new(NODE, NODE);
    c.labels = parse_node_labels("site=berlin").unwrap();
    c.register_with_taints = parse_taints("dedicated=edge:NoSchedule").unwrap();
    c.node_status_update_frequency = update;
    c.node_status_report_frequency = report;
    c.node_lease_renew_interval = renew;
    c.retry_initial = Duration::from_millis(10);
    c.retry_max = Duration::from_millis(100);
    c
}

/// Running threads plus the knobs the test turns.
struct Node {
    health: Arc<Mutex<Health>>,
    health_calls: Arc<AtomicUsize>,
    shutdown: Option<Sender<()>>,
    handles: Option<NodeHandles>,
}

fn start(api: &FakeApi, config: NodeConfig) -> Node {
    start_with_swap(api, config, Arc::new(AtomicU64::new(0)))
}

/// As `start`, with the machine's swap size read from `swap` at every status update.
fn start_with_swap(api: &FakeApi, config: NodeConfig, swap: Arc<AtomicU64>) -> Node {
    let health = Arc::new(Mutex::new(Health::default()));
    let health_calls = Arc::new(AtomicUsize::new(0));
    let (h, calls) = (health.clone(), health_calls.clone());
    let inputs = NodeInputs {
        machine: Box::new(move || {
            let mut m = machine();
            m.swap_bytes = Some(swap.load(Ordering::SeqCst));
            (m, Vec::new())
        }),
        health: Box::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            h.lock().unwrap().clone()
        }),
        runtime_version: Box::new(|| Some("containerd://1.7.13".into())),
        images: None,
        sync_now: None,
        devices: None,
        devices_changed: None,
        volumes: None,
    };
    let (tx, rx) = crossbeam_channel::bounded(0);
    let handles = node::start(&api.client(), config, inputs, Recorder::log_only(), rx).unwrap();
    Node {
        health,
        health_calls,
        shutdown: Some(tx),
        handles: Some(handles),
    }
}

impl Node {
    /// Waits until the status has been computed `n` more times.
    fn wait_ticks(&self, n: usize) {
        let target = self.health_calls.load(Ordering::SeqCst) + n;
        assert!(
            wait_until(LONG, || self.health_calls.load(Ordering::SeqCst) >= target),
            "status computed fewer than {n} more times"
        );
    }

    fn set_health(&self, f: impl FnOnce(&mut Health)) {
        f(&mut self.health.lock().unwrap());
    }

    /// Signals shutdown and waits (up to LONG) for both threads to end.
    fn stop(&mut self) {
        drop(self.shutdown.take());
        let handles = self.handles.take().unwrap();
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            handles.join();
            let _ = done_tx.send(());
        });
        assert!(
            done_rx.recv_timeout(LONG).is_ok(),
            "node threads did not end after shutdown"
        );
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.shutdown.take());
    }
}

fn get_node(api: &FakeApi) -> Option<Value> {
    api.get("nodes", "", NODE)
}

fn condition<'a>(node: &'a Value, type_: &str) -> &'a Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn lease(api: &FakeApi) -> Option<Value> {
    api.get("leases", "kube-node-lease", NODE)
}

fn renew_time(api: &FakeApi) -> Option<MicroTime> {
    let l = lease(api)?;
    MicroTime::parse(l["spec"]["renewTime"].as_str()?).ok()
}

/// Waits until the lease's renewTime is later than `after`.
fn wait_renewed(api: &FakeApi, after: Option<MicroTime>, what: &str) -> MicroTime {
    let mut seen = None;
    let ok = wait_until(LONG, || {
        seen = renew_time(api);
        seen.is_some() && seen > after
    });
    assert!(ok, "lease not renewed {what}: {seen:?} (before: {after:?})");
    seen.unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);
const FAST: Duration = Duration::from_millis(40);

#[test]
fn registers_with_labels_taints_and_allocatable() {
    let api = FakeApi::start();
    let node = start(&api, config(FAST, HOUR, HOUR));
    assert!(wait_until(LONG, || get_node(&api).is_some()), "no node");
    let n = get_node(&api).unwrap();
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], "arm64");
    assert_eq!(labels["beta.kubernetes.io/arch"], "arm64");
    assert_eq!(labels["site"], "berlin");
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}])
    );
    // Allocatable came with the create itself: nothing else has written the status.
    assert_eq!(api.count("create", "/api/v1/nodes"), 1);
    assert_eq!(api.count("patch", STATUS_PATH), 0);
    let st = &n["status"];
    assert_eq!(st["capacity"]["cpu"], "4");
    assert_eq!(st["capacity"]["memory"], "8Gi");
    assert_eq!(st["allocatable"]["memory"], "8092Mi");
    assert_eq!(st["allocatable"]["ephemeral-storage"], "90Gi");
    assert_eq!(st["allocatable"]["pods"], "110");
    assert_eq!(condition(&n, "Ready")["status"], "True");
    assert_eq!(condition(&n, "Ready")["reason"], "KubeletReady");
    assert_eq!(condition(&n, "MemoryPressure")["status"], "False");
    assert_eq!(
        st["addresses"],
        json!([{"type": "InternalIP", "address": "192.0.2.10"},
               {"type": "Hostname", "address": NODE}])
    );
    assert_eq!(
        st["nodeInfo"]["containerRuntimeVersion"],
        "containerd://1.7.13"
    );
    assert_eq!(st["nodeInfo"]["bootID"], "boot-2");
    assert_eq!(st["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    drop(node);
}

#[test]
fn reconciles_an_existing_node() {
    let api = FakeApi::start();
    api.create(
        "nodes",
        "",
        json!({
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": "old",
                                                   "team": "ops"}},
            "spec": {"taints": [{"key": "admin", "effect": "NoExecute"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                     "lastTransitionTime": "2024-01-01T00:00:00Z"},
                    {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}
                ],
                "capacity": {"example.com/dongle": "2"},
                "nodeInfo": {"bootID": "boot-1"}
            }
        }),
    );
    let uid = get_node(&api).unwrap()["metadata"]["uid"].clone();
    let _node = start(&api, config(FAST, HOUR, HOUR));
    assert!(
        wait_until(LONG, || get_node(&api)
            .is_some_and(|n| condition(&n, "Ready")["status"] == "True")),
        "existing node never reported Ready: {:#?}",
        get_node(&api)
    );
    let n = get_node(&api).unwrap();
    assert_eq!(n["metadata"]["uid"], uid, "adopted, not replaced");
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["site"], "berlin");
    assert_eq!(labels["team"], "ops", "labels litelet does not own stay");
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "admin", "effect": "NoExecute"}]),
        "taints are only set on first registration"
    );
    assert_eq!(
        condition(&n, "NetworkUnavailable")["reason"],
        "RouteCreated"
    );
    assert_eq!(n["status"]["capacity"]["example.com/dongle"], "2");
    assert_eq!(n["status"]["allocatable"]["example.com/dongle"], "2");
    assert_eq!(n["status"]["nodeInfo"]["bootID"], "boot-2");
    assert_eq!(api.count("create", "/api/v1/nodes"), 1);
    assert_eq!(api.count("patch", NODE_PATH), 1, "one label reconcile");
    assert_eq!(
        api.count("patch", STATUS_PATH),
        1,
        "status reported at once"
    );
}

#[test]
fn status_is_patched_only_on_change() {
    let api = FakeApi::start();
    let node = start(&api, config(FAST, HOUR, HOUR));
    assert!(wait_until(LONG, || get_node(&api).is_some()));
    node.wait_ticks(10);
    assert_eq!(api.count("patch", STATUS_PATH), 0, "nothing changed");

    node.set_health(|h| {
        h.network_errors = vec!["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized".into()]
    });
    assert!(wait_until(LONG, || api.count("patch", STATUS_PATH) == 1));
    let n = get_node(&api).unwrap();
    let ready = condition(&n, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "KubeletNotReady");
    assert!(ready["message"]
        .as_str()
        .unwrap()
        .starts_with("container runtime network not ready"));
    let rec = api
        .requests()
        .into_iter()
        .find(|r| r.verb == "patch" && r.path == STATUS_PATH)
        .unwrap();
    assert_eq!(rec.content_type, "application/strategic-merge-patch+json");

    node.wait_ticks(10);
    assert_eq!(api.count("patch", STATUS_PATH), 1, "no change since");
    assert_eq!(api.count("get", NODE_PATH), 0, "no reads while all is well");

    node.set_health(|h| h.network_errors.clear());
    assert!(wait_until(LONG, || api.count("patch", STATUS_PATH) == 2));
    assert_eq!(
        condition(&get_node(&api).unwrap(), "Ready")["status"],
        "True"
    );
}

/// Swap turned off on a node that reported it: the published `nodeInfo.swap` goes,
/// rather than staying behind because the patch leaves it out.
#[test]
fn swap_turned_off_is_removed_from_the_node() {
    let api = FakeApi::start();
    let swap = Arc::new(AtomicU64::new(2 << 30));
    let _node = start_with_swap(&api, config(FAST, HOUR, HOUR), swap.clone());
    let swap_of = |api: &FakeApi| get_node(api).map(|n| n["status"]["nodeInfo"]["swap"].clone());
    assert!(wait_until(LONG, || {
        swap_of(&api) == Some(json!({"capacity": 2u64 << 30}))
    }));
    swap.store(0, Ordering::SeqCst);
    assert!(
        wait_until(LONG, || swap_of(&api) == Some(Value::Null)),
        "nodeInfo.swap still published: {:?}",
        swap_of(&api)
    );
    let n = get_node(&api).unwrap();
    assert!(n["status"]["nodeInfo"].get("swap").is_none(), "{n}");
    assert_eq!(n["status"]["nodeInfo"]["machineID"], "m1", "the rest stays");
}

#[test]
fn status_is_reported_after_the_report_frequency() {
    let api = FakeApi::start();
    let _node = start(&api, config(FAST, Duration::from_millis(300), HOUR));
    assert!(wait_until(LONG, || get_node(&api).is_some()));
    let first = condition(&get_node(&api).unwrap(), "Ready").clone();
    assert!(
        wait_until(LONG, || api.count("patch", STATUS_PATH) >= 3),
        "no periodic reports"
    );
    // Nothing changed but the heartbeats.
    let ready = condition(&get_node(&api).unwrap(), "Ready").clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["lastTransitionTime"], first["lastTransitionTime"]);
}

#[test]
fn lease_is_created_with_owner_and_renewed() {
    let api = FakeApi::start();
    let _node = start(&api, config(FAST, HOUR, FAST));
    assert!(wait_until(LONG, || lease(&api).is_some()), "no lease");
    let n = get_node(&api).unwrap();
    let l = lease(&api).unwrap();
    assert_eq!(
        l["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE,
                "uid": n["metadata"]["uid"]}])
    );
    assert_eq!(l["spec"]["holderIdentity"], NODE);
    assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
    let t1 = wait_renewed(&api, None, "at first");
    let t2 = wait_renewed(&api, Some(t1), "again");
    wait_renewed(&api, Some(t2), "a third time");
    // Renewals are small merge patches of the holder and renew time, never a PUT
    // of the whole lease, and read nothing: one GET (which found nothing) in all.
    assert!(api.count("patch", LEASE_PATH) >= 2);
    assert_eq!(api.count("update", LEASE_PATH), 0);
    assert_eq!(api.count("get", LEASE_PATH), 1);
    assert_eq!(
        api.count(
            "create",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        ),
        1
    );
}

#[test]
fn lease_survives_conflict_outage_and_deletion() {
    let api = FakeApi::start();
    let _node = start(&api, config(FAST, HOUR, FAST));
    let t0 = wait_renewed(&api, None, "at first");

    // The next renewal gets 409: the lease is read again.
    let gets = api.count("get", LEASE_PATH);
    api.conflict_next_write(LEASE_PATH);
    assert!(wait_until(LONG, || api
        .requests()
        .iter()
        .any(|r| r.path == LEASE_PATH && r.status == 409)));
    assert!(wait_until(LONG, || api.count("get", LEASE_PATH) > gets));
    let t1 = wait_renewed(&api, Some(t0), "after a conflict");

    // The API server fails every lease request for a while.
    api.inject(Fail::status(503).always().path("/leases/"));
    assert!(wait_until(LONG, || api
        .requests()
        .iter()
        .filter(|r| r.path == LEASE_PATH && r.status == 503)
        .count()
        >= 10));
    let during = renew_time(&api);
    assert!(during >= Some(t1));
    let node_gets = api.count("get", NODE_PATH);
    api.clear_faults();
    let t2 = wait_renewed(&api, during, "after the outage");
    // The node thread was asked to read the Node again after the outage.
    assert!(wait_until(LONG, || api.count("get", NODE_PATH) > node_gets));

    // The lease is deleted: it is created again, still owned by the Node.
    api.remove("leases", "kube-node-lease", NODE);
    assert!(wait_until(LONG, || lease(&api).is_some()));
    wait_renewed(&api, Some(t2), "after deletion");
    let uid = get_node(&api).unwrap()["metadata"]["uid"].clone();
    assert_eq!(
        lease(&api).unwrap()["metadata"]["ownerReferences"][0]["uid"],
        uid
    );
}

#[test]
fn deleted_node_is_registered_again() {
    let api = FakeApi::start();
    let _node = start(&api, config(FAST, Duration::from_millis(200), FAST));
    assert!(wait_until(LONG, || get_node(&api).is_some()));
    let old_uid = get_node(&api).unwrap()["metadata"]["uid"].clone();
    assert!(wait_until(LONG, || lease(&api).is_some()));
    api.remove("nodes", "", NODE);
    assert!(
        wait_until(LONG, || get_node(&api)
            .is_some_and(|n| n["metadata"]["uid"] != old_uid)),
        "node not registered again"
    );
    let new_uid = get_node(&api).unwrap()["metadata"]["uid"].clone();
    // The lease follows the new Node.
    assert!(wait_until(LONG, || lease(&api).is_some_and(|l| l
        ["metadata"]["ownerReferences"][0]["uid"]
        == new_uid)));
    assert_eq!(api.count("create", "/api/v1/nodes"), 2);
}

#[test]
fn registration_retries_until_the_api_answers() {
    let api = FakeApi::start();
    api.inject(
        Fail::status(500)
            .times(12)
            .verb("create")
            .path("/api/v1/nodes"),
    );
    let _node = start(&api, config(FAST, HOUR, FAST));
    assert!(wait_until(LONG, || get_node(&api).is_some()));
    assert!(api.count("create", "/api/v1/nodes") >= 2);
    // The lease waits for the Node.
    assert!(wait_until(LONG, || lease(&api).is_some()));
}

#[test]
fn shutdown_ends_both_threads_even_mid_request() {
    let api = FakeApi::start();
    let mut node = start(&api, config(FAST, HOUR, FAST));
    assert!(wait_until(LONG, || lease(&api).is_some()));
    node.stop();

    // Again, with every request hanging far longer than the test waits.
    let api = FakeApi::start();
    let mut node = start(&api, config(FAST, HOUR, FAST));
    assert!(wait_until(LONG, || lease(&api).is_some()));
    api.set_delay(Duration::from_secs(120));
    // The lease thread stuck in a request; stop() waits at most LONG (20 s).
    let lease_stuck = || api.delayed_paths().iter().any(|p| p.contains("/leases/"));
    assert!(wait_until(LONG, lease_stuck));
    node.stop();
    api.set_delay(Duration::ZERO);
}

#[test]
fn host_inputs_follow_the_runtime() {
    use litelet::node::{MachineReader, MachineRoots};
    use litelet::pleg::PlegHealth;
    use litelet::runtime::manager::RuntimeConditions;
    use litelet::runtime::state::RuntimeState;
    use std::time::Instant;
    use support::fake_cri::FakeCri;

    let cri = FakeCri::start();
    let (runtime, _images) = cri.clients(Duration::from_secs(5));
    let dir = tempfile::tempdir().unwrap();
    let reader = MachineReader::new(
        MachineRoots::host(),
        dir.path(),
        Some("192.0.2.10".parse().unwrap()),
    );
    let state = RuntimeState::new(PlegHealth::default());
    let mut inputs = NodeInputs::from_host(reader, state.clone(), runtime);
    assert_eq!(
        (inputs.runtime_version)().as_deref(),
        Some("fake-cri://0.1.0")
    );
    // No runtime status yet: not ready, as upstream.
    let h = (inputs.health)();
    assert_eq!(
        h.runtime_errors,
        ["container runtime status check may not have completed yet"]
    );

    let ok = RuntimeConditions {
        runtime_ready: true,
        network_ready: true,
        problems: Vec::new(),
        ..Default::default()
    };
    state.record(Ok(ok), Instant::now());
    let h = (inputs.health)();
    assert!(
        h.runtime_errors.is_empty() && h.network_errors.is_empty(),
        "{h:?}"
    );

    let no_net = RuntimeConditions {
        runtime_ready: true,
        network_ready: false,
        problems: vec!["NetworkReady=false reason:NetworkPluginNotReady message:cni".into()],
        ..Default::default()
    };
    state.record(Ok(no_net), Instant::now());
    let h = (inputs.health)();
    assert_eq!(
        h.network_errors,
        ["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni"]
    );

    // The runtime goes away: the version is the last one known.
    drop(cri);
    assert_eq!(
        (inputs.runtime_version)().as_deref(),
        Some("fake-cri://0.1.0")
    );
    let (machine, _problems) = (inputs.machine)();
    assert!(machine.memory_bytes.is_some());
    assert_eq!(machine.node_ip, Some("192.0.2.10".parse().unwrap()));
}

/// Requests a minute at idle with the production periods, over a real minute.
/// Run with `cargo test --test fakes node::idle_requests_per_minute -- --ignored --nocapture`.
#[test]
#[ignore = "takes a minute; a measurement, not a check"]
fn idle_requests_per_minute() {
    let api = FakeApi::start();
    let defaults = NodeConfig::new(NODE, NODE);
    let c = config(
        defaults.node_status_update_frequency,
        defaults.node_status_report_frequency,
        defaults.node_lease_renew_interval,
    );
    let node = start(&api, c);
    assert!(wait_until(LONG, || lease(&api).is_some()));
    // Start counting after start-up (create node, get + create lease).
    std::thread::sleep(Duration::from_secs(1));
    api.clear_requests();
    std::thread::sleep(Duration::from_secs(60));
    let reqs = api.requests();
    let mut by: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for r in &reqs {
        *by.entry((r.verb.clone(), r.path.clone())).or_default() += 1;
    }
    println!("idle requests in 60 s: {}", reqs.len());
    for ((verb, path), n) in by {
        println!("  {n:3} {verb} {path}");
    }
    drop(node);
}

/// Catching up after an outage: once the API server answers any request of the
/// client again (here the test's own GETs through a clone), the lease is renewed and
/// the node status sent at once, not at their next tick 10 minutes away.
#[test]
fn the_api_servers_return_renews_the_lease_and_syncs_the_status_at_once() {
    let api = FakeApi::start();
    let mut c = config(Duration::from_secs(600), HOUR, Duration::from_secs(600));
    c.retry_initial = Duration::from_secs(600);
    c.retry_max = Duration::from_secs(600);
    let client = api.client();
    let health = Arc::new(Mutex::new(Health::default()));
    let h = health.clone();
    let inputs = NodeInputs {
        machine: Box::new(|| (machine(), Vec::new())),
        health: Box::new(move || h.lock().unwrap().clone()),
        runtime_version: Box::new(|| Some("containerd://1.7.13".into())),
        images: None,
        sync_now: None,
        devices: None,
        devices_changed: None,
        volumes: None,
    };
    let (tx, rx) = crossbeam_channel::bounded(0);
    let handles = node::start(&client, c, inputs, Recorder::log_only(), rx).unwrap();
    let _node = Node {
        health: health.clone(),
        health_calls: Arc::new(AtomicUsize::new(0)),
        shutdown: Some(tx),
        handles: Some(handles),
    };
    let t0 = wait_renewed(&api, None, "at first");
    assert!(wait_until(LONG, || get_node(&api)
        .is_some_and(|n| condition(&n, "Ready")["status"] == "True")));
    // An outage: a request fails; meanwhile the runtime goes down.
    api.inject(Fail::status(503).always());
    let failed: Result<Value, _> = client.get(NODE_PATH);
    assert!(failed.is_err());
    health.lock().unwrap().runtime_errors = vec!["container runtime is down".into()];
    api.clear_faults();
    let answer: Result<Value, _> = client.get(NODE_PATH);
    assert!(answer.is_ok(), "{answer:?}");
    wait_renewed(&api, Some(t0), "when the API server answered again");
    assert!(
        wait_until(LONG, || get_node(&api)
            .is_some_and(|n| condition(&n, "Ready")["status"] == "False")),
        "the node status waited for its next tick"
    );
}
