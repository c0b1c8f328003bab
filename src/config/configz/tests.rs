//! `/configz`: effective values under upstream's names, and a file litelet takes back.

use serde_json::json;

use super::*;
use crate::config::decode::from_file;

fn flags(args: &[&str]) -> Flags {
    let mut all = vec!["litelet"];
    all.extend_from_slice(args);
    Flags::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn configz_shows_effective_values_under_upstream_names() {
    let z = flags(&[
        "--max-pods=42",
        "--sync-frequency=30s",
        "--authorization-mode=AlwaysAllow",
        "--cluster-dns=10.0.0.10",
        "--eviction-hard=memory.available<300Mi,nodefs.available<7%",
        "--kube-reserved=cpu=100m,memory=64Mi",
        "--image-gc-high-threshold=90",
        "--fail-swap-on=false",
    ])
    .configz();
    let c = &z["kubeletconfig"];
    assert_eq!(c["kind"], "KubeletConfiguration");
    assert_eq!(c["apiVersion"], "kubelet.config.k8s.io/v1beta1");
    assert_eq!(c["maxPods"], 42);
    assert_eq!(c["syncFrequency"], "30s");
    assert_eq!(c["authorization"]["mode"], "AlwaysAllow");
    assert_eq!(c["clusterDNS"], json!(["10.0.0.10"]));
    assert_eq!(
        c["evictionHard"],
        json!({"memory.available": "300Mi", "nodefs.available": "7%"})
    );
    assert_eq!(c["kubeReserved"], json!({"cpu": "100m", "memory": "64Mi"}));
    assert_eq!(c["imageGCHighThresholdPercent"], 90);
    assert_eq!(c["failSwapOn"], false);
    assert_eq!(c["port"], 10250);
    assert_eq!(c["cgroupDriver"], "cgroupfs");
}

/// It says what litelet does: pulls in parallel, no read-only port, QoS cgroups, the
/// node registered, tokens checked with a TokenReview.
#[test]
fn configz_tells_litelets_fixed_behaviour() {
    let z = flags(&[]).configz();
    let c = &z["kubeletconfig"];
    assert_eq!(c["serializeImagePulls"], false);
    assert_eq!(c["readOnlyPort"], 0);
    assert_eq!(c["cgroupsPerQOS"], true);
    assert_eq!(c["registerNode"], true);
    assert_eq!(c["authentication"]["webhook"]["enabled"], true);
    assert_eq!(c["evictionHard"]["memory.available"], "100Mi");
    assert_eq!(c["evictionPressureTransitionPeriod"], "5m0s");
    assert_eq!(c["memorySwap"]["swapBehavior"], "NoSwap");
    assert!(
        c.get("hairpinMode").is_none(),
        "settings that change nothing are left out"
    );
}

/// `/configz` saved as a file is a config litelet takes, to the same configuration.
#[test]
fn configz_is_a_config_file_litelet_takes_back() {
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec![
            "--max-pods=42",
            "--cluster-dns=10.0.0.10,fd00::a",
            "--eviction-hard=",
            "--register-with-taints=a=b:NoSchedule",
            "--node-labels=site=north",
            "--pod-manifest-path=/etc/kubernetes/manifests",
            "--enforce-node-allocatable=pods,system-reserved",
            "--system-reserved-cgroup=/system.slice",
            "--healthz-port=0",
            "--cgroup-driver=systemd",
            "-v",
            "4",
        ],
    ];
    for args in cases {
        let before = flags(&args).configz();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("configz.json");
        std::fs::write(&path, before["kubeletconfig"].to_string()).unwrap();
        let after = from_file(&path).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(after.configz(), before, "{args:?}");
        assert!(
            after.warnings.iter().all(|w| !w.contains("unknown field")),
            "{:?}",
            after.warnings
        );
    }
}
