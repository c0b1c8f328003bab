//! Unit tests of the static pod source's pure parts: parsing, static rules and
//! defaults, UID stability, lists, errors naming the file and field, and the
//! folder/snapshot logic of `Manifests`.

use std::path::{Path, PathBuf};

use super::defaults::pull_policy_for_image;
use super::validate::{is_dns_label, is_dns_subdomain};
use super::*;
use crate::api::node::TaintEffect;
use crate::api::pod::{
    DnsPolicy, ImagePullPolicy, Pod, PodPhase, Protocol, RestartPolicy, TerminationMessagePolicy,
    TolerationOperator, UriScheme, CONFIG_HASH_ANNOTATION_KEY, CONFIG_SOURCE_ANNOTATION_KEY,
};

const NODE: &str = "Edge-1";

fn path() -> PathBuf {
    PathBuf::from("/etc/kubernetes/manifests/web.yaml")
}

const WEB: &str = r#"
# a comment
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    ports:
    - containerPort: 80
    resources:
      limits: {cpu: 500m, memory: 128Mi}
    livenessProbe:
      httpGet: {port: 80}
"#;

fn parse(text: &str) -> Result<Vec<Pod>, ManifestError> {
    parse_manifest(&path(), text.as_bytes(), NODE)
}

fn one(text: &str) -> Pod {
    let mut pods = parse(text).unwrap();
    assert_eq!(pods.len(), 1);
    pods.remove(0)
}

#[test]
fn static_rules_are_applied() {
    let pod = one(WEB);
    assert_eq!(pod.name(), "web-edge-1", "node name appended in lowercase");
    assert_eq!(pod.namespace(), "default");
    assert_eq!(pod.spec.node_name.as_deref(), Some(NODE));
    assert_eq!(pod.uid().len(), 32);
    assert!(pod.uid().bytes().all(|b| b.is_ascii_hexdigit()));
    let ann = &pod.metadata.annotations;
    assert_eq!(
        ann.get(CONFIG_HASH_ANNOTATION_KEY).map(String::as_str),
        Some(pod.uid())
    );
    assert_eq!(
        ann.get(CONFIG_SOURCE_ANNOTATION_KEY).map(String::as_str),
        Some("file")
    );
    assert!(pod.is_static());
    assert_eq!(pod.spec.tolerations.len(), 1);
    let t = &pod.spec.tolerations[0];
    assert_eq!(t.operator, Some(TolerationOperator::Exists));
    assert_eq!(t.effect, Some(TaintEffect::NoExecute));
    assert!(t.key.is_none() && t.value.is_none() && t.toleration_seconds.is_none());
    assert_eq!(pod.status.phase, Some(PodPhase::Pending));
    assert_eq!(
        pod.metadata.labels.get("app").map(String::as_str),
        Some("web")
    );
}

#[test]
fn api_server_defaults_fill_unset_fields() {
    let pod = one(WEB);
    let spec = &pod.spec;
    assert_eq!(spec.restart_policy, Some(RestartPolicy::Always));
    assert_eq!(spec.dns_policy, Some(DnsPolicy::ClusterFirst));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.enable_service_links, Some(true));
    let c = &spec.containers[0];
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(
        c.termination_message_policy,
        Some(TerminationMessagePolicy::File)
    );
    assert_eq!(c.image_pull_policy, Some(ImagePullPolicy::IfNotPresent));
    assert_eq!(c.ports[0].protocol, Some(Protocol::Tcp));
    assert_eq!(c.ports[0].host_port, None, "no host network, no host port");
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests, res.limits, "requests default to limits");
    let probe = c.liveness_probe.as_ref().unwrap();
    assert_eq!(
        (
            probe.timeout_seconds,
            probe.period_seconds,
            probe.success_threshold,
            probe.failure_threshold
        ),
        (Some(1), Some(10), Some(1), Some(3))
    );
    let get = probe.handler.http_get.as_ref().unwrap();
    assert_eq!(
        (get.path.as_deref(), get.scheme.as_ref()),
        (Some("/"), Some(&UriScheme::Http))
    );
}

