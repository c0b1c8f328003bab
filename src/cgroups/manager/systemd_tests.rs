//! The systemd driver over a fake systemd (which makes and removes slice cgroups on
//! the temp-dir cgroupfs model as systemd would): the units and properties it asks
//! for, and that a pod's files end up as with the cgroupfs driver, step by step.

use super::*;
use crate::cgroups::pod_resources::tests::{container, pod};
use crate::cgroups::systemd::fake::{FakeUnits, UnitCall};
use crate::cgroups::systemd::SystemdError;
use crate::cgroups::testfs::Model;
use crate::dbus::Value;

const UID: &str = "6b1f-22c4";
const POD_SLICE: &str =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1f_22c4.slice";

fn with_uid(mut p: Pod, uid: &str) -> Pod {
    p.metadata.uid = Some(uid.to_owned());
    p
}

fn burstable(uid: &str) -> Pod {
    with_uid(
        pod(
            vec![container(
                "a",
                &[("cpu", "250m"), ("memory", "32Mi")],
                &[("cpu", "1"), ("memory", "64Mi")],
            )],
            vec![],
        ),
        uid,
    )
}

fn guaranteed(uid: &str) -> Pod {
    with_uid(
        pod(
            vec![container("a", &[], &[("cpu", "500m"), ("memory", "64Mi")])],
            vec![],
        ),
        uid,
    )
}

fn best_effort(uid: &str) -> Pod {
    with_uid(pod(vec![container("a", &[], &[])], vec![]), uid)
}

fn config() -> ManagerConfig {
    ManagerConfig {
        pod_pids_limit: Some(100),
        ..Default::default()
    }
}

fn model(v2: bool) -> Model {
    if v2 {
        Model::v2("cpu io memory pids")
    } else {
        Model::v1()
    }
}

/// A systemd-driver manager on a fresh model, with the QoS slices started.
fn systemd_setup(v2: bool, config: ManagerConfig) -> (Model, FakeUnits, PodCgroupManager) {
    let model = model(v2);
    let units = FakeUnits::on(&model);
    let manager = PodCgroupManager::with_driver(
        model.root(),
        &model.mountinfo,
        config,
        Driver::Systemd(Box::new(units.clone())),
    )
    .unwrap();
    manager.ensure_qos_hierarchy().unwrap();
    (model, units, manager)
}

/// A cgroupfs-driver manager on a fresh model whose directories the "kernel" fills.
fn cgroupfs_setup(v2: bool, config: ManagerConfig) -> (Model, PodCgroupManager) {
    let model = model(v2);
    for qos in ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"] {
        model.populate(qos);
    }
    let manager = PodCgroupManager::new(model.root(), &model.mountinfo, config).unwrap();
    manager.ensure_qos_hierarchy().unwrap();
    (model, manager)
}

/// The files litelet writes, as (hierarchy, file, content).
fn files(model: &Model, dir: &str) -> Vec<(&'static str, &'static str, String)> {
    let wanted: &[(&str, &str)] = if model.is_v2() {
        &[
            ("", "cpu.weight"),
            ("", "cpu.max"),
            ("", "memory.max"),
            ("", "pids.max"),
        ]
    } else {
        &[
            ("cpu", "cpu.shares"),
            ("cpu", "cpu.cfs_quota_us"),
            ("cpu", "cpu.cfs_period_us"),
            ("memory", "memory.limit_in_bytes"),
            ("pids", "pids.max"),
        ]
    };
    wanted
        .iter()
        .map(|(h, f)| (*h, *f, model.read(h, dir, f)))
        .collect()
}

