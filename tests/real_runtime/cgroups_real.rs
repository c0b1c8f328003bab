//! The pod cgroup manager against the kernel's cgroup v1 files.
//!
//! Runs as root on a machine with v1 (legacy or hybrid) cgroupfs at `/sys/fs/cgroup`.
//! Everything lives under a private top-level cgroup root `/litelet-test-<pid>` (so
//! `/sys/fs/cgroup/<controller>/litelet-test-<pid>/kubepods/...`), which a guard removes
//! from every hierarchy at the end, also when the test fails. Without root or v1 the
//! test is skipped loudly, unless `CI=true`, where that is a failure.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use litelet::api::pod::{Container, Pod, ResourceRequirements};
use litelet::api::quantity::Quantity;
use litelet::cgroups::detect::{detect, CgroupMode};
use litelet::cgroups::{
    CgroupError, CgroupResources, FsError, Limit, ManagerConfig, PodCgroupManager,
    DEFAULT_MOUNT_ROOT, MOUNTINFO_PATH,
};

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn skip(test: &str, why: &str) {
    if required() {
        panic!("{test}: real cgroup test cannot run in CI: {why}");
    }
    eprintln!("\n*** SKIPPED {test}: {why} (set CI=true to make this a failure) ***\n");
}

/// Removes `/sys/fs/cgroup/*/<top>` in every hierarchy and kills the processes the test
/// started, whatever happened in the test.
struct Guard {
    top: String,
    children: Vec<Child>,
}

impl Guard {
    fn kill_children(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&entry.path());
            }
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("cleanup: cannot remove {}: {e}", dir.display());
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill_children();
        let Ok(hierarchies) = fs::read_dir(DEFAULT_MOUNT_ROOT) else {
            return;
        };
        for hierarchy in hierarchies.flatten() {
            let dir = hierarchy.path().join(&self.top);
            if dir.exists() {
                rmdir_tree(&dir);
            }
        }
    }
}

fn quantities(items: &[(&str, &str)]) -> std::collections::BTreeMap<String, Quantity> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).expect("quantity")))
        .collect()
}

fn burstable_pod(uid: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.to_owned());
    pod.metadata.name = Some("real".to_owned());
    pod.metadata.namespace = Some("default".to_owned());
    pod.spec.containers = vec![Container {
        name: "app".to_owned(),
        resources: Some(ResourceRequirements {
            requests: quantities(&[("cpu", "250m"), ("memory", "32Mi")]),
            limits: quantities(&[("cpu", "1"), ("memory", "64Mi")]),
            ..Default::default()
        }),
        ..Default::default()
    }];
    pod
}

fn kernel_file(hierarchy: &str, cgroup: &str, file: &str) -> String {
    let path = Path::new(DEFAULT_MOUNT_ROOT)
        .join(hierarchy)
        .join(cgroup.trim_start_matches('/'))
        .join(file);
    fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_owned()
}

fn kernel_path(hierarchy: &str, cgroup: &str) -> PathBuf {
    Path::new(DEFAULT_MOUNT_ROOT)
        .join(hierarchy)
        .join(cgroup.trim_start_matches('/'))
}

fn is_einval(err: &CgroupError) -> bool {
    matches!(err, CgroupError::Fs(FsError::Write { source, .. })
        if source.raw_os_error() == Some(nix::libc::EINVAL))
}

