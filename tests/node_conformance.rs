//! `make conformance`: upstream's node-conformance suite (the `[NodeConformance]`
//! specs of the Kubernetes v1.36 e2e suite) against litelet as the one node of a real
//! control plane, the way `../shared/conformance/README.md` describes it: etcd,
//! kube-apiserver (Node authorizer, NodeRestriction), kube-controller-manager and
//! kube-scheduler; a private containerd with a pod network, the suite's images
//! imported from an offline archive, and every registry the suite names pointed at a
//! closed port (so the specs that expect a failed pull fail fast).
//!
//! The run passes when every failed spec is on the list of the machine's own failures
//! (`tests/node-conformance/environmental-failures.txt`, each with its reason). It
//! prints the counts and the failed specs, and leaves the JUnit and JSON reports in
//! `LITELET_CONFORMANCE_OUT` (default `/tmp/litelet-conformance`).
//!
//! The suite's binaries come from `LITELET_E2E_DIR` (what `../shared/conformance/
//! unpack.sh` prints: `e2e.test`, `ginkgo`, `kube-scheduler`, `e2e-images.tar`,
//! `images.txt`). `LITELET_CONFORMANCE_PROCS` sets ginkgo's parallelism (default 8)
//! and `LITELET_CONFORMANCE_FOCUS` narrows the focus to a subset.
//!
//! Ignored by `cargo test`: the suite takes about 17 minutes on 2 cores.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::control_plane::ControlPlane;
use support::real_node::RealNode;

const LIST: &str = "tests/node-conformance/environmental-failures.txt";
const FOCUS: &str = r"\[NodeConformance\]";
const SKIP: &str = r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:";
/// The quick subset `make test` runs in CI (`LITELET_CONFORMANCE_QUICK=1`): the
/// node-conformance specs of admission, volumes (emptyDir, configMap, secret, downward
/// API, projected, hostPath), pod lifecycle and status, init and ephemeral
/// containers: 144 specs of seconds each, about 3 minutes with the set-up, against
/// about 20 for all 236.
const QUICK_FOCUS: &str = concat!(
    r"\[sig-storage\] (EmptyDir|ConfigMap|Secrets|Downward API|Projected|HostPath)",
    r".*\[NodeConformance\]",
    r"|\[sig-node\] (Pods|PodOSRejection|Kubelet|Container Runtime|InitContainer|Sysctls",
    r"|Variable Expansion|Ephemeral Containers|KubeletManagedEtcHosts|RuntimeClass",
    r"|Downward API|ConfigMap|Secrets|Containers|Security Context When creating a pod)",
    r".*\[NodeConformance\]"
);
/// Left out of the quick subset: the configMap and secret update specs wait about a
/// minute each for the kubelet's periodic resync.
const QUICK_SKIP: &str = "|optional updates|updates should be reflected";

