//! Tests of the pod cgroup manager on temp-dir models of v1 (hybrid) and v2 cgroupfs.

use super::*;
use crate::api::pod::QosClass as ApiQos;
use crate::cgroups::fs::FsError;
use crate::cgroups::pod_resources::tests::{container, pod};
use crate::cgroups::testfs::Model;

fn guaranteed(uid: &str) -> Pod {
    let mut p = pod(
        vec![container("a", &[], &[("cpu", "500m"), ("memory", "64Mi")])],
        vec![],
    );
    p.metadata.uid = Some(uid.to_owned());
    p
}

fn burstable(uid: &str) -> Pod {
    let mut p = pod(
        vec![container(
            "a",
            &[("cpu", "250m"), ("memory", "32Mi")],
            &[("cpu", "1"), ("memory", "64Mi")],
        )],
        vec![],
    );
    p.metadata.uid = Some(uid.to_owned());
    p
}

fn best_effort(uid: &str) -> Pod {
    let mut p = pod(vec![container("a", &[], &[])], vec![]);
    p.metadata.uid = Some(uid.to_owned());
    p
}

/// A v1 model with the QoS cgroups populated, and its manager.
fn v1_setup(config: ManagerConfig) -> (Model, PodCgroupManager) {
    let model = Model::v1();
    let root = CgroupName::parse(&config.cgroup_root).unwrap();
    for qos in ["", "/burstable", "/besteffort"] {
        model.populate(&format!("{root}/kubepods{qos}").replace("//", "/"));
    }
    let manager = PodCgroupManager::new(model.root(), &model.mountinfo, config).unwrap();
    (model, manager)
}

fn v2_setup() -> (Model, PodCgroupManager) {
    let model = Model::v2("cpu io memory pids");
    for qos in ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"] {
        model.populate(qos);
    }
    let manager =
        PodCgroupManager::new(model.root(), &model.mountinfo, ManagerConfig::default()).unwrap();
    (model, manager)
}

#[test]
fn detects_the_version() {
    let (_m, v1) = v1_setup(ManagerConfig::default());
    assert_eq!(v1.version(), CgroupVersion::V1);
    assert_eq!(v1.mode(), CgroupMode::Hybrid);
    let (_m, v2) = v2_setup();
    assert_eq!(v2.version(), CgroupVersion::V2);
    assert_eq!(v2.mode(), CgroupMode::Unified);
}

#[test]
fn pod_cgroup_names_follow_qos() {
    let (_m, manager) = v1_setup(ManagerConfig::default());
    let cases = [
        (guaranteed("u1"), "/kubepods/podu1"),
        (burstable("u2"), "/kubepods/burstable/podu2"),
        (best_effort("u3"), "/kubepods/besteffort/podu3"),
    ];
    for (p, want) in cases {
        assert_eq!(manager.pod_cgroup_name(&p).unwrap(), want);
    }
    // The API server's recorded class wins over the spec.
    let mut p = best_effort("u4");
    p.status.qos_class = Some(ApiQos::Burstable);
    assert_eq!(
        manager.pod_cgroup_name(&p).unwrap(),
        "/kubepods/burstable/podu4"
    );
}

#[test]
fn cgroup_root_prefixes_everything() {
    let config = ManagerConfig {
        cgroup_root: "/edge".to_owned(),
        ..Default::default()
    };
    let (_m, manager) = v1_setup(config);
    assert_eq!(
        manager.pod_cgroup_name(&burstable("u1")).unwrap(),
        "/edge/kubepods/burstable/podu1"
    );
    let model = Model::v1();
    let bad = ManagerConfig {
        cgroup_root: "/../etc".to_owned(),
        ..Default::default()
    };
    assert!(matches!(
        PodCgroupManager::new(model.root(), &model.mountinfo, bad),
        Err(CgroupError::InvalidName { .. })
    ));
}

#[test]
fn cfs_period_must_be_one_the_kernel_accepts() {
    let model = Model::v1();
    for value in [0, 999, 1_000_001] {
        let mut config = ManagerConfig::default();
        config.options.cpu_period_us = value;
        assert!(matches!(
            PodCgroupManager::new(model.root(), &model.mountinfo, config),
            Err(CgroupError::InvalidPeriod { .. })
        ));
    }
}

#[test]
fn untrusted_uids_are_refused() {
    let (_m, manager) = v1_setup(ManagerConfig::default());
    for uid in ["", ".", "..", "../../x", "a/b", "a b"] {
        let err = manager.pod_cgroup_name(&best_effort(uid)).unwrap_err();
        assert!(matches!(err, CgroupError::InvalidName { .. }), "{uid:?}");
        assert!(!manager.exists(uid));
        assert!(manager.remove_pod(uid).is_err(), "{uid:?}");
    }
}

