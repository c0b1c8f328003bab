//! Pod volumes (`litelet::volumes`) against the fake API server over real HTTP and a
//! real directory tree: the kube-api-access projected volume (TokenRequest,
//! kube-root-ca.crt, namespace), configMap/secret volumes and their atomic updates,
//! the shared per-pod cache for the environment, hostPath checks, and bad input
//! (missing, forbidden, wrong type, escaping paths) that blocks only its own volume.
//!
//! These tests run unprivileged (`without_mounts`); the tmpfs test needs root and
//! skips loudly without it unless CI=true.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::wait_until;
use litelet::api::pod::Pod;
use litelet::runtime::env::{container_env, EnvContext};
use litelet::volumes::mount::parse_mountinfo;
use litelet::volumes::{VolumeError, VolumeManager};
use serde_json::{json, Value};

const NODE: &str = "node-1";
const NS: &str = "shop";
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIfake\n-----END CERTIFICATE-----\n";

/// The projected volume the API server adds to every pod that does not opt out.
fn kube_api_access(expiration: i64) -> Value {
    json!({"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": expiration, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]}})
}

/// Creates a pod bound to NODE with these volumes in the fake and returns it as stored.
fn create_pod(api: &FakeApi, name: &str, volumes: Value) -> Pod {
    let stored = api.create(
        "pods",
        NS,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
               "spec": {"nodeName": NODE, "serviceAccountName": "builder",
                        "containers": [{"name": "main", "image": "busybox"}],
                        "volumes": volumes}}),
    );
    serde_json::from_value(stored).unwrap()
}

fn config_map(api: &FakeApi, name: &str, data: Value) {
    api.create(
        "configmaps",
        NS,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": NS}, "data": data}),
    );
}

fn root_ca(api: &FakeApi) {
    config_map(api, "kube-root-ca.crt", json!({"ca.crt": CA}));
}

fn manager(api: &FakeApi, root: &Path) -> VolumeManager {
    VolumeManager::new(root, Some(api.client()), NODE).without_mounts()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every path under `dir` (files, dirs and links), relative.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn kube_api_access_volume_has_token_ca_and_namespace() {
    let api = FakeApi::start();
    root_ca(&api);
    let pod = create_pod(&api, "web", json!([kube_api_access(3607)]));
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());

    let ready = volumes.setup_pod(&pod).unwrap();
    let dir = &ready["kube-api-access-x7k2p"];
    assert_eq!(
        *dir,
        root.path().join(format!(
            "pods/{}/volumes/kubernetes.io~projected/kube-api-access-x7k2p",
            pod.uid()
        ))
    );
    let issued = api.issued_tokens();
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0].service_account, "builder");
    assert_eq!(issued[0].namespace, NS);
    assert_eq!(issued[0].pod_name, "web");
    assert_eq!(issued[0].expiration_seconds, 3607);
    assert!(
        issued[0].audiences.is_empty(),
        "no audience: the server's own"
    );
    assert_eq!(read(&dir.join("token")), issued[0].token);
    assert_eq!(read(&dir.join("ca.crt")), CA);
    assert_eq!(read(&dir.join("namespace")), NS);
    // Files are links into the current version, as upstream lays them out.
    assert_eq!(
        fs::read_link(dir.join("token")).unwrap(),
        Path::new("..data/token")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir.join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "defaultMode 420");

    // Set-up again: the token is cached and the configMap copy is fresh.
    let before = api.count(
        "get",
        &format!("/api/v1/namespaces/{NS}/configmaps/kube-root-ca.crt"),
    );
    let version = fs::read_link(dir.join("..data")).unwrap();
    volumes.setup_pod(&pod).unwrap();
    assert_eq!(api.issued_tokens().len(), 1);
    assert_eq!(
        api.count(
            "get",
            &format!("/api/v1/namespaces/{NS}/configmaps/kube-root-ca.crt")
        ),
        before
    );
    assert_eq!(
        fs::read_link(dir.join("..data")).unwrap(),
        version,
        "nothing rewritten"
    );
}

