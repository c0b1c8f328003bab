//! Private registries end to end (issue 19): a real distribution registry with TLS
//! and htpasswd auth (`support::registry`), litelet as a node of the real
//! kube-apiserver (pull secrets read through the Node authorizer), the real
//! ServiceAccount admission copying a service account's pull secrets into pods, and
//! containerd pulling with the credentials litelet hands it as CRI `AuthConfig`, and
//! the node-wide Docker config under the root dir. The pull records that keep a
//! private image from pods without its credentials are attacked here too: litelet
//! killed between a pull and its record, a damaged records file, pulls finishing
//! together. Skips loudly without root, the assets or the registry unless CI=true.

use crate::support;

use crate::support::containerd::BUSYBOX;
use crate::support::control_plane::base64;
use crate::support::real_node::{busybox_pod, container_status, RealNode};
use crate::support::registry::Registry;
use crate::support::tcp_proxy::TcpProxy;
use serde_json::{json, Value};

const NS: &str = "private-registry";

fn pod(name: &str, node: &str, image: &str, policy: &str, secrets: &[&str]) -> Value {
    pod_in(NS, name, node, image, policy, secrets)
}

fn pod_in(ns: &str, name: &str, node: &str, image: &str, policy: &str, secrets: &[&str]) -> Value {
    let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
    let mut pod = busybox_pod(ns, name, node, 1, "trap 'exit 0' TERM; sleep 3600 & wait");
    // The registry's copy of busybox, pulled as `policy` says.
    pod["spec"]["containers"][0]["image"] = json!(image);
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!(policy);
    if !refs.is_empty() {
        pod["spec"]["imagePullSecrets"] = Value::Array(refs);
    }
    pod
}

fn docker_config_secret(name: &str, host: &str, user: &str, password: &str) -> Value {
    docker_config_secret_in(NS, name, host, user, password)
}

fn docker_config_secret_in(ns: &str, name: &str, host: &str, user: &str, password: &str) -> Value {
    let auth = base64(format!("{user}:{password}").as_bytes());
    let config = json!({"auths": {host: {"auth": auth}}}).to_string();
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64(config.as_bytes())},
    })
}

fn waiting(pod: &Value) -> (&str, &str) {
    let state = &container_status(pod, "main").map_or(&Value::Null, |c| c)["state"]["waiting"];
    (
        state["reason"].as_str().unwrap_or(""),
        state["message"].as_str().unwrap_or(""),
    )
}

fn running(pod: &Value) -> bool {
    container_status(pod, "main").is_some_and(|c| c["state"]["running"].is_object())
}