#[test]
fn set_fields_are_not_overwritten() {
    let pod = one(r#"
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: kube-system, uid: fixed-uid}
spec:
  restartPolicy: OnFailure
  dnsPolicy: Default
  terminationGracePeriodSeconds: 5
  schedulerName: mine
  enableServiceLinks: false
  hostNetwork: true
  tolerations:
  - {operator: Exists, effect: NoExecute}
  containers:
  - name: db
    image: postgres
    imagePullPolicy: Never
    terminationMessagePath: /tmp/msg
    terminationMessagePolicy: FallbackToLogsOnError
    ports:
    - {containerPort: 5432, protocol: UDP}
    - {containerPort: 5433, hostPort: 6000}
    resources:
      limits: {cpu: "1", memory: 1Gi}
      requests: {cpu: 250m}
"#);
    assert_eq!(pod.namespace(), "kube-system");
    assert_eq!(
        pod.uid(),
        "fixed-uid",
        "an explicit uid is kept, as upstream"
    );
    assert_eq!(
        pod.metadata.annotation(CONFIG_HASH_ANNOTATION_KEY),
        Some("fixed-uid")
    );
    let spec = &pod.spec;
    assert_eq!(
        spec.tolerations.len(),
        1,
        "existing toleration not repeated"
    );
    assert_eq!(spec.restart_policy, Some(RestartPolicy::OnFailure));
    assert_eq!(spec.dns_policy, Some(DnsPolicy::Default));
    assert_eq!(spec.termination_grace_period_seconds, Some(5));
    assert_eq!(spec.scheduler_name.as_deref(), Some("mine"));
    assert_eq!(spec.enable_service_links, Some(false));
    let c = &spec.containers[0];
    assert_eq!(c.image_pull_policy, Some(ImagePullPolicy::Never));
    assert_eq!(c.termination_message_path.as_deref(), Some("/tmp/msg"));
    assert_eq!(
        c.termination_message_policy,
        Some(TerminationMessagePolicy::FallbackToLogsOnError)
    );
    assert_eq!(c.ports[0].protocol, Some(Protocol::Udp));
    assert_eq!(
        c.ports[0].host_port,
        Some(5432),
        "host network: port mirrored"
    );
    assert_eq!(c.ports[1].host_port, Some(6000));
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests["cpu"].to_string(), "250m");
    assert_eq!(res.requests["memory"].to_string(), "1Gi");
}

#[test]
fn pull_policy_follows_the_tag() {
    let cases = [
        ("nginx", ImagePullPolicy::Always),
        ("nginx:latest", ImagePullPolicy::Always),
        ("nginx:1.25", ImagePullPolicy::IfNotPresent),
        ("registry:5000/nginx", ImagePullPolicy::Always),
        ("registry:5000/team/nginx:v2", ImagePullPolicy::IfNotPresent),
        ("nginx@sha256:abcd", ImagePullPolicy::IfNotPresent),
        ("nginx:latest@sha256:abcd", ImagePullPolicy::Always),
    ];
    for (image, want) in cases {
        assert_eq!(pull_policy_for_image(image), want, "{image}");
    }
}

#[test]
fn json_manifests_are_accepted() {
    let pod = one(
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}"#,
    );
    assert_eq!(pod.name(), "j-edge-1");
}

#[test]
fn uid_is_stable_and_follows_content_node_and_path() {
    let base = one(WEB).metadata.uid;
    // Same content, even reformatted: same UID.
    assert_eq!(one(WEB).metadata.uid, base);
    let reformatted = WEB.replace("# a comment", "# another comment\n\n");
    assert_eq!(one(&reformatted).metadata.uid, base);
    // Changed content: new UID.
    assert_ne!(one(&WEB.replace("1.25", "1.26")).metadata.uid, base);
    // Different node or file: new UID.
    let other_node = parse_manifest(&path(), WEB.as_bytes(), "edge-2").unwrap();
    assert_ne!(other_node[0].metadata.uid, base);
    let other_path = parse_manifest(Path::new("/m/other.yaml"), WEB.as_bytes(), NODE).unwrap();
    assert_ne!(other_path[0].metadata.uid, base);
}

#[test]
fn lists_yield_every_pod() {
    for kind in ["PodList", "List"] {
        let text = format!(
            r#"
apiVersion: v1
kind: {kind}
items:
- apiVersion: v1
  kind: Pod
  metadata: {{name: a}}
  spec: {{containers: [{{name: c, image: busybox}}]}}
- metadata: {{name: b, namespace: ops}}
  spec: {{containers: [{{name: c, image: busybox}}]}}
"#
        );
        let pods = parse(&text).unwrap();
        let names: Vec<_> = pods.iter().map(|p| (p.namespace(), p.name())).collect();
        assert_eq!(
            names,
            [("default", "a-edge-1"), ("ops", "b-edge-1")],
            "{kind}"
        );
        assert_ne!(pods[0].uid(), pods[1].uid());
    }
    assert_eq!(
        parse("apiVersion: v1\nkind: PodList\nitems: []\n").unwrap(),
        []
    );
}

