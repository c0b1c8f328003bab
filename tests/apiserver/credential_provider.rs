//! Kubelet credential provider plugins end to end: plugins of the test's own (shell
//! scripts in a temp bin dir, configured by a CredentialProviderConfig) give litelet
//! the credentials of the real authenticated registry (`support::registry`: TLS and
//! htpasswd) for pods without any pull secret, on real containerd, as a node of the
//! real kube-apiserver. In service account token mode the plugin receives a token
//! the API server issued for the pod's service account with the configured
//! audience, which the test decodes. A bad config file stops litelet at start.
//! Skips loudly without root, the assets or the registry unless CI=true.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::containerd::BUSYBOX;
use crate::support::real_node::{busybox_pod, container_status, RealNode};
use crate::support::registry::Registry;
use serde_json::{json, Value};

const NS: &str = "credential-provider";
const AUDIENCE: &str = "litelet-test-registry";
const ROLE_ANNOTATION: &str = "litelet.test/registry-role";
const PASSWORD: &str = "plugin-pw-7f3a";

/// The test plugin: records each request (one JSON line) in `$RECORD` and answers
/// with `$REG_USER`/`$REG_PASSWORD` for `$REG_HOST`, never cached.
const PLUGIN: &str = r#"#!/bin/sh
cat >> "$RECORD"; echo >> "$RECORD"
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"0s","auth":{"%s":{"username":"%s","password":"%s"}}}' "$REG_HOST" "$REG_USER" "$REG_PASSWORD"
"#;

/// One provider of the config: plugin `name` for `<host>/<path>` images, answering
/// `password`, recording into `<dir>/<name>.requests`.
fn provider(dir: &Path, name: &str, registry: &Registry, path: &str, password: &str) -> Value {
    let bin = dir.join("bin").join(name);
    std::fs::write(&bin, PLUGIN).expect("write plugin");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod plugin");
    let env = |k: &str, v: &str| json!({"name": k, "value": v});
    json!({
        "name": name,
        "matchImages": [format!("{}/{path}", registry.host)],
        "defaultCacheDuration": "0s",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "env": [
            env("RECORD", &dir.join(format!("{name}.requests")).display().to_string()),
            env("REG_HOST", &registry.host),
            env("REG_USER", &registry.user),
            env("REG_PASSWORD", password),
        ],
    })
}

/// The plugins and their config under `dir`: `<dir>/bin`, `<dir>/config.yaml`.
fn write_plugins(dir: &Path, registry: &Registry) -> PathBuf {
    std::fs::create_dir_all(dir.join("bin")).expect("bin dir");
    let mut token_mode = provider(dir, "token-plugin", registry, "sa", PASSWORD);
    token_mode["tokenAttributes"] = json!({
        "serviceAccountTokenAudience": AUDIENCE,
        "cacheType": "ServiceAccount",
        "requireServiceAccount": true,
        "requiredServiceAccountAnnotationKeys": [ROLE_ANNOTATION],
    });
    let config = json!({
        "kind": "CredentialProviderConfig",
        "apiVersion": "kubelet.config.k8s.io/v1",
        "providers": [
            provider(dir, "good-plugin", registry, "plugin", PASSWORD),
            provider(dir, "wrong-plugin", registry, "wrong", "not-the-password"),
            token_mode,
        ],
    });
    // YAML is a superset of JSON: the file is written as upstream's users would.
    let path = dir.join("config.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).expect("write config");
    path
}

/// The requests plugin `name` received.
fn requests(dir: &Path, name: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join(format!("{name}.requests")))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a request is one JSON line"))
        .collect()
}

/// The claims of a JWT (its middle part, base64url).
fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT has three parts");
    let standard = payload.replace('-', "+").replace('_', "/");
    let bytes = litelet::api::base64::decode(&standard).expect("base64url payload");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn pod(name: &str, node: &str, image: &str, policy: &str, account: Option<&str>) -> Value {
    let mut pod = busybox_pod(NS, name, node, 1, "trap 'exit 0' TERM; sleep 3600 & wait");
    pod["spec"]["containers"][0]["image"] = json!(image);
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!(policy);
    if let Some(account) = account {
        pod["spec"]["serviceAccountName"] = json!(account);
    }
    pod
}