#[test]
fn ensure_qos_hierarchy_v1() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    manager.ensure_qos_hierarchy().unwrap();
    manager.ensure_qos_hierarchy().unwrap();
    assert_eq!(model.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
    assert_eq!(
        model.read("cpu", "/kubepods/burstable", "cpu.shares"),
        "1024"
    );
    for h in ["cpu", "cpuacct", "memory", "pids"] {
        assert!(model.path(h, "/kubepods/burstable").is_dir());
    }
}

#[test]
fn ensure_qos_hierarchy_from_nothing_creates_then_needs_the_kernel() {
    let model = Model::v1();
    let manager =
        PodCgroupManager::new(model.root(), &model.mountinfo, ManagerConfig::default()).unwrap();
    // The model's mkdir makes empty directories, so writing the shares fails: this shows
    // that the directories were made and that nothing creates interface files.
    let err = manager.ensure_qos_hierarchy().unwrap_err();
    assert!(
        matches!(err, CgroupError::Fs(FsError::MissingFile { .. })),
        "{err}"
    );
    assert!(model.path("memory", "/kubepods/besteffort").is_dir());
}

#[test]
fn create_or_update_writes_the_pod_config_v1() {
    let config = ManagerConfig {
        pod_pids_limit: Some(100),
        ..Default::default()
    };
    let (model, manager) = v1_setup(config);
    let p = burstable("u1");
    let dir = "/kubepods/burstable/podu1";
    model.populate(dir);
    manager.create_or_update_pod(&p).unwrap();
    assert_eq!(model.read("cpu", dir, "cpu.shares"), "256");
    assert_eq!(model.read("cpu", dir, "cpu.cfs_quota_us"), "100000");
    assert_eq!(model.read("cpu", dir, "cpu.cfs_period_us"), "100000");
    assert_eq!(
        model.read("memory", dir, "memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(model.read("pids", dir, "pids.max"), "100");
    assert!(manager.exists("u1"));
    assert_eq!(
        manager.read_pod_resources("u1").unwrap(),
        manager.pod_resources(&p)
    );
}

#[test]
fn ensure_pod_leaves_an_existing_cgroup_alone() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let dir = "/kubepods/podg1";
    model.populate(dir);
    model.set("cpu", dir, "cpu.shares", "999");
    assert!(!manager.ensure_pod(&guaranteed("g1")).unwrap());
    assert_eq!(model.read("cpu", dir, "cpu.shares"), "999");
}

#[test]
fn ensure_pod_creates_and_applies() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    // Present in cpu and memory (as if the kernel filled them), missing in the others:
    // not "existing", so it is created where missing and configured.
    let dir = "/kubepods/podg2";
    model.populate(dir);
    std::fs::remove_dir_all(model.path("pids", dir)).unwrap();
    assert!(!manager.exists("g2"));
    assert!(manager.ensure_pod(&guaranteed("g2")).unwrap());
    assert!(manager.exists("g2"));
    assert_eq!(model.read("cpu", dir, "cpu.shares"), "512");
    assert_eq!(model.read("cpu", dir, "cpu.cfs_quota_us"), "50000");
    assert_eq!(
        model.read("memory", dir, "memory.limit_in_bytes"),
        "67108864"
    );
}

#[test]
fn ensure_pod_on_a_bare_mkdir_fails_on_the_missing_file() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let err = manager.ensure_pod(&best_effort("b1")).unwrap_err();
    match err {
        CgroupError::Fs(FsError::MissingFile { path, value }) => {
            assert!(path.ends_with("kubepods/besteffort/podb1/cpu.shares"));
            assert_eq!(value, "2");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(model.path("cpu", "/kubepods/besteffort/podb1").is_dir());
}

#[test]
fn updates_reads_and_usage_by_uid() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let dir = "/kubepods/burstable/podu1";
    model.populate(dir);
    let update = CgroupResources {
        memory_limit: Some(Limit::Value(128 << 20)),
        ..Default::default()
    };
    manager.update_pod_resources("u1", &update).unwrap();
    assert_eq!(
        model.read("memory", dir, "memory.limit_in_bytes"),
        "134217728"
    );
    assert_eq!(
        manager.read_pod_resources("u1").unwrap().memory_limit,
        Some(Limit::Value(128 << 20))
    );
    model.set("memory", dir, "memory.usage_in_bytes", "4096\n");
    assert_eq!(manager.memory_usage("u1").unwrap(), 4096);
    model.set("cpu", dir, "cgroup.procs", "77\n");
    assert_eq!(manager.pod_processes("u1").unwrap(), vec![77]);
    assert_eq!(manager.pod_processes("nobody").unwrap(), Vec::<i32>::new());

    for err in [
        manager.update_pod_resources("nobody", &update).unwrap_err(),
        manager.read_pod_resources("nobody").unwrap_err(),
        manager.memory_usage("nobody").unwrap_err(),
    ] {
        assert!(
            matches!(&err, CgroupError::PodNotFound { uid } if uid == "nobody"),
            "{err}"
        );
    }
}

