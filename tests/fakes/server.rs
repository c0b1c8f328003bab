//! The node server against real TLS clients on 127.0.0.1: healthz, x509 and bearer
//! token authentication (TokenReview on the fake API server), SubjectAccessReview
//! authorization, error answers that leak nothing, 400s for bad input, /pods,
//! /metrics, container logs from crafted CRI log files (tail, since, timestamps,
//! limitBytes, previous, follow), the exec proxy to a runtime streaming server,
//! /run, stalled clients, the connection budgets (a 401/403 closes the connection;
//! token users share a quarter of the places, client certificates may use them all;
//! a burst from one address waits its turn; floods of idle and failing connections do
//! not starve authenticated clients) and a log linked to `/dev/zero` that is refused
//! rather than streamed for ever.

use crate::support;

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::fake_api::FakeApi;
use crate::support::fake_cri::FakeCri;
use crate::support::https::{self, Identity, Pki};
use crate::support::pods;
use crate::support::wait_until;
use crossbeam_channel::{bounded, Sender};
use litelet::api::pod::{Container, Pod};
use litelet::cri::{pb, RuntimeClient};
use litelet::events::Recorder;
use litelet::kubelet::snapshot::PodSnapshot;
use litelet::metrics;
use litelet::pleg::PlegHealth;
use litelet::prober::ProbeManager;
use litelet::server::authz::AuthorizationMode;
use litelet::server::{self, Limits, ServerConfig, ServerContext};
use protobuf::MessageField;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

struct Setup {
    anonymous: bool,
    mode: AuthorizationMode,
    api: bool,
    limits: Limits,
    /// The `/configz` document (from `Flags::server_config`).
    configz: Option<Arc<Value>>,
    /// Run a prober on the fake runtime and serve its `/metrics/probes`.
    prober: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            anonymous: false,
            mode: AuthorizationMode::Webhook,
            api: true,
            limits: Limits::default(),
            configz: None,
            prober: false,
        }
    }
}

/// A node server on ephemeral ports with a fake runtime and (optionally) API server.
struct Node {
    cri: FakeCri,
    api: Option<FakeApi>,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    healthz: SocketAddr,
    server_ca: Vec<u8>,
    pki: Pki,
    heartbeat: Arc<AtomicU64>,
    pods: PodSnapshot,
    runtime: RuntimeClient,
    prober: Option<ProbeManager>,
    stop: Sender<()>,
    /// The accept threads.
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn start(setup: Setup) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let cri = FakeCri::start();
    cri.state().images.insert("busybox".into(), 1000);
    let (runtime, _) = cri.clients(Duration::from_secs(10));
    let api = setup.api.then(FakeApi::start);
    let pki = Pki::new("client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let mut config = ServerConfig::new("node-1", dir.path().to_owned());
    config.address = "127.0.0.1".parse().unwrap();
    config.port = 0;
    config.healthz_port = Some(0);
    config.tls.client_ca_file = Some(ca_file);
    config.tls.host_ips = vec!["127.0.0.1".parse().unwrap()];
    config.anonymous_auth = setup.anonymous;
    config.authorization_mode = setup.mode;
    config.limits = setup.limits;
    config.sync_loop_threshold = Duration::from_secs(60);
    config.pod_logs_dir = dir.path().join("pods");
    config.configz = setup.configz;
    let heartbeat = Arc::new(AtomicU64::new(now_secs()));
    let pods = PodSnapshot::new();
    let (stop, shutdown) = bounded::<()>(0);
    let prober = setup.prober.then(|| {
        let started = ProbeManager::start(
            Default::default(),
            runtime.clone(),
            Recorder::log_only(),
            shutdown.clone(),
        );
        started.unwrap().0
    });
    let ctx = ServerContext {
        heartbeat: heartbeat.clone(),
        pleg: PlegHealth::default(),
        started: Instant::now(),
        pods: pods.clone(),
        runtime: runtime.clone(),
        status: None,
        api: api.as_ref().map(|a| a.client()),
        stats: None,
        probes: prober.as_ref().map(|p| p.metrics()),
        runtime_cache: None,
    };
    let handle = server::start(config, ctx, shutdown).unwrap();
    let server_ca = std::fs::read(dir.path().join("pki/litelet.crt")).unwrap();
    Node {
        cri,
        api,
        dir,
        addr: handle.api_addr,
        healthz: handle.healthz_addr.unwrap(),
        server_ca,
        pki,
        heartbeat,
        pods,
        runtime,
        prober,
        stop,
        threads: handle.threads,
    }
}

impl Node {
    fn admin(&self) -> Identity {
        self.pki.client("admin", &["system:masters"])
    }

    fn get(&self, id: Option<&Identity>, path: &str) -> https::Answer {
        https::get(self.addr, &self.server_ca, id, "GET", path, &[]).unwrap()
    }