/// Parses `text` and checks the error names `field` and mentions `reason`.
fn check_field_error(text: &str, field: &str, reason: &str) {
    let err = parse(text).expect_err(field);
    assert_eq!(err.field(), Some(field), "{err}");
    assert_eq!(err.path(), path());
    let msg = err.to_string();
    assert!(msg.contains(reason), "{msg:?} lacks {reason:?}");
    assert!(
        msg.starts_with("static pod manifest /etc/kubernetes/manifests/web.yaml: "),
        "{msg}"
    );
}

fn pod_with(spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}")
}

#[test]
fn errors_name_the_field() {
    let c = "  containers:\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n".into(),
            "kind",
            "\"Service\" is not a Pod",
        ),
        ("apiVersion: v1\nmetadata: {name: s}\n".into(), "kind", "missing"),
        (
            "kind: Pod\nmetadata: {name: p}\n".into(),
            "apiVersion",
            "missing",
        ),
        (
            "apiVersion: apps/v1\nkind: Pod\n".into(),
            "apiVersion",
            "expected v1",
        ),
        (
            "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n".into(),
            "metadata.name",
            "required",
        ),
        (
            pod_with(&format!("{c}  - image: busybox\n")),
            "spec.containers[0].name",
            "required",
        ),
        (
            pod_with(&format!("{c}  - name: a\n    image: x\n  - name: b\n")),
            "spec.containers[1].image",
            "required",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    resources: {{limits: {{cpu: lots}}}}\n"
            )),
            "spec.containers[0].resources.limits.cpu",
            "lots",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    ports: [{{containerPort: http}}]\n"
            )),
            "spec.containers[0].ports[0].containerPort",
            "invalid type",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    ports: [{{containerPort: 70000}}]\n"
            )),
            "spec.containers[0].ports[0].containerPort",
            "70000",
        ),
        (
            pod_with(&format!("{c}  - {{name: Web, image: x}}\n")),
            "spec.containers[0].name",
            "\"Web\"",
        ),
        (
            pod_with(&format!("{c}  - {{name: a, image: x}}\n  - {{name: a, image: y}}\n")),
            "spec.containers[1].name",
            "duplicate",
        ),
        (
            pod_with(&format!(
                "  initContainers: [{{name: a, image: x}}]\n{c}  - {{name: a, image: y}}\n"
            )),
            "spec.containers[0].name",
            "duplicate",
        ),
        (pod_with("  containers: []\n"), "spec.containers", "at least one"),
        (
            pod_with(&format!("  restartPolicy: Sometimes\n{c}  - {{name: a, image: x}}\n")),
            "spec.restartPolicy",
            "\"Sometimes\"",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    volumeMounts: [{{name: data, mountPath: /d}}]\n"
            )),
            "spec.containers[0].volumeMounts[0].name",
            "no volume named \"data\"",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: a, image: x}]}\n"
                .into(),
            "metadata.name",
            "not a valid DNS subdomain",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: [1, 2]\n".into(),
            "spec",
            "invalid type",
        ),
        (
            "apiVersion: v1\nkind: PodList\nitems:\n- {kind: Service, metadata: {name: s}}\n"
                .into(),
            "items[0].kind",
            "only pods",
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x}]}\n- metadata: {name: b}\n  spec: {containers: [{name: c}]}\n"
                .into(),
            "items[1].spec.containers[0].image",
            "required",
        ),
        ("apiVersion: v1\nkind: List\n".into(), "items", "required"),
        ("- 1\n- 2\n".into(), "(document)", "expected an object"),
    ];
    for (text, field, reason) in cases {
        check_field_error(&text, field, reason);
    }
}

#[test]
fn syntax_errors() {
    for text in [
        "",
        "   \n",
        "kind: Pod\n  bad: [indent\n",
        "{\"kind\": \"Pod\",}",
    ] {
        let err = parse(text).expect_err(text);
        assert!(
            matches!(err, ManifestError::Syntax { .. }),
            "{text:?}: {err}"
        );
        assert!(err.to_string().contains("web.yaml"), "{err}");
    }
    let err = parse_manifest(&path(), b"\xff\xfe", NODE).unwrap_err();
    assert!(err.to_string().contains("utf-8"), "{err}");
}