#[test]
fn the_qos_slices_start_parent_first_and_besteffort_gets_minimum_shares() {
    for v2 in [false, true] {
        let (model, units, _manager) = systemd_setup(v2, config());
        assert_eq!(
            units.started(),
            [
                "kubepods.slice",
                "kubepods-burstable.slice",
                "kubepods-besteffort.slice"
            ]
        );
        let calls = units.calls();
        let UnitCall::Start(_, props) = &calls[2] else {
            panic!("{calls:?}");
        };
        assert!(props.contains(&(
            "Wants",
            Value::array("s", vec![Value::str("kubepods.slice")])
        )));
        let shares = if v2 {
            ("CPUWeight", 1)
        } else {
            ("CPUShares", 2)
        };
        assert!(
            props.contains(&(shares.0, Value::U64(shares.1))),
            "{props:?}"
        );
        let dir = "/kubepods.slice/kubepods-besteffort.slice";
        if v2 {
            assert_eq!(model.read("", dir, "cpu.weight"), "1");
        } else {
            assert_eq!(model.read("cpu", dir, "cpu.shares"), "2");
        }
    }
}

#[test]
fn a_pod_slice_holds_the_same_files_as_the_cgroupfs_pod_cgroup() {
    for v2 in [false, true] {
        for (p, fs_dir) in [
            (burstable(UID), format!("/kubepods/burstable/pod{UID}")),
            (guaranteed(UID), format!("/kubepods/pod{UID}")),
            (best_effort(UID), format!("/kubepods/besteffort/pod{UID}")),
        ] {
            let (fs_model, fs_manager) = cgroupfs_setup(v2, config());
            fs_model.populate(&fs_dir);
            fs_manager.create_or_update_pod(&p).unwrap();

            let (sd_model, units, sd_manager) = systemd_setup(v2, config());
            assert!(sd_manager.ensure_pod(&p).unwrap());
            let slice = sd_manager.pod_cgroup_name(&p).unwrap();
            assert_eq!(
                files(&sd_model, &slice),
                files(&fs_model, &fs_dir),
                "v2={v2} {slice}"
            );
            // systemd was asked for the same values, as properties of a new slice.
            let calls = units.calls();
            let Some(UnitCall::Start(unit, props)) = calls.last() else {
                panic!("{calls:?}");
            };
            assert_eq!(Some(unit.as_str()), slice.rsplit('/').next());
            assert!(props.contains(&("TasksMax", Value::U64(100))), "{props:?}");
            assert!(sd_manager.exists(UID));
            assert_eq!(
                sd_manager.read_pod_resources(UID).unwrap(),
                fs_manager.read_pod_resources(UID).unwrap()
            );
        }
    }
}

#[test]
fn the_sandbox_cgroup_parent_is_the_pod_slice_path() {
    let (_m, _u, manager) = systemd_setup(false, config());
    assert_eq!(manager.pod_cgroup_name(&burstable(UID)).unwrap(), POD_SLICE);
    assert_eq!(
        manager.pod_cgroup_name(&guaranteed("g")).unwrap(),
        "/kubepods.slice/kubepods-podg.slice"
    );
    // --cgroup-root as a name or as a slice: the same tree.
    for root in ["/edge", "/edge.slice"] {
        let model = Model::v1();
        let manager = PodCgroupManager::with_driver(
            model.root(),
            &model.mountinfo,
            ManagerConfig {
                cgroup_root: root.to_owned(),
                ..Default::default()
            },
            Driver::Systemd(Box::new(FakeUnits::on(&model))),
        )
        .unwrap();
        assert_eq!(
            manager.pod_cgroup_name(&best_effort("b")).unwrap(),
            "/edge.slice/edge-kubepods.slice/edge-kubepods-besteffort.slice/edge-kubepods-besteffort-podb.slice",
            "{root}"
        );
    }
}

