//! Graceful node shutdown end to end, in process: the whole agent (`agent::run`) on the
//! fake API server and the fake CRI, with a fake logind handed in through
//! `Prepared::with_logind` delivering `PrepareForShutdown`. The inhibitor lock it hands
//! out is the write end of a pipe, so the test sees the instant litelet closes it
//! (EOF on the read end) and looks at the API server at that instant.
//!
//! Real logind on a systemd host: the VM scenario in `docs/node-shutdown.md`.

use crate::support;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::fake_api::{pod_json, FakeApi};
use crate::support::fake_cri::FakeCri;
use crate::support::{free_port, wait_until};
use crossbeam_channel::{Receiver, Sender};
use litelet::agent;
use litelet::config::Flags;
use litelet::cri;
use litelet::nodeshutdown::logind::{Connect, InhibitLock, Logind, LogindError};
use nix::fcntl::OFlag;
use serde_json::{json, Value};

const NODE: &str = "shutdown-node";
const WAIT: Duration = Duration::from_secs(60);

/// What the fake logind was asked, for the test to read.
#[derive(Default)]
struct Record {
    /// `InhibitDelayMaxUSec` as logind reports it.
    delay: Duration,
    /// Delays written through the drop-in + reload.
    overrides: Vec<Duration>,
    /// One per lock handed out: a message when litelet closes it (with what the API
    /// server had at that instant).
    locks: Vec<Receiver<Released>>,
    subscribed: usize,
}

/// The API server's view when a lock was released.
struct Released {
    at: Instant,
    pods: Vec<Value>,
    node: Option<Value>,
}

struct FakeLogind {
    record: Arc<Mutex<Record>>,
    events: Receiver<bool>,
    api_url: String,
    pod_names: Vec<String>,
}

impl Logind for FakeLogind {
    fn inhibit_delay_max(&mut self) -> Result<Duration, LogindError> {
        Ok(self.record.lock().unwrap().delay)
    }

    fn override_inhibit_delay(&mut self, delay: Duration) -> Result<(), LogindError> {
        let mut r = self.record.lock().unwrap();
        r.overrides.push(delay);
        // logind reads the drop-in on SIGHUP.
        r.delay = delay;
        Ok(())
    }

    fn inhibit_shutdown(&mut self) -> Result<InhibitLock, LogindError> {
        let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (url, names) = (self.api_url.clone(), self.pod_names.clone());
        std::thread::spawn(move || watch_release(read, tx, url, names));
        self.record.lock().unwrap().locks.push(rx);
        Ok(InhibitLock::new(write))
    }

    fn subscribe(&mut self) -> Result<(), LogindError> {
        self.record.lock().unwrap().subscribed += 1;
        Ok(())
    }