/// Reasons and messages of the node's events about pod `name`.
fn events(node: &RealNode, name: &str) -> Vec<(String, String)> {
    let out = node.cp.kubectl(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ]);
    let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|e| {
                    let text = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                    (text("reason"), text("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pods_pull_private_images_with_their_pull_secrets_or_service_account_and_fail_without() {
    let test =
        "pods_pull_private_images_with_their_pull_secrets_or_service_account_and_fail_without";
    let Some(registry) = Registry::start(test, "puller", "s3cret-pw") else {
        return;
    };
    let hosts = registry.hosts_dir();
    let Some(node) = RealNode::start_with_registries(test, "rn-registry", &[], Some(&hosts)) else {
        return;
    };
    node.wait_ready();
    let socket = node.containerd.dir().join("containerd.sock");
    let image = registry.push(&socket, BUSYBOX, "litelet/busybox:1.0");
    let cp = node.cp;
    cp.namespace(NS);
    let secrets = format!("/api/v1/namespaces/{NS}/secrets");
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    cp.create(
        &secrets,
        &docker_config_secret("regcred", &registry.host, "puller", "s3cret-pw"),
    );
    cp.create(
        &secrets,
        &docker_config_secret("wrongcred", &registry.host, "puller", "nope"),
    );
    // Valid JSON (the API server checks that much) with an auth that is not base64.
    let broken = json!({"auths": {registry.host.clone(): {"auth": "!!not-base64"}}}).to_string();
    cp.create(
        &secrets,
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "broken", "namespace": NS},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64(broken.as_bytes())},
        }),
    );

    // The right secret, after a missing and a malformed one: those are events, and
    // the next credential is tried.
    cp.create(
        &pods,
        &pod(
            "with-secret",
            &node.name,
            &image,
            "IfNotPresent",
            &["absent", "broken", "regcred"],
        ),
    );
    node.wait_pod(
        NS,
        "with-secret",
        "running from the private registry",
        running,
    );
    let seen = events(&node, "with-secret");
    let about = |needle: &str| {
        seen.iter()
            .any(|(r, m)| r == "FailedToRetrieveImagePullSecret" && m.contains(needle))
    };
    assert!(
        about("(absent)"),
        "no event for the missing secret: {seen:?}"
    );
    assert!(
        about("secret private-registry/broken"),
        "no event for the malformed secret: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, m)| !m.contains("s3cret-pw")),
        "an event shows the password: {seen:?}"
    );

    // No credentials: the registry refuses the anonymous pull.
    cp.create(&pods, &pod("no-secret", &node.name, &image, "Always", &[]));
    let p = node.wait_pod(NS, "no-secret", "ErrImagePull naming authentication", |p| {
        let (reason, message) = waiting(p);
        reason == "ErrImagePull" && message.contains("authentication required")
    });
    assert!(waiting(&p).1.contains("401"), "{:?}", waiting(&p));
    eprintln!("no-secret: {}", waiting(&p).1);
    if let Some((_, pulled)) = seen.iter().find(|(r, _)| r == "Pulled") {
        eprintln!("with-secret: {pulled}");
    }

    // A wrong password: refused likewise.
    cp.create(
        &pods,
        &pod("wrong-pass", &node.name, &image, "Always", &["wrongcred"]),
    );
    node.wait_pod(
        NS,
        "wrong-pass",
        "ErrImagePull naming authentication",
        |p| {
            let (reason, message) = waiting(p);
            reason == "ErrImagePull" && message.contains("authentication failed")
        },
    );

    // Two matching credentials: the wrong one fails, the next one is tried.
    cp.create(
        &pods,
        &pod(
            "second-try",
            &node.name,
            &image,
            "Always",
            &["wrongcred", "regcred"],
        ),
    );
    node.wait_pod(
        NS,
        "second-try",
        "running with the second credential",
        running,
    );

    // A service account's pull secret: the ServiceAccount admission copies it into
    // the pod, and the pull uses it.
    cp.create(
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        &json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "puller", "namespace": NS},
            "imagePullSecrets": [{"name": "regcred"}],
        }),
    );
    let mut via_sa = pod("via-sa", &node.name, &image, "Always", &[]);
    via_sa["spec"]["serviceAccountName"] = json!("puller");
    let created = cp.create(&pods, &via_sa);
    assert_eq!(
        created["spec"]["imagePullSecrets"],
        json!([{"name": "regcred"}]),
        "admission did not copy the service account's pull secret"
    );
    node.wait_pod(
        NS,
        "via-sa",
        "running with the service account's secret",
        running,
    );

    // The image is on the node now, pulled with a secret: a pod without one may not
    // use it (imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages).
    cp.create(
        &pods,
        &pod("reuse", &node.name, &image, "IfNotPresent", &[]),
    );
    node.wait_pod(
        NS,
        "reuse",
        "ErrImagePull instead of the secret-pulled image",
        |p| {
            let (reason, message) = waiting(p);
            reason == "ErrImagePull" && message.contains("authentication required")
        },
    );
    // The image the node had before (never pulled by litelet) stays usable by all.
    cp.create(
        &pods,
        &pod("preloaded", &node.name, BUSYBOX, "IfNotPresent", &[]),
    );
    node.wait_pod(NS, "preloaded", "running from the preloaded image", running);
    // The node-wide Docker config under the root dir serves pods without secrets
    // (read at each pull: no restart needed).
    let auth = base64(b"puller:s3cret-pw");
    std::fs::write(
        node.root().join("config.json"),
        json!({"auths": {registry.host.clone(): {"auth": auth}}}).to_string(),
    )
    .expect("write the node's config.json");
    cp.create(&pods, &pod("node-wide", &node.name, &image, "Always", &[]));
    node.wait_pod(
        NS,
        "node-wide",
        "running with the node's credentials",
        running,
    );
    assert!(
        !node.log().contains("s3cret-pw"),
        "litelet logged the registry password"
    );
}

