//! The only code that touches cgroupfs: write one interface file, read one, join an
//! untrusted name onto a root, make and remove cgroup directories, list children.
//!
//! Rules kept here so the v1/v2 backends cannot get them wrong:
//! - a write opens an *existing* file (never `O_CREAT`): on cgroupfs a missing file means
//!   the controller is absent or not enabled, and on a test model it means the test did
//!   not expect the write; either way it is an error naming the path and the value;
//! - a value is written with one `write` call, as cgroupfs parses each write separately;
//! - removal is `rmdir`, deepest first; cgroupfs refuses it (`EBUSY`) while processes
//!   remain, which is reported as [`FsError::Busy`]; nothing is ever unlinked.
//!
//! Called from pod worker threads and housekeeping; stateless.

use std::fs::{self, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Component, Path, PathBuf};

/// The file listing a cgroup's processes (both versions).
pub const CGROUP_PROCS: &str = "cgroup.procs";

/// A failed cgroupfs access, with the path and the value involved.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The interface file does not exist (controller missing or not enabled).
    #[error("cannot write {value:?} to {path}: no such cgroup file")]
    MissingFile { path: PathBuf, value: String },
    /// The kernel (or the file system) refused the value.
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// The file's content is not what this version of the file holds.
    #[error("unexpected content {value:?} in {path}")]
    Parse { path: PathBuf, value: String },
    /// An untrusted name would leave the root it is joined onto.
    #[error("cgroup name {name:?} escapes {root}")]
    Escape { root: PathBuf, name: String },
    #[error("cannot create cgroup directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot list cgroup directory {path}: {source}")]
    ListDir { path: PathBuf, source: io::Error },
    /// `rmdir` refused: the cgroup still has processes (or a child that has them).
    #[error("cannot remove cgroup {path}: it still has processes")]
    Busy { path: PathBuf },
    #[error("cannot remove cgroup directory {path}: {source}")]
    RemoveDir { path: PathBuf, source: io::Error },
}

/// Joins `untrusted` below `root`, refusing any `..` part or prefix. A leading `/` is
/// taken as relative to `root` (cgroup names are absolute within their hierarchy).
pub fn join_safely(root: &Path, untrusted: impl AsRef<Path>) -> Result<PathBuf, FsError> {
    let untrusted = untrusted.as_ref();
    let mut joined = root.to_path_buf();
    for component in untrusted.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => joined.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(FsError::Escape {
                    root: root.to_path_buf(),
                    name: untrusted.display().to_string(),
                })
            }
        }
    }
    Ok(joined)
}

/// Writes `value` to the existing file `path` in a single write.
pub fn write(path: &Path, value: &str) -> Result<(), FsError> {
    let wrap = |source: io::Error| {
        if source.kind() == ErrorKind::NotFound {
            FsError::MissingFile {
                path: path.to_path_buf(),
                value: value.to_owned(),
            }
        } else {
            FsError::Write {
                path: path.to_path_buf(),
                value: value.to_owned(),
                source,
            }
        }
    };
    // `truncate` is a no-op on cgroupfs (as for `echo v > file`) and keeps a model file
    // from keeping the tail of a longer earlier value.
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(wrap)?;
    let written = file.write(value.as_bytes()).map_err(wrap)?;
    if written != value.len() {
        return Err(wrap(io::Error::new(
            ErrorKind::WriteZero,
            format!("short write of {written} bytes"),
        )));
    }
    Ok(())
}

/// The whole file, trailing newline removed.
pub fn read_string(path: &Path) -> Result<String, FsError> {
    let text = fs::read_to_string(path).map_err(|source| FsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text.trim_end().to_owned())
}

/// A file holding one unsigned number.
pub fn read_u64(path: &Path) -> Result<u64, FsError> {
    let text = read_string(path)?;
    text.trim().parse().map_err(|_| FsError::Parse {
        path: path.to_path_buf(),
        value: text,
    })
}

/// A file holding one signed number (v1 uses `-1` for "no limit").
pub fn read_i64(path: &Path) -> Result<i64, FsError> {
    let text = read_string(path)?;
    text.trim().parse().map_err(|_| FsError::Parse {
        path: path.to_path_buf(),
        value: text,
    })
}

/// Makes the cgroup directory and any missing ancestors; an existing one is fine.
pub fn create_dir(path: &Path) -> Result<(), FsError> {
    fs::create_dir_all(path).map_err(|source| FsError::CreateDir {
        path: path.to_path_buf(),
        source,
    })
}