    fn get_with(
        &self,
        id: Option<&Identity>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> https::Answer {
        https::get(self.addr, &self.server_ca, id, method, path, headers).unwrap()
    }

    fn api(&self) -> &FakeApi {
        self.api.as_ref().unwrap()
    }
}

fn open_setup() -> Setup {
    Setup {
        anonymous: true,
        mode: AuthorizationMode::AlwaysAllow,
        api: false,
        ..Default::default()
    }
}

/// A pod in the snapshot whose containers exist in the fake runtime; each
/// `(name, log file, running)` instance is created in order (older first).
fn run_pod(
    node: &Node,
    ns: &str,
    name: &str,
    uid: &str,
    instances: &[(&str, &Path, bool)],
) -> Vec<String> {
    let labels = HashMap::from([
        ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
        ("io.kubernetes.pod.name".to_owned(), name.to_owned()),
        ("io.kubernetes.pod.namespace".to_owned(), ns.to_owned()),
    ]);
    let sandbox = pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            ..Default::default()
        }),
        labels: labels.clone(),
        ..Default::default()
    };
    let sandbox_id = node
        .runtime
        .run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(sandbox.clone()),
            ..Default::default()
        })
        .unwrap()
        .pod_sandbox_id;
    let mut ids = Vec::new();
    let mut containers: Vec<String> = Vec::new();
    for (attempt, (cname, log, running)) in instances.iter().enumerate() {
        let mut clabels = labels.clone();
        clabels.insert("io.kubernetes.container.name".into(), cname.to_string());
        let id = node
            .runtime
            .create_container(&pb::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.clone(),
                config: MessageField::some(pb::ContainerConfig {
                    metadata: MessageField::some(pb::ContainerMetadata {
                        name: cname.to_string(),
                        attempt: attempt as u32,
                        ..Default::default()
                    }),
                    image: MessageField::some(pb::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    labels: clabels,
                    log_path: log.display().to_string(),
                    ..Default::default()
                }),
                sandbox_config: MessageField::some(sandbox.clone()),
                ..Default::default()
            })
            .unwrap()
            .container_id;
        node.runtime
            .start_container(&pb::StartContainerRequest {
                container_id: id.clone(),
                ..Default::default()
            })
            .unwrap();
        if !running {
            assert!(node.cri.exit_container(&id, 1));
        }
        if !containers.contains(&cname.to_string()) {
            containers.push(cname.to_string());
        }
        ids.push(id);
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut pod = pods::meta(ns, name, uid);
    pod.spec.containers = containers
        .into_iter()
        .map(|name| Container {
            name,
            image: Some("busybox".into()),
            ..Default::default()
        })
        .collect();
    let mut all: Vec<Arc<Pod>> = node.pods.pods().iter().cloned().collect();
    all.push(Arc::new(pod));
    node.pods.publish(all.iter());
    ids
}