/// The resize path's pod writes, in its order (memory up first, then CPU down), on
/// both drivers: after every step the files agree, and systemd saw the same steps
/// in the same order, each before cgroupfs.
#[test]
fn resize_steps_write_the_same_files_in_the_same_order_with_both_drivers() {
    for v2 in [false, true] {
        let p = burstable(UID);
        let fs_dir = format!("/kubepods/burstable/pod{UID}");
        let (fs_model, fs_manager) = cgroupfs_setup(v2, config());
        fs_model.populate(&fs_dir);
        fs_manager.create_or_update_pod(&p).unwrap();
        let (sd_model, units, sd_manager) = systemd_setup(v2, config());
        sd_manager.ensure_pod(&p).unwrap();
        let before = units.calls().len();

        let steps = [
            CgroupResources {
                memory_limit: Some(Limit::Value(128 << 20)),
                ..Default::default()
            },
            CgroupResources {
                cpu_shares: Some(128),
                cpu_quota: Some(Limit::Value(50_000)),
                ..Default::default()
            },
            CgroupResources {
                memory_limit: Some(Limit::Unlimited),
                cpu_quota: Some(Limit::Unlimited),
                ..Default::default()
            },
        ];
        for step in &steps {
            fs_manager.update_pod_resources(UID, step).unwrap();
            sd_manager.update_pod_resources(UID, step).unwrap();
            assert_eq!(
                files(&sd_model, POD_SLICE),
                files(&fs_model, &fs_dir),
                "{step:?}"
            );
        }
        let sets: Vec<UnitCall> = units.calls()[before..].to_vec();
        let version = sd_manager.version();
        let unit = "kubepods-burstable-pod6b1f_22c4.slice".to_owned();
        let expected: Vec<UnitCall> = steps
            .iter()
            .map(|s| UnitCall::Set(unit.clone(), resource_properties(s, version, 100_000)))
            .collect();
        assert_eq!(sets, expected, "v2={v2}");
    }
}

#[test]
fn an_existing_pod_slice_is_updated_not_started_again() {
    let (_m, units, manager) = systemd_setup(true, config());
    let p = burstable(UID);
    manager.create_or_update_pod(&p).unwrap();
    let starts = units.started().len();
    assert!(!manager.ensure_pod(&p).unwrap());
    manager.create_or_update_pod(&p).unwrap();
    assert_eq!(units.started().len(), starts);
    assert!(matches!(units.calls().last(), Some(UnitCall::Set(..))));
}

#[test]
fn pods_are_listed_from_slices_and_removed_by_stopping_their_units() {
    let (model, units, manager) = systemd_setup(false, config());
    manager.ensure_pod(&burstable("aa-bb")).unwrap();
    manager.ensure_pod(&guaranteed("cc")).unwrap();
    manager.ensure_pod(&best_effort("dd")).unwrap();
    assert_eq!(manager.list_pod_uids().unwrap(), vec!["aa-bb", "cc", "dd"]);

    model.strip_files();
    manager.remove_pod("aa-bb").unwrap();
    let stops: Vec<UnitCall> = units
        .calls()
        .into_iter()
        .filter(|c| matches!(c, UnitCall::Stop(_)))
        .collect();
    assert_eq!(
        stops,
        [
            UnitCall::Stop("kubepods-podaa_bb.slice".into()),
            UnitCall::Stop("kubepods-burstable-podaa_bb.slice".into()),
            UnitCall::Stop("kubepods-besteffort-podaa_bb.slice".into()),
        ]
    );
    assert!(!model
        .path(
            "memory",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa_bb.slice"
        )
        .exists());
    assert_eq!(manager.list_pod_uids().unwrap(), vec!["cc", "dd"]);
    assert!(!manager.exists("aa-bb"));
}

#[test]
fn a_container_cgroup_is_the_runtimes_scope_below_the_pod_slice() {
    let (model, _u, manager) = systemd_setup(false, config());
    manager.ensure_pod(&burstable(UID)).unwrap();
    assert_eq!(manager.container_memory_usage(UID, "abc").unwrap(), None);
    let scope = format!("{POD_SLICE}/cri-containerd-abc.scope");
    model.populate(&scope);
    model.set("memory", &scope, "memory.usage_in_bytes", "8192");
    assert_eq!(
        manager.container_memory_usage(UID, "abc").unwrap(),
        Some(8192)
    );
    let pod = manager.find_pod(UID).unwrap().unwrap();
    assert_eq!(
        manager
            .container_cgroup(&pod, "abc")
            .unwrap()
            .unwrap()
            .to_cgroupfs(),
        scope
    );
    assert_eq!(manager.container_cgroup(&pod, "ab").unwrap(), None);
}