fn waiting(pod: &Value) -> (String, String) {
    let state = &container_status(pod, "main").map_or(&Value::Null, |c| c)["state"]["waiting"];
    let text = |k: &str| state[k].as_str().unwrap_or("").to_owned();
    (text("reason"), text("message"))
}

fn running(pod: &Value) -> bool {
    container_status(pod, "main").is_some_and(|c| c["state"]["running"].is_object())
}

fn pull_refused(pod: &Value, how: &str) -> bool {
    let (reason, message) = waiting(pod);
    reason == "ErrImagePull" && message.contains(how)
}

/// Lets the nodes ask tokens for the plugin's audience, which no pod mounts
/// (ServiceAccountNodeAudienceRestriction), as a cluster admin would.
fn allow_node_audience(node: &RealNode) {
    let name = format!("litelet-test-{AUDIENCE}");
    node.cp.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"verbs": ["request-serviceaccounts-token-audience"],
                       "apiGroups": [""], "resources": [AUDIENCE]}],
        }),
    );
    node.cp.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": format!("system:node:{}", node.name)}],
        }),
    );
}

#[test]
fn pods_without_pull_secrets_pull_private_images_with_credential_provider_plugins() {
    let test = "pods_without_pull_secrets_pull_private_images_with_credential_provider_plugins";
    let Some(registry) = Registry::start(test, "puller", PASSWORD) else {
        return;
    };
    let plugins = tempfile::tempdir().expect("plugin dir");
    let dir = plugins.path();
    let config = write_plugins(dir, &registry);
    let (config_arg, bin_arg) = (
        config.display().to_string(),
        dir.join("bin").display().to_string(),
    );
    let flags = [
        "--image-credential-provider-config",
        config_arg.as_str(),
        "--image-credential-provider-bin-dir",
        bin_arg.as_str(),
    ];
    let hosts = registry.hosts_dir();
    let Some(node) = RealNode::start_with_registries(test, "rn-credprov", &flags, Some(&hosts))
    else {
        return;
    };
    node.wait_ready();
    let socket = node.containerd.dir().join("containerd.sock");
    let by_plugin = registry.push(&socket, BUSYBOX, "plugin/busybox:1.0");
    let wrong = registry.push(&socket, BUSYBOX, "wrong/busybox:1.0");
    let by_token = registry.push(&socket, BUSYBOX, "sa/busybox:1.0");
    let cp = node.cp;
    cp.namespace(NS);
    let pods = format!("/api/v1/namespaces/{NS}/pods");

    // The plugin's credentials pull the private image for a pod with no secret.
    cp.create(
        &pods,
        &pod("by-plugin", &node.name, &by_plugin, "Always", None),
    );
    node.wait_pod(
        NS,
        "by-plugin",
        "running, pulled with the plugin's credentials",
        running,
    );
    let asked = requests(dir, "good-plugin");
    assert!(
        asked.iter().any(
            |r| r["image"] == format!("{}/plugin/busybox", registry.host)
                && r["apiVersion"] == "credentialprovider.kubelet.k8s.io/v1"
                && r["kind"] == "CredentialProviderRequest"
        ),
        "{asked:?}"
    );
    assert!(
        requests(dir, "wrong-plugin").is_empty(),
        "a plugin was asked about an image it does not match"
    );

    // A plugin answering a wrong password: the registry's refusal reaches the pod.
    cp.create(
        &pods,
        &pod("wrong-plugin", &node.name, &wrong, "Always", None),
    );
    let p = node.wait_pod(
        NS,
        "wrong-plugin",
        "ErrImagePull naming the refused credentials",
        |p| pull_refused(p, "authentication failed"),
    );
    assert!(waiting(&p).1.contains("401"), "{:?}", waiting(&p));

    // Service account token mode: a token for the pod's service account, with the
    // plugin's audience, reaches the plugin; the credentials it gives pull the image.
    allow_node_audience(&node);
    cp.create(
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "builder", "namespace": NS,
                             "annotations": {ROLE_ANNOTATION: "pull", "unlisted.test/x": "y"}}}),
    );
    cp.create(
        &pods,
        &pod("by-token", &node.name, &by_token, "Always", Some("builder")),
    );
    let p = node.wait_pod(
        NS,
        "by-token",
        "running, pulled with token-mode credentials",
        running,
    );
    let asked = requests(dir, "token-plugin");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0]["serviceAccountAnnotations"],
        json!({ROLE_ANNOTATION: "pull"}),
        "only the configured annotation keys are passed"
    );
    let token = asked[0]["serviceAccountToken"].as_str().expect("a token");
    let claims = jwt_claims(token);
    assert_eq!(claims["aud"], json!([AUDIENCE]), "{claims}");
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{NS}:builder"),
        "{claims}"
    );
    let bound = &claims["kubernetes.io"]["pod"];
    assert_eq!(bound["name"], "by-token", "{claims}");
    assert_eq!(bound["uid"], p["metadata"]["uid"], "{claims}");

    // The default service account lacks the required annotation: the plugin is not
    // asked, and the pull goes on without credentials.
    cp.create(
        &pods,
        &pod(
            "no-annotation",
            &node.name,
            &by_token,
            "Always",
            Some("default"),
        ),
    );
    node.wait_pod(
        NS,
        "no-annotation",
        "ErrImagePull for the anonymous pull",
        |p| pull_refused(p, "authentication required"),
    );
    assert_eq!(
        requests(dir, "token-plugin").len(),
        1,
        "the plugin was asked without the annotation"
    );

    // The image is on the node now, pulled with builder's credentials: a pod of
    // another service account may not use it (the pull records keep whose it was),
    // while another pod of builder may.
    cp.create(
        &pods,
        &pod(
            "other-account",
            &node.name,
            &by_token,
            "IfNotPresent",
            Some("default"),
        ),
    );
    node.wait_pod(
        NS,
        "other-account",
        "ErrImagePull instead of builder's image",
        |p| pull_refused(p, "authentication required"),
    );
    cp.create(
        &pods,
        &pod(
            "same-account",
            &node.name,
            &by_token,
            "IfNotPresent",
            Some("builder"),
        ),
    );
    node.wait_pod(NS, "same-account", "running from builder's image", running);

    let log = node.log();
    assert!(
        !log.contains(PASSWORD),
        "litelet logged the registry password"
    );
    assert!(
        !log.contains(token),
        "litelet logged the service account token"
    );
    assert!(
        log.contains("credential provider plugins from") && log.contains("good-plugin"),
        "no start-up line naming the plugins"
    );
}

