//! Test support shared by the integration tests: the fake CRI runtime, a private real
//! containerd, and small helpers. Each test binary includes this with `mod support;`
//! (the tier binaries `tests/<tier>/main.rs` through `#[path]`) and uses what it needs.
#![allow(dead_code)]

pub mod cgroup_model;
pub mod containerd;
pub mod control_plane;
pub mod dbus_daemon;
pub mod fake_api;
pub mod fake_cri;
pub mod fake_device_plugin;
pub mod https;
pub mod litelet;
pub mod pod_data;
pub mod pods;
pub mod probes;
pub mod prometheus;
pub mod real_node;
pub mod registry;
pub mod runtime;
pub mod sources;
pub mod tcp_proxy;
pub mod vm;

use std::time::{Duration, Instant};

/// True when tests that need root or a real component must run (CI); outside CI
/// they may skip.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Skips `test` loudly, saying `why`, or fails it in CI, where it must run.
pub fn skip<T>(test: &str, why: &str) -> Option<T> {
    if required() {
        panic!("{test}: cannot run in CI: {why}");
    }
    eprintln!("\n*** SKIPPED {test}: {why} (set CI=true to make this a failure) ***\n");
    None
}

/// A copy of `/proc/sys` under `dir` holding the kernel tunables litelet checks, at
/// the values it wants; every litelet a test starts gets it (through
/// `LITELET_TEST_PROC_SYS`), so no test changes this machine's tunables.
pub fn proc_sys(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("proc-sys");
    ::litelet::kernel_tunables::write_wanted(&root).expect("a /proc/sys copy");
    root
}

/// Points the litelet `cmd` starts at a `/proc/sys` copy under `dir` ([`proc_sys`]).
pub fn with_proc_sys(cmd: &mut std::process::Command, dir: &std::path::Path) {
    cmd.env(::litelet::kernel_tunables::TEST_ROOT_ENV, proc_sys(dir));
}

/// A port free on 127.0.0.1 right now (the kernel picks it; a race with another
/// process binding it before the caller is possible but rare).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The [`exclusive`] turn of tests that run litelet's status thread (`status`) in
/// process or measure it.
pub const STATUS_THREADS: &str = "in-process status threads";

/// Holds the lock named `name` until the guard drops: tests of one binary that share
/// something process- or cluster-wide (a thread name they measure, a cluster-scoped
/// object) take turns on it. A test that panicked holding it does not poison it.
pub fn exclusive(name: &str) -> std::sync::MutexGuard<'static, ()> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, PoisonError};
    static LOCKS: Mutex<BTreeMap<String, &'static Mutex<()>>> = Mutex::new(BTreeMap::new());
    let lock: &'static Mutex<()> = LOCKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name.to_owned())
        .or_insert_with(|| Box::leak(Box::new(Mutex::new(()))));
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unmounts, lazily and deepest first, every mount point at or below `dir`, so that
/// none outlives the test's temporary directory.
pub fn unmount_everything_below(dir: &std::path::Path) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<std::path::PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(std::path::PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    for point in points {
        let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
    }
}