#[test]
fn token_is_refreshed_at_eighty_percent_of_its_lifetime() {
    let api = FakeApi::start();
    root_ca(&api);
    let mut access = kube_api_access(2);
    access["projected"]["sources"][0]["serviceAccountToken"]["audience"] = json!("vault");
    let pod = create_pod(&api, "web", json!([access]));
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());
    let dir = volumes.setup_pod(&pod).unwrap()["kube-api-access-x7k2p"].clone();
    let first = read(&dir.join("token"));
    assert_eq!(api.issued_tokens()[0].audiences, ["vault"]);

    // A 2 s token is due after at most 1.6 s; each re-run of set-up may refresh it.
    let refreshed = wait_until(Duration::from_secs(10), || {
        volumes.setup_pod(&pod).unwrap();
        read(&dir.join("token")) != first
    });
    assert!(refreshed, "token never refreshed");
    let issued = api.issued_tokens();
    assert!(issued.len() >= 2);
    assert_eq!(read(&dir.join("token")), issued.last().unwrap().token);
}

#[test]
fn token_for_a_pod_the_server_does_not_know_is_refused() {
    let api = FakeApi::start();
    root_ca(&api);
    let mut pod = create_pod(&api, "web", json!([kube_api_access(3607)]));
    pod.metadata.uid = Some("another-uid".into());
    let root = tempfile::tempdir().unwrap();
    let err = manager(&api, root.path()).setup_pod(&pod).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("request token for service account shop/builder") && msg.contains("conflict"),
        "{msg}"
    );
    assert_eq!(err.failed_volumes(), ["kube-api-access-x7k2p"]);
}

#[test]
fn config_map_update_swaps_the_whole_set_at_once() {
    let api = FakeApi::start();
    config_map(&api, "app", json!({"a": "1", "b": "1", "gone-later": "x"}));
    let pod = create_pod(
        &api,
        "web",
        json!([{"name": "cfg", "configMap": {"name": "app", "defaultMode": 0o440}}]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path()).with_cache_ttl(Duration::ZERO);
    let dir = volumes.setup_pod(&pod).unwrap()["cfg"].clone();
    assert_eq!(read(&dir.join("a")), "1");
    assert!(dir.join("gone-later").exists());
    let old_version = fs::read_link(dir.join("..data")).unwrap();

    api.modify("configmaps", NS, "app", |cm| {
        cm["data"] = json!({"a": "2", "b": "2", "new": "n"});
    });
    volumes.setup_pod(&pod).unwrap();
    assert_eq!(read(&dir.join("a")), "2");
    assert_eq!(read(&dir.join("b")), "2");
    assert_eq!(read(&dir.join("new")), "n");
    assert!(
        fs::symlink_metadata(dir.join("gone-later")).is_err(),
        "removed key disappears"
    );
    let new_version = fs::read_link(dir.join("..data")).unwrap();
    assert_ne!(new_version, old_version);
    assert!(!dir.join(&old_version).exists(), "old version removed");
    let mut expected = vec![
        PathBuf::from("..data"),
        new_version.clone(),
        new_version.join("a"),
        new_version.join("b"),
        new_version.join("new"),
        "a".into(),
        "b".into(),
        "new".into(),
    ];
    expected.sort();
    assert_eq!(tree(&dir), expected);
}

#[test]
fn secret_volume_and_environment_share_one_read() {
    let api = FakeApi::start();
    api.create(
        "secrets",
        NS,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "creds", "namespace": NS},
               "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="}}),
    );
    let mut pod = create_pod(
        &api,
        "web",
        json!([{"name": "creds", "secret": {"secretName": "creds",
               "items": [{"key": "password", "path": "db/pass", "mode": 0o400}]}}]),
    );
    pod.spec.containers[0].env = serde_json::from_value(json!([
        {"name": "DB_USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}}
    ]))
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());
    let dir = volumes.setup_pod(&pod).unwrap()["creds"].clone();
    assert_eq!(read(&dir.join("db/pass")), "hunter2");
    assert!(!dir.join("user").exists(), "only the listed item");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir.join("db/pass"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o400);

    let source = volumes.config_source(&pod);
    let env = container_env(
        &pod,
        &pod.spec.containers[0],
        &EnvContext::default(),
        &source,
    )
    .unwrap();
    assert_eq!(env, [("DB_USER".to_owned(), "admin".to_owned())]);
    let path = format!("/api/v1/namespaces/{NS}/secrets/creds");
    assert_eq!(
        api.count("get", &path),
        1,
        "volume and env use one cached read"
    );
    assert_eq!(volumes.cached_counts(), (1, 0));

    volumes.teardown_pod(pod.uid()).unwrap();
    assert_eq!(
        volumes.cached_counts(),
        (0, 0),
        "the pod's cache entries are dropped"
    );
}

