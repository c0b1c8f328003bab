//! Container environments through the litelet binary, against the fake CRI and the
//! fake API server: service variables (issue 16 item 6: the namespace's services plus
//! the master `kubernetes` service, `enableServiceLinks`, explicit env wins, an API
//! pod's containers wait for the first service list while static pods do not) and
//! downward API limits that default to the node's allocatable (item 7). The last
//! test runs the same on a real containerd (needs root; skips loudly otherwise unless
//! CI=true) and reads what the container itself sees.

use std::path::Path;
use std::time::Duration;

use crate::support::containerd::{Containerd, BUSYBOX};
use crate::support::fake_api::{pod_json, Fail, FakeApi};
use crate::support::fake_cri::FakeCri;
use crate::support::litelet::Litelet;
use litelet::api::quantity::Quantity;
use serde_json::{json, Value};

const NODE: &str = "env-node";

/// litelet as `NODE` on the CRI at `endpoint`, reading `api` (and `manifests`).
fn start_on(endpoint: &str, api: &FakeApi, manifests: Option<&Path>) -> Litelet {
    Litelet::on_fakes(endpoint, NODE, "env", Some(api), manifests, &[])
}

/// [`start_on`] the fake CRI.
fn start(cri: &FakeCri, api: &FakeApi, manifests: Option<&Path>) -> Litelet {
    start_on(&cri.endpoint(), api, manifests)
}

fn service(ns: &str, name: &str, ip: &str, ports: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ports": ports}
    })
}

fn cluster_services(api: &FakeApi) {
    api.create(
        "services",
        "default",
        service(
            "default",
            "kubernetes",
            "10.96.0.1",
            json!([{"name": "https", "protocol": "TCP", "port": 443}]),
        ),
    );
    api.create(
        "services",
        "shop",
        service(
            "shop",
            "front-end",
            "10.96.0.20",
            json!([{"name": "http", "protocol": "TCP", "port": 80},
                   {"name": "dns", "protocol": "UDP", "port": 53}]),
        ),
    );
    let mut headless = service("shop", "db", "None", json!([{"port": 5432}]));
    headless["spec"]["clusterIPs"] = json!(["None"]);
    api.create("services", "shop", headless);
    api.create(
        "services",
        "other",
        service("other", "cache", "10.96.0.30", json!([{"port": 6379}])),
    );
}

/// A pod of namespace `ns` bound to the node, one container `main` of busybox:1.0.
fn pod(ns: &str, name: &str, env: Value) -> Value {
    let mut pod = pod_json(ns, name, NODE);
    pod["spec"]["containers"][0]["image"] = json!("busybox:1.0");
    pod["spec"]["containers"][0]["env"] = env;
    pod
}

/// The environment of the pod's first created container, once there is one.
fn env_of(cri: &FakeCri, pod: &str) -> Option<Vec<(String, String)>> {
    let state = cri.state();
    let id = state
        .list_containers(&Default::default())
        .containers
        .into_iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod))?
        .id;
    state.container_envs(&id)
}

fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn run_and_get_env(litelet: &Litelet, cri: &FakeCri, pod: &str) -> Vec<(String, String)> {
    let mut env = None;
    litelet.wait_for(&format!("a container of {pod}"), || {
        env = env_of(cri, pod);
        env.is_some()
    });
    env.unwrap_or_default()
}

