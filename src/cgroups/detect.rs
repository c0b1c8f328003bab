//! Which cgroup layout the machine has, decided from an injected mount table
//! (`/proc/self/mountinfo` text) and mount root (normally `/sys/fs/cgroup`).
//!
//! - **unified**: a `cgroup2` file system is mounted at the root itself → v2;
//! - **hybrid**: v1 controller hierarchies under the root plus a `cgroup2` mount (usually
//!   `<root>/unified`, without controllers) → treated as v1, as upstream and runc do;
//! - **legacy**: v1 hierarchies only → v1.
//!
//! Only mounts at or below the root count, so a bind mount of a hierarchy elsewhere
//! cannot win; when a controller is mounted twice under the root, the shorter mount path
//! wins (upstream's rule). Pure: parsing and deciding only, no file access.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The v1 controllers the kernel knows; any other super option is a mount option.
const V1_CONTROLLERS: &[&str] = &[
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "debug",
    "devices",
    "freezer",
    "hugetlb",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// A mount table litelet cannot use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DetectError {
    /// A line does not have mountinfo's shape.
    #[error("malformed mountinfo line {line_no}: {line:?}")]
    Malformed { line_no: usize, line: String },
    /// Neither a cgroup2 mount at the root nor any v1 hierarchy below it.
    #[error("no cgroup file system is mounted at or below {root}")]
    NoCgroups { root: PathBuf },
}

/// The cgroup layout of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    /// v1 hierarchies only.
    Legacy,
    /// v1 hierarchies plus a controller-less cgroup2 mount; used as v1.
    Hybrid,
    /// cgroup2 at the root.
    Unified,
}

/// One v1 hierarchy: where it is mounted and what it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V1Mount {
    pub mount_point: PathBuf,
    /// Controllers, plus `name=<x>` for a named hierarchy such as `name=systemd`.
    pub controllers: Vec<String>,
    /// The cgroup of the hierarchy shown at the mount point (`/` outside cgroup
    /// namespaces and containers).
    pub root: String,
}

/// The outcome of detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub mode: CgroupMode,
    /// The cgroup2 mount: the root itself when unified, e.g. `<root>/unified` when hybrid.
    pub unified: Option<PathBuf>,
    /// v1 hierarchies under the root, one per mount point, in mount-table order.
    pub v1: Vec<V1Mount>,
}

impl Layout {
    /// Controller → mount point, for v1 controllers and named hierarchies.
    pub fn v1_mount_points(&self) -> BTreeMap<String, PathBuf> {
        let mut points: BTreeMap<String, PathBuf> = BTreeMap::new();
        for mount in &self.v1 {
            for controller in &mount.controllers {
                let better = points.get(controller).is_none_or(|known| {
                    mount.mount_point.as_os_str().len() < known.as_os_str().len()
                });
                if better {
                    points.insert(controller.clone(), mount.mount_point.clone());
                }
            }
        }
        points
    }
}

/// A cgroup-related line of the mount table.
#[derive(Debug, PartialEq, Eq)]
enum CgroupMount {
    V1(V1Mount),
    V2 { mount_point: PathBuf },
}

/// Decides the layout from the mount table text and the mount root.
pub fn detect(mountinfo: &str, root: &Path) -> Result<Layout, DetectError> {
    let mut unified = None;
    let mut v1: Vec<V1Mount> = Vec::new();
    for (index, line) in mountinfo.lines().enumerate() {
        let Some(mount) = parse_line(index + 1, line)? else {
            continue;
        };
        match mount {
            CgroupMount::V2 { mount_point } if mount_point.starts_with(root) => {
                // The one at the root beats `<root>/unified`.
                let at_root = mount_point == root;
                if at_root || unified.is_none() {
                    unified = Some(mount_point);
                }
            }
            CgroupMount::V1(mount)
                if mount.mount_point.starts_with(root)
                    && !mount.controllers.is_empty()
                    && !v1.iter().any(|m| m.mount_point == mount.mount_point) =>
            {
                v1.push(mount);
            }
            _ => {}
        }
    }
    let mode = match (&unified, v1.is_empty()) {
        (Some(point), _) if point == root => CgroupMode::Unified,
        (_, true) => {
            return Err(DetectError::NoCgroups {
                root: root.to_path_buf(),
            })
        }
        (Some(_), false) => CgroupMode::Hybrid,
        (None, false) => CgroupMode::Legacy,
    };
    if mode == CgroupMode::Unified {
        v1.clear();
    }
    Ok(Layout { mode, unified, v1 })
}

