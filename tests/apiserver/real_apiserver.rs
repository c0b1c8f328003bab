//! litelet as a node of a real kube-apiserver (v1.33+, from `KUBEBUILDER_ASSETS`) with
//! the Node authorizer and NodeRestriction, running pods on a private real containerd.
//! These are the end-to-end scenarios a cluster relies on most: registration, lease
//! and node status; a bound pod's life as the apiserver stores it (status, conditions,
//! events, graceful deletion with the final DELETE); restarts; in-place resize through
//! the `resize` subresource; service-account, configMap, secret and downwardAPI
//! volumes; `kubectl logs -f`, `exec` and `port-forward` through the apiserver; a
//! static pod's mirror pod. One control plane serves the whole binary; each test has
//! its own node and namespace. Skips loudly without the assets or root unless CI=true.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::containerd::BUSYBOX;
use crate::support::real_node::{
    busybox_pod, condition, container_status, find_pod_cgroup_file, RealNode, WAIT,
};
use crate::support::wait_until;
use serde_json::{json, Value};

/// A pod bound to `node` with one busybox container `main` running `script`, on the
/// host network (the test containerd has no CNI), that exits at once on SIGTERM.
fn pod(ns: &str, name: &str, node: &str, script: &str) -> Value {
    let mut pod = busybox_pod(ns, name, node, 5, &format!("trap 'exit 0' TERM; {script}"));
    pod["metadata"]["labels"] = json!({"app": name});
    pod
}

fn pods_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// kubectl, failing the test with its output when it fails.
fn kubectl_ok(node: &RealNode, args: &[&str]) -> String {
    let out = node.cp.kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\nlitelet log:\n{}",
        text(&out),
        node.tail()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn node_registers_with_labels_addresses_allocatable_and_keeps_its_lease() {
    let Some(node) = RealNode::start(
        "node_registers_with_labels_addresses_allocatable_and_keeps_its_lease",
        "rn-register",
        &["--node-labels", "litelet.test/tier=edge"],
    ) else {
        return;
    };
    node.wait_ready();
    let n = node.node_object().expect("node object");
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "rn-register");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["litelet.test/tier"], "edge");
    let addresses = n["status"]["addresses"].as_array().expect("addresses");
    assert!(
        addresses
            .iter()
            .any(|a| a["type"] == "InternalIP"
                && a["address"] == node.cp.node_ip.to_string().as_str()),
        "InternalIP {} missing: {addresses:?}",
        node.cp.node_ip
    );
    assert!(addresses.iter().any(|a| a["type"] == "Hostname"));
    for res in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(
            n["status"]["allocatable"][res].is_string(),
            "allocatable {res} missing: {}",
            n["status"]
        );
        assert!(n["status"]["capacity"][res].is_string());
    }
    for c in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(&n["status"], c), Some("False"), "{c}");
    }
    assert_eq!(
        n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        json!(node.port)
    );
    assert!(n["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("containerd://")));

    // The lease names the node, is owned by it, and is renewed.
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rn-register";
    // The lease thread starts once the Node exists, so it may land after Ready.
    node.wait_for("the node lease", || node.cp.get(lease_path).is_some());
    let lease = node.cp.get(lease_path).expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "rn-register");
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        n["metadata"]["uid"]
    );
    let first = lease["spec"]["renewTime"].clone();
    node.wait_for("a lease renewal", || {
        node.cp
            .get(lease_path)
            .is_some_and(|l| l["spec"]["renewTime"] != first)
    });
}

/// The control plane marks a node Unknown when its heartbeats stop (the node lifecycle
/// controller). litelet reads the status patch's answer no more: the Node watch brings
/// the Unknown, and the next status tick (10 s) reports Ready again instead of the
/// next 5-minute report.
#[test]
fn a_ready_condition_marked_unknown_by_the_control_plane_is_reported_true_at_the_next_tick() {
    let Some(node) = RealNode::start(
        "a_ready_condition_marked_unknown_by_the_control_plane_is_reported_true_at_the_next_tick",
        "rn-unknown",
        &[],
    ) else {
        return;
    };
    node.wait_ready();
    node.cp.patch(
        "/api/v1/nodes/rn-unknown/status",
        &json!({"status": {"conditions": [{
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status."
        }]}}),
    );
    let marked = Instant::now();
    node.wait_ready();
    let n = node.node_object().expect("node object");
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["reason"], "KubeletReady", "{ready}");
    eprintln!("Ready again {:?} after the Unknown", marked.elapsed());
}

