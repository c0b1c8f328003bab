//! Pod volumes with a real containerd: a host-network pod with the kube-api-access
//! projected volume and a configMap volume, set up by `VolumeManager` against the
//! fake API server and mounted through the CRI config litelet builds
//! (`runtime::container::container_config`). The container reads its token, CA and
//! namespace at the standard path; configMap updates reach the running container as
//! whole sets (a reader in the container never sees two versions mixed).
//!
//! Drives the CRI client directly (no sync loop). Needs root and containerd; skips
//! loudly otherwise unless CI=true.

use std::time::Duration;

use crate::support::containerd::{remove_cgroup_tree, remove_sandbox, Containerd, BUSYBOX};
use crate::support::fake_api::FakeApi;
use crate::support::wait_until;
use litelet::api::pod::Pod;
use litelet::cri::{self, pb, ConnectOptions, Endpoint, RuntimeClient};
use litelet::runtime::container::{container_config, ContainerContext};
use litelet::runtime::env::EnvContext;
use litelet::runtime::sandbox::{pod_log_dir, sandbox_config, SandboxContext};
use litelet::volumes::mount::parse_mountinfo;
use litelet::volumes::VolumeManager;
use serde_json::json;

const NODE: &str = "node-1";
const NS: &str = "shop";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIlitelet-test-ca\n-----END CERTIFICATE-----";

/// Prints the mounted credentials once, then checks the configMap set forever:
/// both files read from one resolved version must agree.
const SCRIPT: &str = "\
cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; \
cat /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; echo; \
echo ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); \
while true; do \
  ( cd /etc/app/..data 2>/dev/null && a=$(cat first 2>/dev/null) && b=$(cat second 2>/dev/null) \
    && [ \"$a\" != \"$b\" ] && echo MIXED $a $b ); \
  echo seen-$(cat /etc/app/first 2>/dev/null) > /tmp/last; \
done";