#[test]
fn real_v1_pod_cgroup_lifecycle() {
    const TEST: &str = "real_v1_pod_cgroup_lifecycle";
    if !nix::unistd::geteuid().is_root() {
        return skip(TEST, "needs root");
    }
    let Ok(mountinfo) = fs::read_to_string(MOUNTINFO_PATH) else {
        return skip(TEST, "no /proc/self/mountinfo");
    };
    let mode = detect(&mountinfo, Path::new(DEFAULT_MOUNT_ROOT)).map(|l| l.mode);
    if !matches!(mode, Ok(CgroupMode::Legacy | CgroupMode::Hybrid)) {
        return skip(TEST, &format!("no cgroup v1 hierarchies ({mode:?})"));
    }

    let top = format!("litelet-test-{}", std::process::id());
    let mut guard = Guard {
        top: top.clone(),
        children: Vec::new(),
    };
    let config = ManagerConfig {
        cgroup_root: format!("/{top}"),
        pod_pids_limit: Some(64),
        ..Default::default()
    };
    let manager =
        PodCgroupManager::new(Path::new(DEFAULT_MOUNT_ROOT), &mountinfo, config).expect("manager");

    // QoS hierarchy.
    manager.ensure_qos_hierarchy().expect("qos hierarchy");
    manager.ensure_qos_hierarchy().expect("qos hierarchy again");
    let kubepods = format!("/{top}/kubepods");
    for h in ["cpu", "memory", "pids"] {
        for qos in ["burstable", "besteffort"] {
            assert!(
                kernel_path(h, &format!("{kubepods}/{qos}")).is_dir(),
                "{h} {qos}"
            );
        }
    }
    assert_eq!(
        kernel_file("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
        "2"
    );

    // Pod cgroup with the pod's settings.
    let uid = format!("{}-real", std::process::id());
    let pod = burstable_pod(&uid);
    let name = manager.pod_cgroup_name(&pod).expect("name");
    assert_eq!(name, format!("{kubepods}/burstable/pod{uid}"));
    assert!(manager.ensure_pod(&pod).expect("ensure pod"));
    assert!(!manager.ensure_pod(&pod).expect("ensure pod again"));
    assert!(manager.exists(&uid));
    assert_eq!(kernel_file("cpu", &name, "cpu.shares"), "256");
    assert_eq!(kernel_file("cpu", &name, "cpu.cfs_quota_us"), "100000");
    assert_eq!(kernel_file("cpu", &name, "cpu.cfs_period_us"), "100000");
    assert_eq!(
        kernel_file("memory", &name, "memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(kernel_file("pids", &name, "pids.max"), "64");
    assert_eq!(
        manager.read_pod_resources(&uid).expect("read"),
        manager.pod_resources(&pod)
    );
    assert_eq!(manager.list_pod_uids().expect("list"), vec![uid.clone()]);

    // The kernel rounds memory limits down to whole pages.
    manager
        .update_pod_resources(
            &uid,
            &CgroupResources {
                memory_limit: Some(Limit::Value(100_000_000)),
                ..Default::default()
            },
        )
        .expect("memory update");
    let page = 4096;
    assert_eq!(
        manager.read_pod_resources(&uid).expect("read").memory_limit,
        Some(Limit::Value(100_000_000 / page * page))
    );

    // v1 CFS quota is hierarchical: a pod quota below a container's is refused, so
    // containers are lowered first.
    let container = format!("{name}/container-1");
    fs::create_dir(kernel_path("cpu", &container)).expect("container cgroup");
    fs::write(
        kernel_path("cpu", &container).join("cpu.cfs_quota_us"),
        "80000",
    )
    .expect("quota");
    let lower = CgroupResources {
        cpu_quota: Some(Limit::Value(50_000)),
        ..Default::default()
    };
    let err = manager.update_pod_resources(&uid, &lower).unwrap_err();
    assert!(is_einval(&err), "expected EINVAL, got {err}");
    assert!(err.to_string().contains("cpu.cfs_quota_us"), "{err}");
    fs::write(
        kernel_path("cpu", &container).join("cpu.cfs_quota_us"),
        "40000",
    )
    .expect("quota");
    manager
        .update_pod_resources(&uid, &lower)
        .expect("lower pod quota");
    assert_eq!(kernel_file("cpu", &name, "cpu.cfs_quota_us"), "50000");

    // A new period goes through "no quota", so the ratio never drops below the child's.
    manager
        .update_pod_resources(
            &uid,
            &CgroupResources {
                cpu_quota: Some(Limit::Value(25_000)),
                cpu_period: Some(50_000),
                ..Default::default()
            },
        )
        .expect("period change");
    assert_eq!(kernel_file("cpu", &name, "cpu.cfs_period_us"), "50000");
    assert_eq!(kernel_file("cpu", &name, "cpu.cfs_quota_us"), "25000");

    // A process inside: removal is refused with a clear error, then works once it is gone.
    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    guard.children.push(child);
    for h in ["cpu", "memory", "pids"] {
        fs::write(kernel_path(h, &name).join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {h}: {e}"));
    }
    let pid = i32::try_from(pid).expect("pid");
    assert!(manager.pod_processes(&uid).expect("procs").contains(&pid));
    manager.memory_usage(&uid).expect("memory usage");
    let err = manager.remove_pod(&uid).unwrap_err();
    assert!(
        matches!(&err, CgroupError::Fs(FsError::Busy { .. })),
        "expected busy, got {err}"
    );
    assert!(err.to_string().contains("still has processes"), "{err}");
    guard.kill_children();

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match manager.remove_pod(&uid) {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("remove_pod retry: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("remove_pod after the process exited: {e}"),
        }
    }
    manager.remove_pod(&uid).expect("remove again");
    assert!(!manager.exists(&uid));
    for h in ["cpu", "cpuacct", "memory", "pids"] {
        assert!(
            !kernel_path(h, &name).exists(),
            "{h} still has the pod cgroup"
        );
    }
    assert!(manager.list_pod_uids().expect("list").is_empty());
    drop(guard);
    for h in ["cpu", "memory", "pids"] {
        assert!(
            !kernel_path(h, &format!("/{top}")).exists(),
            "{h}: test root left"
        );
    }
}

/// Every `/sys/fs/cgroup/<hierarchy>/<cgroup>` that exists, `unified` included.
fn existing_in_any_hierarchy(cgroup: &str) -> Vec<PathBuf> {
    let Ok(hierarchies) = fs::read_dir(DEFAULT_MOUNT_ROOT) else {
        return Vec::new();
    };
    hierarchies
        .flatten()
        .map(|h| h.path().join(cgroup.trim_start_matches('/')))
        .filter(|p| p.is_dir())
        .collect()
}

/// Issue 18: on a hybrid host runc mirrors the pod cgroup into the cgroup2 mount at
/// `/sys/fs/cgroup/unified`; removing the pod cgroup must remove that copy too.
#[test]
fn real_hybrid_pod_cgroup_removal_covers_the_unified_hierarchy() {
    const TEST: &str = "real_hybrid_pod_cgroup_removal_covers_the_unified_hierarchy";
    if !nix::unistd::geteuid().is_root() {
        return skip(TEST, "needs root");
    }
    let Ok(mountinfo) = fs::read_to_string(MOUNTINFO_PATH) else {
        return skip(TEST, "no /proc/self/mountinfo");
    };
    let layout = detect(&mountinfo, Path::new(DEFAULT_MOUNT_ROOT));
    let Ok(layout) = layout else {
        return skip(TEST, "no cgroups");
    };
    if layout.mode != CgroupMode::Hybrid {
        return skip(TEST, &format!("not a hybrid host ({:?})", layout.mode));
    }
    let unified_root = layout.unified.clone().expect("hybrid has a cgroup2 mount");

    let top = format!("litelet-test-u{}", std::process::id());
    let _guard = Guard {
        top: top.clone(),
        children: Vec::new(),
    };
    let config = ManagerConfig {
        cgroup_root: format!("/{top}"),
        ..Default::default()
    };
    let manager =
        PodCgroupManager::new(Path::new(DEFAULT_MOUNT_ROOT), &mountinfo, config).expect("manager");
    manager.ensure_qos_hierarchy().expect("qos hierarchy");
    let uid = format!("{}-unified", std::process::id());
    let pod = burstable_pod(&uid);
    let name = manager.pod_cgroup_name(&pod).expect("name");
    manager.ensure_pod(&pod).expect("ensure pod");
    // What runc does when it starts the pod's first container: the pod's path and
    // the container's below it, in the cgroup2 mount as well.
    let in_unified = unified_root.join(name.trim_start_matches('/'));
    fs::create_dir_all(in_unified.join("container-a")).expect("mkdir in the unified hierarchy");

    manager.remove_pod(&uid).expect("remove pod cgroup");
    let left = existing_in_any_hierarchy(&name);
    assert!(left.is_empty(), "pod cgroup left behind in: {left:?}");
    assert!(!in_unified.exists(), "{} left behind", in_unified.display());
}