#[test]
fn dns_names() {
    assert!(is_dns_label("a") && is_dns_label("web-1") && is_dns_label("0a"));
    assert!(!is_dns_label("") && !is_dns_label("-a") && !is_dns_label("a-"));
    assert!(!is_dns_label("A") && !is_dns_label("a.b") && !is_dns_label(&"a".repeat(64)));
    assert!(is_dns_subdomain("a.b-c.d") && !is_dns_subdomain("a..b"));
    assert!(!is_dns_subdomain(&"a.".repeat(127)));
}

// ---------------------------------------------------------------------------
// Manifests: files → snapshot + report
// ---------------------------------------------------------------------------

fn pod_file(dir: &str, file: &str, pod_name: &str, image: &str) -> ManifestFile {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod_name}}}\nspec: {{containers: [{{name: c, image: {image}}}]}}\n"
    );
    let path = Path::new(dir).join(file);
    ManifestFile {
        pods: parse_manifest(&path, text.as_bytes(), NODE),
        path,
    }
}

fn bad_file(dir: &str, file: &str) -> ManifestFile {
    let path = Path::new(dir).join(file);
    ManifestFile {
        pods: parse_manifest(&path, b"kind: [", NODE),
        path,
    }
}

fn names(pods: &[Pod]) -> Vec<&str> {
    pods.iter().map(Pod::name).collect()
}

#[test]
fn duplicate_names_keep_the_first_file() {
    let mut m = Manifests::default();
    let (pods, errors) = m.update(vec![
        pod_file("/m", "a.yaml", "web", "nginx:1"),
        pod_file("/m", "b.yaml", "web", "nginx:2"),
        pod_file("/m", "c.yaml", "db", "pg:1"),
    ]);
    assert_eq!(names(&pods), ["web-edge-1", "db-edge-1"]);
    assert_eq!(pods[0].spec.containers[0].image.as_deref(), Some("nginx:1"));
    assert_eq!(errors.len(), 1);
    let msg = errors[0].to_string();
    assert!(
        msg.contains("/m/b.yaml")
            && msg.contains("/m/a.yaml")
            && msg.contains("default/web-edge-1"),
        "{msg}"
    );
    assert!(
        matches!(&errors[0], ManifestError::Duplicate { first, .. } if first == Path::new("/m/a.yaml"))
    );
}

#[test]
fn a_file_that_turns_bad_keeps_its_last_good_pods() {
    let mut m = Manifests::default();
    let (good, _) = m.update(vec![
        pod_file("/m", "a.yaml", "web", "nginx:1"),
        pod_file("/m", "b.yaml", "db", "pg:1"),
    ]);
    let (pods, errors) = m.update(vec![
        bad_file("/m", "a.yaml"),
        pod_file("/m", "b.yaml", "db", "pg:1"),
    ]);
    assert_eq!(pods, good, "the bad file's last good pod stays");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path(), Path::new("/m/a.yaml"));
    assert!(m.has_pods(Path::new("/m/a.yaml")));
    // Still bad on the next read: still kept.
    let (pods, _) = m.update(vec![
        bad_file("/m", "a.yaml"),
        pod_file("/m", "b.yaml", "db", "pg:1"),
    ]);
    assert_eq!(pods, good);
    // Deleted: gone.
    let (pods, errors) = m.update(vec![pod_file("/m", "b.yaml", "db", "pg:1")]);
    assert_eq!(names(&pods), ["db-edge-1"]);
    assert!(errors.is_empty());
    // Back, but bad from the start: nothing to keep.
    let (pods, errors) = m.update(vec![
        bad_file("/m", "a.yaml"),
        pod_file("/m", "b.yaml", "db", "pg:1"),
    ]);
    assert_eq!(names(&pods), ["db-edge-1"]);
    assert_eq!(errors.len(), 1);
    assert!(!m.has_pods(Path::new("/m/a.yaml")));
}

#[test]
fn duplicate_names_inside_one_list() {
    let text = "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x}]}\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: y}]}\n";
    let path = PathBuf::from("/m/list.yaml");
    let (pods, errors) = Manifests::default().update(vec![ManifestFile {
        pods: parse_manifest(&path, text.as_bytes(), NODE),
        path,
    }]);
    assert_eq!(pods.len(), 1);
    assert!(matches!(&errors[..], [ManifestError::Duplicate { .. }]));
}

