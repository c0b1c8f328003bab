//! Filesystem usage: statvfs of a whole filesystem (nodefs = the filesystem of
//! `--root-dir`; imagefs = the mountpoint CRI `ImageFsInfo` names), and the bytes and
//! inodes of a small directory tree (a container's log directory), bounded so a
//! runaway directory cannot stall the `stats` thread.

use std::path::Path;

/// Usage of a filesystem, or of one tenant of it (then only `used_*` are its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity_bytes: Option<u64>,
    /// Space an unprivileged writer can still use (statvfs `f_bavail`).
    pub available_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes_used: Option<u64>,
}

impl FsUsage {
    /// `used` bytes and inodes of a tenant on the filesystem `fs`.
    pub fn tenant(fs: Option<&FsUsage>, used_bytes: u64, inodes_used: Option<u64>) -> FsUsage {
        FsUsage {
            used_bytes: Some(used_bytes),
            inodes_used,
            ..fs.map(|f| FsUsage {
                used_bytes: None,
                inodes_used: None,
                ..*f
            })
            .unwrap_or_default()
        }
    }
}

/// The numbers statvfs gives, in blocks and inodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStatvfs {
    pub fragment_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
}

/// Bytes and inodes from statvfs numbers (pure). Used = total − free, as `df` counts.
pub fn from_statvfs(raw: RawStatvfs) -> FsUsage {
    let bytes = |blocks: u64| blocks.saturating_mul(raw.fragment_size);
    FsUsage {
        capacity_bytes: Some(bytes(raw.blocks)),
        available_bytes: Some(bytes(raw.blocks_available)),
        used_bytes: Some(bytes(raw.blocks.saturating_sub(raw.blocks_free))),
        inodes: Some(raw.files),
        inodes_free: Some(raw.files_free),
        inodes_used: Some(raw.files.saturating_sub(raw.files_free)),
    }
}

/// statvfs of the filesystem holding `path`.
// The statvfs field types differ between platforms; on Linux some are already u64.
#[allow(clippy::unnecessary_cast)]
pub fn statvfs(path: &Path) -> std::io::Result<FsUsage> {
    let s = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    Ok(from_statvfs(RawStatvfs {
        fragment_size: s.fragment_size() as u64,
        blocks: s.blocks() as u64,
        blocks_free: s.blocks_free() as u64,
        blocks_available: s.blocks_available() as u64,
        files: s.files() as u64,
        files_free: s.files_free() as u64,
    }))
}

/// Most entries [`dir_usage`] visits; beyond them the sum is a lower bound.
pub const DIR_USAGE_MAX_ENTRIES: usize = 4096;
/// Directory levels [`dir_usage`] goes down; deeper ones are not counted.
const DIR_USAGE_MAX_DEPTH: usize = 128;

