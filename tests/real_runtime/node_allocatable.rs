//! Node allocatable on the kernel: the litelet binary, on the fake CRI, limits its
//! `kubepods` cgroup (under a private `--cgroup-root`) to the machine's capacity minus
//! --system-reserved and --kube-reserved, and to the capacity with
//! `--enforce-node-allocatable=none`; stops at start when a reserved cgroup to limit is
//! missing; and a `kubepods` limit the kernel refuses (`EBUSY`, below the usage) is
//! retried until it holds.
//!
//! Runs as root on cgroup v1 (legacy or hybrid) at `/sys/fs/cgroup`; skipped loudly
//! otherwise, a failure with `CI=true`. litelet (or the memory hog) is stopped first,
//! then the private cgroup root is removed deepest first (the `Litelet` and `Hog`
//! guards).

use crate::support;

use std::path::Path;

use crate::support::fake_cri::FakeCri;
use crate::support::litelet::Litelet;
use litelet::node::{MachineReader, MachineRoots};

const PAGE: u64 = 4096;

fn kubepods_file(node: &Litelet, hierarchy: &str, file: &str) -> String {
    let path = format!(
        "/sys/fs/cgroup/{hierarchy}{}/kubepods/{file}",
        node.cgroup_root
    );
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("<{path}: {e}>"))
}

