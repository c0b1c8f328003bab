//! The API client against the fake API server over real HTTP: round trips of every
//! verb, the mapping of 404/409/410/401 to `ApiError`, retries (500, 429 with
//! Retry-After, refused connections) and what is not retried, watches (events,
//! bookmarks, selectors, timeouts, 410, being woken by `close_connections`), a
//! kubeconfig-driven client, and the fake's patch semantics.

use std::time::{Duration, Instant};

use crate::support::fake_api::{patch, pod_json, Fail, FakeApi};
use crate::support::wait_until;
use litelet::api::lease::Lease;
use litelet::api::meta::{List, MicroTime, WatchEventType};
use litelet::api::node::Node;
use litelet::api::pod::Pod;
use litelet::api::{
    kubeconfig, paths, ApiClient, ApiError, DeleteOptions, ListOptions, PatchType, Verb,
    WatchOptions,
};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(20);

fn new_pod(client: &ApiClient, name: &str, node: &str) -> Pod {
    let pod: Pod = serde_json::from_value(pod_json("default", name, node)).unwrap();
    client.create(&paths::pods("default"), &pod).unwrap()
}

#[test]
fn pod_round_trip_through_every_verb() {
    let fake = FakeApi::start();
    let client = fake.client();

    let pod = new_pod(&client, "web", "node-1");
    assert!(!pod.uid().is_empty());
    assert_eq!(pod.metadata.generation, Some(1));
    assert!(pod.metadata.creation_timestamp.is_some());
    let rv1 = pod.metadata.resource_version.clone().unwrap();

    let got: Pod = client.get(&paths::pod("default", "web")).unwrap();
    assert_eq!(got, pod);

    // PUT with the current version: labels change, version moves; spec change bumps
    // generation.
    let mut changed = got.clone();
    changed
        .metadata
        .labels
        .insert("tier".into(), "front".into());
    changed.spec.active_deadline_seconds = Some(60);
    let replaced: Pod = client
        .replace(&paths::pod("default", "web"), &changed)
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    assert_eq!(replaced.metadata.label("tier"), Some("front"));
    assert_eq!(replaced.metadata.generation, Some(2));

    // PUT with the old version: conflict.
    let e = client
        .replace(&paths::pod("default", "web"), &changed)
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");

    // Status through pods/status with a strategic merge patch carrying the uid.
    let patch = json!({
        "metadata": {"uid": pod.uid()},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    });
    let patched: Pod = client
        .patch(
            &paths::pod_status("default", "web"),
            PatchType::StrategicMerge,
            &patch,
        )
        .unwrap();
    assert_eq!(
        patched.status.phase.as_ref().map(|p| p.as_str()),
        Some("Running")
    );
    assert_eq!(patched.status.conditions.len(), 1);
    // Status patches leave spec and generation alone.
    assert_eq!(patched.metadata.generation, Some(2));

    // A merge patch on the main resource cannot change status.
    let patched: Pod = client
        .patch(
            &paths::pod("default", "web"),
            PatchType::Merge,
            &json!({"metadata": {"annotations": {"a": "b"}}, "status": {"phase": "Failed"}}),
        )
        .unwrap();
    assert_eq!(patched.metadata.annotation("a"), Some("b"));
    assert_eq!(
        patched.status.phase.as_ref().map(|p| p.as_str()),
        Some("Running")
    );

    // JSON patch.
    let patched: Pod = client
        .patch(
            &paths::pod("default", "web"),
            PatchType::Json,
            &json!([{"op": "replace", "path": "/metadata/labels/tier", "value": "back"}]),
        )
        .unwrap();
    assert_eq!(patched.metadata.label("tier"), Some("back"));

    // Graceful delete of a bound pod only marks it; grace 0 removes it.
    client
        .delete(&paths::pod("default", "web"), &DeleteOptions::default())
        .unwrap();
    let marked: Pod = client.get(&paths::pod("default", "web")).unwrap();
    assert!(marked.deletion_requested());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    let wrong_uid = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some("someone-else".into()),
        ..DeleteOptions::default()
    };
    let e = client
        .delete(&paths::pod("default", "web"), &wrong_uid)
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some(pod.uid().to_owned()),
        ..DeleteOptions::default()
    };
    client.delete(&paths::pod("default", "web"), &now).unwrap();
    let e = client
        .get::<Pod>(&paths::pod("default", "web"))
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");

    let stats = client.stats();
    assert_eq!(stats.count(Verb::Create), 1);
    assert_eq!(stats.count(Verb::Get), 3);
    assert_eq!(stats.count(Verb::Update), 2);
    assert_eq!(stats.count(Verb::Patch), 3);
    assert_eq!(stats.count(Verb::Delete), 3);
    assert_eq!(stats.retries, 0);
    assert_eq!(
        fake.count("patch", "/api/v1/namespaces/default/pods/web/status"),
        1
    );
}

