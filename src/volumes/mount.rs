//! Mounts the volume code makes and undoes: tmpfs for memory-backed volumes (secrets,
//! projected and downwardAPI volumes, emptyDir with medium Memory), shared volume
//! mounts for mount propagation, and the search for mounts under a directory before
//! it is removed.
//!
//! Thin shell over mount(2)/umount(2) (nix) and `/proc/self/mountinfo`; the parsing
//! of mountinfo is pure and tested on text. Called from pod worker threads.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// A mount step that failed. The leaf of the volume code's errors: it depends on
/// nothing else of `volumes` (`VolumeError` and `CsiMountError` wrap it).
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// Reading mountinfo or a path's metadata.
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// mount(2) failed.
    #[error("mount {what} on {path}: {source}")]
    Mount {
        what: &'static str,
        path: PathBuf,
        source: nix::errno::Errno,
    },
    /// umount(2) failed.
    #[error("unmount {path}: {source}")]
    Unmount {
        path: PathBuf,
        source: nix::errno::Errno,
    },
    /// A directory still has a mount under it; it is left in place.
    #[error("{path} still has a mount at {mount}; not removed")]
    StillMounted { path: PathBuf, mount: PathBuf },
}

fn io(step: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> MountError {
    MountError::Io {
        step,
        path: path.into(),
        source,
    }
}

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of mountinfo: where it is mounted and its optional fields
/// (`shared:N`, `master:N`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub optional: Vec<String>,
    pub fs_type: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(v) = u8::try_from(value) {
                    out.push(v);
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

/// Parses `/proc/self/mountinfo` text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            if sep < 6 || fields.len() < sep + 2 {
                return None;
            }
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(fields[4])),
                optional: fields[6..sep].iter().map(|s| s.to_string()).collect(),
                fs_type: fields[sep + 1].to_owned(),
            })
        })
        .collect()
}

/// Mount points at or under `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(entries: &[MountEntry], dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = entries
        .iter()
        .filter(|e| e.mount_point.starts_with(dir))
        .map(|e| e.mount_point.clone())
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

fn read_mountinfo() -> Result<Vec<MountEntry>, MountError> {
    let text = fs::read_to_string(MOUNTINFO).map_err(|e| io("read", MOUNTINFO, e))?;
    Ok(parse_mountinfo(&text))
}

/// True when `path` is a mount point in this mount namespace (a bind mount of the
/// same file system included, which [`is_separate_fs`] cannot see).
pub fn is_mount_point(path: &Path) -> Result<bool, MountError> {
    Ok(read_mountinfo()?.iter().any(|e| e.mount_point == path))
}

/// True when `dir` is the root of a file system other than its parent's (our tmpfs
/// mounts always are: each tmpfs has its own device).
pub fn is_separate_fs(dir: &Path) -> Result<bool, MountError> {
    let own = fs::metadata(dir).map_err(|e| io("stat", dir, e))?;
    let parent_path = dir.parent().unwrap_or(dir);
    let parent = fs::metadata(parent_path).map_err(|e| io("stat", parent_path, e))?;
    Ok(own.dev() != parent.dev())
}