#[test]
#[ignore = "upstream's node-conformance suite, about 17 minutes: run it with make conformance"]
fn node_conformance_suite_fails_only_where_the_machine_does() {
    let test = "node_conformance_suite_fails_only_where_the_machine_does";
    let e2e = PathBuf::from(
        std::env::var_os("LITELET_E2E_DIR")
            .expect("LITELET_E2E_DIR names the unpacked suite (../shared/conformance/unpack.sh)"),
    );
    for file in [
        "e2e.test",
        "ginkgo",
        "kube-scheduler",
        "e2e-images.tar",
        "images.txt",
    ] {
        assert!(e2e.join(file).exists(), "{} has no {file}", e2e.display());
    }
    let expected = environmental_failures(&std::fs::read_to_string(manifest_path(LIST)).unwrap());
    let images = std::fs::read_to_string(e2e.join("images.txt")).expect("images.txt");
    let pause = images
        .lines()
        .find(|l| l.starts_with("registry.k8s.io/pause:"))
        .expect("images.txt names the pause image");
    // Read by tests/containerd/start-containerd.sh; set before any thread of ours runs.
    std::env::set_var("LITELET_SANDBOX_IMAGE", pause);
    std::env::set_var("LITELET_EXTRA_IMAGES", e2e.join("e2e-images.tar"));

    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    cp.start_controllers(Some(&e2e.join("kube-scheduler")))
        .unwrap_or_else(|e| panic!("controllers: {e}"));
    let hosts = tempfile::tempdir().expect("registry hosts dir");
    closed_registries(&images, hosts.path());
    // The suite's images came from an archive and cannot be pulled again: image GC
    // (which a full build disk triggers) must not remove them between specs.
    let extra = [
        "--image-gc-high-threshold=100",
        "--image-gc-low-threshold=99",
    ];
    let Some(node) =
        RealNode::start_with_registries(test, "conformance", &extra, Some(hosts.path()))
    else {
        return;
    };
    node.wait_ready();
    node.wait_for("the node has no taints", || {
        node.node_object()
            .is_some_and(|n| n["spec"]["taints"].as_array().is_none_or(Vec::is_empty))
    });

    let out = PathBuf::from(
        std::env::var("LITELET_CONFORMANCE_OUT").unwrap_or("/tmp/litelet-conformance".into()),
    );
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("report dir");
    let procs = std::env::var("LITELET_CONFORMANCE_PROCS").unwrap_or("8".into());
    let quick = std::env::var("LITELET_CONFORMANCE_QUICK").is_ok_and(|v| v == "1");
    let (focus, skip) = if quick {
        (QUICK_FOCUS.to_owned(), format!("{SKIP}{QUICK_SKIP}"))
    } else {
        (FOCUS.to_owned(), SKIP.to_owned())
    };
    let focus = std::env::var("LITELET_CONFORMANCE_FOCUS").unwrap_or(focus);
    let kubectl = cp.kubectl_command().get_program().to_owned();
    let status = Command::new(e2e.join("ginkgo"))
        .arg(format!("--procs={procs}"))
        .arg("--timeout=45m")
        .arg(format!("--focus={focus}"))
        .arg(format!("--skip={skip}"))
        .arg("--no-color")
        .arg(format!("--output-dir={}", out.display()))
        .args(["--junit-report=junit_01.xml", "--json-report=ginkgo.json"])
        .arg("--silence-skips")
        .arg(e2e.join("e2e.test"))
        .arg("--")
        .arg("--provider=skeleton")
        .arg(format!("--kubeconfig={}", cp.admin_kubeconfig().display()))
        .arg(format!("--kubectl-path={}", Path::new(&kubectl).display()))
        .args(["--disable-log-dump", "--dump-logs-on-failure=false"])
        .arg("--node-os-distro=debian")
        .status()
        .expect("run ginkgo");

    let junit = std::fs::read_to_string(out.join("junit_01.xml"))
        .unwrap_or_else(|e| panic!("ginkgo (exit {status}) wrote no JUnit report: {e}"));
    let specs = junit_specs(&junit);
    let outcome = judge(&specs, &expected);
    println!("\n{}", outcome.report());
    println!("JUnit report: {}", out.join("junit_01.xml").display());

    // The suite deletes its namespaces; let the node finish their pods while it runs,
    // so that stopping it leaves no containers behind.
    let pods_path = format!("/api/v1/pods?fieldSelector=spec.nodeName={}", node.name);
    let drained = support::wait_until(Duration::from_secs(60), || {
        cp.admin()
            .get::<serde_json::Value>(&pods_path)
            .is_ok_and(|l| l["items"].as_array().is_none_or(Vec::is_empty))
    });
    if !drained {
        eprintln!("warning: pods of the suite still on the node after a minute");
    }
    assert!(
        outcome.unexpected.is_empty() && outcome.passed > 0,
        "specs failed outside the machine's known failures ({LIST}):\n{}",
        outcome.unexpected.join("\n")
    );
}

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Points every registry host the suite names at a closed local port.
fn closed_registries(images: &str, dir: &Path) {
    let mut hosts: Vec<&str> = images
        .lines()
        .filter_map(|l| l.split_once('/').map(|(host, _)| host))
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    for host in hosts {
        let d = dir.join(host);
        std::fs::create_dir_all(&d).expect("hosts dir");
        let toml = format!(
            "server = \"https://{host}\"\n\n[host.\"https://127.0.0.1:1\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        std::fs::write(d.join("hosts.toml"), toml).expect("hosts.toml");
    }
}

/// The specs on the list, with their reasons.
fn environmental_failures(text: &str) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            let reason = trimmed.strip_prefix("reason:").map(str::trim);
            match (list.last_mut(), reason) {
                (Some(entry), Some(reason)) if entry.1.is_empty() => entry.1 = reason.to_owned(),
                _ => panic!("{LIST}: a stray line: {line:?}"),
            }
        } else {
            list.push((trimmed.to_owned(), String::new()));
        }
    }
    for (spec, reason) in &list {
        assert!(!reason.is_empty(), "{LIST}: {spec:?} has no reason");
    }
    list
}

/// One spec's name and ginkgo status (`passed`, `failed`, `skipped`, ...).
#[derive(Debug, PartialEq)]
struct Spec {
    name: String,
    status: String,
}