fn write_log(path: &Path, lines: &[&str]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_accept_threads_end_soon_after_shutdown_begins() {
    let node = start(Setup::default());
    assert_eq!(node.get(None, "/healthz").status, 401);
    // Idle a while first: the threads are asleep in poll, with no timer to wake them.
    std::thread::sleep(Duration::from_millis(300));
    let Node { stop, threads, .. } = node;
    drop(stop);
    let deadline = Instant::now() + Duration::from_secs(2);
    for thread in threads {
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "an accept thread did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn healthz_ok_and_failing_when_the_sync_loop_is_stale() {
    let node = start(open_setup());
    let ok = https::get_plain(node.healthz, "/healthz").unwrap();
    assert_eq!((ok.status, ok.text().as_str()), (200, "ok\n"));
    let verbose = https::get_plain(node.healthz, "/healthz?verbose").unwrap();
    assert!(
        verbose.text().contains("[+]syncloop ok") && verbose.text().contains("[+]pleg ok"),
        "{}",
        verbose.text()
    );
    node.heartbeat.store(now_secs() - 600, Ordering::Relaxed);
    let stale = https::get_plain(node.healthz, "/healthz").unwrap();
    assert_eq!(stale.status, 500, "{}", stale.text());
    assert!(
        stale.text().contains("[-]syncloop failed"),
        "{}",
        stale.text()
    );
    // The TLS port serves it too, and its SLI series (kube-prometheus scrapes them);
    // the healthz port serves nothing else.
    assert_eq!(node.get(None, "/healthz").status, 500);
    let slis = node.get(None, "/metrics/slis").text();
    for line in [
        "kubernetes_healthcheck{name=\"syncloop\",type=\"healthz\"} 0",
        "kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1",
    ] {
        assert!(slis.lines().any(|l| l == line), "{line} in {slis}");
    }
    assert!(
        slis.contains(
            "kubernetes_healthchecks_total{name=\"syncloop\",status=\"error\",type=\"healthz\"}"
        ),
        "{slis}"
    );
    assert_eq!(https::get_plain(node.healthz, "/pods").unwrap().status, 404);
    node.heartbeat.store(now_secs(), Ordering::Relaxed);
    assert_eq!(
        https::get_plain(node.healthz, "/healthz").unwrap().status,
        200
    );
}

#[test]
fn x509_client_certificates_accepted_and_untrusted_ones_rejected() {
    let node = start(Setup::default());
    node.api().grant("system:node:n1", "get", "*");
    let trusted = node.pki.client("system:node:n1", &["system:nodes"]);
    let answer = node.get(Some(&trusted), "/pods");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let review = node.api().access_reviews().pop().unwrap();
    assert_eq!(review["user"], "system:node:n1");
    let groups: Vec<&str> = review["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(groups, vec!["system:nodes", "system:authenticated"]);
    assert_eq!(review["resourceAttributes"]["name"], "node-1");
    assert_eq!(review["resourceAttributes"]["resource"], "nodes");

    let other = Pki::new("other-ca").client("system:node:n1", &["system:nodes"]);
    let rejected = node.get(Some(&other), "/pods");
    assert_eq!(
        (rejected.status, rejected.text().as_str()),
        (401, "Unauthorized\n")
    );
    let anonymous = node.get(None, "/pods");
    assert_eq!(anonymous.status, 401);

    // ureq (through litelet's own API client) presenting the certificate.
    let mut config = litelet::api::ClientConfig::new(&format!("https://{}", node.addr));
    config.ca_pem = Some(node.server_ca.clone());
    config.client_cert_pem = Some(trusted.cert_pem.clone().into_bytes());
    config.client_key_pem = Some(trusted.key_pem.clone().into_bytes());
    let client = litelet::api::ApiClient::new(&config).unwrap();
    let list: litelet::api::meta::List<Pod> = client.get("/pods").unwrap();
    assert_eq!(list.kind, "PodList");
}

#[test]
fn bearer_tokens_are_reviewed_once_and_cached() {
    let node = start(Setup::default());
    node.api().add_token("good-token", "alice", &["dev"]);
    node.api().grant("alice", "get", "proxy");
    let auth = [("Authorization", "Bearer good-token")];
    let first = node.get_with(None, "GET", "/pods", &auth);
    assert_eq!(first.status, 200, "{}", first.text());
    let second = node.get_with(None, "GET", "/pods", &auth);
    assert_eq!(second.status, 200);
    let reviews = node
        .api()
        .count("create", "/apis/authentication.k8s.io/v1/tokenreviews");
    assert_eq!(reviews, 1, "the second request used the cache");
    let bad = node.get_with(None, "GET", "/pods", &[("Authorization", "Bearer nope")]);
    assert_eq!((bad.status, bad.text().as_str()), (401, "Unauthorized\n"));
    // A bad token is not rescued by a good certificate's absence nor by anonymous.
    let node = start(Setup {
        anonymous: true,
        ..Default::default()
    });
    let bad = node.get_with(None, "GET", "/pods", &[("Authorization", "Bearer nope")]);
    assert_eq!(bad.status, 401);
}

#[test]
fn subject_access_reviews_allow_and_deny() {
    let node = start(Setup::default());
    node.api().add_token("t", "alice", &[]);
    node.api().grant("alice", "get", "proxy");
    let auth = [("Authorization", "Bearer t")];
    // /pods: nodes/pods is not granted, nodes/proxy is (upstream's fallback).
    assert_eq!(node.get_with(None, "GET", "/pods", &auth).status, 200);
    let subs: Vec<String> = node
        .api()
        .access_reviews()
        .iter()
        .map(|r| {
            r["resourceAttributes"]["subresource"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(subs, vec!["pods", "proxy"]);
    let denied = node.get_with(None, "GET", "/metrics", &auth);
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.text(),
        "Forbidden (user=alice, verb=get, resource=nodes, subresource=metrics)\n"
    );
    // POST maps to create, which alice may not do.
    let run = node.get_with(None, "POST", "/run/default/p/c?cmd=true", &auth);
    assert_eq!(run.status, 403, "{}", run.text());
    // Review failures are 500s, never an allow.
    let node2 = start(Setup::default());
    node2.api().add_token("t", "bob", &[]);
    node2.api().inject(
        support::fake_api::Fail::status(500)
            .always()
            .path("subjectaccessreviews"),
    );
    let err = node2.get_with(None, "GET", "/pods", &auth);
    assert_eq!(err.status, 500, "{}", err.text());
}

#[test]
fn unauthenticated_and_forbidden_answers_leak_no_pod_data() {
    let node = start(Setup::default());
    let log = node.dir.path().join("logs/secret.log");
    write_log(&log, &["2024-01-01T00:00:00Z stdout F top-secret-line"]);
    run_pod(
        &node,
        "hidden-ns",
        "secret-pod",
        "uid-secret",
        &[("c", &log, true)],
    );
    node.api().add_token("t", "mallory", &[]);
    for path in [
        "/pods",
        "/containerLogs/hidden-ns/secret-pod/c",
        "/containerLogs/hidden-ns/no-such-pod/c",
        "/exec/hidden-ns/secret-pod/c?command=ls&output=1",
    ] {
        let anon = node.get(None, path);
        assert_eq!(anon.status, 401, "{path}");
        let forbidden = node.get_with(None, "GET", path, &[("Authorization", "Bearer t")]);
        assert_eq!(forbidden.status, 403, "{path}");
        for answer in [&anon, &forbidden] {
            let text = answer.text();
            for secret in [
                "hidden-ns",
                "secret-pod",
                "uid-secret",
                "top-secret",
                "no-such-pod",
            ] {
                assert!(!text.contains(secret), "{path}: {text}");
            }
        }
    }
}

#[test]
fn malformed_paths_and_parameters_get_400_with_a_message() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/p.log");
    write_log(&log, &["2024-01-01T00:00:00Z stdout F hi"]);
    run_pod(&node, "ns", "p", "uid-p", &[("c", &log, true)]);
    let cases = [
        ("/containerLogs/ns//c", "malformed pod name"),
        (
            "/containerLogs/ns/p",
            "expected /<namespace>/<pod>/<container>",
        ),
        (
            "/containerLogs/ns/p/c?tailLines=-1",
            "tailLines must be at least 0",
        ),
        ("/containerLogs/ns/p/c?tailLines=ten", "invalid integer"),
        ("/containerLogs/ns/p/c?follow=maybe", "invalid boolean"),
        (
            "/containerLogs/ns/p/c?limitBytes=0",
            "limitBytes must be at least 1",
        ),
        (
            "/containerLogs/ns/p/c?sinceTime=yesterday",
            "invalid sinceTime",
        ),
        ("/containerLogs/ns/p/%zz", "malformed path"),
        ("/containerLogs/ns/p/c?x=%zz", "bad query parameter"),
        ("/exec/ns/p/c?output=1", "at least one command"),
        (
            "/exec/ns/p/c?command=ls",
            "at least 1 of stdin, stdout, stderr",
        ),
        ("/portForward/ns/p?port=99999", "invalid port"),
    ];
    for (path, message) in cases {
        let answer = node.get(None, path);
        assert_eq!(answer.status, 400, "{path}: {}", answer.text());
        assert!(answer.text().contains(message), "{path}: {}", answer.text());
    }
    assert_eq!(node.get(None, "/nope").status, 404);
    assert_eq!(node.get(None, "/containerLogs/ns/nope/c").status, 404);
    assert_eq!(node.get(None, "/containerLogs/ns/p/other").status, 404);
    assert_eq!(node.get_with(None, "DELETE", "/pods", &[]).status, 405);
    // Garbage and oversized heads.
    let tls = https::connect(node.addr, &node.server_ca, None).unwrap();
    let mut reader = BufReader::new(tls);
    reader
        .get_mut()
        .write_all(b"NOT HTTP AT ALL\r\n\r\n")
        .unwrap();
    assert_eq!(https::read_answer(&mut reader).unwrap().status, 400);
    let big = "x".repeat(1100 * 1024);
    let answer = node.get_with(None, "GET", "/pods", &[("X-Big", &big)]);
    assert_eq!(answer.status, 431);
}

#[test]
fn pods_lists_the_published_pods() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/a.log");
    write_log(&log, &[]);
    run_pod(&node, "b-ns", "second", "uid-2", &[("c", &log, true)]);
    run_pod(&node, "a-ns", "first", "uid-1", &[("c", &log, true)]);
    let answer = node.get(None, "/pods");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let list: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["first", "second"]);
}

#[test]
fn runningpods_lists_what_the_runtime_runs() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/a.log");
    write_log(&log, &[]);
    run_pod(&node, "b-ns", "second", "uid-2", &[("web", &log, true)]);
    run_pod(
        &node,
        "a-ns",
        "first",
        "uid-1",
        &[("done", &log, false), ("app", &log, true)],
    );
    // Not desired (no source wants it) but running: /runningpods/ shows it, /pods not.
    run_pod(&node, "c-ns", "orphan", "uid-3", &[("x", &log, true)]);
    node.pods.publish(
        node.pods
            .pods()
            .iter()
            .filter(|p| p.name() != "orphan")
            .collect::<Vec<_>>()
            .into_iter(),
    );
    let answer = node.get(None, "/runningpods/");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let list: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let pods: Vec<(String, String, Vec<String>)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let containers = p["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect();
            (
                p["metadata"]["name"].as_str().unwrap().to_owned(),
                p["metadata"]["uid"].as_str().unwrap().to_owned(),
                containers,
            )
        })
        .collect();
    // Running containers only; sorted by namespace and name.
    assert_eq!(
        pods,
        vec![
            ("first".into(), "uid-1".into(), vec!["app".into()]),
            ("second".into(), "uid-2".into(), vec!["web".into()]),
            ("orphan".into(), "uid-3".into(), vec!["x".into()]),
        ]
    );
}