/// A private registry behind a proxy that can hold or cut its connections, a node
/// that trusts it, and a namespace with the registry's credentials as secret
/// `regcred` (for the proxy's address, the one pods name).
struct Rig {
    registry: Registry,
    proxy: TcpProxy,
    node: RealNode,
    ns: &'static str,
}

impl Rig {
    fn start(test: &str, node: &str, ns: &'static str) -> Option<Rig> {
        let registry = Registry::start(test, "puller", "s3cret-pw")?;
        let target = registry.host.parse().expect("registry address");
        let proxy = TcpProxy::start(target);
        registry.trust_alias(&proxy.addr.to_string());
        let hosts = registry.hosts_dir();
        let node = RealNode::start_with_registries(test, node, &[], Some(&hosts))?;
        node.wait_ready();
        node.cp.namespace(ns);
        let secret = docker_config_secret_in(
            ns,
            "regcred",
            &proxy.addr.to_string(),
            "puller",
            "s3cret-pw",
        );
        node.cp
            .create(&format!("/api/v1/namespaces/{ns}/secrets"), &secret);
        Some(Rig {
            registry,
            proxy,
            node,
            ns,
        })
    }

    /// Pushes busybox as `repository` (`litelet/x:1.0`); the name pods use (through
    /// the proxy).
    fn push(&self, repository: &str) -> String {
        let socket = self.node.containerd.dir().join("containerd.sock");
        self.registry.push(&socket, BUSYBOX, repository);
        format!("{}/{repository}", self.proxy.addr)
    }

    fn create(&self, name: &str, image: &str, secrets: &[&str]) {
        let pod = pod_in(
            self.ns,
            name,
            &self.node.name,
            image,
            "IfNotPresent",
            secrets,
        );
        self.node
            .cp
            .create(&format!("/api/v1/namespaces/{}/pods", self.ns), &pod);
    }

    /// Waits until pod `name` runs.
    fn runs(&self, name: &str) {
        self.node.wait_pod(self.ns, name, "running", running);
    }

    /// Waits until pod `name` fails to pull (and so never ran the image).
    fn refused(&self, name: &str) {
        let p = self.node.wait_pod(self.ns, name, "ErrImagePull", |p| {
            running(p) || ["ErrImagePull", "ImagePullBackOff"].contains(&waiting(p).0)
        });
        assert!(
            !running(&p),
            "pod {name} without credentials runs the private image:\n{}",
            self.node.tail()
        );
    }
}

/// litelet is killed (SIGKILL) after the runtime pulled a private image for a pod
/// with credentials and before litelet recorded the pull: the pull is held at the
/// registry proxy, litelet is frozen (SIGSTOP) once the runtime is fetching, the
/// pull is let through and completes, then litelet dies. After the restart, a pod
/// without credentials asking for the image (IfNotPresent) must not run it; one
/// with the credentials does.
#[test]
fn a_pull_litelet_died_before_recording_is_not_open_to_pods_without_credentials() {
    let test = "a_pull_litelet_died_before_recording_is_not_open_to_pods_without_credentials";
    let Some(mut rig) = Rig::start(test, "rn-crash", "pull-crash") else {
        return;
    };
    let image = rig.push("litelet/crash:1.0");
    rig.proxy.hold();
    rig.create("puller", &image, &["regcred"]);
    rig.node
        .wait_for("the runtime to start fetching", || rig.proxy.accepted() > 0);
    let pid = nix::unistd::Pid::from_raw(rig.node.pid().expect("litelet runs") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP litelet");
    rig.proxy.release();
    let log = rig.node.containerd.dir().join("containerd.log");
    let pulled = format!("PullImage \\\"{image}\\\" returns image reference");
    let done = support::wait_until(support::real_node::WAIT, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&pulled))
    });
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("SIGKILL litelet");
    assert!(
        done,
        "the runtime did not finish the pull:\n{}",
        rig.node.containerd.log_tail()
    );
    rig.node.stop();
    rig.node.start_again();
    rig.node.wait_ready();

    rig.create("no-creds", &image, &[]);
    rig.refused("no-creds");
    rig.create("with-creds", &image, &["regcred"]);
    rig.runs("with-creds");
}