/// A credential provider config with a typo stops litelet before anything starts,
/// naming the file and the field, as upstream refuses to start.
#[test]
fn a_bad_credential_provider_config_stops_litelet_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("bin")).unwrap();
    let config = d.join("credential-providers.yaml");
    std::fs::write(
        &config,
        "kind: CredentialProviderConfig\napiVersion: kubelet.config.k8s.io/v1\nproviders:\n\
         - name: ecr\n  matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\n  defaultCacheDuration: 12h\n  \
         apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImage: [oops]\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_litelet"))
        .env(
            litelet::kernel_tunables::TEST_ROOT_ENV,
            support::proc_sys(d),
        )
        .arg("--container-runtime-endpoint")
        .arg(format!("unix://{}/missing.sock", d.display()))
        .arg("--root-dir")
        .arg(d.join("root"))
        .arg("--device-plugins-dir")
        .arg(d.join("device-plugins"))
        .arg("--fail-swap-on=false")
        .arg("--image-credential-provider-config")
        .arg(&config)
        .arg("--image-credential-provider-bin-dir")
        .arg(d.join("bin"))
        .stdin(Stdio::null())
        .output_with_timeout(Duration::from_secs(20));
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{log}");
    assert!(
        log.contains(&format!("credential provider config {}", config.display()))
            && log.contains("providers[0]: unknown field `matchImage`"),
        "{log}"
    );
}

/// `Command::output` with a deadline: a litelet that does not stop is killed and
/// the test fails.
trait OutputWithTimeout {
    fn output_with_timeout(&mut self, limit: Duration) -> std::process::Output;
}

impl OutputWithTimeout for Command {
    fn output_with_timeout(&mut self, limit: Duration) -> std::process::Output {
        let mut child = self
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start litelet");
        let pid = child.id();
        let stopped = support::wait_until(limit, || child.try_wait().ok().flatten().is_some());
        if !stopped {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap litelet");
            panic!(
                "litelet {pid} kept running with a bad config:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        child.wait_with_output().expect("collect output")
    }
}