#[test]
fn metrics_are_valid_prometheus_text() {
    let node = start(Setup {
        api: true,
        ..open_setup()
    });
    let _ = node.runtime.version(&Default::default());
    // client-go's request series come from the attempt observer main installs.
    litelet::api::stats::observe_attempts(metrics::rest_attempt);
    let _ = node.api().client().get::<Value>("/api/v1/nodes");
    let answer = node.get(None, "/metrics");
    assert_eq!(answer.status, 200);
    assert!(answer
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = answer.text();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            assert!(
                rest.starts_with("HELP ") || rest.starts_with("TYPE "),
                "{line}"
            );
            continue;
        }
        let (name, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample {line:?}"));
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let metric = name.split('{').next().unwrap();
        assert!(
            metric
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        if let Some(labels) = name.strip_prefix(metric) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "{line}"
            );
        }
        samples.insert(name.to_owned(), v);
    }
    assert!(
        samples["kubelet_runtime_operations_total{operation_type=\"version\"}"] >= 1.0,
        "{text}"
    );
    assert!(samples["process_resident_memory_bytes"] > 0.0);
    assert!(samples.contains_key("process_cpu_seconds_total"));
    let host = node.api().url().trim_start_matches("http://").to_owned();
    let got = format!("rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}}");
    assert!(
        samples.get(&got).is_some_and(|n| *n >= 1.0),
        "{got} in {text}"
    );
    assert_eq!(samples["kubelet_node_name{node=\"node-1\"}"], 1.0);
    assert_eq!(samples["kubelet_node_config_error"], 0.0);
    assert!(samples["process_start_time_seconds"] > 1.5e9);
    assert!(text.contains("# TYPE kubelet_runtime_operations_duration_seconds histogram"));
    assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"+Inf\"}"));
}

#[test]
fn configz_serves_the_effective_configuration_of_flags_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubelet.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         maxPods: 50\nsyncFrequency: 20s\nclusterDomain: edge.local\n",
    )
    .unwrap();
    let flags = litelet::config::Flags::try_load_from([
        "litelet",
        "--config",
        file.to_str().unwrap(),
        "--max-pods=42",
        "--eviction-hard=memory.available<300Mi",
        "--container-log-max-files=3",
    ])
    .unwrap();
    let node = start(Setup {
        configz: flags.server_config("node-1").configz,
        ..Setup::default()
    });
    node.api().add_token("t", "alice", &[]);
    node.api().grant("alice", "get", "configz");
    let auth = [("Authorization", "Bearer t")];
    let answer = node.get_with(None, "GET", "/configz", &auth);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let doc: Value = serde_json::from_str(&answer.text()).unwrap();
    let c = &doc["kubeletconfig"];
    // The flag wins over the file; what only the file sets shows through.
    assert_eq!(c["maxPods"], 42, "{doc}");
    assert_eq!(c["syncFrequency"], "20s");
    assert_eq!(c["clusterDomain"], "edge.local");
    assert_eq!(c["evictionHard"]["memory.available"], "300Mi");
    assert_eq!(c["containerLogMaxFiles"], 3);
    assert_eq!(c["authorization"]["mode"], "Webhook");
    let subs: Vec<String> = node
        .api()
        .access_reviews()
        .iter()
        .filter_map(|r| {
            r["resourceAttributes"]["subresource"]
                .as_str()
                .map(Into::into)
        })
        .collect();
    assert_eq!(subs, vec!["configz"]);

    // Without nodes/configz the nodes/proxy fallback is asked, and refused.
    node.api().add_token("u", "bob", &[]);
    let denied = node.get_with(None, "GET", "/configz", &[("Authorization", "Bearer u")]);
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.text(),
        "Forbidden (user=bob, verb=get, resource=nodes, subresource=proxy)\n"
    );
    // A server given no document answers 404.
    let bare = start(open_setup());
    assert_eq!(bare.get(None, "/configz").status, 404);
}