/// A records file that does not decode (cut short, then garbage) at start: a pod
/// without credentials still cannot use the private image a pod with them pulled,
/// a pod with them can, and the node gets a warning event naming the file.
#[test]
fn a_damaged_pull_records_file_never_opens_a_private_image() {
    let test = "a_damaged_pull_records_file_never_opens_a_private_image";
    let Some(mut rig) = Rig::start(test, "rn-damaged", "pull-damaged") else {
        return;
    };
    let image = rig.push("litelet/damaged:1.0");
    rig.create("first", &image, &["regcred"]);
    rig.runs("first");
    let records = rig.node.root().join("image_manager/pulled.json");
    for damage in ["truncated", "garbage"] {
        rig.node.stop();
        let bytes = std::fs::read(&records).expect("litelet wrote pull records");
        let damaged = match damage {
            "truncated" => bytes[..bytes.len() / 2].to_vec(),
            _ => b"\x00\xffnot json".to_vec(),
        };
        std::fs::write(&records, damaged).expect("damage the records");
        rig.node.start_again();
        rig.node.wait_ready();
        rig.create(&format!("no-creds-{damage}"), &image, &[]);
        rig.refused(&format!("no-creds-{damage}"));
        rig.create(&format!("with-creds-{damage}"), &image, &["regcred"]);
        rig.runs(&format!("with-creds-{damage}"));
    }
    let node_events = rig.node.cp.kubectl(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        &format!(
            "involvedObject.name={},reason=ImagePullRecordsUnusable",
            rig.node.name
        ),
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    let messages = String::from_utf8_lossy(&node_events.stdout);
    assert!(
        messages.contains("pulled.json") && messages.contains("verified again"),
        "no event about the damaged records: {messages:?}"
    );
}

/// Several pods pull different private images at once (held at the proxy, then let
/// through together): every pull leaves its record. After a restart, with the
/// registry unreachable, each image still serves a pod with the credentials (the
/// record shows they pulled it) and refuses one without.
#[test]
fn concurrent_private_pulls_each_leave_their_record() {
    let test = "concurrent_private_pulls_each_leave_their_record";
    let Some(mut rig) = Rig::start(test, "rn-concurrent", "pull-concurrent") else {
        return;
    };
    const PULLS: usize = 6;
    let images: Vec<String> = (0..PULLS)
        .map(|i| rig.push(&format!("litelet/app{i}:1.0")))
        .collect();
    rig.proxy.hold();
    for (i, image) in images.iter().enumerate() {
        rig.create(&format!("puller-{i}"), image, &["regcred"]);
    }
    // Let the pulls gather at the proxy, then through together.
    let _ = support::wait_until(std::time::Duration::from_secs(30), || {
        rig.proxy.accepted() >= PULLS
    });
    rig.proxy.release();
    for i in 0..PULLS {
        rig.runs(&format!("puller-{i}"));
    }
    rig.node.restart();
    rig.node.wait_ready();
    rig.proxy.cut();
    for (i, image) in images.iter().enumerate() {
        rig.create(&format!("again-{i}"), image, &["regcred"]);
        rig.create(&format!("no-creds-{i}"), image, &[]);
    }
    for i in 0..PULLS {
        rig.runs(&format!("again-{i}"));
        rig.refused(&format!("no-creds-{i}"));
    }
}