#[test]
fn bound_pod_runs_with_its_status_and_events_and_deletion_completes() {
    let Some(node) = RealNode::start(
        "bound_pod_runs_with_its_status_and_events_and_deletion_completes",
        "rn-pod",
        &[],
    ) else {
        return;
    };
    let ns = "rn-pod";
    node.cp.namespace(ns);
    node.wait_ready();
    node.cp
        .create(&pods_path(ns), &pod(ns, "web", &node.name, "sleep 3600"));
    let p = node.wait_pod(ns, "web", "Running and Ready", |p| {
        phase(p) == "Running" && condition(&p["status"], "Ready") == Some("True")
    });
    let status = &p["status"];
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
    ] {
        assert_eq!(condition(status, c), Some("True"), "{c}: {status}");
    }
    assert_eq!(status["hostIP"], node.cp.node_ip.to_string().as_str());
    assert_eq!(status["qosClass"], "BestEffort");
    assert!(status["startTime"].is_string());
    let main = container_status(&p, "main").expect("main status");
    assert_eq!(main["ready"], true);
    assert_eq!(main["started"], true);
    assert_eq!(main["restartCount"], 0);
    assert!(main["state"]["running"]["startedAt"].is_string());
    assert!(main["containerID"]
        .as_str()
        .is_some_and(|id| id.starts_with("containerd://")));
    assert!(main["imageID"].as_str().is_some_and(|id| !id.is_empty()));

    // Events from the kubelet, as `kubectl get events` shows them.
    let mut reasons = Vec::new();
    node.wait_for("Pulled/Created/Started events", || {
        let out = node.cp.kubectl(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "involvedObject.name=web",
            "-o",
            "json",
        ]);
        let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
            return false;
        };
        reasons = list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|e| {
                        e["source"]["host"] == "rn-pod" || e["reportingInstance"] == "rn-pod"
                    })
                    .filter_map(|e| e["reason"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ["Pulled", "Created", "Started"]
            .iter()
            .all(|r| reasons.iter().any(|x| x == r))
    });

    // A graceful delete completes: litelet kills the pod and makes the final DELETE.
    let started = Instant::now();
    kubectl_ok(
        &node,
        &[
            "delete",
            "pod",
            "web",
            "-n",
            ns,
            "--wait=true",
            "--timeout=60s",
        ],
    );
    assert!(node.cp.get(&format!("{}/web", pods_path(ns))).is_none());
    eprintln!("graceful delete took {:?}", started.elapsed());
}

#[test]
fn exited_containers_restart_per_policy_and_report_their_last_state() {
    let Some(node) = RealNode::start(
        "exited_containers_restart_per_policy_and_report_their_last_state",
        "rn-restart",
        &[],
    ) else {
        return;
    };
    let ns = "rn-restart";
    node.cp.namespace(ns);
    node.wait_ready();
    node.cp.create(
        &pods_path(ns),
        &pod(ns, "crash", &node.name, "sleep 1; exit 3"),
    );
    let mut done = pod(ns, "done", &node.name, "exit 0");
    done["spec"]["restartPolicy"] = json!("Never");
    node.cp.create(&pods_path(ns), &done);

    let p = node.wait_pod(ns, "crash", "a restart after exit 3", |p| {
        container_status(p, "main").is_some_and(|c| {
            c["restartCount"].as_i64().unwrap_or(0) >= 1
                && c["lastState"]["terminated"]["exitCode"] == 3
        })
    });
    let last = &container_status(&p, "main").expect("main")["lastState"]["terminated"];
    assert_eq!(last["reason"], "Error");
    assert!(last["finishedAt"].is_string());

    let p = node.wait_pod(ns, "done", "Succeeded", |p| phase(p) == "Succeeded");
    let term = &container_status(&p, "main").expect("main")["state"]["terminated"];
    assert_eq!(term["exitCode"], 0);
    assert_eq!(term["reason"], "Completed");
    assert_eq!(condition(&p["status"], "Ready"), Some("False"));
}