#[test]
fn errors_map_to_variants() {
    let fake = FakeApi::start();
    let client = fake.client();

    let e = client
        .get::<Pod>(&paths::pod("default", "nope"))
        .unwrap_err();
    match &e {
        ApiError::NotFound {
            verb,
            path,
            message,
        } => {
            assert_eq!(*verb, Verb::Get);
            assert_eq!(path, "/api/v1/namespaces/default/pods/nope");
            assert_eq!(message, "pods \"nope\" not found");
        }
        other => panic!("want NotFound, got {other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "get /api/v1/namespaces/default/pods/nope: not found: pods \"nope\" not found"
    );

    let pod = new_pod(&client, "a", "node-1");
    let e = client.create(&paths::pods("default"), &pod).unwrap_err();
    assert!(e.is_already_exists(), "{e}");

    // A uid in a patch that is not the object's: 422, as the real server answers
    // (the uid is immutable; see tests/apiserver/api_agreement.rs).
    let e = client
        .patch::<Pod>(
            &paths::pod_status("default", "a"),
            PatchType::StrategicMerge,
            &json!({"metadata": {"uid": "other"}, "status": {"phase": "Running"}}),
        )
        .unwrap_err();
    assert_eq!(e.status_code(), Some(422), "{e}");
    assert!(e.to_string().contains("field is immutable"), "{e}");

    // A forced conflict on the next write only.
    fake.conflict_next_write("/api/v1/namespaces/default/pods/a/status");
    let status_patch = json!({"status": {"phase": "Running"}});
    let e = client
        .patch::<Pod>(
            &paths::pod_status("default", "a"),
            PatchType::Merge,
            &status_patch,
        )
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    client
        .patch::<Pod>(
            &paths::pod_status("default", "a"),
            PatchType::Merge,
            &status_patch,
        )
        .unwrap();

    // Unknown paths get a 404 Status too.
    let e = client.get::<Value>("/api/v1/widgets/x").unwrap_err();
    assert!(e.is_not_found(), "{e}");

    // 401 without the right token.
    fake.require_token(Some("secret"));
    let e = client.get::<Pod>(&paths::pod("default", "a")).unwrap_err();
    assert!(matches!(e, ApiError::Unauthorized { .. }), "{e}");
    assert_eq!(e.status_code(), Some(401));

    // Unsupported field selectors are a 400 with the server's message.
    fake.require_token(None);
    let opts = ListOptions {
        field_selector: Some("spec.bogus=1".into()),
        ..ListOptions::default()
    };
    let e = client.list::<Pod>(&paths::all_pods(), &opts).unwrap_err();
    assert_eq!(e.status_code(), Some(400), "{e}");
    assert!(e.to_string().contains("field label not supported"), "{e}");
}

#[test]
fn retries_on_500_then_succeeds() {
    let fake = FakeApi::start();
    let client = fake.client();
    new_pod(&client, "a", "n");
    fake.inject(Fail::status(500).times(2).verb("get"));
    let pod: Pod = client.get(&paths::pod("default", "a")).unwrap();
    assert_eq!(pod.name(), "a");
    assert_eq!(fake.count("get", "/api/v1/namespaces/default/pods/a"), 3);
    let stats = client.stats();
    assert_eq!(stats.count(Verb::Get), 3);
    assert_eq!(stats.retries, 2);
}

#[test]
fn retry_after_of_429_is_honoured() {
    let fake = FakeApi::start();
    let client = fake.client();
    new_pod(&client, "a", "n");
    fake.inject(Fail::status(429).retry_after(1).verb("patch"));
    let started = Instant::now();
    client
        .patch::<Pod>(
            &paths::pod_status("default", "a"),
            PatchType::Merge,
            &json!({"status": {"phase": "Running"}}),
        )
        .unwrap();
    // A lower bound only: the retry waited for the server's Retry-After.
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(fake.count_verb("patch"), 2);
}

#[test]
fn post_is_retried_on_429_but_not_on_500() {
    let fake = FakeApi::start();
    let client = fake.client();
    let pod: Pod = serde_json::from_value(pod_json("default", "a", "n")).unwrap();

    fake.inject(Fail::status(500).verb("create"));
    let e = client.create(&paths::pods("default"), &pod).unwrap_err();
    assert_eq!(e.status_code(), Some(500), "{e}");
    assert_eq!(fake.count_verb("create"), 1);

    fake.inject(Fail::status(429).verb("create"));
    client.create(&paths::pods("default"), &pod).unwrap();
    assert_eq!(fake.count_verb("create"), 3);
}

#[test]
fn gives_up_after_max_retries() {
    let fake = FakeApi::start();
    let client = fake.client();
    fake.inject(Fail::status(503).always().verb("list"));
    let e = client
        .list::<Pod>(&paths::all_pods(), &ListOptions::default())
        .unwrap_err();
    assert_eq!(e.status_code(), Some(503), "{e}");
    // The first attempt plus max_retries (4).
    assert_eq!(fake.count_verb("list"), 5);
    fake.clear_faults();
    client
        .list::<Pod>(&paths::all_pods(), &ListOptions::default())
        .unwrap();
}

#[test]
fn refused_connections_are_retried_even_for_post() {
    // A port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fake = FakeApi::start();
    let mut config = fake.client_config();
    config.server = format!("http://127.0.0.1:{port}");
    let client = ApiClient::new(&config).unwrap();
    let pod: Pod = serde_json::from_value(pod_json("default", "a", "n")).unwrap();
    let e = client.create(&paths::pods("default"), &pod).unwrap_err();
    assert!(matches!(e, ApiError::Transport { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("create /api/v1/namespaces/default/pods: transport:"),
        "{e}"
    );
    let stats = client.stats();
    assert_eq!(stats.count(Verb::Create), 5, "{stats}");
}

#[test]
fn list_pages_and_field_selectors() {
    let fake = FakeApi::start();
    let client = fake.client();
    for i in 0..5 {
        fake.create_pod("default", &format!("p{i}"), "node-1");
    }
    fake.create_pod("other", "x", "node-2");

    let mut names = Vec::new();
    let mut opts = ListOptions {
        limit: Some(2),
        ..ListOptions::default()
    };
    loop {
        let page: List<Pod> = client.list(&paths::all_pods(), &opts).unwrap();
        assert!(page.items.len() <= 2);
        assert!(page.metadata.resource_version.is_some());
        names.extend(page.items.iter().map(|p| p.name().to_owned()));
        match page.metadata.continue_ {
            Some(c) => opts.continue_ = Some(c),
            None => break,
        }
    }
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4", "x"]);

    let mine: List<Pod> = client
        .list(
            &paths::all_pods(),
            &ListOptions {
                field_selector: Some("spec.nodeName=node-2".into()),
                ..ListOptions::default()
            },
        )
        .unwrap();
    assert_eq!(mine.items.len(), 1);
    assert_eq!(mine.items[0].namespace(), "other");

    let by_label: List<Pod> = client
        .list(
            &paths::pods("default"),
            &ListOptions {
                label_selector: Some("app=p3".into()),
                ..ListOptions::default()
            },
        )
        .unwrap();
    assert_eq!(by_label.items.len(), 1);
    assert_eq!(by_label.items[0].name(), "p3");
}

#[test]
fn watch_delivers_events_bookmarks_and_ends_on_timeout() {
    let fake = FakeApi::start();
    fake.set_bookmark_interval(Duration::from_millis(100));
    let client = fake.client();
    fake.create_pod("default", "before", "node-1");
    let list: List<Pod> = client
        .list(&paths::all_pods(), &ListOptions::default())
        .unwrap();
    let rv = list.metadata.resource_version.unwrap();

    let opts = WatchOptions {
        field_selector: Some("spec.nodeName=node-1".into()),
        resource_version: Some(rv.clone()),
        allow_bookmarks: true,
        timeout_seconds: Some(2),
        ..WatchOptions::default()
    };
    let mut stream = client.watch(&paths::all_pods(), &opts).unwrap();
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    fake.create_pod("default", "mine", "node-1");
    fake.create_pod("default", "theirs", "node-2");
    fake.modify("pods", "default", "mine", |p| {
        p["status"]["phase"] = "Running".into();
    });
    fake.remove("pods", "default", "mine");

    let mut seen = Vec::new();
    let mut bookmarks = 0;
    let mut last_rv = rv.parse::<u64>().unwrap();
    for ev in stream.by_ref() {
        let ev = ev.unwrap();
        let ev_rv: u64 = ev.object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ev_rv >= last_rv, "versions never go back");
        last_rv = ev_rv;
        match ev.type_.clone() {
            WatchEventType::Bookmark => {
                bookmarks += 1;
                assert_eq!(ev.object["kind"], "Pod");
                assert!(ev.object["metadata"].get("name").is_none());
            }
            t => seen.push((t, ev.decode::<Pod>().unwrap().name().to_owned())),
        }
    }
    // The stream ended by itself (timeoutSeconds), cleanly.
    assert_eq!(
        seen,
        [
            (WatchEventType::Added, "mine".to_owned()),
            (WatchEventType::Modified, "mine".to_owned()),
            (WatchEventType::Deleted, "mine".to_owned()),
        ]
    );
    assert!(bookmarks >= 1);
    assert!(stream.next().is_none());

    // Without a version the watch starts with the current objects as ADDED.
    let opts = WatchOptions {
        timeout_seconds: Some(1),
        ..WatchOptions::default()
    };
    let names: Vec<String> = client
        .watch(&paths::pods("default"), &opts)
        .unwrap()
        .map(|e| e.unwrap().decode::<Pod>().unwrap().name().to_owned())
        .collect();
    assert_eq!(names, ["before", "theirs"]);
}

#[test]
fn watch_outlives_the_request_timeout() {
    let fake = FakeApi::start();
    let mut config = fake.client_config();
    config.timeout = Duration::from_millis(300);
    let client = ApiClient::new(&config).unwrap();
    let opts = WatchOptions {
        resource_version: Some(fake.resource_version().to_string()),
        timeout_seconds: Some(2),
        ..WatchOptions::default()
    };
    // The stream runs past the 300 ms request budget and ends cleanly at 2 s.
    let mut stream = client.watch(&paths::all_pods(), &opts).unwrap();
    assert!(stream.next().is_none());
}

#[test]
fn watch_from_compacted_version_is_gone() {
    let fake = FakeApi::start();
    let client = fake.client();
    let old = fake.resource_version().to_string();
    fake.create_pod("default", "a", "n");
    fake.compact();
    let opts = WatchOptions {
        resource_version: Some(old),
        ..WatchOptions::default()
    };
    let mut stream = client.watch(&paths::all_pods(), &opts).unwrap();
    let e = stream.next().unwrap().unwrap_err();
    assert!(e.is_gone(), "{e}");
    assert!(e.to_string().contains("too old resource version"), "{e}");
    assert!(stream.next().is_none());

    // A version after the compaction still works, and so does a short history.
    fake.set_history_limit(1);
    fake.create_pod("default", "b", "n");
    fake.create_pod("default", "c", "n");
    let opts = WatchOptions {
        resource_version: Some((fake.resource_version() - 2).to_string()),
        ..WatchOptions::default()
    };
    let e = client
        .watch(&paths::all_pods(), &opts)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.is_gone(), "{e}");
}

#[test]
fn dropped_watch_is_a_transport_error() {
    let fake = FakeApi::start();
    let client = fake.client();
    let opts = WatchOptions {
        resource_version: Some(fake.resource_version().to_string()),
        ..WatchOptions::default()
    };
    let mut stream = client.watch(&paths::all_pods(), &opts).unwrap();
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    fake.create_pod("default", "a", "n");
    assert_eq!(stream.next().unwrap().unwrap().type_, WatchEventType::Added);
    assert_eq!(fake.drop_watches(), 1);
    let e = stream.next().unwrap().unwrap_err();
    assert!(
        matches!(
            e,
            ApiError::Transport {
                verb: Verb::Watch,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn close_connections_wakes_a_blocked_watch() {
    let fake = FakeApi::start();
    let client = fake.client().with_own_connections();
    let opts = WatchOptions {
        resource_version: Some(fake.resource_version().to_string()),
        ..WatchOptions::default()
    };
    let mut stream = client.watch(&paths::all_pods(), &opts).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = std::thread::spawn(move || {
        let first = stream.next();
        let _ = tx.send(first.map(|r| r.is_err()));
    });
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    client.close_connections();
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Some(true));
    reader.join().unwrap();
    // The closed client refuses new work without retrying; other clients carry on.
    let e = client.get::<Value>(&paths::nodes()).unwrap_err();
    assert!(matches!(e, ApiError::Transport { .. }), "{e}");
    fake.client()
        .list::<Pod>(&paths::all_pods(), &ListOptions::default())
        .unwrap();
}

#[test]
fn node_status_and_lease_paths() {
    let fake = FakeApi::start();
    let client = fake.client();
    let node = client
        .create(&paths::nodes(), &Node::new("node-1"))
        .unwrap();
    assert_eq!(node.name(), "node-1");
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}]}});
    client
        .patch::<Node>(
            &paths::node_status("node-1"),
            PatchType::StrategicMerge,
            &patch,
        )
        .unwrap();
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    let node: Node = client
        .patch(
            &paths::node_status("node-1"),
            PatchType::StrategicMerge,
            &patch,
        )
        .unwrap();
    assert_eq!(node.status.conditions.len(), 2, "merged by type");
    assert!(!node.is_ready());

    let mut lease = Lease::new("node-1", "kube-node-lease");
    lease.spec.holder_identity = Some("node-1".into());
    lease.spec.lease_duration_seconds = Some(40);
    lease.spec.renew_time = Some(MicroTime::now());
    let created = client
        .create(&paths::leases("kube-node-lease"), &lease)
        .unwrap();
    assert_eq!(created.api_version, "coordination.k8s.io/v1");
    let mut renewed = created.clone();
    renewed.spec.renew_time = Some(MicroTime::from_unix_micros(
        created.spec.renew_time.unwrap().unix_micros() + 10_000_000,
    ));
    let renewed = client
        .replace(&paths::node_lease("node-1"), &renewed)
        .unwrap();
    assert_ne!(
        renewed.metadata.resource_version,
        created.metadata.resource_version
    );
    // A stale renew loses.
    let e = client
        .replace(&paths::node_lease("node-1"), &created)
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(fake.count("patch", "/api/v1/nodes/node-1/status"), 2);
    assert_eq!(
        fake.count(
            "update",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1"
        ),
        2
    );
}