/// Parses one mountinfo line; `None` when it is not a cgroup mount.
///
/// Shape: `id parent major:minor root mount-point options [optional...] - fstype source
/// super-options`.
fn parse_line(line_no: usize, line: &str) -> Result<Option<CgroupMount>, DetectError> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let malformed = || DetectError::Malformed {
        line_no,
        line: line.to_owned(),
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    let sep = fields
        .iter()
        .position(|f| *f == "-")
        .ok_or_else(malformed)?;
    // Six fields before the separator, three after it.
    let (Some(root), Some(mount_point), true) = (fields.get(3), fields.get(4), sep >= 6) else {
        return Err(malformed());
    };
    let (Some(fstype), Some(super_options)) = (fields.get(sep + 1), fields.get(sep + 3)) else {
        return Err(malformed());
    };
    let root = unescape(root);
    let mount_point = PathBuf::from(unescape(mount_point));
    Ok(match *fstype {
        "cgroup2" => Some(CgroupMount::V2 { mount_point }),
        "cgroup" => {
            let controllers = super_options
                .split(',')
                .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                .map(str::to_owned)
                .collect();
            Some(CgroupMount::V1(V1Mount {
                mount_point,
                controllers,
                root,
            }))
        }
        _ => None,
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            if let Some(digits @ [a, b, c]) = bytes.get(i + 1..i + 4) {
                let octal = digits.iter().all(|d| (b'0'..=b'7').contains(d));
                // Three octal digits above \377 do not fit a byte; keep them verbatim.
                if octal && *a <= b'3' {
                    out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The interface file whose presence says the memory controller can limit swap
/// (upstream swapControllerAvailable): v1 `memory.memsw.limit_in_bytes` at the memory
/// hierarchy's root; v2 `memory.swap.max` in the process's own cgroup (the root has
/// none), read from `proc_self_cgroup` (the text of /proc/self/cgroup). `None`: no
/// memory controller at all.
pub fn swap_control_file(layout: &Layout, proc_self_cgroup: &str) -> Option<PathBuf> {
    if let (CgroupMode::Unified, Some(root)) = (layout.mode, &layout.unified) {
        let own = proc_self_cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/");
        let mut path = root.clone();
        // Own cgroup path from the kernel: only plain components are joined.
        for part in Path::new(own.trim()).components() {
            if let std::path::Component::Normal(name) = part {
                path.push(name);
            }
        }
        return Some(path.join("memory.swap.max"));
    }
    let memory = layout.v1_mount_points().remove("memory")?;
    Some(memory.join("memory.memsw.limit_in_bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This project's machines (cgroup v1 hybrid, cpu and cpuacct mounted apart).
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd-style legacy host: cpu and cpuacct co-mounted, shared:N optional fields.
    const LEGACY: &str = "\
25 18 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory
";

    const UNIFIED: &str = "\
24 18 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    fn root() -> &'static Path {
        Path::new("/sys/fs/cgroup")
    }

    #[test]
    fn hybrid_is_used_as_v1() {
        let layout = detect(HYBRID, root()).unwrap();
        assert_eq!(layout.mode, CgroupMode::Hybrid);
        assert_eq!(
            layout.unified,
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let points = layout.v1_mount_points();
        assert_eq!(points["cpu"], PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(points["cpuacct"], PathBuf::from("/sys/fs/cgroup/cpuacct"));
        assert_eq!(points["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(
            points["name=systemd"],
            PathBuf::from("/sys/fs/cgroup/systemd")
        );
        assert_eq!(layout.v1.len(), 6);
    }

    #[test]
    fn legacy_with_comounted_cpu_and_optional_fields() {
        let layout = detect(LEGACY, root()).unwrap();
        assert_eq!(layout.mode, CgroupMode::Legacy);
        let points = layout.v1_mount_points();
        assert_eq!(points["cpu"], points["cpuacct"]);
        assert_eq!(points["cpu"], PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(!points.contains_key("pids"));
    }

    #[test]
    fn unified_at_the_root() {
        let layout = detect(UNIFIED, root()).unwrap();
        assert_eq!(layout.mode, CgroupMode::Unified);
        assert_eq!(layout.unified, Some(root().to_path_buf()));
        assert!(layout.v1.is_empty());
    }

    #[test]
    fn swap_is_controlled_through_memsw_on_v1_and_the_own_cgroup_on_v2() {
        let v1 = detect(HYBRID, root()).unwrap();
        assert_eq!(
            swap_control_file(&v1, "12:memory:/user.slice\n0::/user.slice\n"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
            ))
        );
        let v2 = detect(UNIFIED, root()).unwrap();
        assert_eq!(
            swap_control_file(&v2, "0::/system.slice/litelet.service\n"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/litelet.service/memory.swap.max"
            ))
        );
        // Nothing but plain components is joined.
        assert_eq!(
            swap_control_file(&v2, "0::/../../etc\n"),
            Some(PathBuf::from("/sys/fs/cgroup/etc/memory.swap.max"))
        );
        let no_memory = detect(
            "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
            root(),
        )
        .unwrap();
        assert_eq!(swap_control_file(&no_memory, ""), None);
    }

    #[test]
    fn mounts_outside_the_root_do_not_count() {
        let text = "\
50 1 0:40 / /mnt/cg/memory rw - cgroup cgroup rw,memory
51 1 0:41 / /tmp/other rw - cgroup2 cgroup2 rw
";
        assert_eq!(
            detect(text, root()),
            Err(DetectError::NoCgroups {
                root: root().to_path_buf()
            })
        );
        let mut doubled = String::from(LEGACY);
        doubled.push_str(
            "60 28 0:25 / /sys/fs/cgroup/memory/nested/memory rw - cgroup cgroup rw,memory\n",
        );
        let points = detect(&doubled, root()).unwrap().v1_mount_points();
        assert_eq!(points["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn malformed_lines_are_errors_with_their_number() {
        let text = "24 18 0:21 / /sys/fs/cgroup rw cgroup2 cgroup2 rw\n";
        assert!(matches!(
            detect(text, root()),
            Err(DetectError::Malformed { line_no: 1, .. })
        ));
        let bad_lines = [
            "1 2 - cgroup2 x rw\n",
            "1 2 0:3 / /sys/fs/cgroup rw - cgroup2 cgroup2\n",
            "1 2 0:3 / /sys/fs/cgroup rw -\n",
        ];
        for line in bad_lines {
            assert!(
                matches!(detect(line, root()), Err(DetectError::Malformed { .. })),
                "{line:?}"
            );
        }
        assert!(matches!(
            detect("", root()),
            Err(DetectError::NoCgroups { .. })
        ));
    }

    #[test]
    fn escaped_mount_points() {
        assert_eq!(unescape(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape(r"/tmp/x\134y"), r"/tmp/x\y");
        assert_eq!(unescape(r"/tmp/end\04"), r"/tmp/end\04");
        assert_eq!(unescape(r"\"), r"\");
        let text = r"5 1 0:9 / /tmp/my\040cg rw - cgroup2 cgroup2 rw";
        let layout = detect(text, Path::new("/tmp/my cg")).unwrap();
        assert_eq!(layout.mode, CgroupMode::Unified);
    }
}