#[test]
fn api_pods_get_service_variables_and_explicit_env_wins() {
    let cri = FakeCri::start();
    let api = FakeApi::start();
    cluster_services(&api);
    let litelet = start(&cri, &api, None);
    api.create(
        "pods",
        "shop",
        pod(
            "shop",
            "linked",
            json!([
                {"name": "FRONT_END_SERVICE_PORT", "value": "mine"},
                {"name": "URL", "value": "http://$(FRONT_END_SERVICE_HOST):$(FRONT_END_SERVICE_PORT_HTTP)"}
            ]),
        ),
    );
    let mut unlinked = pod("shop", "unlinked", json!([]));
    unlinked["spec"]["enableServiceLinks"] = json!(false);
    api.create("pods", "shop", unlinked);

    let env = run_and_get_env(&litelet, &cri, "linked");
    let expected = [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ("FRONT_END_SERVICE_HOST", "10.96.0.20"),
        ("FRONT_END_SERVICE_PORT_HTTP", "80"),
        ("FRONT_END_SERVICE_PORT_DNS", "53"),
        ("FRONT_END_PORT", "tcp://10.96.0.20:80"),
        ("FRONT_END_PORT_80_TCP", "tcp://10.96.0.20:80"),
        ("FRONT_END_PORT_53_UDP", "udp://10.96.0.20:53"),
        ("FRONT_END_PORT_53_UDP_PROTO", "udp"),
        ("FRONT_END_PORT_53_UDP_PORT", "53"),
        ("FRONT_END_PORT_53_UDP_ADDR", "10.96.0.20"),
        // Explicit env wins over the service variable of the same name...
        ("FRONT_END_SERVICE_PORT", "mine"),
        // ...and values expand service variables.
        ("URL", "http://10.96.0.20:80"),
    ];
    for (key, value) in expected {
        assert_eq!(get(&env, key), Some(value), "{key} in {env:?}");
    }
    assert_eq!(
        env.iter()
            .filter(|(k, _)| k == "FRONT_END_SERVICE_PORT")
            .count(),
        1,
        "one value per name"
    );
    assert!(
        !env.iter()
            .any(|(k, _)| k.starts_with("DB_") || k.starts_with("CACHE_")),
        "headless and other namespaces' services give nothing: {env:?}"
    );

    let env = run_and_get_env(&litelet, &cri, "unlinked");
    assert_eq!(get(&env, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
    assert!(
        !env.iter().any(|(k, _)| k.starts_with("FRONT_END_")),
        "enableServiceLinks false: only the master service: {env:?}"
    );
}

#[test]
fn api_pod_containers_wait_for_the_first_service_list_and_static_pods_do_not() {
    let cri = FakeCri::start();
    let api = FakeApi::start();
    cluster_services(&api);
    api.inject(
        Fail::status(500)
            .always()
            .verb("list")
            .path("/api/v1/services"),
    );
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("static.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-app\n  namespace: shop\nspec:\n  hostNetwork: true\n  containers:\n  - name: app\n    image: busybox:1.0\n",
    )
    .unwrap();
    let litelet = start(&cri, &api, Some(manifests.path()));
    api.create("pods", "shop", pod("shop", "waiting", json!([])));

    // The static pod runs although the services were never listed.
    let env = run_and_get_env(&litelet, &cri, format!("static-app-{NODE}").as_str());
    assert_eq!(get(&env, "KUBERNETES_SERVICE_HOST"), None, "{env:?}");

    // The API pod gets its sandbox but no container while the list keeps failing.
    litelet.wait_for("the API pod's sandbox and a failing services list", || {
        cri.calls()
            .iter()
            .any(|c| c.method == "RunPodSandbox" && c.target.ends_with("/waiting"))
            && api.count("list", "/api/v1/services") >= 3
    });
    litelet.wait_for("the waiting reason in the API", || {
        api.get("pods", "shop", "waiting").is_some_and(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                == json!("CreateContainerConfigError")
        })
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        env_of(&cri, "waiting").is_none(),
        "no container before the list"
    );

    api.clear_faults();
    let env = run_and_get_env(&litelet, &cri, "waiting");
    assert_eq!(get(&env, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
    assert_eq!(get(&env, "FRONT_END_SERVICE_HOST"), Some("10.96.0.20"));
}

#[test]
fn downward_api_limits_of_a_container_without_limits_are_node_allocatable() {
    let cri = FakeCri::start();
    let api = FakeApi::start();
    let litelet = start(&cri, &api, None);
    let field = |resource: &str, divisor: &str| json!({"resourceFieldRef": {"resource": resource, "divisor": divisor}});
    api.create(
        "pods",
        "shop",
        pod(
            "shop",
            "unlimited",
            json!([
                {"name": "CPU_MILLIS", "valueFrom": field("limits.cpu", "1m")},
                {"name": "MEM_BYTES", "valueFrom": field("limits.memory", "1")},
                {"name": "CPU_REQUEST", "valueFrom": field("requests.cpu", "1m")},
            ]),
        ),
    );
    let mut allocatable = Value::Null;
    litelet.wait_for("the node's allocatable in the API", || {
        allocatable = api
            .get("nodes", "", NODE)
            .map(|n| n["status"]["allocatable"].clone())
            .unwrap_or_default();
        allocatable["cpu"].is_string() && allocatable["memory"].is_string()
    });
    let quantity = |key: &str| Quantity::parse(allocatable[key].as_str().unwrap()).unwrap();
    let env = run_and_get_env(&litelet, &cri, "unlimited");
    assert_eq!(
        get(&env, "CPU_MILLIS"),
        Some(quantity("cpu").milli_value().to_string().as_str()),
        "{env:?}"
    );
    assert_eq!(
        get(&env, "MEM_BYTES"),
        Some(quantity("memory").value().to_string().as_str()),
        "{env:?}"
    );
    assert_eq!(get(&env, "CPU_REQUEST"), Some("0"), "an unset request is 0");
}

#[test]
fn real_containerd_container_sees_service_variables_and_allocatable_limits() {
    // A short name: containerd's socket paths are limited to 104 bytes.
    let Some(containerd) = Containerd::start("svc-env") else {
        return;
    };
    let api = FakeApi::start();
    cluster_services(&api);
    let litelet = start_on(&containerd.endpoint(), &api, None);
    let field = |resource: &str, divisor: &str| json!({"resourceFieldRef": {"containerName": "main", "resource": resource, "divisor": divisor}});
    let created = api.create(
        "pods",
        "shop",
        json!({"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "printer", "namespace": "shop"},
          "spec": {"nodeName": NODE, "hostNetwork": true, "dnsPolicy": "Default",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
              "command": ["sh", "-c", "env; echo mem-file=$(cat /etc/podinfo/mem); sleep 3600"],
              "env": [{"name": "MEM_BYTES", "valueFrom": field("limits.memory", "1")}],
              "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"}]}],
            "volumes": [{"name": "podinfo", "downwardAPI": {"items": [
              {"path": "mem", "resourceFieldRef": {"containerName": "main",
                "resource": "limits.memory", "divisor": "1"}}]}}]}}),
    );
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let mut allocatable = Value::Null;
    litelet.wait_for("the node's allocatable in the API", || {
        allocatable = api
            .get("nodes", "", NODE)
            .map(|n| n["status"]["allocatable"]["memory"].clone())
            .unwrap_or_default();
        allocatable.is_string()
    });
    let memory = Quantity::parse(allocatable.as_str().unwrap())
        .unwrap()
        .value()
        .to_string();
    let log_file = litelet
        .dir
        .path()
        .join(format!("logs/shop_printer_{uid}/main/0.log"));
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    litelet.wait_for("the container's output", || log().contains("mem-file="));
    let text = log();
    for line in [
        "KUBERNETES_SERVICE_HOST=10.96.0.1".to_owned(),
        "FRONT_END_PORT_53_UDP=udp://10.96.0.20:53".to_owned(),
        format!("MEM_BYTES={memory}"),
        format!("mem-file={memory}"),
    ] {
        assert!(
            text.contains(&format!(" stdout F {line}")),
            "{line} not in the container output:\n{text}\n{}",
            containerd.log_tail()
        );
    }
    drop(containerd);
}
