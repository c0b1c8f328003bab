//! A temp-dir cgroupfs for integration tests (the crate's unit tests have their own):
//! a mount table pointing into a temp dir, v1 (the project machines' hybrid layout)
//! or v2, and a small "kernel" thread that fills every new cgroup directory with the
//! interface files litelet touches, at their defaults, a few milliseconds after its
//! mkdir. Writes are not checked or rounded as the kernel would; reads give back what
//! was written.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use litelet::cgroups::{ManagerConfig, PodCgroupManager};

const V1_FILES: &[(&str, &[(&str, &str)])] = &[
    (
        "cpu",
        &[
            ("cpu.shares", "1024"),
            ("cpu.cfs_quota_us", "-1"),
            ("cpu.cfs_period_us", "100000"),
            ("cgroup.procs", ""),
        ],
    ),
    ("cpuacct", &[("cgroup.procs", "")]),
    (
        "memory",
        &[
            ("memory.limit_in_bytes", "9223372036854771712"),
            ("memory.usage_in_bytes", "0"),
            ("cgroup.procs", ""),
        ],
    ),
    ("pids", &[("pids.max", "max"), ("cgroup.procs", "")]),
];

const V2_FILES: &[(&str, &str)] = &[
    ("cgroup.controllers", "cpu memory pids"),
    ("cgroup.subtree_control", ""),
    ("cgroup.procs", ""),
    ("cpu.weight", "100"),
    ("cpu.max", "max 100000"),
    ("memory.max", "max"),
    ("memory.min", "0"),
    ("memory.current", "0"),
    ("pids.max", "max"),
];

/// A temp-dir cgroupfs with its mount table and kernel thread.
pub struct CgroupModel {
    dir: tempfile::TempDir,
    pub mountinfo: String,
    pub v2: bool,
    stop: Arc<AtomicBool>,
    kernel: Option<JoinHandle<()>>,
}

fn fill(dir: &Path, files: &[(&str, &str)]) {
    for (file, content) in files {
        let path = dir.join(file);
        if !path.exists() {
            let _ = fs::write(path, content);
        }
    }
}

/// Fills directories that have no interface file yet, recursively.
fn populate_tree(root: &Path, files: &[(&str, &str)]) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if !path.join(files[0].0).exists() {
                fill(&path, files);
            }
            populate_tree(&path, files);
        }
    }
}

impl CgroupModel {
    /// v1: one hierarchy per controller under the temp dir.
    pub fn v1() -> CgroupModel {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut mountinfo = format!("31 23 0:28 / {} rw - tmpfs tmpfs rw\n", root.display());
        for (i, (name, option)) in [
            ("cpu", "cpu"),
            ("cpuacct", "cpuacct"),
            ("memory", "memory"),
            ("pids", "pids"),
            ("systemd", "name=systemd"),
        ]
        .iter()
        .enumerate()
        {
            let point = root.join(name);
            fs::create_dir_all(&point).unwrap();
            mountinfo.push_str(&format!(
                "{} 31 0:{} / {} rw,relatime - cgroup cgroup rw,{option}\n",
                40 + i,
                29 + i,
                point.display()
            ));
        }
        Self::start(dir, mountinfo, false)
    }

    /// v2: the unified hierarchy at the temp dir.
    pub fn v2() -> CgroupModel {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("cgroup.controllers"), "cpu memory pids").unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        fs::write(root.join("cgroup.procs"), "1\n").unwrap();
        let mountinfo = format!(
            "24 18 0:21 / {} rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            root.display()
        );
        Self::start(dir, mountinfo, true)
    }

    fn start(dir: tempfile::TempDir, mountinfo: String, v2: bool) -> CgroupModel {
        let stop = Arc::new(AtomicBool::new(false));
        let root = dir.path().to_owned();
        let flag = stop.clone();
        let kernel = std::thread::Builder::new()
            .name("cg-kernel".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if v2 {
                        populate_tree(&root, V2_FILES);
                    } else {
                        for (hierarchy, files) in V1_FILES {
                            populate_tree(&root.join(hierarchy), files);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
            .unwrap();
        CgroupModel {
            dir,
            mountinfo,
            v2,
            stop,
            kernel: Some(kernel),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A manager over this model with `--cgroup-root /`, QoS cgroups created.
    pub fn manager(&self) -> PodCgroupManager {
        let m =
            PodCgroupManager::new(self.root(), &self.mountinfo, ManagerConfig::default()).unwrap();
        for _ in 0..500 {
            if m.ensure_qos_hierarchy().is_ok() {
                return m;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("qos hierarchy never became writable in the model");
    }

    /// Where cgroup `name` (e.g. `/kubepods/pod<uid>`) is, for `hierarchy` on v1.
    pub fn path(&self, hierarchy: &str, name: &str) -> PathBuf {
        let rel = name.trim_start_matches('/');
        if self.v2 {
            self.root().join(rel)
        } else {
            self.root().join(hierarchy).join(rel)
        }
    }

    /// The content of an interface file, trimmed; `None` when absent.
    pub fn read(&self, hierarchy: &str, name: &str, file: &str) -> Option<String> {
        fs::read_to_string(self.path(hierarchy, name).join(file))
            .ok()
            .map(|s| s.trim().to_owned())
    }

    /// Plays the kernel: sets a file's content.
    pub fn set(&self, hierarchy: &str, name: &str, file: &str, content: &str) {
        fs::write(self.path(hierarchy, name).join(file), content).unwrap();
    }
}

impl Drop for CgroupModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(k) = self.kernel.take() {
            let _ = k.join();
        }
    }
}