#[test]
fn a_pod_at_hand_is_found_under_its_own_class_and_else_wherever_it_is() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let dir = "/kubepods/burstable/podu1";
    model.populate(dir);
    model.set("memory", dir, "memory.usage_in_bytes", "4096\n");
    let found = manager.find_pod_of(&burstable("u1")).unwrap();
    assert_eq!(found.as_ref().map(|n| n.to_string()), Some(dir.to_owned()));
    let found = found.unwrap();
    assert_eq!(
        manager.read_found(&found).unwrap(),
        manager.read_pod_resources("u1").unwrap()
    );
    assert_eq!(manager.memory_usage_found(&found).unwrap(), 4096);
    // The same UID seen with another class (its cgroup made under the old one).
    let elsewhere = manager.find_pod_of(&guaranteed("u1")).unwrap();
    assert_eq!(elsewhere.map(|n| n.to_string()), Some(dir.to_owned()));
    assert_eq!(manager.find_pod_of(&best_effort("nobody")).unwrap(), None);
}

#[test]
fn list_and_remove_pods_v1() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let dirs = [
        ("cpu", "/kubepods/poda"),
        ("memory", "/kubepods/burstable/podb"),
        ("cpuset", "/kubepods/besteffort/podc"),
        ("systemd", "/kubepods/besteffort/podc/container-1"),
        ("pids", "/kubepods/burstable/not-a-pod"),
    ];
    for (h, d) in dirs {
        std::fs::create_dir_all(model.path(h, d)).unwrap();
    }
    assert_eq!(manager.list_pod_uids().unwrap(), vec!["a", "b", "c"]);
    model.strip_files();
    manager.remove_pod("c").unwrap();
    manager.remove_pod("c").unwrap();
    assert!(!model.path("cpuset", "/kubepods/besteffort/podc").exists());
    assert!(!model.path("systemd", "/kubepods/besteffort/podc").exists());
    assert_eq!(manager.list_pod_uids().unwrap(), vec!["a", "b"]);
    manager.remove_pod("a").unwrap();
    manager.remove_pod("b").unwrap();
    assert_eq!(manager.list_pod_uids().unwrap(), Vec::<String>::new());
    assert!(model.path("cpu", "/kubepods/besteffort").is_dir());
}

#[test]
fn qos_cpu_shares_are_written() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    let pods = [burstable("a"), burstable("b"), guaranteed("c")];
    let shares = manager.update_qos_cpu_shares(&pods).unwrap();
    assert_eq!(shares.burstable, 512);
    assert_eq!(
        model.read("cpu", "/kubepods/burstable", "cpu.shares"),
        "512"
    );
    assert_eq!(model.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
}

#[test]
fn v2_hierarchy_and_pod() {
    let (model, manager) = v2_setup();
    manager.ensure_qos_hierarchy().unwrap();
    assert_eq!(
        model.read("", "/", "cgroup.subtree_control"),
        "+cpu +memory +pids"
    );
    assert_eq!(
        model.read("", "/kubepods", "cgroup.subtree_control"),
        "+cpu +memory +pids"
    );
    assert_eq!(model.read("", "/kubepods/besteffort", "cpu.weight"), "1");

    let p = guaranteed("g1");
    model.populate("/kubepods/podg1");
    manager.create_or_update_pod(&p).unwrap();
    assert_eq!(model.read("", "/kubepods/podg1", "cpu.weight"), "20");
    assert_eq!(model.read("", "/kubepods/podg1", "cpu.max"), "50000 100000");
    assert_eq!(model.read("", "/kubepods/podg1", "memory.max"), "67108864");
    assert_eq!(model.read("", "/kubepods/podg1", "pids.max"), "max");
    assert_eq!(manager.list_pod_uids().unwrap(), vec!["g1"]);
    let read = manager.read_pod_resources("g1").unwrap();
    assert_eq!(read.cpu_quota, Some(Limit::Value(50_000)));
    assert_eq!(read.memory_limit, Some(Limit::Value(64 << 20)));

    model.strip_files();
    manager.remove_pod("g1").unwrap();
    assert!(!manager.exists("g1"));
}

