//! Table tests for the GC decisions: each case lists what the runtime has and the IDs
//! that must go, in removal order.

use super::*;

const SEC: i64 = 1_000_000_000;
/// "now" in the tables: 1000 s after the epoch.
const NOW: i64 = 1000 * SEC;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(NOW as u64)
}

/// A container `id` of pod `uid`, named `name`, created `age` seconds before NOW.
fn c(id: &str, uid: &str, name: &str, state: ContainerState, age: i64) -> GcContainer {
    GcContainer {
        id: id.into(),
        pod_uid: uid.into(),
        name: name.into(),
        sandbox_id: format!("sb-{uid}"),
        state,
        created_at: NOW - age * SEC,
    }
}

fn dead(id: &str, uid: &str, name: &str, age: i64) -> GcContainer {
    c(id, uid, name, ContainerState::Exited, age)
}

fn policy(min_age: u64, per_unit: i32, max: i32) -> GcPolicy {
    GcPolicy {
        min_age: Duration::from_secs(min_age),
        max_per_pod_container: per_unit,
        max_containers: max,
    }
}

struct Case {
    name: &'static str,
    containers: Vec<GcContainer>,
    policy: GcPolicy,
    all_sources_ready: bool,
    removable: &'static [&'static str],
    remove: &'static [&'static str],
}

fn check(case: Case) {
    let removable = |uid: &str| case.removable.contains(&uid);
    let got: Vec<&str> = containers_to_remove(
        &case.containers,
        &case.policy,
        case.all_sources_ready,
        &removable,
        now(),
    )
    .into_iter()
    .map(|c| c.id.as_str())
    .collect();
    assert_eq!(got, case.remove, "case {:?}", case.name);
}