/// Bytes (allocated blocks, as `du`) and inodes under `dir` as cAdvisor's
/// GetDirUsage counts them: on `dir`'s file system only, a file with several names
/// once. The tree is a pod's (an emptyDir, or a log folder a pod can write), so it
/// is walked by descriptors ([`crate::fswalk`]): a directory swapped for a symlink
/// mid-walk is counted as the link, never as what it points to. `None` when `dir`
/// does not exist; a walk cut short (a directory gone or unreadable, too deep, too
/// many entries) gives what it counted so far.
pub fn dir_usage(dir: &Path) -> Option<(u64, u64)> {
    use crate::fswalk::{walk, Event, Options, WalkError};
    use std::ops::ControlFlow;
    std::fs::symlink_metadata(dir).ok()?;
    let options = Options {
        max_depth: DIR_USAGE_MAX_DEPTH,
        one_file_system: true,
    };
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut budget = DIR_USAGE_MAX_ENTRIES + 1; // and the root
    let mut linked = std::collections::HashSet::new();
    let walked = walk::<WalkError>(dir, options, &mut |event| {
        let node = match event {
            Event::Enter(node) | Event::Other(node) => node,
            Event::Leave(_) => return Ok(ControlFlow::Continue(())),
        };
        if budget == 0 {
            return Ok(ControlFlow::Break(()));
        }
        budget -= 1;
        let st = node.stat;
        if node.is_dir() || st.st_nlink <= 1 || linked.insert(st.st_ino) {
            bytes = bytes.saturating_add((st.st_blocks as u64).saturating_mul(512));
            inodes += 1;
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = walked {
        log::debug!("disk usage of {}: {e}", dir.display());
    }
    Some((bytes, inodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_numbers_become_bytes_and_inodes() {
        let got = from_statvfs(RawStatvfs {
            fragment_size: 4096,
            blocks: 1000,
            blocks_free: 400,
            blocks_available: 300,
            files: 500,
            files_free: 100,
        });
        assert_eq!(
            got,
            FsUsage {
                capacity_bytes: Some(4_096_000),
                available_bytes: Some(1_228_800),
                used_bytes: Some(2_457_600),
                inodes: Some(500),
                inodes_free: Some(100),
                inodes_used: Some(400),
            }
        );
    }

    #[test]
    fn dir_usage_counts_files_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/0.log"), vec![b'x'; 10_000]).unwrap();
        let (bytes, inodes) = dir_usage(dir.path()).unwrap();
        assert_eq!(inodes, 3);
        assert!(bytes >= 10_000, "{bytes}");
        assert_eq!(dir_usage(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_file_with_two_names_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![b'x'; 10_000]).unwrap();
        let (one_name, _) = dir_usage(dir.path()).unwrap();
        std::fs::hard_link(dir.path().join("a"), dir.path().join("b")).unwrap();
        assert_eq!(dir_usage(dir.path()).unwrap(), (one_name, 2));
    }

    /// A pod swaps a directory of its emptyDir with a symlink to a big host folder
    /// while the stats thread measures it: every measure is the emptyDir's own (a
    /// swap between two opens may count its directory under both names), never
    /// the host folder's 8 MiB.
    #[test]
    fn a_directory_swapped_for_a_symlink_is_never_measured_through_the_link() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        std::fs::create_dir(&host).unwrap();
        for i in 0..8 {
            std::fs::write(host.join(format!("big-{i}")), vec![b'x'; 1 << 20]).unwrap();
        }
        let vol = tmp.path().join("vol");
        std::fs::create_dir_all(vol.join("dir")).unwrap();
        std::fs::write(vol.join("dir/small"), b"x").unwrap();
        std::os::unix::fs::symlink(&host, vol.join("link")).unwrap();
        let own = dir_usage(&vol).unwrap();
        assert_eq!(own.1, 4);

        let swapper = crate::fswalk::swapper::Swapper::start(&vol, "dir", "link");
        let started = std::time::Instant::now();
        let mut measures = 0;
        while measures < 3000 && started.elapsed() < std::time::Duration::from_secs(20) {
            let got = dir_usage(&vol).unwrap();
            measures += 1;
            assert!(
                got.0 < 1 << 20 && got.1 <= own.1 + 2,
                "measure {measures}: {got:?}, the volume's own is {own:?}"
            );
        }
        assert!(swapper.stop() > 0, "the swaps never ran");
    }

    #[test]
    fn a_tenant_keeps_the_filesystem_size_but_its_own_use() {
        let fs = FsUsage {
            capacity_bytes: Some(100),
            available_bytes: Some(40),
            used_bytes: Some(60),
            inodes: Some(10),
            inodes_free: Some(5),
            inodes_used: Some(5),
        };
        let t = FsUsage::tenant(Some(&fs), 7, Some(1));
        assert_eq!((t.capacity_bytes, t.available_bytes), (Some(100), Some(40)));
        assert_eq!((t.used_bytes, t.inodes_used), (Some(7), Some(1)));
    }
}