#[test]
fn kubeconfig_driven_client_sends_token_and_user_agent() {
    let fake = FakeApi::start();
    fake.require_token(Some("t0ken"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t0ken\n").unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: c\n  context: {{cluster: fake, user: kubelet}}\nusers:\n- name: kubelet\n  user:\n    tokenFile: token\n",
            fake.url()
        ),
    )
    .unwrap();
    let config = kubeconfig::load(&path).unwrap();
    let client = ApiClient::new(&config).unwrap();
    client
        .list::<Pod>(&paths::all_pods(), &ListOptions::default())
        .unwrap();
    let rec = fake.requests().pop().unwrap();
    assert_eq!(rec.authorization.as_deref(), Some("Bearer t0ken"));
    assert_eq!(
        rec.user_agent,
        format!("litelet/{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(rec.status, 200);
}

#[test]
fn clones_share_counters_and_own_pools_too() {
    let fake = FakeApi::start();
    let a = fake.client();
    let b = a.clone();
    let c = a.with_own_connections();
    for client in [&a, &b, &c] {
        client
            .list::<Pod>(&paths::all_pods(), &ListOptions::default())
            .unwrap();
    }
    assert_eq!(a.stats().count(Verb::List), 3);
    assert_eq!(c.stats().total(), 3);
}

#[test]
fn https_with_client_certificate_and_pinned_ca() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = FakeApi::start_tls(dir.path(), "node-1") else {
        eprintln!("skipped: no openssl command to make certificates");
        return;
    };
    assert!(fake.url().starts_with("https://127.0.0.1:"));
    let client = fake.client();
    new_pod(&client, "a", "node-1");
    let rec = fake.requests().pop().unwrap();
    assert!(rec.client_cert, "the client certificate was presented");

    // A watch over TLS, woken by closing the connections.
    let watcher = client.with_own_connections();
    let opts = WatchOptions {
        resource_version: Some(fake.resource_version().to_string()),
        ..WatchOptions::default()
    };
    let mut stream = watcher.watch(&paths::all_pods(), &opts).unwrap();
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    fake.create_pod("default", "b", "node-1");
    assert_eq!(stream.next().unwrap().unwrap().type_, WatchEventType::Added);
    watcher.close_connections();
    assert!(stream.next().unwrap().is_err());

    // Without the pinned CA the server is not trusted: a transport error, no retries.
    let mut untrusting = fake.client_config();
    untrusting.ca_pem = None;
    let before = fake.requests().len();
    let e = ApiClient::new(&untrusting)
        .unwrap()
        .get::<Pod>(&paths::pod("default", "a"))
        .unwrap_err();
    assert!(matches!(e, ApiError::Transport { .. }), "{e}");
    assert_eq!(fake.requests().len(), before);

    // insecure-skip-tls-verify with a token and no certificate.
    let mut insecure = fake.client_config();
    insecure.ca_pem = None;
    insecure.client_cert_pem = None;
    insecure.client_key_pem = None;
    insecure.insecure_skip_tls_verify = true;
    insecure.token = Some("tok".into());
    ApiClient::new(&insecure)
        .unwrap()
        .get::<Pod>(&paths::pod("default", "a"))
        .unwrap();
    let rec = fake.requests().pop().unwrap();
    assert!(!rec.client_cert);
    assert_eq!(rec.authorization.as_deref(), Some("Bearer tok"));
}

#[test]
fn https_client_from_a_kubeconfig_with_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = FakeApi::start_tls(dir.path(), "node-1") else {
        eprintln!("skipped: no openssl command to make certificates");
        return;
    };
    let files = fake.tls_files().unwrap();
    let pki = dir.path().join("conf/pki");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::write(pki.join("ca.crt"), &files.ca_pem).unwrap();
    std::fs::write(pki.join("kubelet.crt"), &files.client_cert_pem).unwrap();
    std::fs::write(pki.join("kubelet.key"), &files.client_key_pem).unwrap();
    let path = dir.path().join("conf/kubelet.conf");
    std::fs::write(
        &path,
        format!(
            "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority: pki/ca.crt\ncontexts:\n- {{name: c, context: {{cluster: k, user: u}}}}\nusers:\n- name: u\n  user:\n    client-certificate: pki/kubelet.crt\n    client-key: pki/kubelet.key\n",
            fake.url()
        ),
    )
    .unwrap();
    let client = ApiClient::new(&kubeconfig::load(&path).unwrap()).unwrap();
    client
        .list::<Pod>(&paths::all_pods(), &ListOptions::default())
        .unwrap();
    assert!(fake.requests().pop().unwrap().client_cert);
}