/// The `[It]` test cases of a ginkgo JUnit report (suite set-up nodes left out).
fn junit_specs(xml: &str) -> Vec<Spec> {
    xml.split("<testcase ")
        .skip(1)
        .filter_map(|case| {
            // The split took the space before the first attribute.
            let head = format!(" {}", &case[..case.find('>')?]);
            let name = unescape(attribute(&head, "name")?);
            let status = attribute(&head, "status")?.to_owned();
            let name = name.strip_prefix("[It] ")?.to_owned();
            Some(Spec { name, status })
        })
        .collect()
}

fn attribute<'a>(head: &'a str, key: &str) -> Option<&'a str> {
    let start = head.find(&format!(" {key}=\""))? + key.len() + 3;
    let len = head[start..].find('"')?;
    Some(&head[start..start + len])
}

fn unescape(s: &str) -> String {
    s.replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A run judged against the list.
#[derive(Debug, Default)]
struct Outcome {
    passed: usize,
    failed: usize,
    /// Failed specs on the list, with the reason.
    environmental: Vec<String>,
    /// Failed specs not on the list: the run fails.
    unexpected: Vec<String>,
    /// Specs on the list that passed: they should leave it.
    listed_but_passed: Vec<String>,
}

fn judge(specs: &[Spec], expected: &[(String, String)]) -> Outcome {
    let mut outcome = Outcome::default();
    let listed = |name: &str| {
        expected
            .iter()
            .find(|(spec, _)| name.starts_with(spec.as_str()))
    };
    for spec in specs {
        match spec.status.as_str() {
            "passed" => {
                outcome.passed += 1;
                if listed(&spec.name).is_some() {
                    outcome.listed_but_passed.push(spec.name.clone());
                }
            }
            "skipped" | "pending" => {}
            _ => {
                outcome.failed += 1;
                match listed(&spec.name) {
                    Some((_, reason)) => outcome
                        .environmental
                        .push(format!("{} (environmental: {reason})", spec.name)),
                    None => outcome
                        .unexpected
                        .push(format!("{} ({})", spec.name, spec.status)),
                }
            }
        }
    }
    outcome
}

impl Outcome {
    fn report(&self) -> String {
        let mut out = format!(
            "node conformance: {} passed, {} failed ({} environmental, {} unexpected)\n",
            self.passed,
            self.failed,
            self.environmental.len(),
            self.unexpected.len()
        );
        for name in &self.unexpected {
            out.push_str(&format!("  FAILED      {name}\n"));
        }
        for name in &self.environmental {
            out.push_str(&format!("  known       {name}\n"));
        }
        for name in &self.listed_but_passed {
            out.push_str(&format!("  now passes  {name}: take it off {LIST}\n"));
        }
        out
    }
}

#[test]
fn the_environmental_list_parses_and_names_a_reason_for_each_spec() {
    let list = environmental_failures(&std::fs::read_to_string(manifest_path(LIST)).unwrap());
    assert_eq!(list.len(), 5, "{list:?}");
    assert!(list
        .iter()
        .all(|(spec, reason)| spec.starts_with("[sig-") && !reason.is_empty()));
}

#[test]
fn a_failure_off_the_list_fails_the_run_and_one_on_it_does_not() {
    let xml = r#"<testsuites><testsuite>
      <testcase name="[SynchronizedBeforeSuite]" classname="e2e" status="passed" time="1"></testcase>
      <testcase name="[It] [sig-node] A [NodeConformance] works [sig-node, NodeConformance]" classname="e2e" status="passed" time="1"></testcase>
      <testcase name="[It] [sig-node] B [NodeConformance] needs a dummy link [sig-node]" classname="e2e" status="failed" time="1"><failure/></testcase>
      <testcase name="[It] [sig-node] C doesn&#39;t match [NodeConformance]" classname="e2e" status="failed" time="1"><failure/></testcase>
      <testcase name="[It] [sig-node] D [NodeConformance] skipped" classname="e2e" status="skipped" time="0"></testcase>
    </testsuite></testsuites>"#;
    let specs = junit_specs(xml);
    assert_eq!(specs.len(), 4, "suite nodes are not specs: {specs:?}");
    let expected = environmental_failures(
        "# comment\n[sig-node] B [NodeConformance] needs a dummy link\n    reason: no dummy\n",
    );
    let outcome = judge(&specs, &expected);
    assert_eq!((outcome.passed, outcome.failed), (1, 2));
    assert_eq!(outcome.environmental.len(), 1);
    assert_eq!(
        outcome.unexpected,
        vec!["[sig-node] C doesn't match [NodeConformance] (failed)".to_owned()]
    );
    assert!(outcome.report().contains("1 passed, 2 failed"));
}