#[test]
fn resize_through_the_resize_subresource_reaches_cgroups_and_status() {
    let Some(node) = RealNode::start(
        "resize_through_the_resize_subresource_reaches_cgroups_and_status",
        "rn-resize",
        &[],
    ) else {
        return;
    };
    let ns = "rn-resize";
    node.cp.namespace(ns);
    node.wait_ready();
    let mut p = pod(ns, "elastic", &node.name, "sleep 3600");
    p["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"}
    });
    node.cp.create(&pods_path(ns), &p);
    let running = node.wait_pod(ns, "elastic", "Running", |p| phase(p) == "Running");
    let uid = running["metadata"]["uid"].as_str().expect("uid").to_owned();

    resize_cpu(&node, ns, "elastic", "150m", "300m");
    let p = node.wait_pod(ns, "elastic", "the resize in status", |p| {
        container_status(p, "main").is_some_and(|c| c["resources"]["limits"]["cpu"] == "300m")
            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && condition(&p["status"], "PodResizeInProgress").is_none()
    });
    let main = container_status(&p, "main").expect("main");
    assert_eq!(main["allocatedResources"]["cpu"], "150m");
    assert_eq!(main["resources"]["requests"]["cpu"], "150m");
    assert_eq!(main["resources"]["limits"]["memory"], "128Mi");
    assert!(condition(&p["status"], "PodResizePending").is_none());
    // The pod cgroup carries the new limit (30 ms per 100 ms period).
    let quota = cpu_pod_cgroup_file(&uid, "cpu.cfs_quota_us");
    assert_eq!(quota.as_deref(), Some("30000"), "pod cgroup cpu quota");

    // A resize that fits the node but not beside another pod is Deferred, and goes
    // through once that pod is gone. (The apiserver itself refuses a resize above
    // the node's allocatable, so Infeasible cannot be reached through it.)
    let mut hog = pod(ns, "hog", &node.name, "sleep 3600");
    hog["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1500m"}});
    node.cp.create(&pods_path(ns), &hog);
    node.wait_pod(ns, "hog", "Running", |p| phase(p) == "Running");
    resize_cpu(&node, ns, "elastic", "600m", "600m");
    let p = node.wait_pod(ns, "elastic", "PodResizePending Deferred", |p| {
        condition(&p["status"], "PodResizePending") == Some("True")
    });
    let pending = p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodResizePending"))
        .expect("pending condition");
    assert_eq!(pending["reason"], "Deferred", "{pending}");
    let main = container_status(&p, "main").expect("main");
    assert_eq!(main["allocatedResources"]["cpu"], "150m");
    node.cp.delete(&format!("{}/hog", pods_path(ns)));
    let p = node.wait_pod(ns, "elastic", "the deferred resize done", |p| {
        container_status(p, "main").is_some_and(|c| c["resources"]["limits"]["cpu"] == "600m")
            && condition(&p["status"], "PodResizePending").is_none()
    });
    let main = container_status(&p, "main").expect("main");
    assert_eq!(main["allocatedResources"]["cpu"], "600m");
    assert_eq!(
        cpu_pod_cgroup_file(&uid, "cpu.cfs_quota_us").as_deref(),
        Some("60000")
    );
    // A resize moves the resourceVersion on; the status sync patches on the pod as
    // watched after it, so no status PATCH of this pod met a 409 (2 before the fix).
    let log = node.log();
    let conflicts = log
        .lines()
        .filter(|l| l.contains("elastic_rn-resize") && l.contains("changed since our last write"))
        .count();
    assert_eq!(conflicts, 0, "status PATCHes refused with 409");
}