#[test]
fn bad_sources_block_only_their_volume_and_pod() {
    let api = FakeApi::start();
    config_map(&api, "present", json!({"k": "v"}));
    api.create(
        "secrets",
        NS,
        json!({"metadata": {"name": "locked", "namespace": NS}, "data": {}}),
    );
    api.inject(Fail::status(403).always().path("/secrets/locked"));
    let root = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("a-file");
    fs::write(&file, "x").unwrap();
    let pod = create_pod(
        &api,
        "broken",
        json!([
            {"name": "missing", "configMap": {"name": "absent"}},
            {"name": "optional", "configMap": {"name": "absent", "optional": true}},
            {"name": "nokey", "configMap": {"name": "present", "items": [{"key": "nope", "path": "p"}]}},
            {"name": "locked", "secret": {"secretName": "locked"}},
            {"name": "wrongtype", "hostPath": {"path": file, "type": "Directory"}},
            {"name": "escape", "configMap": {"name": "present", "items": [{"key": "k", "path": "../../../../x"}]}},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "bundle", "projected": {"sources": [{"clusterTrustBundle": {"name": "b", "path": "b"}}]}},
            {"name": "scratch", "emptyDir": {}}
        ]),
    );
    let volumes = manager(&api, root.path());
    let err = volumes.setup_pod(&pod).unwrap_err();
    let messages = err.messages();
    let failed = err.failed_volumes();
    assert_eq!(
        failed,
        [
            "missing",
            "nokey",
            "locked",
            "wrongtype",
            "escape",
            "pvc",
            "bundle"
        ],
        "{messages:#?}"
    );
    let expect = [
        "volume \"missing\": configmap shop/absent not found",
        "volume \"nokey\": configmap shop/present has no key \"nope\"",
        "volume \"locked\": secret shop/locked is forbidden for this node",
        "is not a Directory (File)",
        "volume \"escape\": invalid file path \"../../../../x\": must not contain '..'",
        // A claim that does not exist: the pod waits for it (it is supported now).
        "volume \"pvc\": get persistentVolumeClaim shop/data",
        "volume \"bundle\": volume type projected source clusterTrustBundle is not supported",
    ];
    for (msg, want) in messages.iter().zip(expect) {
        assert!(msg.contains(want), "{msg:?} should contain {want:?}");
    }
    // The good volumes were set up; nothing was written outside the pod's directory.
    let pod_dir = root.path().join("pods").join(pod.uid());
    assert!(pod_dir
        .join("volumes/kubernetes.io~empty-dir/scratch")
        .is_dir());
    assert!(pod_dir
        .join("volumes/kubernetes.io~configmap/optional/..data")
        .exists());
    assert_eq!(tree(root.path())[0], PathBuf::from("pods"));
    assert!(tree(root.path())
        .iter()
        .all(|p| p.starts_with(Path::new("pods").join(pod.uid())) || p == Path::new("pods")));
    assert_eq!(tree(host.path()), [PathBuf::from("a-file")]);

    // Another pod is unaffected.
    let other = create_pod(
        &api,
        "fine",
        json!([{"name": "c", "configMap": {"name": "present"}}]),
    );
    let ready = volumes.setup_pod(&other).unwrap();
    assert_eq!(read(&ready["c"].join("k")), "v");

    // Once the configMap exists, the blocked volume comes up on the next set-up.
    config_map(&api, "absent", json!({"late": "yes"}));
    let err = volumes.setup_pod(&pod).unwrap_err();
    assert!(!err.failed_volumes().contains(&"missing"));
}

