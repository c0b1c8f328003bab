//! Private registries end to end (issue 19): a real distribution registry with TLS
//! and htpasswd auth (`support::registry`), litelet as a node of the real
//! kube-apiserver (pull secrets read through the Node authorizer), the real
//! ServiceAccount admission copying a service account's pull secrets into pods, and
//! containerd pulling with the credentials litelet hands it as CRI `AuthConfig`, and
//! the node-wide Docker config under the root dir.
//! Skips loudly without root, the assets or the registry unless CI=true.

mod support;

use serde_json::{json, Value};
use support::containerd::BUSYBOX;
use support::control_plane::base64;
use support::real_node::{busybox_pod, container_status, RealNode};
use support::registry::Registry;

const NS: &str = "private-registry";

fn pod(name: &str, node: &str, image: &str, policy: &str, secrets: &[&str]) -> Value {
    let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
    let mut pod = busybox_pod(NS, name, node, 1, "trap 'exit 0' TERM; sleep 3600 & wait");
    // The registry's copy of busybox, pulled as `policy` says.
    pod["spec"]["containers"][0]["image"] = json!(image);
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!(policy);
    if !refs.is_empty() {
        pod["spec"]["imagePullSecrets"] = Value::Array(refs);
    }
    pod
}

fn docker_config_secret(name: &str, host: &str, user: &str, password: &str) -> Value {
    let auth = base64(format!("{user}:{password}").as_bytes());
    let config = json!({"auths": {host: {"auth": auth}}}).to_string();
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
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
