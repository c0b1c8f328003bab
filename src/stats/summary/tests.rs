//! The summary's JSON against upstream's field names (stats/v1alpha1 types.go).

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};

use super::*;
use crate::stats::sample::{ContainerSample, NodeSample, PodSample};

fn fs_usage(used: u64) -> FsUsage {
    FsUsage {
        capacity_bytes: Some(1000),
        available_bytes: Some(400),
        used_bytes: Some(used),
        inodes: Some(100),
        inodes_free: Some(50),
        inodes_used: Some(used / 10),
    }
}

fn sample() -> Sample {
    let usage = CgroupUsage {
        cpu_usage_ns: Some(5_000_000_000),
        memory_usage_bytes: Some(3000),
        working_set_bytes: Some(2000),
        rss_bytes: Some(1500),
        page_faults: Some(10),
        major_page_faults: Some(1),
        pids: Some(3),
    };
    Sample {
        time: UNIX_EPOCH + Duration::from_secs(1_700_000_100),
        node: NodeSample {
            usage,
            usage_nano_cores: Some(250_000_000),
            memory_capacity_bytes: Some(10_000),
            nodefs: Some(fs_usage(600)),
            imagefs: Some(fs_usage(200)),
            max_pid: Some(4_194_304),
            processes: Some(120),
            ..Default::default()
        },
        pods: vec![PodSample {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into(),
            start_time: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            usage: Some(usage),
            usage_nano_cores: Some(100),
            containers: vec![ContainerSample {
                name: "main".into(),
                id: "c1".into(),
                start_time: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_001)),
                usage: Some(usage),
                usage_nano_cores: None,
                rootfs: Some(fs_usage(40)),
                logs: Some(fs_usage(20)),
                ..Default::default()
            }],
            volumes: vec![("cache".into(), fs_usage(30))],
            ..Default::default()
        }],
        claims: vec![],
        errors: vec![],
        pods_skipped: false,
    }
}

/// The object keys of `v` at `path` (dot-separated, numbers index arrays).
fn keys(v: &Value, path: &str) -> Vec<String> {
    let mut cur = v;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        cur = match part.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[part],
        };
    }
    let mut k: Vec<String> = cur
        .as_object()
        .unwrap_or_else(|| panic!("{path} is not an object in {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn summary_json_uses_upstream_field_names() {
    let s = summary(
        "edge-1",
        UNIX_EPOCH + Duration::from_secs(1_699_999_000),
        &sample(),
    );
    let v = serde_json::to_value(&s).unwrap();
    let fs_keys = [
        "time",
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ];
    let memory_keys = [
        "time",
        "availableBytes",
        "usageBytes",
        "workingSetBytes",
        "rssBytes",
        "pageFaults",
        "majorPageFaults",
    ];
    let cases: &[(&str, &[&str])] = &[
        ("", &["node", "pods"]),
        (
            "node",
            &[
                "nodeName",
                "startTime",
                "cpu",
                "memory",
                "fs",
                "runtime",
                "rlimit",
            ],
        ),
        (
            "node.cpu",
            &["time", "usageNanoCores", "usageCoreNanoSeconds"],
        ),
        ("node.memory", &memory_keys),
        ("node.fs", &fs_keys),
        ("node.runtime", &["imageFs", "containerFs"]),
        ("node.runtime.imageFs", &fs_keys),
        ("node.rlimit", &["time", "maxpid", "curproc"]),
        (
            "pods.0",
            &[
                "podRef",
                "startTime",
                "containers",
                "cpu",
                "memory",
                "volume",
                "ephemeral-storage",
                "process_stats",
            ],
        ),
        ("pods.0.podRef", &["name", "namespace", "uid"]),
        ("pods.0.process_stats", &["process_count"]),
        ("pods.0.ephemeral-storage", &fs_keys),
        (
            "pods.0.volume.0",
            &[
                "time",
                "availableBytes",
                "capacityBytes",
                "usedBytes",
                "inodesFree",
                "inodes",
                "inodesUsed",
                "name",
            ],
        ),
        (
            "pods.0.containers.0",
            &["name", "startTime", "cpu", "memory", "rootfs", "logs"],
        ),
        // A container's first sample has no rate yet: the key is left out.
        ("pods.0.containers.0.cpu", &["time", "usageCoreNanoSeconds"]),
        ("pods.0.containers.0.rootfs", &fs_keys),
    ];
    for (path, want) in cases {
        assert_eq!(keys(&v, path), sorted(want), "keys of {path:?}");
    }
}

#[test]
fn summary_values_follow_upstream_definitions() {
    let s = summary(
        "edge-1",
        UNIX_EPOCH + Duration::from_secs(1_699_999_000),
        &sample(),
    );
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["node"]["nodeName"], "edge-1");
    assert_eq!(v["node"]["startTime"], "2023-11-14T21:56:40Z");
    assert_eq!(v["node"]["cpu"]["time"], "2023-11-14T22:15:00Z");
    // Node memory available = capacity − working set; pods and containers have none.
    assert_eq!(v["node"]["memory"]["availableBytes"], 8000);
    assert_eq!(v["pods"][0]["memory"].get("availableBytes"), None);
    assert_eq!(
        v["pods"][0]["podRef"],
        json!({"name": "web", "namespace": "default", "uid": "u1"})
    );
    assert_eq!(
        v["pods"][0]["cpu"]["usageCoreNanoSeconds"],
        5_000_000_000u64
    );
    // Ephemeral storage = writable layers + logs + disk volumes.
    assert_eq!(v["pods"][0]["ephemeral-storage"]["usedBytes"], 40 + 20 + 30);
    assert_eq!(v["pods"][0]["ephemeral-storage"]["capacityBytes"], 1000);
    assert_eq!(v["pods"][0]["volume"][0]["name"], "cache");
    assert_eq!(v["pods"][0]["process_stats"]["process_count"], 3);
    assert_eq!(v["node"]["rlimit"]["curproc"], 120);
}

#[test]
fn unknown_numbers_are_omitted_not_zero() {
    let mut s = sample();
    s.node = NodeSample::default();
    s.pods[0].usage = None;
    s.pods[0].containers[0].usage = None;
    let v = serde_json::to_value(summary("n", UNIX_EPOCH, &s)).unwrap();
    assert_eq!(keys(&v, "node"), sorted(&["nodeName", "startTime"]));
    assert_eq!(v["pods"][0].get("cpu"), None);
    assert_eq!(v["pods"][0].get("process_stats"), None);
    assert_eq!(v["pods"][0]["containers"][0].get("memory"), None);
}
