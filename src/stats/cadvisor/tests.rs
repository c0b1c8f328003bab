//! The cAdvisor rendering of a sample: names, labels and values as the upstream
//! kubelet gives them, for the node, a pod, its sandbox and a container.

use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::stats::cgroup::{CgroupSpec, DeviceIo};
use crate::stats::sample::{ContainerSample, DeviceFs, NodeSample, PodSample, SandboxSample};

fn usage(cpu_s: u64, memory: u64) -> CgroupUsage {
    CgroupUsage {
        cpu_usage_ns: Some(cpu_s * 1_000_000_000),
        memory_usage_bytes: Some(memory),
        working_set_bytes: Some(memory / 2),
        rss_bytes: Some(memory / 4),
        page_faults: Some(10),
        major_page_faults: Some(1),
        pids: Some(3),
    }
}

fn eth0(rx: u64) -> NetDev {
    NetDev {
        name: "eth0".into(),
        rx_bytes: rx,
        tx_bytes: rx * 2,
        ..Default::default()
    }
}

fn sample() -> Sample {
    let limited = CgroupDetail {
        cfs_periods: Some(100),
        cfs_throttled_periods: Some(25),
        cfs_throttled_ns: Some(2_500_000_000),
        memory_cache: Some(4096),
        oom_kills: Some(1),
        processes: Some(2),
        spec: CgroupSpec {
            cpu_shares: Some(102),
            cpu_quota_us: Some(20000),
            cpu_period_us: Some(100000),
            memory_limit: Some(67108864),
            ..Default::default()
        },
        io: vec![DeviceIo {
            major: 8,
            minor: 0,
            device: "/dev/sda".into(),
            read_bytes: 512,
            write_bytes: 1024,
            reads: 1,
            writes: 2,
        }],
        ..Default::default()
    };
    Sample {
        time: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        node: NodeSample {
            usage: usage(500, 1 << 30),
            memory_capacity_bytes: Some(2 << 30),
            detail: Some(CgroupDetail::default()),
            network: vec![eth0(9000)],
            filesystems: vec![DeviceFs {
                device: "/dev/sda1".into(),
                usage: FsUsage {
                    capacity_bytes: Some(1000),
                    used_bytes: Some(400),
                    inodes: Some(50),
                    inodes_free: Some(20),
                    ..Default::default()
                },
            }],
            imagefs_device: "/dev/sda1".into(),
            machine: Some(MachineInfo {
                cores: 2,
                physical_cores: 2,
                sockets: 1,
                boot_id: "b".into(),
                machine_id: "m".into(),
                system_uuid: "s".into(),
            }),
            ..Default::default()
        },
        pods: vec![PodSample {
            name: "web".into(),
            namespace: "shop".into(),
            uid: "u1".into(),
            usage: Some(usage(7, 1 << 20)),
            cgroup: "/kubepods/burstable/podu1".into(),
            detail: Some(CgroupDetail::default()),
            sandbox: Some(SandboxSample {
                id: "sb1".into(),
                cgroup: "/kubepods/burstable/podu1/sb1".into(),
                usage: Some(usage(1, 4096)),
                detail: Some(CgroupDetail::default()),
                network: vec![eth0(300)],
            }),
            containers: vec![ContainerSample {
                name: "main".into(),
                id: "c1".into(),
                image: "busybox:1.0".into(),
                cgroup: "/kubepods/burstable/podu1/c1".into(),
                start_time: Some(UNIX_EPOCH + Duration::from_secs(1_699_999_000)),
                usage: Some(usage(6, 1 << 20)),
                detail: Some(limited),
                rootfs: Some(FsUsage {
                    used_bytes: Some(8192),
                    capacity_bytes: Some(1000),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }],
        claims: vec![],
        errors: vec![],
        pods_skipped: false,
    }
}

const MAIN: &str = "container=\"main\",id=\"/kubepods/burstable/podu1/c1\",\
image=\"busybox:1.0\",name=\"c1\",namespace=\"shop\",pod=\"web\"";
const T: &str = " 1700000000000";

fn has(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in:\n{text}"
    );
}

#[test]
fn rows_for_the_node_a_pod_its_sandbox_and_its_container() {
    let text = render(Some(&sample()));
    has(
        &text,
        &format!("container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 500{T}"),
    );
    has(
        &text,
        &format!("container_memory_working_set_bytes{{container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",name=\"\",namespace=\"shop\",pod=\"web\"}} 524288{T}"),
    );
    has(
        &text,
        &format!(
            "container_cpu_usage_seconds_total{{{}}} 6{T}",
            MAIN.replace("id=", "cpu=\"total\",id=")
        ),
    );
    has(
        &text,
        &format!("container_memory_working_set_bytes{{{MAIN}}} 524288{T}"),
    );
    has(&text, &format!("container_memory_rss{{{MAIN}}} 262144{T}"));
    has(&text, &format!("container_memory_cache{{{MAIN}}} 4096{T}"));
    has(&text, &format!("container_oom_events_total{{{MAIN}}} 1{T}"));
    has(
        &text,
        &format!("container_spec_cpu_quota{{{MAIN}}} 20000{T}"),
    );
    has(
        &text,
        &format!("container_spec_memory_limit_bytes{{{MAIN}}} 67108864{T}"),
    );
    has(
        &text,
        &format!("container_start_time_seconds{{{MAIN}}} 1699999000{T}"),
    );
    has(
        &text,
        "# TYPE container_cpu_cfs_throttled_periods_total counter",
    );
    has(
        &text,
        &format!("container_cpu_cfs_throttled_periods_total{{{MAIN}}} 25{T}"),
    );
    has(
        &text,
        &format!("container_cpu_cfs_throttled_seconds_total{{{MAIN}}} 2.5{T}"),
    );
    // The network is the pod's, on its sandbox: container="" and the sandbox's ID.
    has(
        &text,
        &format!("container_network_receive_bytes_total{{container=\"\",id=\"/kubepods/burstable/podu1/sb1\",image=\"\",interface=\"eth0\",name=\"sb1\",namespace=\"shop\",pod=\"web\"}} 300{T}"),
    );
    has(
        &text,
        &format!("container_network_transmit_bytes_total{{container=\"\",id=\"/\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"}} 18000{T}"),
    );
    has(
        &text,
        &format!(
            "container_fs_reads_bytes_total{{{}}} 512{T}",
            MAIN.replace("id=", "device=\"/dev/sda\",id=")
        ),
    );
    has(
        &text,
        &format!(
            "container_fs_usage_bytes{{{}}} 8192{T}",
            MAIN.replace("id=", "device=\"/dev/sda1\",id=")
        ),
    );
    has(
        &text,
        &format!("container_fs_limit_bytes{{container=\"\",device=\"/dev/sda1\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 1000{T}"),
    );
    has(
        &text,
        &format!("machine_cpu_cores{{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"}} 2{T}"),
    );
    has(
        &text,
        &format!("machine_memory_bytes{{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"}} 2147483648{T}"),
    );
    has(&text, "container_scrape_error 0");
}

#[test]
fn cfs_series_only_with_a_quota_and_every_family_once() {
    let text = render(Some(&sample()));
    // The pod cgroup has no quota in this sample: no CFS series of its own.
    assert!(!text
        .lines()
        .any(|l| l.starts_with("container_cpu_cfs_periods_total{container=\"\",id=\"/kubepods")));
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    let all = names.len();
    names.dedup();
    assert_eq!(names.len(), all, "a family is declared once");
    // Every sample line belongs to the family declared above it.
    let mut current = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap_or("");
        } else if !line.starts_with('#') {
            assert!(line.starts_with(current), "{line} under {current}");
        }
    }
}

#[test]
fn no_sample_is_a_scrape_error() {
    assert!(render(None).contains("container_scrape_error 1"));
    let mut failed = sample();
    failed.errors.push("ListContainers: unavailable".into());
    assert!(render(Some(&failed)).contains("container_scrape_error 1"));
}