fn exec(runtime: &RuntimeClient, id: &str, script: &str) -> (i32, String) {
    let out = runtime
        .exec_sync(&pb::ExecSyncRequest {
            container_id: id.into(),
            cmd: vec!["sh".into(), "-c".into(), script.into()],
            timeout: 10,
            ..Default::default()
        })
        .expect("exec sync");
    (
        out.exit_code,
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn pod(api: &FakeApi) -> Pod {
    let stored = api.create(
        "pods",
        NS,
        json!({"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "reader", "namespace": NS},
          "spec": {"nodeName": NODE, "hostNetwork": true, "dnsPolicy": "Default",
            "serviceAccountName": "default",
            "containers": [{"name": "main", "image": BUSYBOX,
              "command": ["sh", "-c", SCRIPT],
              "volumeMounts": [
                {"name": "kube-api-access-q9z4t", "mountPath": SA_DIR, "readOnly": true},
                {"name": "cfg", "mountPath": "/etc/app"},
                {"name": "shared", "mountPath": "/shared", "mountPropagation": "HostToContainer"}]}],
            "volumes": [
              {"name": "kube-api-access-q9z4t", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                  "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
              {"name": "cfg", "configMap": {"name": "app-config"}},
              {"name": "shared", "emptyDir": {}}]}}),
    );
    serde_json::from_value(stored).unwrap()
}

#[test]
fn container_reads_projected_token_and_sees_atomic_config_updates() {
    let Some(containerd) = Containerd::start("volumes") else {
        return;
    };
    let api = FakeApi::start();
    api.create(
        "configmaps",
        NS,
        json!({"metadata": {"name": "kube-root-ca.crt", "namespace": NS}, "data": {"ca.crt": CA}}),
    );
    api.create(
        "configmaps",
        NS,
        json!({"metadata": {"name": "app-config", "namespace": NS},
               "data": {"first": "v0", "second": "v0"}}),
    );
    let pod = pod(&api);
    let root = containerd.dir().join("kubelet-root");
    let volumes =
        VolumeManager::new(&root, Some(api.client()), NODE).with_cache_ttl(Duration::ZERO);
    volumes.prepare_root().expect("root dir");
    let ready = volumes.setup_pod(&pod).expect("volumes set up");

    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let (runtime, _images) = cri::connect(&endpoint, &ConnectOptions::default());
    let logs = containerd.dir().join("pod-logs");
    let cgroup_parent = format!("/litelet-vol-{}", std::process::id());
    let sandbox_ctx = SandboxContext {
        pod_logs_dir: logs.clone(),
        cgroup_parent: cgroup_parent.clone(),
        ..Default::default()
    };
    std::fs::create_dir_all(pod_log_dir(&logs, &pod)).unwrap();
    let sandbox = sandbox_config(&pod, 0, &sandbox_ctx).expect("sandbox config");
    let sandbox_id = containerd.run_sandbox(&runtime, &sandbox);

    let env = EnvContext {
        node_name: NODE.into(),
        ..Default::default()
    };
    let source = volumes.config_source(&pod);
    let config = container_config(&ContainerContext {
        pod: &pod,
        container: &pod.spec.containers[0],
        restart_count: 0,
        image_ref: BUSYBOX,
        env: &env,
        config_source: &source,
        volumes: &ready,
        sub_paths: &std::collections::BTreeMap::new(),
        termination_log: None,
        hosts_file: None,
        memory_capacity: 1 << 30,
        enforce_cpu_limits: false,
        target_container_id: None,
        seccomp_root: std::path::Path::new("/"),
        seccomp_default: false,
        apparmor_enabled: false,
        swap: &litelet::runtime::swap::SwapSettings::UNTOUCHED,
        userns: None,
    })
    .expect("container config");
    let read_only: Vec<bool> = config.mounts.iter().map(|m| m.readonly).collect();
    assert_eq!(
        read_only,
        [true, true, false],
        "kubelet-written volumes are read-only: {:?}",
        config.mounts
    );
    let id = containerd.run_container(&runtime, &sandbox_id, &sandbox, config);

    // The CRI log shows the token, the CA and the namespace.
    let token = api.issued_tokens()[0].token.clone();
    let log_file = pod_log_dir(&logs, &pod).join("main/0.log");
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || log()
            .contains(&format!("ns={NS}"))),
        "container output never arrived: {}",
        log()
    );
    let text = log();
    assert!(text.contains(&format!(" stdout F {token}")), "{text}");
    assert!(text.contains(" stdout F MIIlitelet-test-ca"), "{text}");
    let (code, out) = exec(&runtime, &id, &format!("touch {SA_DIR}/x"));
    assert_ne!(code, 0, "the token volume must be read-only: {out}");

    // HostToContainer: a mount made on the host under the volume later shows up inside.
    let late = ready["shared"].join("late");
    std::fs::create_dir(&late).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &late,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("host mount under the volume");
    std::fs::write(late.join("hello"), "propagated").unwrap();
    let (code, out) = exec(&runtime, &id, "cat /shared/late/hello");
    assert_eq!((code, out.as_str()), (0, "propagated"));

    // Rapid configMap updates: each lands whole while the container keeps reading.
    for round in 1..=10 {
        let value = format!("v{round}");
        api.modify("configmaps", NS, "app-config", |cm| {
            cm["data"] = json!({"first": value, "second": value});
        });
        volumes.setup_pod(&pod).expect("refresh");
    }
    assert!(
        wait_until(Duration::from_secs(20), || {
            exec(&runtime, &id, "cat /tmp/last").1.trim() == "seen-v10"
        }),
        "the running container never saw the last update"
    );
    let (code, out) = exec(&runtime, &id, "cat /etc/app/first /etc/app/second");
    assert_eq!((code, out.as_str()), (0, "v10v10"));
    assert!(
        !log().contains("MIXED"),
        "a reader saw two versions at once:\n{}",
        log()
    );

    remove_sandbox(&runtime, &sandbox_id);
    volumes.teardown_pod(pod.uid()).expect("teardown");
    assert!(!volumes.pod_volumes_exist(pod.uid()));
    let real_root = std::fs::canonicalize(&root).unwrap();
    let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap());
    let left: Vec<_> = mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(&real_root))
        .collect();
    assert!(left.is_empty(), "mounts left: {left:?}");
    remove_cgroup_tree(&cgroup_parent);
}