/// `kubectl patch --subresource resize` of container `main`'s CPU.
fn resize_cpu(node: &RealNode, ns: &str, pod: &str, request: &str, limit: &str) {
    let patch = json!({"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": request}, "limits": {"cpu": limit}}}]}});
    kubectl_ok(
        node,
        &[
            "patch",
            "pod",
            pod,
            "-n",
            ns,
            "--subresource",
            "resize",
            "-p",
            &patch.to_string(),
        ],
    );
}

/// The first `file` of a `pod<uid>` cgroup in the cpu hierarchy, trimmed.
fn cpu_pod_cgroup_file(uid: &str, file: &str) -> Option<String> {
    find_pod_cgroup_file(std::path::Path::new("/sys/fs/cgroup/cpu"), uid, 5, file)
}

#[test]
fn volumes_come_from_token_request_configmaps_secrets_and_the_downward_api() {
    let Some(node) = RealNode::start(
        "volumes_come_from_token_request_configmaps_secrets_and_the_downward_api",
        "rn-volumes",
        &[],
    ) else {
        return;
    };
    let ns = "rn-volumes";
    node.cp.namespace(ns);
    node.wait_ready();
    node.cp.create(
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                "data": {"greeting": "hello-from-configmap"}}),
    );
    node.cp.create(
        &format!("/api/v1/namespaces/{ns}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                "stringData": {"password": "s3cr3t-value"}}),
    );
    let script = "cat /etc/cm/greeting; echo; cat /etc/sec/password; echo; \
                  cat /etc/podinfo/name; echo; \
                  cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
                  grep -c BEGIN /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; \
                  echo ready; sleep 3600";
    let mut p = pod(ns, "reader", &node.name, script);
    p["spec"]["volumes"] = json!([
        {"name": "cm", "configMap": {"name": "settings"}},
        {"name": "sec", "secret": {"secretName": "creds"}},
        {"name": "podinfo", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}
    ]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "cm", "mountPath": "/etc/cm"},
        {"name": "sec", "mountPath": "/etc/sec"},
        {"name": "podinfo", "mountPath": "/etc/podinfo"}
    ]);
    let created = node.cp.create(&pods_path(ns), &p);
    // The ServiceAccount admission plugin added the kube-api-access volume.
    assert!(created["spec"]["volumes"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-")))));
    node.wait_pod(ns, "reader", "Running", |p| phase(p) == "Running");
    let mut logs = String::new();
    node.wait_for("the volume contents in the log", || {
        logs = String::from_utf8_lossy(&node.cp.kubectl(&["logs", "-n", ns, "reader"]).stdout)
            .into_owned();
        logs.contains("ready")
    });
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(
        lines,
        [
            "hello-from-configmap",
            "s3cr3t-value",
            "reader",
            ns,
            "1",
            "ready"
        ],
        "volume contents"
    );

    // The projected token is a real service-account token of the pod.
    let token = kubectl_ok(
        &node,
        &[
            "exec",
            "-n",
            ns,
            "reader",
            "--",
            "cat",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
        ],
    );
    let review = node.cp.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token.trim()}}),
    );
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["username"],
        format!("system:serviceaccount:{ns}:default")
    );
    assert_eq!(
        review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"][0],
        "reader"
    );

    // A configMap update reaches the running container.
    node.cp.patch(
        &format!("/api/v1/namespaces/{ns}/configmaps/settings"),
        &json!({"data": {"greeting": "updated"}}),
    );
    node.wait_for("the configMap update in the container", || {
        node.cp
            .kubectl(&["exec", "-n", ns, "reader", "--", "cat", "/etc/cm/greeting"])
            .stdout
            == b"updated"
    });
}