#[test]
fn container_selection() {
    let cases = vec![
        Case {
            name: "default keeps the newest dead instance per (pod, name)",
            containers: vec![
                dead("a1", "p", "a", 30),
                dead("a3", "p", "a", 10),
                dead("a2", "p", "a", 20),
                c("a4", "p", "a", ContainerState::Running, 5),
                dead("b1", "p", "b", 40),
            ],
            policy: GcPolicy::default(),
            all_sources_ready: true,
            removable: &[],
            remove: &["a1", "a2"],
        },
        Case {
            name: "running containers are never removed",
            containers: vec![
                c("r1", "p", "a", ContainerState::Running, 50),
                c("r2", "p", "a", ContainerState::Running, 40),
                c("r3", "q", "a", ContainerState::Running, 40),
            ],
            policy: policy(0, 0, 0),
            all_sources_ready: true,
            removable: &["p", "q"],
            remove: &[],
        },
        Case {
            name: "created and unknown containers count as dead",
            containers: vec![
                c("u1", "p", "a", ContainerState::Unknown, 30),
                c("c1", "p", "a", ContainerState::Created, 20),
                dead("e1", "p", "a", 10),
            ],
            policy: GcPolicy::default(),
            all_sources_ready: false,
            removable: &[],
            remove: &["u1", "c1"],
        },
        Case {
            name: "dead containers younger than min age are kept",
            containers: vec![
                dead("old", "p", "a", 300),
                dead("mid", "p", "a", 200),
                dead("young", "p", "a", 30),
            ],
            policy: policy(60, 1, -1),
            all_sources_ready: true,
            removable: &[],
            // The young one does not count: of the two old ones, the newer stays.
            remove: &["old"],
        },
        Case {
            name: "min age also protects a removable pod's containers",
            containers: vec![dead("old", "p", "a", 300), dead("young", "p", "a", 30)],
            policy: policy(60, 1, -1),
            all_sources_ready: true,
            removable: &["p"],
            remove: &["old"],
        },
        Case {
            name: "a removable pod loses every dead container when sources are ready",
            containers: vec![
                dead("a1", "gone", "a", 20),
                dead("a2", "gone", "a", 10),
                dead("b1", "gone", "b", 10),
                c("b2", "gone", "b", ContainerState::Running, 5),
                dead("k1", "live", "a", 10),
            ],
            policy: GcPolicy::default(),
            all_sources_ready: true,
            removable: &["gone"],
            remove: &["a1", "a2", "b1"],
        },
        Case {
            name: "without all sources ready a removable pod only gets the per-unit limit",
            containers: vec![
                dead("a1", "gone", "a", 20),
                dead("a2", "gone", "a", 10),
                dead("b1", "gone", "b", 10),
            ],
            policy: GcPolicy::default(),
            all_sources_ready: false,
            removable: &["gone"],
            remove: &["a1"],
        },
        Case {
            name: "negative per-unit limit keeps everything",
            containers: vec![dead("a1", "p", "a", 20), dead("a2", "p", "a", 10)],
            policy: policy(0, -1, -1),
            all_sources_ready: true,
            removable: &[],
            remove: &[],
        },
        Case {
            name: "per-unit limit of 2 keeps the two newest",
            containers: vec![
                dead("a1", "p", "a", 40),
                dead("a2", "p", "a", 30),
                dead("a3", "p", "a", 20),
                dead("a4", "p", "a", 10),
            ],
            policy: policy(0, 2, -1),
            all_sources_ready: true,
            removable: &[],
            remove: &["a1", "a2"],
        },
        Case {
            name: "node limit: each unit capped at max(1, 2/3), then the oldest go",
            containers: vec![
                dead("x1", "p", "x", 60),
                dead("x2", "p", "x", 50),
                dead("y1", "p", "y", 40),
                dead("y2", "p", "y", 30),
                dead("z1", "q", "z", 20),
                dead("z2", "q", "z", 10),
            ],
            policy: policy(0, -1, 2),
            all_sources_ready: true,
            removable: &[],
            // Units in (uid, name) order: p/x, p/y, q/z; then x2 is the oldest left.
            remove: &["x1", "y1", "z1", "x2"],
        },
        Case {
            name: "node limit larger than the per-unit share spreads evenly",
            containers: vec![
                dead("x1", "p", "x", 60),
                dead("x2", "p", "x", 50),
                dead("x3", "p", "x", 45),
                dead("y1", "q", "y", 40),
                dead("y2", "q", "y", 30),
            ],
            policy: policy(0, -1, 4),
            all_sources_ready: true,
            removable: &[],
            // 4 / 2 units = 2 per unit: x1 goes; 4 remain, which is the limit.
            remove: &["x1"],
        },
        Case {
            name: "node limit of zero removes every dead container",
            containers: vec![dead("x1", "p", "x", 60), dead("y1", "q", "y", 40)],
            policy: policy(0, -1, 0),
            all_sources_ready: false,
            removable: &[],
            remove: &["x1", "y1"],
        },
        Case {
            name: "node limit not reached: nothing beyond the per-unit limit",
            containers: vec![dead("x1", "p", "x", 60), dead("y1", "q", "y", 40)],
            policy: policy(0, 1, 5),
            all_sources_ready: true,
            removable: &[],
            remove: &[],
        },
        Case {
            name: "containers without litelet's pod label are someone else's",
            containers: vec![dead("f1", "", "a", 60), dead("f2", "", "a", 50)],
            policy: policy(0, 0, 0),
            all_sources_ready: true,
            removable: &[""],
            remove: &[],
        },
    ];
    for case in cases {
        check(case);
    }
}

fn sb(id: &str, uid: &str, ready: bool, age: i64) -> GcSandbox {
    GcSandbox {
        id: id.into(),
        pod_uid: uid.into(),
        ready,
        created_at: NOW - age * SEC,
    }
}

fn in_sandbox(id: &str, sandbox: &str, state: ContainerState) -> GcContainer {
    GcContainer {
        sandbox_id: sandbox.into(),
        ..c(id, "p", "a", state, 1)
    }
}

fn check_sandboxes(
    name: &str,
    sandboxes: &[GcSandbox],
    containers: &[GcContainer],
    removable: &[&str],
    want: &[&str],
) {
    let is_removable = |uid: &str| removable.contains(&uid);
    let got: Vec<&str> = sandboxes_to_remove(sandboxes, containers, &is_removable)
        .into_iter()
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(got, want, "case {name:?}");
}

