//! Test-only model of cgroupfs in a temp dir (youki's `test.rs` fixtures, firecracker's
//! `MockCgroupFs` mount table): a mount table text pointing into the temp dir and
//! cgroup directories holding exactly the interface files litelet may touch, with the
//! kernel's default contents.
//!
//! The model cannot play the kernel: `mkdir` does not fill a directory (call
//! [`Model::populate`]), and `rmdir` fails on a directory with files, so removal tests
//! use directories without files.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::detect::{detect, Layout};
use super::name::CgroupName;

/// v1 memory limit the kernel shows for "no limit" (4 KiB pages).
pub const V1_NO_MEMORY_LIMIT: &str = "9223372036854771712";

/// Interface files of a v1 cgroup per controller, with their defaults.
pub const V1_FILES: &[(&str, &[(&str, &str)])] = &[
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
            ("memory.limit_in_bytes", V1_NO_MEMORY_LIMIT),
            ("memory.usage_in_bytes", "0"),
            ("cgroup.procs", ""),
        ],
    ),
    ("pids", &[("pids.max", "max"), ("cgroup.procs", "")]),
];

/// Interface files of a non-root v2 cgroup, with their defaults.
pub const V2_FILES: &[(&str, &str)] = &[
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

/// [`Model::populate`] for a model at `root` (for fakes that act as the kernel or
/// systemd without holding the model).
pub fn populate_at(root: &Path, v2: bool, name: &str) {
    let relative = CgroupName::parse(name).unwrap().to_relative_path();
    if v2 {
        let dir = root.join(relative);
        fs::create_dir_all(&dir).unwrap();
        for (file, content) in V2_FILES {
            fs::write(dir.join(file), content).unwrap();
        }
        return;
    }
    for (hierarchy, files) in V1_FILES {
        let dir = root.join(hierarchy).join(&relative);
        fs::create_dir_all(&dir).unwrap();
        for (file, content) in *files {
            fs::write(dir.join(file), content).unwrap();
        }
    }
}

/// A temp-dir cgroupfs with its mount table.
pub struct Model {
    dir: TempDir,
    pub mountinfo: String,
    v2: bool,
}

impl Model {
    /// The project machines' hybrid layout: v1 cpu, cpuacct, cpuset, memory, pids,
    /// name=systemd, and a controller-less cgroup2 at `unified`.
    pub fn v1() -> Model {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut mountinfo = format!("31 23 0:28 / {} rw - tmpfs tmpfs rw\n", root.display());
        let hierarchies = [
            ("cpu", "cpu"),
            ("cpuacct", "cpuacct"),
            ("cpuset", "cpuset"),
            ("memory", "memory"),
            ("pids", "pids"),
            ("systemd", "name=systemd"),
        ];
        for (i, (dir_name, option)) in hierarchies.iter().enumerate() {
            let point = root.join(dir_name);
            fs::create_dir_all(&point).unwrap();
            mountinfo.push_str(&format!(
                "{} 31 0:{} / {} rw,relatime - cgroup cgroup rw,{option}\n",
                40 + i,
                29 + i,
                point.display()
            ));
        }
        let unified = root.join("unified");
        fs::create_dir_all(&unified).unwrap();
        mountinfo.push_str(&format!(
            "50 31 0:40 / {} rw - cgroup2 cgroup2 rw\n",
            unified.display()
        ));
        Model {
            dir,
            mountinfo,
            v2: false,
        }
    }

    /// A unified (v2) host: cgroup2 at the root, whose `cgroup.controllers` offers
    /// `available`.
    pub fn v2(available: &str) -> Model {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("cgroup.controllers"), available).unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        fs::write(root.join("cgroup.procs"), "1\n").unwrap();
        let mountinfo = format!(
            "24 18 0:21 / {} rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            root.display()
        );
        Model {
            dir,
            mountinfo,
            v2: true,
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn layout(&self) -> Layout {
        detect(&self.mountinfo, self.root()).unwrap()
    }

    /// Where `name` lives in `hierarchy` (ignored for v2).
    pub fn path(&self, hierarchy: &str, name: &str) -> PathBuf {
        let relative = CgroupName::parse(name).unwrap().to_relative_path();
        if self.v2 {
            self.root().join(relative)
        } else {
            self.root().join(hierarchy).join(relative)
        }
    }

    /// Makes `name` as the kernel would on mkdir: the directory with its default
    /// interface files, in every managed v1 hierarchy (or the v2 tree).
    pub fn populate(&self, name: &str) {
        populate_at(self.root(), self.v2, name);
    }

    /// Whether this is a v2 model.
    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The content of `file` of `name` in `hierarchy`.
    pub fn read(&self, hierarchy: &str, name: &str, file: &str) -> String {
        fs::read_to_string(self.path(hierarchy, name).join(file)).unwrap()
    }

    /// Overwrites `file` of `name` in `hierarchy` (the model's way to "be the kernel").
    pub fn set(&self, hierarchy: &str, name: &str, file: &str, content: &str) {
        fs::write(self.path(hierarchy, name).join(file), content).unwrap();
    }

    /// Deletes `file`, as if the controller were not enabled.
    pub fn delete(&self, hierarchy: &str, name: &str, file: &str) {
        fs::remove_file(self.path(hierarchy, name).join(file)).unwrap();
    }

    /// Removes every regular file below the root, leaving only directories, so that
    /// `rmdir` works as on cgroupfs.
    pub fn strip_files(&self) {
        fn walk(dir: &Path) {
            for entry in fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path());
                } else {
                    fs::remove_file(entry.path()).unwrap();
                }
            }
        }
        walk(self.root());
    }
}