#[test]
fn kubectl_logs_follow_exec_and_port_forward_through_the_apiserver() {
    let Some(node) = RealNode::start(
        "kubectl_logs_follow_exec_and_port_forward_through_the_apiserver",
        "rn-stream",
        &[],
    ) else {
        return;
    };
    let ns = "rn-stream";
    node.cp.namespace(ns);
    node.wait_ready();
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let script = format!(
        "mkdir -p /tmp/www; echo port-forward-ok > /tmp/www/index.html; \
         busybox httpd -p 127.0.0.1:{http_port} -h /tmp/www; \
         i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.2; done"
    );
    node.cp
        .create(&pods_path(ns), &pod(ns, "talker", &node.name, &script));
    node.wait_pod(ns, "talker", "Running", |p| phase(p) == "Running");

    // kubectl logs -f streams new lines as they are written.
    let mut follow = node
        .cp
        .kubectl_command()
        .args(["logs", "-f", "-n", ns, "talker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 10 && start.elapsed() < WAIT {
        match lines.next() {
            Some(Ok(line)) => seen.push(line),
            _ => break,
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        seen.len() >= 10,
        "followed lines: {seen:?}\n{}",
        node.tail()
    );
    let numbers: Vec<u64> = seen
        .iter()
        .filter_map(|l| l.strip_prefix("line-").and_then(|n| n.parse().ok()))
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "lines in order: {seen:?}"
    );

    // kubectl exec runs a command in the container, with its exit code.
    let out = kubectl_ok(
        &node,
        &["exec", "-n", ns, "talker", "--", "echo", "hello-exec"],
    );
    assert_eq!(out, "hello-exec\n");
    let failed = node
        .cp
        .kubectl(&["exec", "-n", ns, "talker", "--", "sh", "-c", "exit 7"]);
    assert_eq!(failed.status.code(), Some(7), "{}", text(&failed));

    // kubectl port-forward reaches the pod's port.
    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let mut forward = node
        .cp
        .kubectl_command()
        .args([
            "port-forward",
            "-n",
            ns,
            "pod/talker",
            &format!("{local}:{http_port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let mut body = String::new();
    let got = wait_until(WAIT, || {
        let Ok(mut sock) = std::net::TcpStream::connect(("127.0.0.1", local)) else {
            return false;
        };
        let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
        if sock
            .write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
            .is_err()
        {
            return false;
        }
        body.clear();
        let _ = sock.read_to_string(&mut body);
        body.contains("port-forward-ok")
    });
    let _ = forward.kill();
    let mut err = String::new();
    if let Some(mut e) = forward.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = forward.wait();
    assert!(
        got,
        "port-forward answer: {body:?}; kubectl: {err}\n{}",
        node.tail()
    );
}

#[test]
fn static_pod_is_mirrored_in_the_apiserver_and_removed_with_its_manifest() {
    let Some(node) = RealNode::start(
        "static_pod_is_mirrored_in_the_apiserver_and_removed_with_its_manifest",
        "rn-static",
        &[],
    ) else {
        return;
    };
    let ns = "rn-static";
    node.cp.namespace(ns);
    node.wait_ready();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stat\n  namespace: {ns}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
    );
    std::fs::write(node.manifests().join("stat.yaml"), manifest).expect("write manifest");
    let mirror_name = format!("stat-{}", node.name);
    let p = node.wait_pod(ns, &mirror_name, "the mirror pod Running", |p| {
        phase(p) == "Running"
    });
    let annotations = &p["metadata"]["annotations"];
    assert!(
        annotations["kubernetes.io/config.mirror"].is_string(),
        "{p}"
    );
    assert_eq!(annotations["kubernetes.io/config.source"], "file");
    let owner = &p["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["name"], node.name.as_str());
    assert_eq!(p["spec"]["nodeName"], node.name.as_str());

    std::fs::remove_file(node.manifests().join("stat.yaml")).expect("remove manifest");
    node.wait_for("the mirror pod deleted", || {
        node.cp
            .get(&format!("{}/{mirror_name}", pods_path(ns)))
            .is_none()
    });
}

/// Every `pod<uid>` directory below `root` in any cgroup hierarchy (`unified` too).
fn pod_cgroup_dirs(root: &str, uid: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, name: &str, depth: usize, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten().filter(|e| e.path().is_dir()) {
            if entry.file_name().to_string_lossy() == name {
                out.push(entry.path());
            } else if depth > 0 {
                walk(&entry.path(), name, depth - 1, out);
            }
        }
    }
    let mut found = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let top = hierarchy.path().join(root.trim_start_matches('/'));
        walk(&top, &format!("pod{uid}"), 3, &mut found);
    }
    found
}

/// Issue 18 item 3: runc makes the pod cgroup in every hierarchy, on a hybrid host
/// also in the cgroup2 mount `/sys/fs/cgroup/unified`; once the pod is deleted, no
/// `pod<uid>` directory is left in any of them.
#[test]
fn deleted_pod_leaves_no_pod_cgroup_in_any_hierarchy_incl_unified() {
    let Some(node) = RealNode::start(
        "deleted_pod_leaves_no_pod_cgroup_in_any_hierarchy_incl_unified",
        "rn-cgleak",
        &[],
    ) else {
        return;
    };
    let ns = "rn-cgleak";
    node.cp.namespace(ns);
    node.wait_ready();
    let mut p = pod(ns, "short", &node.name, "sleep 3600");
    p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "50m"}});
    node.cp.create(&pods_path(ns), &p);
    let running = node.wait_pod(ns, "short", "Running", |p| phase(p) == "Running");
    let uid = running["metadata"]["uid"].as_str().expect("uid").to_owned();
    let while_running = pod_cgroup_dirs(node.cgroup_root(), &uid);
    assert!(
        while_running
            .iter()
            .any(|d| d.starts_with("/sys/fs/cgroup/cpu")),
        "no pod cgroup while running: {while_running:?}"
    );
    let hybrid = std::path::Path::new("/sys/fs/cgroup/unified").is_dir();
    if hybrid {
        // The case this test is about: runc's copy in the cgroup2 hierarchy.
        assert!(
            while_running
                .iter()
                .any(|d| d.starts_with("/sys/fs/cgroup/unified")),
            "runc made no pod cgroup in unified: {while_running:?}"
        );
    }

    node.cp.delete(&format!("{}/short", pods_path(ns)));
    node.wait_for("the pod gone from the API", || {
        node.cp.get(&format!("{}/short", pods_path(ns))).is_none()
    });
    let mut left = Vec::new();
    node.wait_for("no pod cgroup left in any hierarchy", || {
        left = pod_cgroup_dirs(node.cgroup_root(), &uid);
        left.is_empty()
    });
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Once a pod is force-deleted, the Node authorizer answers 403 for it; the status
/// thread forgets the pod instead of retrying (it used to retry in a loop that spun a
/// core for seconds). A 403 that comes while litelet's watch still shows the pod (the
/// authorizer's graph can learn of the deletion first) is retried, on purpose: only
/// until the watch's DELETED event lands, so at most a couple of times.
#[test]
fn force_deleted_pod_status_is_forgotten_on_403_not_retried() {
    let Some(node) = RealNode::start(
        "force_deleted_pod_status_is_forgotten_on_403_not_retried",
        "rn-forbid",
        &[],
    ) else {
        return;
    };
    let ns = "rn-forbid";
    node.cp.namespace(ns);
    node.wait_ready();
    node.cp
        .create(&pods_path(ns), &pod(ns, "gone", &node.name, "sleep 3600"));
    node.wait_pod(ns, "gone", "Running", |p| phase(p) == "Running");
    let options = litelet::api::client::DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    node.cp
        .admin()
        .delete(&format!("{}/gone", pods_path(ns)), &options)
        .expect("force delete");
    // litelet stops the pod (terminating and terminated statuses are written, each
    // refused with 403), then has nothing left to say about it.
    std::thread::sleep(Duration::from_secs(10));
    let log = node.log();
    let retries: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("rn-forbid/gone") && l.contains("not synced, retrying"))
        .collect();
    assert!(
        retries.len() <= 2,
        "status retried after 403 past the watch's deletion: {retries:#?}"
    );
    let forgotten = log
        .lines()
        .filter(|l| l.contains("rn-forbid/gone") && l.contains("no longer visible"))
        .count();
    assert!(
        forgotten <= 5,
        "forgot the pod {forgotten} times in 10 s: the status thread keeps trying"
    );
}
