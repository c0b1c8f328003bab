//! Slice names both ways (upstream's `ToSystemd` / `ParseSystemdToCgroupName`) and the
//! unit properties of each setting on v1 and v2.

use super::*;
use crate::cgroups::CgroupVersion::{V1, V2};

fn name(parts: &[&str]) -> CgroupName {
    parts
        .iter()
        .fold(CgroupName::root(), |n, p| n.child(p).unwrap())
}

#[test]
fn cgroup_names_become_slices_with_dashes_escaped() {
    let uid = "6b1f-22c4";
    let pod = name(&["kubepods", "burstable", &format!("pod{uid}")]);
    assert_eq!(
        slice_unit(&pod).unwrap(),
        "kubepods-burstable-pod6b1f_22c4.slice"
    );
    assert_eq!(
        slice_path(&pod).unwrap().to_cgroupfs(),
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1f_22c4.slice"
    );
    assert_eq!(slice_unit(&name(&["kubepods"])).unwrap(), "kubepods.slice");
    assert_eq!(slice_unit(&CgroupName::root()).unwrap(), "-.slice");
    assert_eq!(slice_path(&CgroupName::root()).unwrap().to_cgroupfs(), "/");
    assert_eq!(parent_slice(&pod).unwrap(), "kubepods-burstable.slice");
    assert_eq!(parent_slice(&name(&["kubepods"])).unwrap(), "-.slice");
}

#[test]
fn slices_parse_back_to_cgroup_names() {
    let back = parse_slice("kubepods-besteffort-pod6b1f_22c4.slice").unwrap();
    assert_eq!(back, name(&["kubepods", "besteffort", "pod6b1f-22c4"]));
    // A path's last part is the unit.
    let back = parse_slice("/kubepods.slice/kubepods-podx.slice").unwrap();
    assert_eq!(back, name(&["kubepods", "podx"]));
    assert_eq!(parse_slice("-.slice").unwrap(), CgroupName::root());
    assert!(parse_slice("cri-containerd-abc.scope").is_err());
    assert_eq!(
        pod_uid_of_slice("kubepods-burstable-pod6b1f_22c4.slice", "pod").as_deref(),
        Some("6b1f-22c4")
    );
    assert_eq!(pod_uid_of_slice("kubepods-burstable.slice", "pod"), None);
    assert_eq!(pod_uid_of_slice("kubepods-pod.slice", "pod"), None);
}

#[test]
fn parts_a_unit_name_cannot_hold_are_refused() {
    for bad in ["a@b", "a\\b", "ü"] {
        let n = name(&["kubepods", bad]);
        assert!(slice_unit(&n).is_err(), "{bad:?}");
        assert!(slice_path(&n).is_err(), "{bad:?}");
    }
}

#[test]
fn cpu_quota_per_second_rounds_up_to_whole_10ms() {
    assert_eq!(quota_per_sec_us(Limit::Value(50_000), 100_000), 500_000);
    assert_eq!(quota_per_sec_us(Limit::Value(33_333), 100_000), 340_000);
    assert_eq!(quota_per_sec_us(Limit::Value(1_000), 100_000), 10_000);
    assert_eq!(quota_per_sec_us(Limit::Value(25_000), 50_000), 500_000);
    assert_eq!(quota_per_sec_us(Limit::Unlimited, 100_000), INFINITY);
}

#[test]
fn resource_properties_per_version() {
    let r = CgroupResources {
        cpu_shares: Some(256),
        cpu_quota: Some(Limit::Value(100_000)),
        cpu_period: Some(100_000),
        memory_limit: Some(Limit::Value(64 << 20)),
        memory_min: None,
        pids_max: Some(Limit::Unlimited),
    };
    assert_eq!(
        resource_properties(&r, V1, 100_000),
        vec![
            ("CPUShares", Value::U64(256)),
            ("CPUQuotaPerSecUSec", Value::U64(1_000_000)),
            ("CPUQuotaPeriodUSec", Value::U64(100_000)),
            ("MemoryLimit", Value::U64(64 << 20)),
            ("TasksMax", Value::U64(INFINITY)),
        ]
    );
    assert_eq!(
        resource_properties(&r, V2, 100_000),
        vec![
            ("CPUWeight", Value::U64(10)),
            ("CPUQuotaPerSecUSec", Value::U64(1_000_000)),
            ("CPUQuotaPeriodUSec", Value::U64(100_000)),
            ("MemoryMax", Value::U64(64 << 20)),
            ("TasksMax", Value::U64(INFINITY)),
        ]
    );
    // A quota change alone uses the configured period; nothing set, nothing sent.
    let quota_only = CgroupResources {
        cpu_quota: Some(Limit::Value(10_000)),
        ..Default::default()
    };
    assert_eq!(
        resource_properties(&quota_only, V2, 50_000),
        vec![("CPUQuotaPerSecUSec", Value::U64(200_000))]
    );
    assert!(resource_properties(&CgroupResources::default(), V1, 100_000).is_empty());
}

#[test]
fn a_new_slice_wants_its_parent_and_has_accounting() {
    let pod = name(&["kubepods", "burstable", "podu1"]);
    let props = slice_properties(&pod, "pod ns/p uid u1").unwrap();
    assert_eq!(props[0], ("Description", Value::str("pod ns/p uid u1")));
    assert_eq!(
        props[1],
        (
            "Wants",
            Value::array("s", vec![Value::str("kubepods-burstable.slice")])
        )
    );
    assert!(props.contains(&("DefaultDependencies", Value::Bool(false))));
    for accounting in ["CPUAccounting", "MemoryAccounting", "TasksAccounting"] {
        assert!(
            props.contains(&(accounting, Value::Bool(true))),
            "{accounting}"
        );
    }
}

proptest::proptest! {
    /// Any name of unit-safe parts survives the trip to a slice and back, and its
    /// path's last part is its unit.
    #[test]
    fn slice_names_round_trip(parts in proptest::collection::vec("[a-z0-9][a-z0-9-]{0,12}", 1..5)) {
        let n = parts.iter().fold(CgroupName::root(), |n, p| n.child(p).unwrap());
        let unit = slice_unit(&n).unwrap();
        proptest::prop_assert_eq!(parse_slice(&unit).unwrap(), n.clone());
        let path = slice_path(&n).unwrap();
        proptest::prop_assert_eq!(path.base().unwrap(), unit.as_str());
        proptest::prop_assert_eq!(path.parts().len(), n.parts().len());
    }
}