    fn next_event(&mut self, timeout: Duration) -> Result<Option<bool>, LogindError> {
        match self.events.recv_timeout(timeout) {
            Ok(v) => Ok(Some(v)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Ok(None),
            Err(_) => Err(LogindError::Closed),
        }
    }
}

/// Blocks until every write end of the lock's pipe is closed, then reads the API
/// server's pods and node at once.
fn watch_release(read: OwnedFd, tx: Sender<Released>, url: String, names: Vec<String>) {
    let mut file = std::fs::File::from(read);
    let mut buf = [0u8; 8];
    while matches!(file.read(&mut buf), Ok(n) if n > 0) {}
    let at = Instant::now();
    let get = |path: &str| -> Option<Value> {
        let mut response = ureq::get(&format!("{url}{path}")).call().ok()?;
        let text = response.body_mut().read_to_string().ok()?;
        serde_json::from_str(&text).ok()
    };
    let pods = names
        .iter()
        .filter_map(|n| get(&format!("/api/v1/namespaces/default/pods/{n}")))
        .collect();
    let node = get(&format!("/api/v1/nodes/{NODE}"));
    let _ = tx.send(Released { at, pods, node });
}

/// An API pod with one container `main` (busybox), on this node.
fn pod(name: &str, priority: Option<i64>, grace: i64, pre_stop: bool) -> Value {
    let mut p = pod_json("default", name, NODE);
    p["spec"]["hostNetwork"] = true.into();
    p["spec"]["terminationGracePeriodSeconds"] = grace.into();
    p["spec"]["containers"][0]["command"] = json!(["sleep", "3600"]);
    if let Some(priority) = priority {
        p["spec"]["priority"] = priority.into();
    }
    if pre_stop {
        p["spec"]["containers"][0]["lifecycle"] =
            json!({"preStop": {"exec": {"command": ["sh", "-c", "echo bye"]}}});
    }
    p
}

fn phase(api: &FakeApi, name: &str) -> Option<String> {
    api.get("pods", "default", name)
        .and_then(|p| p["status"]["phase"].as_str().map(str::to_owned))
}

fn ready_condition(node: &Value) -> Option<&Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// StopContainer calls as (container ID, `timeout=N`), in order.
fn stop_calls(cri: &FakeCri) -> Vec<(String, String)> {
    cri.calls()
        .into_iter()
        .filter(|c| c.method == "StopContainer")
        .map(|c| (c.target, c.detail))
        .collect()
}

fn pod_of(cri: &FakeCri, container_id: &str) -> String {
    cri.state()
        .pod_of_container(container_id)
        .unwrap_or_default()
}

#[test]
fn prepare_for_shutdown_stops_pods_by_priority_reports_them_and_releases_the_lock_last() {
    // The agent's status thread would count in the status manager's idle-CPU test.
    let _turn = support::exclusive(support::STATUS_THREADS);
    let api = FakeApi::start();
    let cri = FakeCri::start();
    let dir = tempfile::tempdir().unwrap();
    let cgroup_root = format!("/litelet-shutdown-{}", std::process::id());
    let _cgroups = support::containerd::CgroupRoot(cgroup_root.clone());
    std::fs::write(
        dir.path().join("config.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriod: 8s\nshutdownGracePeriodCriticalPods: 3s\n",
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let root = dir.path().join("root");
    let logs = dir.path().join("logs");
    let plugins_dir = dir.path().join("device-plugins");
    let (port, healthz) = (free_port().to_string(), free_port().to_string());
    let args: Vec<String> = [
        "litelet",
        "--container-runtime-endpoint",
        &cri.endpoint(),
        "--hostname-override",
        NODE,
        "--device-plugins-dir",
        plugins_dir.to_str().unwrap(),
        "--root-dir",
        root.to_str().unwrap(),
        "--pod-logs-dir",
        logs.to_str().unwrap(),
        "--cgroup-root",
        &cgroup_root,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--config",
        dir.path().join("config.yaml").to_str().unwrap(),
        "--sync-frequency",
        "2s",
        "--eviction-hard=",
        "--port",
        &port,
        "--healthz-port",
        &healthz,
        "--fail-swap-on=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let flags = Flags::try_load_from(args).expect("flags");

    // The pods: two regular ones (one with a preStop hook and a long grace period,
    // one with a short own grace period) and one system-critical.
    let names = ["regular-a", "regular-b", "critical-c", "late-d", "after-e"];
    api.create("pods", "default", pod("regular-a", None, 30, true));
    api.create("pods", "default", pod("regular-b", Some(1000), 2, false));
    api.create(
        "pods",
        "default",
        pod("critical-c", Some(2_000_000_000), 30, false),
    );

    // logind says 1 s: litelet must raise it to the 8 s asked for.
    let record = Arc::new(Mutex::new(Record {
        delay: Duration::from_secs(1),
        ..Default::default()
    }));
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let fake = FakeLogind {
        record: record.clone(),
        events: events_rx,
        api_url: api.url(),
        pod_names: names.iter().map(|s| s.to_string()).collect(),
    };
    let mut fake = Some(fake);
    let connect: Connect = Box::new(move || match fake.take() {
        Some(f) => Ok(Box::new(f) as Box<dyn Logind>),
        None => Err(LogindError::Connect("the fake connects once".into())),
    });

    let prepared = agent::prepare(&flags)
        .expect("prepare")
        .with_logind(connect);
    let (endpoint, options) = flags.runtime.resolve().expect("endpoint");
    let (runtime, images) = cri::connect(&endpoint, &options);
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let agent = std::thread::spawn(move || agent::run(&flags, prepared, runtime, images, stop_rx));

    // Running, lock held, subscribed, delay raised.
    for name in ["regular-a", "regular-b", "critical-c"] {
        assert!(
            wait_until(WAIT, || phase(&api, name).as_deref() == Some("Running")),
            "{name} never ran: {:?}",
            api.get("pods", "default", name)
        );
    }
    assert!(wait_until(WAIT, || record.lock().unwrap().subscribed == 1));
    {
        let r = record.lock().unwrap();
        assert_eq!(
            r.overrides,
            [Duration::from_secs(8)],
            "InhibitDelayMaxSec raised"
        );
        assert_eq!(r.locks.len(), 1, "one delay lock taken");
    }
    let first_lock = record.lock().unwrap().locks[0].clone();
    assert!(
        first_lock.try_recv().is_err(),
        "the lock is held while nothing happens"
    );

    // PrepareForShutdown(true), with the API server holding critical-c's final status
    // write for a while.
    let held = api.pause_next("patch", "/api/v1/namespaces/default/pods/critical-c/status");
    let stops_before = stop_calls(&cri).len();
    let execs_before = cri.count("ExecSync");
    let sent = Instant::now();
    events_tx.send(true).unwrap();
    assert!(held.wait(WAIT), "critical-c's status was never written");
    assert!(
        first_lock.recv_timeout(Duration::from_secs(1)).is_err(),
        "the lock was released while a pod's final status was still on its way"
    );
    held.release();

    // The lock is released once every pod is stopped and reported.
    let released = first_lock
        .recv_timeout(WAIT)
        .expect("the inhibitor lock was never released");
    let took = released.at - sent;
    eprintln!("lock released {took:?} after PrepareForShutdown");
    assert!(
        took < Duration::from_secs(8),
        "within the grace period: {took:?}"
    );

    // At the instant of the release, the API server had every final status.
    for name in ["regular-a", "regular-b", "critical-c"] {
        let pod = released
            .pods
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing at the release"));
        let status = &pod["status"];
        assert_eq!(status["phase"], "Failed", "{name}: {status}");
        assert_eq!(status["reason"], "Terminated", "{name}");
        assert_eq!(
            status["message"], "Pod was terminated in response to imminent node shutdown.",
            "{name}"
        );
        let disruption = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget"))
            .unwrap_or_else(|| panic!("{name}: no DisruptionTarget: {status}"));
        assert_eq!(disruption["status"], "True");
        assert_eq!(disruption["reason"], "TerminationByKubelet");
    }
    // And the node was NotReady, saying why.
    let node = released.node.expect("node at the release");
    let ready = ready_condition(&node).expect("Ready condition");
    assert_eq!(ready["status"], "False", "{ready}");
    assert_eq!(ready["reason"], "KubeletNotReady");
    assert_eq!(ready["message"], "node is shutting down");

    // Regular pods first, each with the shorter of its own grace period and the
    // regular share (8 s − 3 s); the critical pod after them, with its 3 s share.
    let stops: Vec<(String, String)> = stop_calls(&cri)[stops_before..]
        .iter()
        .map(|(id, detail)| (pod_of(&cri, id), detail.clone()))
        .collect();
    let position = |pod: &str| {
        stops
            .iter()
            .position(|(p, _)| p.contains(pod))
            .unwrap_or_else(|| panic!("{pod} never stopped: {stops:?}"))
    };
    let detail = |pod: &str| stops[position(pod)].1.clone();
    assert!(position("critical-c") > position("regular-a"), "{stops:?}");
    assert!(position("critical-c") > position("regular-b"), "{stops:?}");
    assert_eq!(detail("regular-a"), "timeout=5", "{stops:?}");
    assert_eq!(detail("regular-b"), "timeout=2", "{stops:?}");
    assert_eq!(detail("critical-c"), "timeout=3", "{stops:?}");
    // The preStop hook ran, as in any kill.
    assert!(cri.count("ExecSync") > execs_before, "no preStop hook ran");

    // Upstream's node event.
    let event_sent = |message: &str| {
        api.requests().iter().any(|r| {
            r.path.contains("/events")
                && r.body
                    .as_deref()
                    .is_some_and(|b| b.contains("\"NodeShutdown\"") && b.contains(message))
        })
    };
    assert!(
        wait_until(WAIT, || event_sent(
            "Shutdown manager detected shutdown event"
        )),
        "no NodeShutdown event"
    );

    // Admission refuses new pods while the node shuts down.
    api.create("pods", "default", pod("late-d", None, 30, false));
    assert!(
        wait_until(WAIT, || phase(&api, "late-d").as_deref() == Some("Failed")),
        "late-d: {:?}",
        api.get("pods", "default", "late-d")
    );
    let late = api.get("pods", "default", "late-d").unwrap();
    assert_eq!(late["status"]["reason"], "NodeShutdown");
    // Upstream's rejectPod prefixes the handler's message.
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: Pod was rejected as the node is shutting down."
    );

    // PrepareForShutdown(false): the lock is taken again and pods are admitted again.
    events_tx.send(false).unwrap();
    assert!(wait_until(WAIT, || record.lock().unwrap().locks.len() == 2));
    assert!(wait_until(WAIT, || event_sent(
        "Shutdown manager detected shutdown cancellation"
    )));
    api.create("pods", "default", pod("after-e", None, 30, false));
    assert!(
        wait_until(WAIT, || phase(&api, "after-e").as_deref()
            == Some("Running")),
        "after-e: {:?}",
        api.get("pods", "default", "after-e")
    );
    assert!(wait_until(WAIT, || {
        api.get("nodes", "", NODE)
            .as_ref()
            .and_then(ready_condition)
            .is_some_and(|c| c["status"] == "True")
    }));

    drop(stop_tx);
    agent.join().expect("agent thread").expect("agent run");
    // litelet's own stop drops the second lock too.
    let second = record.lock().unwrap().locks[1].clone();
    assert!(
        second.recv_timeout(WAIT).is_ok(),
        "second lock not released"
    );
    support::containerd::remove_cgroup_tree(&cgroup_root);
}