#[test]
fn metrics_probes_counts_a_failing_readiness_probe_upwards() {
    use litelet::api::pod::{ExecAction, Probe, ProbeHandler};
    use litelet::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};

    let node = start(Setup {
        prober: true,
        ..open_setup()
    });
    let log = node.dir.path().join("web.log");
    write_log(&log, &[]);
    let ids = run_pod(&node, "default", "web", "uid-web", &[("app", &log, true)]);
    node.cri
        .state()
        .exec_results
        .insert("cat /tmp/ready".into(), (1, "not ready".into()));
    let mut pod = Pod::clone(&node.pods.pods()[0]);
    pod.spec.containers[0].readiness_probe = Some(Probe {
        handler: ProbeHandler {
            exec: Some(ExecAction {
                command: vec!["cat".into(), "/tmp/ready".into()],
            }),
            ..Default::default()
        },
        period_seconds: Some(1),
        ..Default::default()
    });
    let status = PodRuntimeStatus {
        uid: "uid-web".into(),
        containers: vec![ContainerStatus {
            id: ids[0].clone(),
            name: "app".into(),
            state: ContainerState::Running,
            started_at: (now_secs() as i64) * 1_000_000_000,
            ..Default::default()
        }],
        ..Default::default()
    };
    let prober = node.prober.as_ref().unwrap();
    let pod = Arc::new(pod);
    prober.update_pod(&pod, &status, "");

    let failed = "prober_probe_total{probe_type=\"Readiness\",result=\"failed\",container=\"app\",pod=\"web\",namespace=\"default\",pod_uid=\"uid-web\"}";
    let count = |text: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(failed))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    };
    let scrape = || {
        let answer = node.get(None, "/metrics/probes");
        assert_eq!(answer.status, 200);
        assert!(answer
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        answer.text()
    };
    let mut first = 0.0;
    assert!(
        wait_until(WAIT, || {
            first = count(&scrape());
            first >= 1.0
        }),
        "no failed readiness attempt counted: {}",
        scrape()
    );
    assert!(
        wait_until(WAIT, || count(&scrape()) > first),
        "the failed count did not grow past {first}: {}",
        scrape()
    );
    let text = scrape();
    assert!(text.contains("# TYPE prober_probe_total counter"), "{text}");
    assert!(text.contains("# TYPE prober_probe_duration_seconds histogram"));
    assert!(!text.contains("result=\"successful\""), "{text}");

    // A forgotten pod's series go away.
    prober.remove_pod(&pod);
    assert!(wait_until(WAIT, || count(&scrape()) == 0.0), "{}", scrape());

    // Without a prober the path says so.
    let bare = start(open_setup());
    assert_eq!(bare.get(None, "/metrics/probes").status, 503);
}

#[test]
fn container_logs_from_crafted_cri_files() {
    let node = start(open_setup());
    let old = node.dir.path().join("logs/c/0.log");
    let new = node.dir.path().join("logs/c/1.log");
    write_log(
        &old,
        &["2024-01-01T00:00:00Z stdout F from-the-previous-instance"],
    );
    write_log(
        &new,
        &[
            "2024-01-01T00:00:01.000000001Z stdout F one",
            "2024-01-01T00:00:02Z stderr P two-",
            "2024-01-01T00:00:02.5Z stderr F halves",
            "this line is not CRI",
            "2024-01-01T00:00:03Z stdout F three",
        ],
    );
    run_pod(
        &node,
        "ns",
        "p",
        "uid-logs",
        &[("c", &old, false), ("c", &new, true)],
    );
    let logs = |q: &str| {
        let a = node.get(None, &format!("/containerLogs/ns/p/c{q}"));
        assert_eq!(a.status, 200, "{q}: {}", a.text());
        a.text()
    };
    assert_eq!(logs(""), "one\ntwo-halves\nthree\n");
    assert_eq!(logs("?tailLines=1"), "three\n");
    assert_eq!(logs("?tailLines=0"), "");
    assert_eq!(logs("?limitBytes=6"), "one\ntw");
    assert_eq!(logs("?sinceTime=2024-01-01T00:00:02.2Z"), "halves\nthree\n");
    assert!(logs("?timestamps=true").starts_with("2024-01-01T00:00:01.000000001Z one\n2024-01-01T00:00:02Z two-2024-01-01T00:00:02.5Z halves\n"));
    assert_eq!(logs("?previous=true"), "from-the-previous-instance\n");
    // sinceSeconds counts back from now: these 2024 lines are all older.
    assert_eq!(logs("?sinceSeconds=10"), "");
    // Only one instance of "d": no previous one.
    let only = node.dir.path().join("logs/d/0.log");
    write_log(&only, &[]);
    run_pod(&node, "ns", "q", "uid-q", &[("d", &only, true)]);
    let none = node.get(None, "/containerLogs/ns/q/d?previous=true");
    assert_eq!(none.status, 400);
    assert!(
        none.text().contains("previous terminated container \"d\""),
        "{}",
        none.text()
    );
}

#[test]
fn container_logs_follow_while_a_writer_appends() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/f/0.log");
    write_log(&log, &["2024-01-01T00:00:00Z stdout F first"]);
    let ids = run_pod(&node, "ns", "f", "uid-follow", &[("c", &log, true)]);
    let tls = https::connect(node.addr, &node.server_ca, None).unwrap();
    let mut reader = BufReader::new(tls);
    https::send(
        reader.get_mut(),
        "GET",
        "/containerLogs/ns/f/c?follow=true",
        &[],
        b"",
    )
    .unwrap();
    let (status, headers) = https::read_head(&mut reader).unwrap();
    assert_eq!(status, 200);
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v == "chunked"));
    let writer_log = log.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..5 {
            std::thread::sleep(Duration::from_millis(100));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&writer_log)
                .unwrap();
            writeln!(f, "2024-01-01T00:00:0{}Z stdout F line-{i}", i + 1).unwrap();
        }
    });
    let mut seen = String::new();
    while !seen.contains("line-4\n") {
        let chunk = https::read_chunk(&mut reader)
            .unwrap()
            .expect("stream ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    writer.join().unwrap();
    assert_eq!(seen, "first\nline-0\nline-1\nline-2\nline-3\nline-4\n");
    // The container stops: the stream ends with the terminating chunk.
    assert!(node.cri.exit_container(&ids[0], 0));
    if let Some(more) = https::read_chunk(&mut reader).unwrap() {
        panic!("unexpected data {:?}", String::from_utf8_lossy(&more));
    }
}

/// A fake runtime streaming server: answers one upgrade with 101 and echoes bytes.
fn streaming_server() -> (String, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            sock.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        sock.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
        )
        .unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match sock.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => sock.write_all(&buf[..n]).unwrap(),
            }
        }
        String::from_utf8_lossy(&head).into_owned()
    });
    (url, handle)
}