/// Mounts a tmpfs on `dir` unless one is there already (then returns false); `size`
/// in bytes caps it.
pub fn mount_tmpfs(dir: &Path, size: Option<u64>, mode: u32) -> Result<bool, MountError> {
    if is_separate_fs(dir)? {
        return Ok(false);
    }
    let mut data = format!("mode={mode:o}");
    if let Some(size) = size.filter(|s| *s > 0) {
        data.push_str(&format!(",size={size}"));
    }
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|source| MountError::Mount {
        what: "tmpfs",
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(true)
}

/// Unmounts every mount at or under `dir`, deepest first. A mount busy in some
/// other namespace is detached lazily rather than left behind.
pub fn unmount_all_under(dir: &Path) -> Result<(), MountError> {
    let Ok(real) = fs::canonicalize(dir) else {
        return Ok(()); // nothing there, nothing mounted
    };
    for point in mounts_under(&read_mountinfo()?, &real) {
        match umount2(&point, MntFlags::empty()) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
            Err(nix::errno::Errno::EBUSY) => {
                umount2(&point, MntFlags::MNT_DETACH).map_err(|source| MountError::Unmount {
                    path: point.clone(),
                    source,
                })?
            }
            Err(source) => {
                return Err(MountError::Unmount {
                    path: point.clone(),
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Fails when anything is still mounted at or under `dir` (checked right before a
/// recursive removal, which must never reach into a mounted file system).
pub fn ensure_nothing_mounted(dir: &Path) -> Result<(), MountError> {
    let Ok(real) = fs::canonicalize(dir) else {
        return Ok(());
    };
    match mounts_under(&read_mountinfo()?, &real).into_iter().next() {
        Some(mount) => Err(MountError::StillMounted {
            path: dir.to_path_buf(),
            mount,
        }),
        None => Ok(()),
    }
}

/// Makes `dir` a shared mount of its own (bind-mounted on itself first when it is not
/// a mount point), so that HostToContainer and Bidirectional propagation work for a
/// volume: the runtime refuses them unless the mount holding the source is shared
/// (or, for HostToContainer, a slave). Only the volume is touched, never the root or
/// the host's mounts; tear-down unmounts it like any other mount under the pod.
pub fn ensure_shared(dir: &Path) -> Result<(), MountError> {
    let real = fs::canonicalize(dir).map_err(|e| io("resolve", dir, e))?;
    let entries = read_mountinfo()?;
    match entries.iter().rev().find(|e| e.mount_point == real) {
        Some(m) if m.optional.iter().any(|o| o.starts_with("shared:")) => return Ok(()),
        Some(_) => {}
        None => mount(
            Some(&real),
            &real,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|source| MountError::Mount {
            what: "bind",
            path: real.clone(),
            source,
        })?,
    }
    mount(
        None::<&str>,
        &real,
        None::<&str>,
        MsFlags::MS_SHARED,
        None::<&str>,
    )
    .map_err(|source| MountError::Mount {
        what: "shared propagation",
        path: real,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
60 22 0:50 / /var/lib/litelet/pods/u1/volumes/kubernetes.io~secret/creds rw,nosuid,nodev - tmpfs tmpfs rw,size=1024k
61 22 0:51 / /var/lib/litelet/pods/u1/volumes/kubernetes.io~empty-dir/my\\040cache rw shared:40 master:2 - tmpfs tmpfs rw
62 60 0:52 / /var/lib/litelet/pods/u1/volumes/kubernetes.io~secret/creds/inner rw - tmpfs tmpfs rw
63 22 0:53 / /var/lib/litelet/pods/u10/volumes/x rw - tmpfs tmpfs rw
garbage line
";

    #[test]
    fn mountinfo_parsing_and_ordering() {
        let entries = parse_mountinfo(SAMPLE);
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[0].optional, ["shared:1"]);
        assert_eq!(entries[2].optional, ["shared:40", "master:2"]);
        assert_eq!(entries[1].fs_type, "tmpfs");
        assert_eq!(
            entries[2].mount_point,
            Path::new("/var/lib/litelet/pods/u1/volumes/kubernetes.io~empty-dir/my cache")
        );
        let under = mounts_under(&entries, Path::new("/var/lib/litelet/pods/u1"));
        assert_eq!(under.len(), 3, "u10 is not under u1: {under:?}");
        assert!(under[0].ends_with("creds/inner"), "deepest first");
    }

    #[test]
    fn unescape_handles_edges() {
        assert_eq!(unescape("a\\040b"), "a b");
        assert_eq!(unescape("tail\\04"), "tail\\04");
        assert_eq!(unescape("\\134x"), "\\x");
        assert_eq!(unescape("plain"), "plain");
    }
}