// ---- the fake server's patch semantics (pure) ----

#[test]
fn fake_merge_patch_rfc7386() {
    let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
    patch::merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
    assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
}

#[test]
fn fake_strategic_merge_lists_by_key() {
    let mut pod = json!({
        "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"}
            ],
            "containerStatuses": [{"name": "c1", "ready": false}]
        }
    });
    let p = json!({
        "metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]},
        "status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"}
            ],
            "containerStatuses": [{"name": "c2", "ready": true}, {"name": "c1", "ready": true}],
            "phase": "Running"
        }
    });
    patch::strategic_merge(&mut pod, &p, "");
    assert_eq!(pod["status"]["phase"], "Running");
    let types: Vec<&str> = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["PodScheduled", "Ready", "Initialized"]);
    assert_eq!(pod["status"]["conditions"][1]["status"], "True");
    // Container statuses are an atomic list: replaced whole, in the patch's order.
    assert_eq!(
        pod["status"]["containerStatuses"],
        json!([{"name": "c2", "ready": true}, {"name": "c1", "ready": true}])
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"].as_array().unwrap().len(),
        2
    );
    assert!(pod["status"].get("$setElementOrder/conditions").is_none());

    patch::strategic_merge(
        &mut pod,
        &json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}),
        "",
    );
    assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 2);
}