#[test]
fn kubepods_is_limited_to_capacity_minus_reservations_on_the_kernel() {
    const TEST: &str = "kubepods_is_limited_to_capacity_minus_reservations_on_the_kernel";
    if !Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        || !Path::new("/sys/fs/cgroup/pids").is_dir()
    {
        let _: Option<()> = support::skip(TEST, "needs cgroup v1 with pids at /sys/fs/cgroup");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        let _: Option<()> = support::skip(TEST, "needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reader = MachineReader::new(MachineRoots::host(), dir.path(), None);
    let (machine, _) = reader.read();
    let cpus = u64::from(machine.num_cpus.expect("cpu count"));
    let memory = machine.memory_bytes.expect("memory");
    let pids = reader.max_pids().expect("pid_max");

    let cri = FakeCri::start();
    for (enforce, reserved_milli_cpu, reserved_memory, reserved_pids) in
        [("pods", 500, 384u64 << 20, 1000), ("none", 0, 0, 0)]
    {
        let node = Litelet::spawn(&cri.endpoint(), "alloc-1", "alloc", |cmd, _| {
            cmd.args([
                "--kube-reserved=cpu=500m,memory=256Mi,pid=1000",
                "--system-reserved=memory=128Mi",
                "--fail-swap-on=false",
            ])
            .arg(format!("--enforce-node-allocatable={enforce}"));
        });
        node.wait_for("the kubepods limits", || {
            node.log().contains("NodeAllocatableEnforced")
        });
        let want_memory = (memory - reserved_memory) / PAGE * PAGE;
        let want_shares = (cpus * 1000 - reserved_milli_cpu) * 1024 / 1000;
        let want_pids = pids - reserved_pids;
        assert_eq!(
            kubepods_file(&node, "memory", "memory.limit_in_bytes"),
            want_memory.to_string(),
            "{enforce}: {}",
            node.tail()
        );
        assert_eq!(
            kubepods_file(&node, "cpu", "cpu.shares"),
            want_shares.to_string(),
            "{enforce}"
        );
        assert_eq!(
            kubepods_file(&node, "pids", "pids.max"),
            want_pids.to_string(),
            "{enforce}"
        );
        eprintln!(
            "{enforce}: kubepods memory {want_memory}, cpu.shares {want_shares}, pids.max {want_pids}"
        );
        drop(node);
    }
}

/// A kube-reserved cgroup to enforce that does not exist stops litelet at start,
/// naming it (upstream fails to start too); litelet never makes it.
#[test]
fn a_missing_kube_reserved_cgroup_stops_litelet_at_start() {
    const TEST: &str = "a_missing_kube_reserved_cgroup_stops_litelet_at_start";
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() || !nix::unistd::geteuid().is_root() {
        let _: Option<()> = support::skip(TEST, "needs root and cgroup v1 at /sys/fs/cgroup");
        return;
    }
    let missing = format!("/litelet-daemons-{}.slice", std::process::id());
    let cri = FakeCri::start();
    let node = Litelet::spawn(&cri.endpoint(), "alloc-2", "alloc", |cmd, _| {
        cmd.args([
            "--kube-reserved=cpu=500m",
            "--fail-swap-on=false",
            "--enforce-node-allocatable=pods,kube-reserved",
        ])
        .arg(format!("--kube-reserved-cgroup={missing}"));
    });
    let died = support::wait_until(std::time::Duration::from_secs(60), || node.is_dead());
    let log = node.log();
    assert!(died, "litelet kept running:\n{}", node.tail());
    assert!(
        log.contains(&format!(
            "Failed to enforce Kube Reserved Cgroup Limits on \"{missing}\""
        )) && log.contains("does not exist"),
        "{log}"
    );
    let leftover = Path::new("/sys/fs/cgroup/cpu").join(missing.trim_start_matches('/'));
    assert!(!leftover.exists(), "litelet made {}", leftover.display());
}

/// Kills the memory hog, then removes the private cgroup root deepest first, also
/// when a check fails.
struct Hog {
    child: Option<std::process::Child>,
    top: String,
}

impl Hog {
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop();
        support::containerd::remove_cgroup_tree(&self.top);
    }
}

/// The kernel refuses (`EBUSY`) a `kubepods` memory limit below what its processes
/// use and cannot give back (no swap): a warning event; once the usage is gone the
/// retry succeeds, with the success event.
#[test]
fn a_kubepods_limit_below_usage_is_refused_then_retried_on_the_kernel() {
    use litelet::cgroups::{CgroupResources, Limit};
    use litelet::events::{EventType, Recorder};
    use litelet::kubelet::node_allocatable::{NodeAllocatable, ENFORCED, FAILED};
    use std::sync::Arc;
    use std::time::Duration;
    use support::containerd::qos_cgroups_under;

    const TEST: &str = "a_kubepods_limit_below_usage_is_refused_then_retried_on_the_kernel";
    let swap = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if !Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        || !nix::unistd::geteuid().is_root()
        || swap.lines().count() > 1
    {
        let _: Option<()> = support::skip(TEST, "needs root, cgroup v1 and no swap");
        return;
    }
    let top = format!("litelet-ebusy-{}", std::process::id());
    let mut hog = Hog {
        child: None,
        top: top.clone(),
    };
    let cgroups = qos_cgroups_under(&format!("/{top}"));
    let memory = format!("/sys/fs/cgroup/memory/{top}/kubepods");
    // Joins kubepods before touching 64 MiB of anonymous memory, so it is charged there.
    hog.child = Some(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {memory}/cgroup.procs && exec perl -e '$x = \"a\" x (64 << 20); sleep 120'"
            ))
            .spawn()
            .expect("sh"),
    );
    let usage = || {
        std::fs::read_to_string(format!("{memory}/memory.usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        support::wait_until(Duration::from_secs(20), || usage() > 48 << 20),
        "usage stayed at {}",
        usage()
    );
    let (tx, rx) = crossbeam_channel::unbounded();
    let limits = CgroupResources {
        memory_limit: Some(Limit::Value(16 << 20)),
        ..Default::default()
    };
    let enforcer = NodeAllocatable::new(Arc::new(cgroups), limits, Recorder::new(tx), "n");
    assert!(
        !enforcer.enforce(),
        "the kernel took a limit below the usage"
    );
    let failed = rx.try_recv().expect("a failure event");
    assert_eq!(
        (failed.kind, failed.reason.as_str()),
        (EventType::Warning, FAILED)
    );
    assert!(
        failed.message.contains("busy"),
        "not EBUSY: {}",
        failed.message
    );
    eprintln!("refused: {}", failed.message);

    hog.stop();
    assert!(
        support::wait_until(Duration::from_secs(20), || usage() < 16 << 20),
        "usage stayed at {}",
        usage()
    );
    assert!(enforcer.enforce(), "the retry failed");
    let done = rx.try_recv().expect("a success event");
    assert_eq!(
        (done.kind, done.reason.as_str()),
        (EventType::Normal, ENFORCED)
    );
    let limit = std::fs::read_to_string(format!("{memory}/memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (16u64 << 20).to_string());
}