#[test]
fn exec_is_proxied_to_the_runtime_streaming_server() {
    let node = start(Setup::default());
    let log = node.dir.path().join("logs/e.log");
    write_log(&log, &[]);
    let ids = run_pod(&node, "ns", "e", "uid-exec", &[("c", &log, true)]);
    let (url, backend) = streaming_server();
    node.cri.state().streaming_url = Some(url);
    node.api().grant("admin", "create", "proxy");
    let tls = https::connect(node.addr, &node.server_ca, Some(&node.admin())).unwrap();
    let mut reader = BufReader::new(tls);
    https::send(
        reader.get_mut(),
        "POST",
        "/exec/ns/e/c?command=echo&command=hi&output=1&error=1",
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("Authorization", "Bearer must-not-leak"),
        ],
        b"",
    )
    .unwrap();
    let (status, _) = https::read_head(&mut reader).unwrap();
    assert_eq!(status, 101);
    reader
        .get_mut()
        .write_all(b"ping-through-the-proxy")
        .unwrap();
    reader.get_mut().flush().unwrap();
    let mut echoed = [0u8; 22];
    reader.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping-through-the-proxy");
    drop(reader);
    let head = backend.join().unwrap();
    assert!(
        head.starts_with(&format!(
            "POST /exec/{}?command=echo&command=hi&output=1&error=1 HTTP/1.1\r\n",
            ids[0]
        )),
        "{head}"
    );
    assert!(
        head.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
        "{head}"
    );
    assert!(!head.contains("must-not-leak"), "{head}");
    let exec_calls = node.cri.count("Exec");
    assert_eq!(exec_calls, 1);
    // Without a streaming server configured the runtime's error comes back.
    node.cri.state().streaming_url = None;
    let answer = node.get_with(
        Some(&node.admin()),
        "POST",
        "/exec/ns/e/c?command=ls&output=1",
        &[],
    );
    assert_eq!(answer.status, 500, "{}", answer.text());
    // A stopped container cannot be exec'd into.
    node.cri.exit_container(&ids[0], 0);
    let answer = node.get_with(
        Some(&node.admin()),
        "POST",
        "/exec/ns/e/c?command=ls&output=1",
        &[],
    );
    assert_eq!(answer.status, 404, "{}", answer.text());
}

#[test]
fn run_returns_the_command_output() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/r.log");
    write_log(&log, &[]);
    run_pod(&node, "ns", "r", "uid-run", &[("c", &log, true)]);
    let ok = node.get_with(None, "POST", "/run/ns/r/c?cmd=echo+hello+world", &[]);
    assert_eq!((ok.status, ok.text().as_str()), (200, "hello world\n"));
    let failed = node.get_with(None, "POST", "/run/ns/r/c?cmd=false", &[]);
    assert_eq!(failed.status, 500);
    assert!(failed.text().contains("exit code 1"), "{}", failed.text());
}

#[test]
fn a_stalled_client_does_not_block_other_requests() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/s.log");
    let line = format!("2024-01-01T00:00:00Z stdout F {}", "x".repeat(1000));
    let lines: Vec<&str> = std::iter::repeat_n(line.as_str(), 20_000).collect();
    write_log(&log, &lines);
    run_pod(&node, "ns", "s", "uid-stall", &[("c", &log, true)]);
    // Asks for 20 MB of logs and never reads them.
    let mut stalled = https::connect(node.addr, &node.server_ca, None).unwrap();
    https::send(
        &mut stalled,
        "GET",
        "/containerLogs/ns/s/c?follow=true",
        &[],
        b"",
    )
    .unwrap();
    // A client that connects and never finishes its request.
    let mut slow = TcpStream::connect(node.addr).unwrap();
    slow.write_all(b"\x16\x03\x01").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let answer = node.get(None, "/pods");
        assert_eq!(answer.status, 200);
        assert_eq!(
            https::get_plain(node.healthz, "/healthz").unwrap().status,
            200
        );
    }
    drop(stalled);
    drop(slow);
}

/// Keeps a connection that answered `/pods` once open (an authorized place held).
fn hold(
    node: &Node,
    id: Option<&Identity>,
    headers: &[(&str, &str)],
) -> (u16, BufReader<https::Tls>) {
    let tls = https::connect(node.addr, &node.server_ca, id).unwrap();
    let mut reader = BufReader::new(tls);
    https::send(reader.get_mut(), "GET", "/pods", headers, b"").unwrap();
    let status = https::read_answer(&mut reader).unwrap().status;
    (status, reader)
}