#[test]
fn a_failed_start_job_fails_the_pod_cgroup() {
    let (_m, units, manager) = systemd_setup(true, config());
    units
        .failing
        .lock()
        .unwrap()
        .push("kubepods-burstable-pod6b1f_22c4.slice".into());
    let err = manager.ensure_pod(&burstable(UID)).unwrap_err();
    assert!(
        matches!(&err, CgroupError::Systemd(e) if matches!(**e, SystemdError::JobFailed { ref result, .. } if result == "failed")),
        "{err}"
    );
    assert!(!manager.exists(UID));
}

#[test]
fn the_qos_shares_are_set_on_the_qos_slices_then_written_to_their_files() {
    for v2 in [false, true] {
        let (model, units, manager) = systemd_setup(v2, config());
        // 250m of one Burstable pod: 256 shares, weight 10.
        manager.note_active_pod(&burstable(UID));
        manager.note_active_pod(&guaranteed("g"));
        manager.update_qos_cgroups().unwrap();
        let (property, burstable_value, best_effort_value) = if v2 {
            ("CPUWeight", 10, 1)
        } else {
            ("CPUShares", 256, 2)
        };
        let calls = units.calls();
        let sets: Vec<&UnitCall> = calls
            .iter()
            .filter(|c| matches!(c, UnitCall::Set(..)))
            .collect();
        assert_eq!(
            sets,
            [
                &UnitCall::Set(
                    "kubepods-burstable.slice".into(),
                    vec![(property, Value::U64(burstable_value))]
                ),
                &UnitCall::Set(
                    "kubepods-besteffort.slice".into(),
                    vec![(property, Value::U64(best_effort_value))]
                ),
            ],
            "v2={v2}"
        );
        let dir = "/kubepods.slice/kubepods-burstable.slice";
        if v2 {
            assert_eq!(model.read("", dir, "cpu.weight"), "10");
        } else {
            assert_eq!(model.read("cpu", dir, "cpu.shares"), "256");
        }
    }
}

#[test]
fn kubepods_slice_and_a_reserved_slice_get_their_limits_through_systemd_then_the_files() {
    for v2 in [false, true] {
        let (model, units, manager) = systemd_setup(v2, config());
        let limits = CgroupResources {
            cpu_shares: Some(1536),
            memory_limit: Some(Limit::Value(3 << 30)),
            pids_max: Some(Limit::Value(32000)),
            ..Default::default()
        };
        manager.update_kubepods(&limits).unwrap();
        let version = manager.version();
        assert_eq!(
            units.calls().last(),
            Some(&UnitCall::Set(
                "kubepods.slice".into(),
                resource_properties(&limits, version, 100_000)
            )),
            "v2={v2}"
        );
        let dir = "/kubepods.slice";
        if v2 {
            assert_eq!(model.read("", dir, "memory.max"), (3u64 << 30).to_string());
            assert_eq!(model.read("", dir, "pids.max"), "32000");
        } else {
            assert_eq!(
                model.read("memory", dir, "memory.limit_in_bytes"),
                (3u64 << 30).to_string()
            );
            assert_eq!(model.read("cpu", dir, "cpu.shares"), "1536");
            assert_eq!(model.read("pids", dir, "pids.max"), "32000");
        }

        // A reserved slice systemd already runs: its unit is the path's last part.
        model.populate("/system.slice");
        let cpu = CgroupResources {
            cpu_shares: Some(256),
            ..Default::default()
        };
        manager
            .update_reserved_cgroup("/system.slice", &cpu)
            .unwrap();
        assert_eq!(
            units.calls().last(),
            Some(&UnitCall::Set(
                "system.slice".into(),
                resource_properties(&cpu, version, 100_000)
            ))
        );
        let missing = manager.update_reserved_cgroup("/kube.slice", &cpu);
        assert!(
            matches!(missing, Err(CgroupError::ReservedCgroupMissing { ref name }) if name == "/kube.slice"),
            "{missing:?}"
        );
    }
}