#[test]
fn host_path_types_are_checked_and_created() {
    let api = FakeApi::start();
    let host = tempfile::tempdir().unwrap();
    let made = host.path().join("made/here");
    let sock = host.path().join("api.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let pod = create_pod(
        &api,
        "host",
        json!([
            {"name": "made", "hostPath": {"path": made, "type": "DirectoryOrCreate"}},
            {"name": "file", "hostPath": {"path": host.path().join("made/f"), "type": "FileOrCreate"}},
            {"name": "sock", "hostPath": {"path": sock, "type": "Socket"}},
            {"name": "any", "hostPath": {"path": "/nonexistent/anything"}}
        ]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());
    let ready = volumes.setup_pod(&pod).unwrap();
    assert!(made.is_dir());
    assert!(host.path().join("made/f").is_file());
    assert_eq!(ready["sock"], sock);
    assert_eq!(ready["any"], Path::new("/nonexistent/anything"));
    // Tear-down leaves host paths alone.
    volumes.teardown_pod(pod.uid()).unwrap();
    assert!(made.is_dir() && sock.exists());
}

#[test]
fn transient_api_failures_serve_the_last_copy() {
    let api = FakeApi::start();
    config_map(&api, "app", json!({"a": "1"}));
    let pod = create_pod(
        &api,
        "web",
        json!([{"name": "cfg", "configMap": {"name": "app"}}]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path()).with_cache_ttl(Duration::ZERO);
    let dir = volumes.setup_pod(&pod).unwrap()["cfg"].clone();
    api.inject(Fail::status(503).always().path("/configmaps/app"));
    volumes.setup_pod(&pod).unwrap();
    assert_eq!(read(&dir.join("a")), "1");
    // A 403 is not transient: the volume reports it.
    api.clear_faults();
    api.inject(Fail::status(403).always().path("/configmaps/app"));
    let err = volumes.setup_pod(&pod).unwrap_err().to_string();
    assert!(err.contains("forbidden"), "{err}");
    assert_eq!(read(&dir.join("a")), "1", "content stays as it was");
}

#[test]
fn downward_api_volume_follows_label_changes() {
    let api = FakeApi::start();
    let mut pod = create_pod(
        &api,
        "web",
        json!([{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}}
        ]}}]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());
    let allocatable = BTreeMap::from([(
        "memory".to_owned(),
        litelet::api::quantity::Quantity::parse("2Gi").unwrap(),
    )]);
    volumes.set_node_allocatable(allocatable);
    let dir = volumes.setup_pod(&pod).unwrap()["info"].clone();
    assert_eq!(read(&dir.join("labels")), "app=\"web\"");
    assert_eq!(read(&dir.join("name")), "web");
    assert_eq!(read(&dir.join("mem")), "2048", "no limit: node allocatable");
    pod.metadata.labels.insert("tier".into(), "front".into());
    volumes.setup_pod(&pod).unwrap();
    assert_eq!(read(&dir.join("labels")), "app=\"web\"\ntier=\"front\"");
}