// ---------------------------------------------------------------------------
// Reading a folder
// ---------------------------------------------------------------------------

const GOOD: &str =
    "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME}\nspec: {containers: [{name: c, image: x}]}\n";

#[test]
fn folder_reading_skips_hidden_and_non_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("b.yaml"), GOOD.replace("NAME", "b")).unwrap();
    std::fs::write(d.join("a.json"), GOOD.replace("NAME", "a")).unwrap();
    std::fs::write(d.join(".hidden.yaml"), GOOD.replace("NAME", "h")).unwrap();
    std::fs::write(d.join(".a.yaml.swp"), "garbage").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/c.yaml"), GOOD.replace("NAME", "c")).unwrap();
    nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink(d.join("b.yaml"), d.join("link.yaml")).unwrap();
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling.yaml")).unwrap();

    let files = read_manifests(d, NODE).unwrap();
    let read: Vec<_> = files
        .iter()
        .map(|f| f.path.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(read, ["a.json", "b.yaml", "link.yaml"], "name order");
    let (pods, errors) = load(d, NODE).unwrap();
    assert_eq!(names(&pods), ["a-edge-1", "b-edge-1"]);
    assert_eq!(errors.len(), 1, "the link duplicates b: {errors:?}");

    // A single manifest file as the path.
    let (pods, errors) = load(&d.join("b.yaml"), NODE).unwrap();
    assert_eq!((names(&pods), errors.len()), (vec!["b-edge-1"], 0));
    // A missing path is an error of the whole read.
    let err = read_manifests(&d.join("missing"), NODE).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn oversized_manifest_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_MANIFEST_BYTES + 1).unwrap();
    let (pods, errors) = load(dir.path(), NODE).unwrap();
    assert!(pods.is_empty());
    assert!(
        matches!(&errors[..], [ManifestError::Read { source, .. }] if source.to_string().contains("larger than")),
        "{errors:?}"
    );
}