#[test]
fn normalize_keeps_what_the_kernel_keeps() {
    let odd = CgroupResources {
        cpu_shares: Some(1024),
        memory_limit: Some(Limit::Value(1_000_000_000)),
        ..Default::default()
    };
    let (_m1, v1) = v1_setup(ManagerConfig::default());
    let page = 4096; // the machines litelet targets; arm64 64 KiB pages round further
    let n = v1.normalize(&odd);
    assert_eq!(n.cpu_shares, Some(1024));
    assert!(matches!(n.memory_limit, Some(Limit::Value(b)) if b <= 1_000_000_000 && b % page == 0));
    assert_eq!(v1.normalize(&n), n);
    let (_m2, v2) = v2_setup();
    let n = v2.normalize(&odd);
    // 1024 shares is weight 39, whose smallest shares are 999.
    assert_eq!(n.cpu_shares, Some(999));
    assert_eq!(v2.normalize(&n), n);
}

#[test]
fn container_memory_usage_reads_the_container_cgroup_below_the_pod() {
    let (model, manager) = v1_setup(ManagerConfig::default());
    model.populate("/kubepods/burstable/podu1");
    assert_eq!(manager.container_memory_usage("u1", "abc").unwrap(), None);
    model.populate("/kubepods/burstable/podu1/abc");
    model.set(
        "memory",
        "/kubepods/burstable/podu1/abc",
        "memory.usage_in_bytes",
        "4096",
    );
    assert_eq!(
        manager.container_memory_usage("u1", "abc").unwrap(),
        Some(4096)
    );
    assert_eq!(
        manager.container_memory_usage("nobody", "abc").unwrap(),
        None
    );
}

/// A Burstable pod requesting `cpu`.
fn burstable_asking(uid: &str, cpu: &str) -> Pod {
    let mut p = pod(
        vec![container(
            "a",
            &[("cpu", cpu), ("memory", "32Mi")],
            &[("cpu", "2"), ("memory", "64Mi")],
        )],
        vec![],
    );
    p.metadata.uid = Some(uid.to_owned());
    p
}

#[test]
fn burstable_qos_shares_follow_the_noted_and_forgotten_pods() {
    let (m1, v1) = v1_setup(ManagerConfig::default());
    let (m2, v2) = v2_setup();
    for (model, manager) in [(&m1, &v1), (&m2, &v2)] {
        let read = |dir: &str| {
            if model.is_v2() {
                model.read("", dir, "cpu.weight")
            } else {
                model.read("cpu", dir, "cpu.shares")
            }
        };
        let on_disk = |shares: u64| {
            if model.is_v2() {
                shares_to_weight(shares).to_string()
            } else {
                shares.to_string()
            }
        };
        manager.note_active_pod(&burstable_asking("half", "500m"));
        manager.note_active_pod(&burstable_asking("quarter", "250m"));
        manager.note_active_pod(&guaranteed("g"));
        manager.note_active_pod(&best_effort("be"));
        let written = manager.update_qos_cgroups().unwrap();
        assert_eq!(written.burstable, 512 + 256);
        assert_eq!(read("/kubepods/burstable"), on_disk(768));
        assert_eq!(read("/kubepods/besteffort"), on_disk(MIN_SHARES));

        // A resize counts at the new request, not twice.
        manager.note_active_pod(&burstable_asking("quarter", "1"));
        assert_eq!(manager.update_qos_cgroups().unwrap().burstable, 1536);

        manager.forget_active_pod("half");
        manager.retain_active_pods(|uid| uid != "quarter");
        assert_eq!(manager.update_qos_cgroups().unwrap().burstable, MIN_SHARES);
        assert_eq!(read("/kubepods/burstable"), on_disk(MIN_SHARES));
    }
}

#[test]
fn kubepods_limits_skip_pids_max_where_the_pids_controller_is_missing() {
    let (model, manager) = v2_setup();
    model.delete("", "/kubepods", "pids.max");
    let limits = CgroupResources {
        memory_limit: Some(Limit::Value(1 << 30)),
        pids_max: Some(Limit::Value(1000)),
        ..Default::default()
    };
    manager.update_kubepods(&limits).unwrap();
    assert_eq!(
        model.read("", "/kubepods", "memory.max"),
        (1u64 << 30).to_string()
    );
    // With the controller, pids.max is written.
    model.set("", "/kubepods", "pids.max", "max");
    manager.update_kubepods(&limits).unwrap();
    assert_eq!(model.read("", "/kubepods", "pids.max"), "1000");
}
