//! The cluster side of a benchmark: the fake API server and fake CRI, pod manifests as
//! a scheduler would bind them, and a timeline of when changes landed in the API store
//! and calls reached the runtime.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::process::NODE;
use crate::support::fake_api::{FakeApi, WatchMsg};
use crate::support::fake_cri::FakeCri;

pub const IMAGE: &str = "busybox:1.0";

/// What a benchmark pod looks like.
#[derive(Clone, Default)]
pub struct PodShape {
    /// restartPolicy Never (a container exit makes the pod Succeeded).
    pub run_once: bool,
    /// Startup (TCP), readiness (HTTP) and liveness (exec) probes against this port.
    pub probes_port: Option<u16>,
    /// Container resources (requests and limits), if any.
    pub resources: Option<Value>,
    /// The host's network namespace (no CNI needed on a real runtime).
    pub host_network: bool,
    /// Image reference; [`IMAGE`] when None.
    pub image: Option<String>,
}

pub fn pod(name: &str, shape: &PodShape) -> Value {
    let mut container = json!({
        "name": "main",
        "image": shape.image.as_deref().unwrap_or(IMAGE),
        "command": ["sleep", "3600"],
    });
    if let Some(port) = shape.probes_port {
        container["startupProbe"] = json!({"tcpSocket": {"host": "127.0.0.1", "port": port}});
        container["readinessProbe"] =
            json!({"httpGet": {"host": "127.0.0.1", "port": port, "path": "/ready"}});
        container["livenessProbe"] = json!({"exec": {"command": ["true"]}});
    }
    if let Some(resources) = &shape.resources {
        container["resources"] = resources.clone();
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": if shape.run_once { "Never" } else { "Always" },
            "terminationGracePeriodSeconds": 30,
            "containers": [container],
        },
    });
    if shape.host_network {
        pod["spec"]["hostNetwork"] = json!(true);
        pod["spec"]["dnsPolicy"] = json!("Default");
    }
    pod
}

/// Every version of one object, with when it landed.
type History = Vec<(Instant, Arc<Value>)>;

/// When each write landed in the API store, per object name (every change kept).
#[derive(Clone, Default)]
pub struct Timeline {
    changes: Arc<Mutex<HashMap<String, History>>>,
}

impl Timeline {
    /// Records every later change of `resource` until `api` is dropped.
    pub fn follow(api: &FakeApi, resource: &str) -> Timeline {
        let timeline = Timeline::default();
        let rx = api.changes(resource);
        let changes = timeline.changes.clone();
        std::thread::Builder::new()
            .name(format!("timeline-{resource}"))
            .spawn(move || {
                for msg in rx {
                    let WatchMsg::Change(change) = msg else {
                        break;
                    };
                    let at = Instant::now();
                    let name = change.object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let object = Arc::new(change.object.clone());
                    lock(&changes).entry(name).or_default().push((at, object));
                }
            })
            .expect("spawn timeline thread");
        timeline
    }

    /// The first time at or after `since` that `name` satisfied `check`.
    pub fn first(
        &self,
        name: &str,
        since: Instant,
        check: impl Fn(&Value) -> bool,
    ) -> Option<Instant> {
        lock(&self.changes)
            .get(name)?
            .iter()
            .find(|(at, object)| *at >= since && check(object))
            .map(|(at, _)| *at)
    }

    /// Waits (polling) until every name has a change satisfying `check` after `since`;
    /// gives up early when `alive` turns false.
    pub fn wait_all(
        &self,
        names: &[String],
        since: Instant,
        timeout: Duration,
        alive: impl Fn() -> bool,
        check: impl Fn(&Value) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if names.iter().all(|n| self.first(n, since, &check).is_some()) {
                return true;
            }
            if Instant::now() > deadline || !alive() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

/// A container status in the API shows the container terminated.
pub fn has_terminated_container(pod: &Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|s| s.iter().any(|c| !c["state"]["terminated"].is_null()))
}

pub fn node_ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// When StartContainer reached the fake runtime, per pod name (first call only).
pub fn start_calls(cri: &FakeCri, since: Instant) -> HashMap<String, Instant> {
    let calls = cri.calls();
    let state = cri.state();
    let mut first = HashMap::new();
    for call in calls
        .iter()
        .filter(|c| c.method == "StartContainer" && c.at >= since)
    {
        if let Some(pod) = state.pod_of_container(&call.target) {
            first.entry(pod).or_insert(call.at);
        }
    }
    first
}

/// IDs of running containers, per pod name.
pub fn running_containers(cri: &FakeCri) -> HashMap<String, String> {
    let state = cri.state();
    state
        .container_ids(litelet::cri::pb::ContainerState::CONTAINER_RUNNING)
        .into_iter()
        .filter_map(|id| state.pod_of_container(&id).map(|pod| (pod, id)))
        .collect()
}

/// A one-thread HTTP server answering 200 to every request (TCP probes connect to
/// it too); its port.
pub fn probe_target() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind probe target");
    let port = listener.local_addr().expect("probe target address").port();
    std::thread::Builder::new()
        .name("probe-target".into())
        .spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 2048];
                if matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    );
                }
            }
        })
        .expect("spawn probe target");
    port
}