/// Bearer-token users share a quarter of the authorized places; client certificates
/// (the API server's) may use every place, and a full class answers 503 and closes.
#[test]
fn connection_budgets_by_class_cap_token_users_not_certificates() {
    let node = start(Setup {
        mode: AuthorizationMode::AlwaysAllow,
        limits: Limits {
            max_connections: 4,
            ..Limits::default()
        },
        ..Default::default()
    });
    node.api().add_token(
        "prom-token",
        "system:serviceaccount:monitoring:prometheus",
        &[],
    );
    node.api()
        .add_token("other-token", "system:serviceaccount:default:other", &[]);
    let admin = node.admin();
    let (status, prom) = hold(&node, None, &[("Authorization", "Bearer prom-token")]);
    assert_eq!(status, 200);
    let (status, _) = hold(&node, None, &[("Authorization", "Bearer other-token")]);
    assert_eq!(status, 503, "token users' share (a quarter of 4) is taken");
    let certs: Vec<_> = (0..3).map(|_| hold(&node, Some(&admin), &[])).collect();
    assert!(
        certs.iter().all(|(s, _)| *s == 200),
        "certificates use the rest"
    );
    let full = node.get(Some(&admin), "/pods");
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(full.header("connection"), Some("close"));
    drop(prom);
    // The place is free once the server's connection thread has read the close, a
    // moment after the drop (longer on a busy machine): until then 503 is right.
    let mut last = 0;
    let reused = support::wait_until(Duration::from_secs(10), || {
        last = hold(&node, None, &[("Authorization", "Bearer other-token")]).0;
        last == 200
    });
    assert!(reused, "a freed place is reused: last answer {last}");
}

/// What the API server does for `stern` or a log shipper: many connections at once
/// from one address, each its own `kubectl logs -f`. Beyond the address's share of
/// pending connections they wait their turn instead of being closed.
#[test]
fn a_burst_from_one_address_is_served_in_turns_not_refused() {
    let node = start(Setup {
        mode: AuthorizationMode::AlwaysAllow,
        api: false,
        limits: Limits {
            max_unauthenticated_per_client: 2,
            ..Limits::default()
        },
        ..Default::default()
    });
    let before = metrics::HTTP_REJECTED_CONNECTIONS.value(&["api"]);
    let admin = node.admin();
    let gate = Arc::new(std::sync::Barrier::new(60));
    let clients: Vec<_> = (0..60)
        .map(|_| {
            let (gate, admin, addr, ca) = (
                gate.clone(),
                admin.clone(),
                node.addr,
                node.server_ca.clone(),
            );
            std::thread::spawn(move || {
                gate.wait();
                https::get(addr, &ca, Some(&admin), "GET", "/pods", &[]).map(|a| a.status)
            })
        })
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let served = answers.iter().filter(|a| matches!(a, Ok(200))).count();
    assert_eq!(served, 60, "{answers:?}");
    assert_eq!(metrics::HTTP_REJECTED_CONNECTIONS.value(&["api"]), before);
}

#[test]
fn self_signed_certificate_is_kept_under_the_root_dir() {
    let node = start(open_setup());
    let pem = std::fs::read_to_string(node.dir.path().join("pki/litelet.crt")).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE"));
    let key: PathBuf = node.dir.path().join("pki/litelet.key");
    assert!(key.exists());
}