#[test]
fn teardown_is_complete_and_tolerates_partial_state() {
    let api = FakeApi::start();
    root_ca(&api);
    let pod = create_pod(
        &api,
        "web",
        json!([kube_api_access(3607), {"name": "scratch", "emptyDir": {}}]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = manager(&api, root.path());
    assert!(!volumes.pod_volumes_exist(pod.uid()));
    let ready = volumes.setup_pod(&pod).unwrap();
    fs::write(ready["scratch"].join("data"), "x").unwrap();
    // A container may leave a link to the host in its scratch space.
    std::os::unix::fs::symlink("/etc", ready["scratch"].join("etc")).unwrap();
    assert!(volumes.pod_volumes_exist(pod.uid()));
    assert_eq!(volumes.list_pod_dirs().unwrap(), [pod.uid().to_owned()]);

    // Partial state: one volume already gone, a stray file in a plugin dir.
    fs::remove_dir_all(&ready["kube-api-access-x7k2p"]).unwrap();
    let plugin_dir = ready["scratch"].parent().unwrap().to_path_buf();
    fs::write(plugin_dir.join("stray"), "").unwrap();
    volumes.teardown_pod(pod.uid()).unwrap();
    assert!(!volumes.pod_volumes_exist(pod.uid()));
    assert!(
        Path::new("/etc/passwd").exists(),
        "links are removed, not followed"
    );
    volumes.teardown_pod(pod.uid()).unwrap();
    volumes.remove_pod_dir(pod.uid()).unwrap();
    assert!(volumes.list_pod_dirs().unwrap().is_empty());
    assert!(volumes.teardown_pod("../escape").is_err());
}

#[test]
fn standalone_mode_refuses_api_volumes_clearly() {
    let api = FakeApi::start();
    let pod = create_pod(
        &api,
        "static",
        json!([kube_api_access(3607), {"name": "scratch", "emptyDir": {}}]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(root.path(), None, NODE).without_mounts();
    let err = volumes.setup_pod(&pod).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot be read: litelet runs without an API server"),
        "{err}"
    );
    assert!(matches!(err, VolumeError::Pod { .. }));
    assert_eq!(err.failed_volumes(), ["kube-api-access-x7k2p"]);
}

/// True when tests that mount must run (CI) rather than skip.
fn mounts_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

#[test]
fn memory_backed_volumes_are_tmpfs_and_unmounted_on_teardown() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            !mounts_required(),
            "tmpfs test cannot run in CI: needs root"
        );
        eprintln!("\n*** SKIPPED memory_backed_volumes_are_tmpfs: needs root (set CI=true to make this a failure) ***\n");
        return;
    }
    let api = FakeApi::start();
    root_ca(&api);
    api.create(
        "secrets",
        NS,
        json!({"metadata": {"name": "creds", "namespace": NS}, "data": {"k": "dg=="}}),
    );
    let pod = create_pod(
        &api,
        "web",
        json!([
            kube_api_access(3607),
            {"name": "creds", "secret": {"secretName": "creds"}},
            {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
            {"name": "disk", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": "kube-root-ca.crt"}}
        ]),
    );
    let root = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(root.path(), Some(api.client()), NODE);
    let ready = volumes.setup_pod(&pod).unwrap();
    volumes.setup_pod(&pod).unwrap(); // idempotent: no second mount
    let mounts = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
    let count = |dir: &Path| {
        let real = fs::canonicalize(dir).unwrap();
        mounts
            .iter()
            .filter(|m| m.mount_point == real && m.fs_type == "tmpfs")
            .count()
    };
    assert_eq!(count(&ready["kube-api-access-x7k2p"]), 1);
    assert_eq!(count(&ready["creds"]), 1);
    assert_eq!(count(&ready["ram"]), 1);
    assert_eq!(count(&ready["disk"]), 0);
    assert_eq!(
        count(&ready["cfg"]),
        0,
        "configMaps stay on disk, as upstream"
    );
    let statfs = nix::sys::statfs::statfs(&ready["ram"]).unwrap();
    let size = statfs.blocks() as u64 * statfs.block_size() as u64;
    assert_eq!(size, 8 << 20, "sizeLimit caps the tmpfs");
    assert_eq!(read(&ready["creds"].join("k")), "v");

    let real_root = fs::canonicalize(root.path()).unwrap();
    assert!(
        mounts.iter().all(|m| m.mount_point != real_root),
        "no propagation asked: the root is left alone"
    );

    volumes.teardown_pod(pod.uid()).unwrap();
    let left = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
    assert!(
        left.iter().all(|m| !m.mount_point.starts_with(&real_root)),
        "all tmpfs unmounted"
    );
    assert!(!volumes.pod_volumes_exist(pod.uid()));

    // A mount with HostToContainer propagation gets a shared mount of its own; the
    // root stays as it was.
    let mut shared = create_pod(&api, "prop", json!([{"name": "d", "emptyDir": {}}]));
    shared.spec.containers[0].volume_mounts = serde_json::from_value(
        json!([{"name": "d", "mountPath": "/d", "mountPropagation": "HostToContainer"}]),
    )
    .unwrap();
    let dir = volumes.setup_pod(&shared).unwrap()["d"].clone();
    volumes.setup_pod(&shared).unwrap();
    let now = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
    let real_dir = fs::canonicalize(&dir).unwrap();
    let at_dir: Vec<_> = now.iter().filter(|m| m.mount_point == real_dir).collect();
    assert_eq!(at_dir.len(), 1, "bound once: {at_dir:?}");
    assert!(at_dir[0].optional.iter().any(|o| o.starts_with("shared:")));
    assert!(now.iter().all(|m| m.mount_point != real_root));
    volumes.teardown_pod(shared.uid()).unwrap();
    let left = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
    assert!(left.iter().all(|m| !m.mount_point.starts_with(&real_root)));
}

// ---- edge autonomy: the node's copy of what pods need to start ----

/// A pod as the API server admits it with everything a pod reads from the API: the
/// automounted token volume, a secret volume, `env` from a secret and `envFrom` a
/// configMap.
fn pod_with_api_data(api: &FakeApi, name: &str) -> Pod {
    let mut pod = create_pod(
        api,
        name,
        json!([kube_api_access(3607), {"name": "creds", "secret": {"secretName": "creds"}}]),
    );
    pod.spec.containers[0].env = serde_json::from_value(json!([
        {"name": "DB_USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}}
    ]))
    .unwrap();
    pod.spec.containers[0].env_from =
        serde_json::from_value(json!([{"configMapRef": {"name": "app"}}])).unwrap();
    pod
}

fn api_data(api: &FakeApi) {
    root_ca(api);
    config_map(api, "app", json!({"MODE": "edge"}));
    api.create(
        "secrets",
        NS,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "creds", "namespace": NS},
               "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="}}),
    );
}