/// Names of the child directories of `path`, sorted; a missing `path` has none.
pub fn child_dirs(path: &Path) -> Result<Vec<String>, FsError> {
    let list_err = |source| FsError::ListDir {
        path: path.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(list_err(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(list_err)?;
        let is_dir = entry.file_type().map_err(list_err)?.is_dir();
        // Names that are not UTF-8 were not made by litelet; leave them alone.
        if let (true, Ok(name)) = (is_dir, entry.file_name().into_string()) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Removes the cgroup directory `path` and its child cgroups, deepest first. A missing
/// directory (already removed) is success.
pub fn remove_tree(path: &Path) -> Result<(), FsError> {
    for child in child_dirs(path)? {
        remove_tree(&path.join(child))?;
    }
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(remove_error(path, e)),
    }
}

fn remove_error(path: &Path, source: io::Error) -> FsError {
    if source.raw_os_error() == Some(nix::libc::EBUSY) {
        FsError::Busy {
            path: path.to_path_buf(),
        }
    } else {
        FsError::RemoveDir {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// PIDs listed in `cgroup.procs` of `path` and of every descendant. A cgroup that
/// disappears while being walked contributes nothing.
pub fn processes(path: &Path) -> Result<Vec<i32>, FsError> {
    let mut pids = Vec::new();
    collect_processes(path, &mut pids)?;
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

fn collect_processes(path: &Path, pids: &mut Vec<i32>) -> Result<(), FsError> {
    let procs = path.join(CGROUP_PROCS);
    match fs::read_to_string(&procs) {
        Ok(text) => {
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                let pid = line.parse().map_err(|_| FsError::Parse {
                    path: procs.clone(),
                    value: line.to_owned(),
                })?;
                pids.push(pid);
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(FsError::Read {
                path: procs,
                source,
            })
        }
    }
    for child in child_dirs(path)? {
        collect_processes(&path.join(child), pids)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_safely_stays_under_root() {
        let root = Path::new("/sys/fs/cgroup/cpu");
        let cases = [
            ("/kubepods/pod1", "/sys/fs/cgroup/cpu/kubepods/pod1"),
            ("kubepods", "/sys/fs/cgroup/cpu/kubepods"),
            ("/", "/sys/fs/cgroup/cpu"),
            ("./a/./b", "/sys/fs/cgroup/cpu/a/b"),
        ];
        for (name, want) in cases {
            assert_eq!(join_safely(root, name).unwrap(), PathBuf::from(want));
        }
        for bad in ["..", "/../etc", "a/../../b", "/kubepods/.."] {
            assert!(
                matches!(join_safely(root, bad), Err(FsError::Escape { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn write_never_creates_and_names_path_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.shares");
        let err = write(&path, "1024").unwrap_err();
        assert!(matches!(&err, FsError::MissingFile { value, .. } if value == "1024"));
        assert!(!path.exists());
        let msg = err.to_string();
        assert!(msg.contains("cpu.shares") && msg.contains("1024"), "{msg}");
    }

    #[test]
    fn write_replaces_a_longer_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.cfs_quota_us");
        fs::write(&path, "100000\n").unwrap();
        write(&path, "-1").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "-1");
        assert_eq!(read_i64(&path).unwrap(), -1);
    }

    #[test]
    fn reads_numbers_and_reports_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.usage_in_bytes");
        fs::write(&path, "4096\n").unwrap();
        assert_eq!(read_u64(&path).unwrap(), 4096);
        fs::write(&path, "lots\n").unwrap();
        assert!(matches!(read_u64(&path), Err(FsError::Parse { value, .. }) if value == "lots"));
        assert!(matches!(
            read_u64(&dir.path().join("nope")),
            Err(FsError::Read { .. })
        ));
    }

    #[test]
    fn remove_tree_is_deepest_first_and_tolerates_missing() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join("kubepods/pod1");
        fs::create_dir_all(pod.join("c1/x")).unwrap();
        fs::create_dir_all(pod.join("c2")).unwrap();
        remove_tree(&pod).unwrap();
        assert!(!pod.exists());
        assert!(dir.path().join("kubepods").exists());
        remove_tree(&pod).unwrap();
    }

    #[test]
    fn ebusy_is_reported_as_busy() {
        let err = remove_error(
            Path::new("/x/pod1"),
            io::Error::from_raw_os_error(nix::libc::EBUSY),
        );
        assert!(matches!(err, FsError::Busy { .. }));
        assert!(err.to_string().contains("still has processes"));
    }

    #[test]
    fn processes_walks_descendants() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join("pod1");
        fs::create_dir_all(pod.join("c1")).unwrap();
        fs::write(pod.join(CGROUP_PROCS), "").unwrap();
        fs::write(pod.join("c1").join(CGROUP_PROCS), "12\n7\n").unwrap();
        assert_eq!(processes(&pod).unwrap(), vec![7, 12]);
        assert_eq!(
            processes(&dir.path().join("gone")).unwrap(),
            Vec::<i32>::new()
        );
        assert_eq!(child_dirs(&pod).unwrap(), vec!["c1".to_owned()]);
    }
}