// Issue 23 item 2: static pods are validated as the API server validates a pod
// create; before, `limits.cpu: "-1"` ran as BestEffort, `-1Gi` ran with no limit and
// a 1 MiB annotation was accepted (its mirror pod then got a 422).
#[test]
fn static_pods_are_validated_as_the_api_server_would() {
    let c = "  containers:\n";
    let with_resources = |resources: &str| {
        pod_with(&format!(
            "{c}  - name: a\n    image: x\n    resources: {resources}\n"
        ))
    };
    let big = "v".repeat(1024 * 1024);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            with_resources("{limits: {cpu: \"-1\"}}"),
            "spec.containers[0].resources.limits.cpu",
            "-1: must be greater than or equal to 0",
        ),
        (
            with_resources("{limits: {memory: \"-1Gi\"}}"),
            "spec.containers[0].resources.limits.memory",
            "must be greater than or equal to 0",
        ),
        (
            with_resources("{requests: {memory: \"-5\"}}"),
            "spec.containers[0].resources.requests.memory",
            "must be greater than or equal to 0",
        ),
        (
            with_resources("{requests: {cpu: \"2\"}, limits: {cpu: \"1\"}}"),
            "spec.containers[0].resources.requests.cpu",
            "must be less than or equal to the cpu limit of 1",
        ),
        (
            with_resources("{limits: {gpu: \"1\"}}"),
            "spec.containers[0].resources.limits.gpu",
            "unsupported resource \"gpu\"",
        ),
        (
            with_resources("{limits: {example.com/dongle: 500m}}"),
            "spec.containers[0].resources.limits.example.com/dongle",
            "whole number",
        ),
        (
            with_resources("{requests: {example.com/dongle: \"1\"}}"),
            "spec.containers[0].resources.limits",
            "a limit must be set for example.com/dongle",
        ),
        (
            pod_with(&format!(
                "  resources: {{limits: {{cpu: \"-2\"}}}}\n{c}  - {{name: a, image: x}}\n"
            )),
            "spec.resources.limits.cpu",
            "must be greater than or equal to 0",
        ),
        (
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {{big: {big}}}\nspec: {{containers: [{{name: a, image: x}}]}}\n"
            ),
            "metadata.annotations",
            "more than the limit of 262144",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {\"-no\": x}\nspec: {containers: [{name: a, image: x}]}\n".into(),
            "metadata.annotations",
            "key \"-no\"",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: \"not ok!\"}\nspec: {containers: [{name: a, image: x}]}\n".into(),
            "metadata.labels[app]",
            "value \"not ok!\"",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {\"Bad_Domain/app\": x}\nspec: {containers: [{name: a, image: x}]}\n".into(),
            "metadata.labels",
            "key \"Bad_Domain/app\"",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    ports: [{{containerPort: 80, name: web}}, {{containerPort: 81, name: web}}]\n"
            )),
            "spec.containers[0].ports[1].name",
            "duplicate port name \"web\"",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    ports: [{{containerPort: 80, name: a-very-long-port-name}}]\n"
            )),
            "spec.containers[0].ports[0].name",
            "at most 15",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    ports: [{{containerPort: 80, hostPort: 8080}}]\n  - name: b\n    image: x\n    ports: [{{containerPort: 81, hostPort: 8080}}]\n"
            )),
            "spec.containers[1].ports[0].hostPort",
            "duplicate host port 8080/TCP",
        ),
        (
            pod_with(&format!(
                "  volumes: [{{name: v, emptyDir: {{}}}}]\n{c}  - name: a\n    image: x\n    volumeMounts: [{{name: v, mountPath: /d}}, {{name: v, mountPath: /d}}]\n"
            )),
            "spec.containers[0].volumeMounts[1].mountPath",
            "must be unique",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    volumeDevices: [{{name: disk, devicePath: /dev/x}}]\n"
            )),
            "spec.containers[0].volumeDevices[0].name",
            "no volume named \"disk\"",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    env: [{{name: \"A=B\", value: x}}]\n"
            )),
            "spec.containers[0].env[0].name",
            "other than '='",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    readinessProbe: {{exec: {{command: [\"true\"]}}, periodSeconds: -1}}\n"
            )),
            "spec.containers[0].readinessProbe.periodSeconds",
            "must be greater than or equal to 0",
        ),
        (
            pod_with(&format!(
                "{c}  - name: a\n    image: x\n    livenessProbe: {{exec: {{command: [\"true\"]}}, successThreshold: 2}}\n"
            )),
            "spec.containers[0].livenessProbe.successThreshold",
            "must be 1",
        ),
        (
            pod_with(&format!("  activeDeadlineSeconds: 0\n{c}  - {{name: a, image: x}}\n")),
            "spec.activeDeadlineSeconds",
            "must be greater than 0",
        ),
        (
            pod_with(&format!(
                "  initContainers: [{{name: i, image: x, restartPolicy: Sometimes}}]\n{c}  - {{name: a, image: x}}\n"
            )),
            "spec.initContainers[0].restartPolicy",
            "\"Sometimes\"",
        ),
    ];
    for (text, field, reason) in &cases {
        check_field_error(text, field, reason);
    }
    // What the API server accepts passes: annotations just under the cap, a request
    // equal to its limit, a whole extended resource, a valid named port.
    let fits = "v".repeat(200 * 1024);
    one(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {{app: web, example.com/tier: \"\"}}\n  annotations: {{note: {fits}}}\nspec:\n  containers:\n  - name: a\n    image: x\n    ports: [{{containerPort: 80, name: http, hostPort: 8080}}, {{containerPort: 80, protocol: UDP, hostPort: 8080}}]\n    resources: {{requests: {{cpu: 500m, example.com/dongle: 2}}, limits: {{cpu: 500m, memory: 1Gi, example.com/dongle: 2}}}}\n"
    ));
}

/// Fields litelet does not model are kept and passed on (to the mirror pod, whose API
/// server drops what it does not know either), never a reason to refuse the file.
#[test]
fn unknown_spec_and_container_fields_are_accepted_and_kept() {
    let text = WEB
        .replace("spec:\n", "spec:\n  someFutureField: 1\n")
        .replace(
            "  - name: nginx\n",
            "  - name: nginx\n    notAField: {a: 1}\n",
        );
    let pod = one(&text);
    assert_eq!(pod.name(), "web-edge-1");
    assert!(pod.spec.extra.contains_key("someFutureField"));
    assert!(pod.spec.containers[0].extra.contains_key("notAField"));
}

#[test]
fn wrongly_typed_known_field_is_still_refused() {
    let text = WEB.replace("containerPort: 80", "containerPort: [80]");
    match parse(&text) {
        Err(ManifestError::Field { field, .. }) => {
            assert_eq!(field, "spec.containers[0].ports[0].containerPort")
        }
        other => panic!("{other:?}"),
    }
}