/// The node's pod data store under `root`, as litelet opens it at start.
fn store(root: &Path) -> std::sync::Arc<litelet::poddata::Store> {
    std::sync::Arc::new(litelet::poddata::Store::open(root, NODE, None).unwrap())
}

fn kept_manager(client: &litelet::api::ApiClient, root: &Path) -> VolumeManager {
    VolumeManager::new(root, Some(client.clone()), NODE)
        .without_mounts()
        .with_pod_data(store(root))
}

fn env_of(volumes: &VolumeManager, pod: &Pod) -> Vec<(String, String)> {
    let source = volumes.config_source(pod);
    container_env(
        pod,
        &pod.spec.containers[0],
        &EnvContext::default(),
        &source,
    )
    .unwrap()
}

/// What a reboot does to a pod's volumes: the memory-backed ones (secrets, tokens)
/// are gone.
fn reboot(root: &Path, pod: &Pod) {
    for plugin in ["kubernetes.io~secret", "kubernetes.io~projected"] {
        let dir = root.join(format!("pods/{}/volumes/{plugin}", pod.uid()));
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// Makes a request through `client` the API server answers, as the lease thread's
/// next renewal would: the clients learn it is reachable again.
fn answered(client: &litelet::api::ApiClient) {
    let r: Result<Value, _> = client.get(&format!("/api/v1/namespaces/{NS}/configmaps/app"));
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn after_a_reboot_while_cut_off_volumes_and_env_come_from_the_nodes_copy_until_it_answers() {
    let api = FakeApi::start();
    api_data(&api);
    let pod = pod_with_api_data(&api, "web");
    let root = tempfile::tempdir().unwrap();
    let client = api.client();
    let before = kept_manager(&client, root.path());
    let ready = before.setup_pod(&pod).unwrap();
    let (token_dir, creds_dir) = (
        ready["kube-api-access-x7k2p"].clone(),
        ready["creds"].clone(),
    );
    let token = read(&token_dir.join("token"));
    let env = env_of(&before, &pod);
    assert_eq!(
        env,
        [
            ("MODE".to_owned(), "edge".to_owned()),
            ("DB_USER".to_owned(), "admin".to_owned())
        ]
    );
    // A pull secret is read too, but images stay on the node: it is not kept.
    use litelet::kubelet::deps::PodVolumes;
    assert!(before.pull_secret(&pod, "creds").unwrap().is_some());
    drop(before);

    // The power comes back without the uplink: the tmpfs volumes are gone, litelet
    // starts again with nothing in memory.
    reboot(root.path(), &pod);
    api.inject(Fail::status(503).always());
    let client = api.client();
    let (tx, events) = crossbeam_channel::unbounded();
    let after =
        kept_manager(&client, root.path()).with_recorder(litelet::events::Recorder::new(tx));
    let ready = after.setup_pod(&pod).unwrap();
    assert_eq!(read(&ready["kube-api-access-x7k2p"].join("token")), token);
    assert_eq!(read(&ready["kube-api-access-x7k2p"].join("ca.crt")), CA);
    assert_eq!(read(&ready["creds"].join("password")), "hunter2");
    assert_eq!(env_of(&after, &pod), env);
    let told: Vec<String> = events
        .try_iter()
        .filter(|e| e.reason == "FromNodeCopy")
        .map(|e| e.message)
        .collect();
    for what in [
        "secret shop/creds",
        "configmap shop/app",
        "configmap shop/kube-root-ca.crt",
        "token for service account shop/builder",
    ] {
        assert!(
            told.iter().any(|m| m.starts_with(what)
                && m.ends_with("from the node's copy: the API server is unreachable")),
            "{what}: {told:?}"
        );
    }
    assert_eq!(told.len(), 4, "once each: {told:?}");
    let gets = api.requests().len();
    after.setup_pod(&pod).unwrap();
    assert_eq!(
        api.requests().len(),
        gets,
        "while it stays unreachable, the copies are served without trying"
    );

    // The API server answers again: a changed secret reaches the volume and the env,
    // and a fresh token replaces the kept one at once.
    api.clear_faults();
    api.modify("secrets", NS, "creds", |s| {
        s["data"]["password"] = json!("bmV3LXBhc3M=");
    });
    answered(&client);
    let issued = api.issued_tokens().len();
    after.setup_pod(&pod).unwrap();
    assert_eq!(api.issued_tokens().len(), issued + 1, "a fresh token");
    let fresh = read(&token_dir.join("token"));
    assert_ne!(fresh, token);
    assert_eq!(fresh, api.issued_tokens().last().unwrap().token);
    assert_eq!(read(&creds_dir.join("password")), "new-pass");

    // The pod goes: so does everything kept for it.
    after.teardown_pod(pod.uid()).unwrap();
    let kept = litelet::poddata::store_dir(root.path());
    assert_eq!(fs::read_dir(&kept).unwrap().count(), 0, "{:?}", tree(&kept));
}

#[test]
fn an_object_deleted_meanwhile_loses_its_copy_when_the_api_server_says_so() {
    let api = FakeApi::start();
    api_data(&api);
    let pod = pod_with_api_data(&api, "web");
    let root = tempfile::tempdir().unwrap();
    let client = api.client();
    let volumes = kept_manager(&client, root.path()).with_cache_ttl(Duration::ZERO);
    volumes.setup_pod(&pod).unwrap();
    let kept = litelet::poddata::store_dir(root.path()).join(format!("secret_{NS}_creds"));
    assert!(kept.exists());
    api.remove("secrets", NS, "creds");
    let err = volumes.setup_pod(&pod).unwrap_err().to_string();
    assert!(err.contains("secret shop/creds not found"), "{err}");
    assert!(!kept.exists(), "a later outage cannot bring it back");
    assert_eq!(
        read(&root.path().join(format!(
            "pods/{}/volumes/kubernetes.io~secret/creds/password",
            pod.uid()
        ))),
        "hunter2",
        "the volume keeps its content, as upstream"
    );
}

#[test]
fn without_the_nodes_copy_a_pod_cut_off_after_a_reboot_waits_and_says_why() {
    let api = FakeApi::start();
    api_data(&api);
    let pod = pod_with_api_data(&api, "web");
    let root = tempfile::tempdir().unwrap();
    // --checkpoint-secrets=false: no store.
    let client = api.client();
    let plain = || VolumeManager::new(root.path(), Some(client.clone()), NODE).without_mounts();
    plain().setup_pod(&pod).unwrap();
    assert!(!root.path().join("checkpoints").exists(), "nothing kept");
    reboot(root.path(), &pod);
    api.inject(Fail::status(503).always());
    let err = plain().setup_pod(&pod).unwrap_err();
    assert_eq!(err.failed_volumes(), ["kube-api-access-x7k2p", "creds"]);
    for message in err.messages() {
        assert!(
            message.ends_with(
                "the API server is unreachable and this node keeps no copy of pod \
                 secrets, configMaps or tokens (--checkpoint-secrets=false): waiting for it"
            ),
            "{message}"
        );
    }
}

#[test]
fn a_kept_token_past_the_expiry_the_api_server_enforces_is_not_mounted_while_cut_off() {
    let api = FakeApi::start();
    root_ca(&api);
    // A 1 s token for another audience: the API server does not extend it.
    let mut access = kube_api_access(1);
    access["projected"]["sources"][0]["serviceAccountToken"]["audience"] = json!("vault");
    let pod = create_pod(&api, "web", json!([access]));
    let root = tempfile::tempdir().unwrap();
    let client = api.client();
    kept_manager(&client, root.path()).setup_pod(&pod).unwrap();
    let expired = std::time::SystemTime::now() + Duration::from_millis(1100);
    assert!(wait_until(Duration::from_secs(10), || {
        std::time::SystemTime::now() > expired
    }));

    // A reboot: the token's tmpfs is gone.
    let projected = root.path().join(format!(
        "pods/{}/volumes/kubernetes.io~projected",
        pod.uid()
    ));
    fs::remove_dir_all(&projected).unwrap();
    api.inject(Fail::status(503).always());
    let client = api.client();
    let err = kept_manager(&client, root.path())
        .setup_pod(&pod)
        .unwrap_err();
    assert_eq!(err.failed_volumes(), ["kube-api-access-x7k2p"]);
    let message = err.messages().join("\n");
    assert!(
        message
            .contains("the node's copy of the token for service account shop/builder expired at")
            && message.ends_with(
                "the API server would refuse it; the API server is unreachable: waiting for it"
            ),
        "{message}"
    );
    let token = projected.join("kube-api-access-x7k2p/token");
    assert!(!token.exists(), "the expired token is not mounted");

    // The API server answers: a fresh token.
    api.clear_faults();
    let r: Result<Value, _> = client.get(&format!("/api/v1/namespaces/{NS}/pods/web"));
    assert!(r.is_ok(), "{r:?}");
    kept_manager(&client, root.path()).setup_pod(&pod).unwrap();
    assert_eq!(read(&token), api.issued_tokens().last().unwrap().token);
}
