//! Usage sampling (`litelet::stats`) against the kernel's real cgroup v1 files of a real
//! container on a private containerd: a pod cgroup made by the pod cgroup manager under
//! a private `--cgroup-root`, a busybox container that burns CPU and writes 8 MiB to
//! its writable layer, then one `Collector` round read from `/sys/fs/cgroup` and CRI.
//! Skips loudly without root unless CI=true.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::containerd::{
    host_network_sandbox, qos_cgroups_under, remove_cgroup_tree, Containerd, BUSYBOX,
};
use crate::support::pods;
use litelet::api::pod::Container;
use litelet::cri::{self, pb, ConnectOptions, Endpoint};
use litelet::stats::{cgroup::reader_from_system, Collector, Sample, StatsStore};

const NS: &str = "default";
const POD: &str = "burner";
const MIB: u64 = 1024 * 1024;

fn read_u64(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn sampler_reads_real_v1_cgroups_and_cri_disk_usage_of_a_running_container() {
    let Some(containerd) = Containerd::start("stats-v1") else {
        return;
    };
    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let (runtime, images) = cri::connect(&endpoint, &ConnectOptions::default());
    let cgroup_root = format!("/litelet-stats-test-{}", std::process::id());
    let manager = Arc::new(qos_cgroups_under(&cgroup_root));
    let uid = format!("stats-{}", std::process::id());
    let mut pod = pods::meta(NS, POD, &uid);
    pod.spec.containers = vec![Container {
        name: "main".into(),
        image: Some(BUSYBOX.into()),
        ..Default::default()
    }];
    manager.ensure_pod(&pod).expect("pod cgroup");
    let pod_cgroup = manager.pod_cgroup_name(&pod).unwrap();

    let logs_root = containerd.dir().join("pod-logs");
    let log_dir = logs_root.join(format!("{NS}_{POD}_{uid}"));
    std::fs::create_dir_all(&log_dir).unwrap();
    // Burn some CPU, write 8 MiB to the writable layer, log a line, then idle.
    let script = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; \
                  dd if=/dev/zero of=/fill bs=1M count=8 2>/dev/null; echo filled; sleep 1000";
    let sandbox = host_network_sandbox(POD, &uid, &log_dir, &pod_cgroup);
    let (sandbox_id, container_id) =
        containerd.run_busybox_pod(&runtime, &sandbox, &["sh", "-c", script]);

    let root_dir = tempfile::tempdir().unwrap();
    let collector = Collector::new(
        runtime.clone(),
        Some(images),
        reader_from_system().expect("cgroup reader"),
        Some(manager.clone()),
        root_dir.path().to_owned(),
        logs_root,
    );
    let store = StatsStore::new();
    let mut last: Option<Sample> = None;
    let done = support::wait_until(Duration::from_secs(60), || {
        let sample = collector.collect(SystemTime::now());
        store.publish(sample.clone());
        let filled = sample
            .pods
            .iter()
            .flat_map(|p| &p.containers)
            .any(|c| c.rootfs.and_then(|r| r.used_bytes).unwrap_or(0) >= 8 * MIB);
        last = Some(sample);
        std::thread::sleep(Duration::from_millis(300));
        filled
    });
    let sample = last.expect("a sample");
    let cleanup = || {
        let _ = runtime.stop_pod_sandbox(&pb::StopPodSandboxRequest {
            pod_sandbox_id: sandbox_id.clone(),
            ..Default::default()
        });
        let _ = runtime.remove_pod_sandbox(&pb::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox_id.clone(),
            ..Default::default()
        });
        let _ = manager.remove_pod(&uid);
        remove_cgroup_tree(&cgroup_root);
    };
    if !done {
        cleanup();
        panic!("the writable layer never reached 8 MiB: {sample:#?}");
    }

    let pod_sample = sample.pods.iter().find(|p| p.uid == uid).expect("our pod");
    assert_eq!(
        (pod_sample.name.as_str(), pod_sample.namespace.as_str()),
        (POD, NS)
    );
    let c = &pod_sample.containers[0];
    assert_eq!(
        (c.name.as_str(), c.id.as_str()),
        ("main", container_id.as_str())
    );
    let cu = c.usage.expect("container usage from its cgroup");
    let pu = pod_sample.usage.expect("pod usage from the pod cgroup");
    // The kernel's own files, read after the sample: counters only grow.
    let cpuacct = Path::new("/sys/fs/cgroup/cpuacct")
        .join(pod_cgroup.trim_start_matches('/'))
        .join(&container_id)
        .join("cpuacct.usage");
    let kernel_cpu = read_u64(&cpuacct);
    let cpu = cu.cpu_usage_ns.expect("container cpu");
    assert!(
        cpu > 10_000_000,
        "300k shell loop iterations took {cpu} ns of CPU"
    );
    assert!(cpu <= kernel_cpu, "sampled {cpu} > kernel {kernel_cpu}");
    assert!(
        pu.cpu_usage_ns.unwrap() >= cpu,
        "the pod includes its container"
    );
    let usage = cu.memory_usage_bytes.expect("memory usage");
    let ws = cu.working_set_bytes.expect("working set");
    assert!(usage > 0 && ws <= usage, "usage {usage} working set {ws}");
    assert!(
        cu.rss_bytes.is_some() && cu.page_faults.unwrap_or(0) > 0,
        "{cu:?}"
    );
    assert!(pu.pids.unwrap_or(0) >= 2, "pause + sh + sleep: {pu:?}");
    let logs = c.logs.expect("log usage");
    assert!(
        logs.used_bytes.unwrap() > 0 && logs.inodes_used.unwrap() >= 2,
        "{logs:?}"
    );
    assert!(c.start_time.is_some() && pod_sample.start_time.is_some());

    let node = &sample.node;
    assert!(
        node.usage.cpu_usage_ns.unwrap() > cpu,
        "node cpu {:?}",
        node.usage
    );
    assert!(node.memory_capacity_bytes.unwrap() > node.usage.working_set_bytes.unwrap());
    assert!(node.nodefs.and_then(|f| f.capacity_bytes).unwrap() > 0);
    let imagefs = node.imagefs.expect("imagefs from ImageFsInfo");
    assert!(imagefs.used_bytes.unwrap() > 0 && imagefs.capacity_bytes.unwrap() > 0);
    assert!(node.max_pid.unwrap() > 0 && node.processes.unwrap() > 0);

    // The store's newest sample has rates from the one before it.
    let (latest, previous) = store.window();
    assert!(previous.is_some());
    let latest = latest.unwrap();
    assert!(latest.node.usage_nano_cores.is_some(), "{:?}", latest.node);
    cleanup();
}