#[test]
fn fake_json_patch_ops() {
    let mut d = json!({"a": [1, 2], "b": {"c": 1}});
    patch::json_patch(
        &mut d,
        &json!([
            {"op": "test", "path": "/b/c", "value": 1},
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "replace", "path": "/b/c", "value": 2},
            {"op": "remove", "path": "/a/0"}
        ]),
    )
    .unwrap();
    assert_eq!(d, json!({"a": [2, 3], "b": {"c": 2}}));
    assert!(
        patch::json_patch(&mut d, &json!([{"op": "test", "path": "/b/c", "value": 9}])).is_err()
    );
}

/// Bodies far larger than the client's 32 KiB connection buffers go out and come back
/// whole, on one kept-alive connection: a PUT, a GET and a list.
#[test]
fn bodies_larger_than_the_connection_buffers_round_trip() {
    let fake = FakeApi::start();
    let client = fake.client();
    let mut pod = new_pod(&client, "big", "node-1");
    let big: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    pod.metadata.annotations.insert("big".into(), big.clone());
    let replaced: Pod = client.replace(&paths::pod("default", "big"), &pod).unwrap();
    assert_eq!(replaced.metadata.annotations.get("big"), Some(&big));
    let got: Pod = client.get(&paths::pod("default", "big")).unwrap();
    assert_eq!(got.metadata.annotations.get("big"), Some(&big));
    for i in 0..200 {
        new_pod(&client, &format!("many-{i}"), "node-1");
    }
    let list: List<Pod> = client
        .list(&paths::pods("default"), &ListOptions::default())
        .unwrap();
    assert_eq!(list.items.len(), 201);
    let stored = fake.get("pods", "default", "big").unwrap();
    assert_eq!(
        stored["metadata"]["annotations"]["big"]
            .as_str()
            .map(str::len),
        Some(300_000)
    );
}