#[test]
fn kubectl_raw_requests_with_a_client_certificate() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("\n*** SKIPPED kubectl_raw_requests_with_a_client_certificate: no kubectl ***\n");
        return;
    }
    let node = start(Setup::default());
    node.api().grant("kube-apiserver-kubelet-client", "*", "*");
    let log = node.dir.path().join("logs/k.log");
    write_log(&log, &["2024-01-01T00:00:00Z stdout F via-kubectl"]);
    run_pod(&node, "ns", "k", "uid-kubectl", &[("c", &log, true)]);
    let id = node
        .pki
        .client("kube-apiserver-kubelet-client", &["system:masters"]);
    let d = node.dir.path();
    std::fs::write(d.join("kc-ca.crt"), &node.server_ca).unwrap();
    std::fs::write(d.join("kc-client.crt"), &id.cert_pem).unwrap();
    std::fs::write(d.join("kc-client.key"), &id.key_pem).unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: https://{}\n    certificate-authority: {}\nusers:\n- name: apiserver\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: node\n  context: {{cluster: node, user: apiserver}}\ncurrent-context: node\n",
        node.addr,
        d.join("kc-ca.crt").display(),
        d.join("kc-client.crt").display(),
        d.join("kc-client.key").display()
    );
    std::fs::write(d.join("kubeconfig"), kubeconfig).unwrap();
    let kubectl = |path: &str| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(d.join("kubeconfig"))
            .args(["get", "--raw", path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl get --raw {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pods: Value = serde_json::from_str(&kubectl("/pods")).unwrap();
    assert_eq!(pods["items"][0]["metadata"]["name"], "k");
    assert_eq!(
        kubectl("/containerLogs/ns/k/c?tailLines=1"),
        "via-kubectl\n"
    );
    assert!(kubectl("/metrics").contains("kubelet_runtime_operations_total"));
}

// Issue 23 item 6: Go's default header limit (1 MiB) is the node server's too.
#[test]
fn request_heads_up_to_one_mebibyte_are_accepted() {
    let node = start(open_setup());
    let big = "x".repeat(1000 * 1024);
    let answer = node.get_with(None, "GET", "/pods", &[("X-Big", &big)]);
    assert_eq!(answer.status, 200, "{}", answer.text());
    // Past the limit: a 431 the client can read, not a connection reset.
    let huge = "x".repeat(1100 * 1024);
    let answer = node.get_with(None, "GET", "/pods", &[("X-Big", &huge)]);
    assert_eq!(answer.status, 431, "{}", answer.text());
}

// Issue 23 item 6: a plain POST to /portForward (no SPDY or WebSocket upgrade) is a
// bad request, as upstream's streaming server answers it; it was an empty 200.
#[test]
fn port_forward_without_an_upgrade_is_a_bad_request() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/pf.log");
    write_log(&log, &[]);
    run_pod(&node, "ns", "pf", "uid-pf", &[("c", &log, true)]);
    // Nothing listens there: the request must be refused before any proxying.
    node.cri.state().streaming_url = Some("http://127.0.0.1:1".into());
    let answer = node.get_with(None, "POST", "/portForward/ns/pf?port=80", &[]);
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(
        answer.text().contains("missing upgrade headers"),
        "{}",
        answer.text()
    );
}

/// A pod that can write its log folder swaps `0.log` for a link to `/dev/zero`: a logs
/// request (with or without follow) is answered at once with an error, instead of a
/// stream that never ends and holds a connection and a core.
#[test]
fn a_log_symlinked_to_dev_zero_is_refused_not_streamed_for_ever() {
    let node = start(open_setup());
    let log = node.dir.path().join("logs/zero/0.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &log).unwrap();
    run_pod(&node, "ns", "zero", "uid-zero", &[("c", &log, true)]);
    for query in ["", "?follow=true", "?tailLines=10"] {
        let started = Instant::now();
        let tls = https::connect(node.addr, &node.server_ca, None).unwrap();
        // Today's bound on the answer: anything slower counts as streaming for ever.
        tls.sock
            .set_read_timeout(Some(Duration::from_secs(8)))
            .unwrap();
        let mut reader = BufReader::new(tls);
        let path = format!("/containerLogs/ns/zero/c{query}");
        https::send(reader.get_mut(), "GET", &path, &[], b"").unwrap();
        let answer = https::read_answer(&mut reader);
        let answer = answer.unwrap_or_else(|e| panic!("{path}: no bounded answer: {e}"));
        assert_ne!(answer.status, 200, "{path}: {}", answer.text());
        assert!(answer.text().contains("symlink"), "{}", answer.text());
        assert!(started.elapsed() < Duration::from_secs(8));
    }
}

/// A client without credentials (401) or without the right (403) loses its connection
/// with the answer, so it cannot keep a connection open by failing requests.
#[test]
fn a_connection_is_closed_after_a_401_or_a_403() {
    let node = start(Setup::default());
    node.api().add_token("t", "mallory", &[]);
    for (auth, want) in [(None, 401), (Some("Bearer t"), 403)] {
        let tls = https::connect(node.addr, &node.server_ca, None).unwrap();
        tls.sock
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut reader = BufReader::new(tls);
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        https::send(reader.get_mut(), "GET", "/pods", &headers, b"").unwrap();
        let answer = https::read_answer(&mut reader).unwrap();
        assert_eq!(answer.status, want);
        let mut byte = [0u8; 1];
        let after = reader.read(&mut byte);
        assert!(
            matches!(after, Ok(0)),
            "{want}: the connection stayed open: {after:?}"
        );
        assert_eq!(answer.header("connection"), Some("close"), "{want}");
    }
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all
/// loopback on Linux), so a test can play many clients.
fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(from, 0)),
    )?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

/// 200 idle connections that never start TLS, from ten addresses, and a loop of
/// failed TLS handshakes from an eleventh: an authenticated client still gets `/pods`,
/// can start a log follow, and a follow started before the flood keeps streaming.
#[test]
fn idle_and_failed_handshake_floods_do_not_starve_authenticated_requests() {
    let node = start(Setup {
        mode: AuthorizationMode::AlwaysAllow,
        api: false,
        ..Default::default()
    });
    let admin = node.admin();
    let log = node.dir.path().join("logs/flood/0.log");
    write_log(&log, &["2024-01-01T00:00:00Z stdout F before"]);
    run_pod(&node, "ns", "flood", "uid-flood", &[("c", &log, true)]);
    let follow = |expect: &str| {
        let tls = https::connect(node.addr, &node.server_ca, Some(&admin))?;
        tls.sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut reader = BufReader::new(tls);
        let path = "/containerLogs/ns/flood/c?follow=true";
        https::send(reader.get_mut(), "GET", path, &[], b"")?;
        let (status, _) = https::read_head(&mut reader)?;
        assert_eq!(status, 200);
        let mut seen = String::new();
        while !seen.contains(expect) {
            let chunk = https::read_chunk(&mut reader)?.unwrap_or_default();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        std::io::Result::Ok(reader)
    };
    let mut early = follow("before\n").unwrap();

    let idle: Vec<TcpStream> = (0..200)
        .filter_map(|i| connect_from([127, 0, 0, 2 + (i % 10) as u8].into(), node.addr).ok())
        .collect();
    assert!(idle.len() >= 150, "only {} idle connections", idle.len());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failed_handshakes = Arc::new(AtomicU64::new(0));
    let handshakes = {
        let (stop, addr, failed) = (stop.clone(), node.addr, failed_handshakes.clone());
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(15);
            let mut tries = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < until && tries < 5000 {
                tries += 1;
                let Ok(mut sock) = connect_from([127, 0, 0, 12].into(), addr) else {
                    continue;
                };
                let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
                // A TLS record header, then garbage: the handshake fails.
                let _ = sock.write_all(b"\x16\x03\x01\x00\x20not a client hello at all......");
                let _ = sock.read(&mut [0u8; 256]);
                failed.fetch_add(1, Ordering::Relaxed);
            }
            tries
        })
    };
    // The flood is on: the server has refused a few handshakes already.
    let flooding = || failed_handshakes.load(Ordering::Relaxed) >= 3;
    assert!(wait_until(Duration::from_secs(15), flooding));

    let started = Instant::now();
    for _ in 0..5 {
        let answer = https::get(
            node.addr,
            &node.server_ca,
            Some(&admin),
            "GET",
            "/pods",
            &[],
        );
        let answer = answer.expect("/pods under the flood");
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let mut late = follow("before\n").expect("a follow started under the flood");
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(f, "2024-01-01T00:00:01Z stdout F during").unwrap();
    }
    for (name, reader) in [("early", &mut early), ("late", &mut late)] {
        let chunk = https::read_chunk(reader).unwrap_or_else(|e| panic!("{name} follow: {e}"));
        assert_eq!(chunk.as_deref(), Some(&b"during\n"[..]), "{name} follow");
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    stop.store(true, Ordering::Relaxed);
    let tries = handshakes.join().unwrap();
    assert!(tries > 0);
    drop(idle);
}