#[test]
fn sandbox_selection() {
    check_sandboxes(
        "live pod keeps its newest inactive sandbox, the older go oldest first",
        &[
            sb("s2", "p", false, 20),
            sb("s1", "p", false, 30),
            sb("s3", "p", false, 10),
        ],
        &[],
        &[],
        &["s1", "s2"],
    );
    check_sandboxes(
        "ready sandboxes and sandboxes with containers stay",
        &[
            sb("ready", "p", true, 30),
            sb("busy", "p", false, 20),
            sb("newest", "p", false, 10),
        ],
        &[in_sandbox("c1", "busy", ContainerState::Exited)],
        &["p"],
        &["newest"],
    );
    check_sandboxes(
        "a live pod's newest sandbox stays even when an older one is ready",
        &[sb("old-ready", "p", true, 30), sb("new", "p", false, 10)],
        &[],
        &[],
        &[],
    );
    check_sandboxes(
        "a live pod's older dead sandbox goes when the newest is ready",
        &[sb("old", "p", false, 30), sb("new-ready", "p", true, 10)],
        &[],
        &[],
        &["old"],
    );
    check_sandboxes(
        "a removable pod loses every inactive sandbox",
        &[
            sb("a", "gone", false, 30),
            sb("b", "gone", false, 10),
            sb("k", "live", false, 10),
        ],
        &[],
        &["gone"],
        &["a", "b"],
    );
    check_sandboxes(
        "a container of any owner keeps its sandbox",
        &[sb("a", "gone", false, 30)],
        &[GcContainer {
            pod_uid: String::new(),
            ..in_sandbox("f", "a", ContainerState::Exited)
        }],
        &["gone"],
        &[],
    );
    check_sandboxes(
        "sandboxes without litelet's pod label are someone else's",
        &[sb("f1", "", false, 30), sb("f2", "", false, 10)],
        &[],
        &[""],
        &[],
    );
}

#[test]
fn log_dir_selection() {
    let names: Vec<String> = [
        "ns_web_uid-gone",
        "ns_web_uid-live",
        "not-a-pod-dir",
        "a_b_c_d",
        "_web_uid-gone",
        "ns__uid-gone",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let removable = |uid: &str| uid != "uid-live";
    assert_eq!(
        log_dirs_to_remove(&names, true, &removable),
        ["ns_web_uid-gone"]
    );
    assert!(log_dirs_to_remove(&names, false, &removable).is_empty());
    assert_eq!(pod_uid_of_log_dir("kube-system_dns_1234"), Some("1234"));
    assert_eq!(pod_uid_of_log_dir("ns_name_"), None);
}

#[test]
fn container_log_file_stays_inside_the_pod_dir() {
    let root = Path::new("/var/log/pods");
    let dir = pod_log_dir_of(root, "ns", "web", "u1").unwrap();
    assert_eq!(dir, Path::new("/var/log/pods/ns_web_u1"));
    let cases: &[(&str, Option<&str>)] = &[
        ("app/0.log", Some("/var/log/pods/ns_web_u1/app/0.log")),
        (
            "/var/log/pods/ns_web_u1/app/3.log",
            Some("/var/log/pods/ns_web_u1/app/3.log"),
        ),
        ("", None),
        ("../other_pod_u2/app/0.log", None),
        ("app/../../x", None),
        ("/var/log/pods/ns_web_u2/app/0.log", None),
        ("/var/log/pods/ns_web_u1", None),
        ("/var/log/pods/ns_web_u1/app/../../../../etc/passwd", None),
        ("/etc/passwd", None),
    ];
    for (log_path, want) in cases {
        assert_eq!(
            container_log_file(&dir, log_path).as_deref(),
            want.map(Path::new),
            "log path {log_path:?}"
        );
    }
    assert_eq!(pod_log_dir_of(root, "ns", "../x", "u1"), None);
    assert_eq!(pod_log_dir_of(root, "", "web", "u1"), None);
}

#[test]
fn log_files_include_rotated_copies_only() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app");
    std::fs::create_dir(&app).unwrap();
    for name in ["0.log", "0.log.20240101-000000", "10.log", "1.log"] {
        std::fs::write(app.join(name), "x").unwrap();
    }
    let mut files = log_files(&LogDir::open(&app).unwrap(), "0.log");
    files.sort();
    assert_eq!(files, ["0.log", "0.log.20240101-000000"]);
}

#[test]
fn really_below_resolves_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pods");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("ns_a_u1/app")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("ns_a_u1/evil")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("ns_b_u2")).unwrap();
    let pod = root.join("ns_a_u1");
    assert_eq!(
        really_below(&root, &pod, &pod.join("app/0.log")),
        Some(true)
    );
    assert_eq!(
        really_below(&root, &pod, &pod.join("evil/0.log")),
        Some(false)
    );
    let linked = root.join("ns_b_u2");
    assert_eq!(
        really_below(&root, &linked, &linked.join("0.log")),
        Some(false)
    );
    assert_eq!(really_below(&root, &pod, &pod.join("missing/0.log")), None);
}
