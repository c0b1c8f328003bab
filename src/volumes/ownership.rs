//! Giving a volume to the pod's fsGroup (upstream `SetVolumeOwnership`,
//! pkg/volume/volume_linux.go), for volumes whose content the kubelet did not write
//! itself (CSI): every file and directory below the root gets the group, group read
//! and write (directories also search and setgid, so new files inherit the group).
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the root already has the
//! group, the permissions and setgid; `Always` (the default) walks every time. A
//! directory is changed after its entries, so an interrupted walk leaves the root
//! unmatched and the next publish walks again.
//!
//! The volume may be written at the same time by another pod that mounts it, so the
//! walk is [`crate::fswalk`]'s: each entry is changed through the descriptor it was
//! opened and checked with (`fchownat(AT_EMPTY_PATH)`, `fchmod`, or `chmod` of
//! `/proc/self/fd/N` for an `O_PATH` descriptor, which names that inode and no
//! path), never by name. A symlink gets the group itself and keeps its target's
//! mode alone; what it points to is never reached. As upstream, a failed chown or
//! chmod is logged and the walk goes on (an NFS export squashing root refuses
//! them all); a walk that cannot read a directory fails the publish.
//!
//! Runs on pod worker threads, once per publish.

use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fchmod, fchmodat, FchmodatFlags, Mode};
use nix::unistd::{fchownat, Gid};

use crate::api::pod::Pod;
use crate::fswalk::{self, Event, Node, WalkError};

/// The walk over a volume's tree stopped, at which path and why.
#[derive(Debug, thiserror::Error)]
#[error("fsGroup ownership of {root}: {source}")]
pub struct OwnershipError {
    pub root: PathBuf,
    pub source: WalkError,
}

/// Group read and write, the mask every entry gets (upstream rwMask).
const RW: u32 = 0o660;
/// Search, for directories (upstream execMask).
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;
/// Directory levels the walk goes down (one descriptor each). A path-based walk
/// such as upstream's ends near PATH_MAX (4096 bytes, about 2000 one-letter
/// levels); no real volume comes near this one, and it keeps the descriptors a
/// walk holds far below the process limit.
const MAX_DEPTH: usize = 256;

/// The pod's `fsGroupChangePolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangePolicy {
    Always,
    OnRootMismatch,
}

impl ChangePolicy {
    /// From the pod's securityContext (`Always` when unset).
    pub fn of(pod: &Pod) -> ChangePolicy {
        let policy = pod
            .spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.extra.get("fsGroupChangePolicy"))
            .and_then(|v| v.as_str());
        match policy {
            Some("OnRootMismatch") => ChangePolicy::OnRootMismatch,
            _ => ChangePolicy::Always,
        }
    }
}

/// Whether the root of the volume already is what a walk would make it (upstream
/// `requiresPermissionChange`, negated). A symlinked root never is.
fn root_matches(root: &Path, gid: u32) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return false;
    };
    let wanted = RW | EXEC;
    meta.is_dir()
        && meta.gid() == gid
        && meta.mode() & wanted == wanted
        && meta.mode() & SETGID != 0
}

/// The mode a walk gives an entry of `mode` (pure).
fn wanted_mode(mode: u32, is_dir: bool) -> u32 {
    let mode = (mode & 0o7777) | RW;
    if is_dir {
        mode | EXEC | SETGID
    } else {
        mode
    }
}

/// Gives everything below `root` (included) to group `gid`.
pub fn set_volume_ownership(
    root: &Path,
    gid: u32,
    policy: ChangePolicy,
) -> Result<(), OwnershipError> {
    if policy == ChangePolicy::OnRootMismatch && root_matches(root, gid) {
        log::debug!(
            "{}: root already owned by group {gid}, walk skipped",
            root.display()
        );
        return Ok(());
    }
    let options = fswalk::Options {
        max_depth: MAX_DEPTH,
        one_file_system: false,
    };
    let mut failures = Failures::default();
    fswalk::walk::<WalkError>(root, options, &mut |event| {
        if let Event::Leave(node) | Event::Other(node) = event {
            if let Err((step, errno)) = change(&node, gid) {
                failures.add(step, node.path, errno);
            }
        }
        Ok(ControlFlow::Continue(()))
    })
    .map_err(|source| OwnershipError {
        root: root.to_owned(),
        source,
    })?;
    failures.log(root);
    Ok(())
}

/// The chowns and chmods that failed in one walk: logged once, with the first.
#[derive(Default)]
struct Failures {
    count: usize,
    first: Option<String>,
}

impl Failures {
    fn add(&mut self, step: &str, path: &Path, errno: Errno) {
        self.count += 1;
        self.first
            .get_or_insert_with(|| format!("{step} {}: {errno}", path.display()));
    }

    fn log(self, root: &Path) {
        if let Some(first) = self.first {
            log::warn!(
                "fsGroup ownership of {}: {} chown/chmod failures, the first: {first}",
                root.display(),
                self.count
            );
        }
    }
}

/// Gives one opened entry the group and the mode bits, through its descriptor.
fn change(node: &Node, gid: u32) -> Result<(), (&'static str, Errno)> {
    let fd = node.fd.as_raw_fd();
    if node.stat.st_gid != gid {
        // Empty path and AT_EMPTY_PATH: the inode behind the descriptor itself
        // (a symlink's own, for a link opened with O_NOFOLLOW).
        fchownat(
            Some(fd),
            "",
            None,
            Some(Gid::from_raw(gid)),
            AtFlags::AT_EMPTY_PATH,
        )
        .map_err(|e| ("chown", e))?;
    }
    if node.is_symlink() {
        return Ok(());
    }
    let mode = wanted_mode(node.stat.st_mode, node.is_dir());
    // chown clears setuid and setgid on files: the mode read before restores them.
    if mode == node.stat.st_mode & 0o7777 && node.stat.st_gid == gid {
        return Ok(());
    }
    let mode = Mode::from_bits_truncate(mode);
    if node.is_dir() {
        // A directory's descriptor is open for reading.
        return fchmod(fd, mode).map_err(|e| ("chmod", e));
    }
    // Any other entry's is an O_PATH descriptor, which fchmod refuses; the
    // /proc/self/fd link resolves to that inode whatever its name is now.
    let by_fd = format!("/proc/self/fd/{fd}");
    fchmodat(None, by_fd.as_str(), mode, FchmodatFlags::FollowSymlink).map_err(|e| ("chmod", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::time::{Duration, Instant};

    use crate::fswalk::swapper::Swapper;

    fn gid_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().gid()
    }

    fn mode_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// The field audit names this test for `fsGroupChangePolicy`.
    #[test]
    fn csi_volume_ownership_follows_the_fs_group_change_policy() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: chown to another group needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("mount");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("sub/data"), b"x").unwrap();
        fs::set_permissions(root.join("sub/data"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        let host_gid = gid_of(Path::new("/etc/hostname"));

        // Always: the whole tree, symlinks themselves and never their targets.
        set_volume_ownership(&root, 4242, ChangePolicy::Always).unwrap();
        for p in [
            root.clone(),
            root.join("sub"),
            root.join("sub/data"),
            root.join("link"),
        ] {
            assert_eq!(gid_of(&p), 4242, "{}", p.display());
        }
        assert_eq!(gid_of(Path::new("/etc/hostname")), host_gid);
        assert_eq!(mode_of(&root.join("sub/data")), 0o660);
        assert_eq!(mode_of(&root.join("sub")) & 0o2070, 0o2070);

        // OnRootMismatch with a matching root: a file changed since is left alone.
        fs::set_permissions(root.join("sub/data"), fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership(&root, 4242, ChangePolicy::OnRootMismatch).unwrap();
        assert_eq!(mode_of(&root.join("sub/data")), 0o600, "walk skipped");
        // Always walks again.
        set_volume_ownership(&root, 4242, ChangePolicy::Always).unwrap();
        assert_eq!(mode_of(&root.join("sub/data")), 0o660);
        // OnRootMismatch with another group at the root: the walk runs.
        set_volume_ownership(&root, 4343, ChangePolicy::OnRootMismatch).unwrap();
        assert_eq!(gid_of(&root.join("sub/data")), 4343);
    }

    #[test]
    fn the_policy_comes_from_the_pod_security_context() {
        let mut pod = Pod::default();
        assert_eq!(ChangePolicy::of(&pod), ChangePolicy::Always);
        let mut sc = crate::api::pod::PodSecurityContext::default();
        sc.extra
            .insert("fsGroupChangePolicy".into(), "OnRootMismatch".into());
        pod.spec.security_context = Some(sc);
        assert_eq!(ChangePolicy::of(&pod), ChangePolicy::OnRootMismatch);
    }

    /// (mode, owner, group) of each path, symlinks not followed.
    fn owners(paths: &[PathBuf]) -> Vec<(u32, u32, u32)> {
        paths
            .iter()
            .map(|p| {
                let m = fs::symlink_metadata(p).unwrap();
                (m.mode(), m.uid(), m.gid())
            })
            .collect()
    }

    /// A pod writing a volume another pod mounts with an fsGroup loops `rename`
    /// between a file and a symlink to a host file, and between a directory and a
    /// symlink to a host directory, while litelet walks the volume as root.
    /// Whatever the timing, nothing outside the volume changes mode, owner or group.
    #[test]
    fn entries_swapped_for_symlinks_during_the_walk_never_change_a_file_outside_the_volume() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true" && v != "1"),
                "chown to another group needs root, and CI=true"
            );
            eprintln!("SKIPPED: chown to another group needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        // The host: a file standing in for /etc/shadow, a folder for /etc.
        let host = tmp.path().join("host");
        fs::create_dir_all(host.join("etc")).unwrap();
        fs::write(host.join("shadow"), b"root:*:1:0:99999:7:::").unwrap();
        fs::write(host.join("etc/passwd"), b"root:x:0:0").unwrap();
        fs::set_permissions(host.join("shadow"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(host.join("etc"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(host.join("etc/passwd"), fs::Permissions::from_mode(0o604)).unwrap();
        let outside = [
            host.clone(),
            host.join("shadow"),
            host.join("etc"),
            host.join("etc/passwd"),
        ];
        let before = owners(&outside);
        // The volume: each real entry has a symlink twin it is swapped with.
        let vol = tmp.path().join("vol");
        fs::create_dir_all(vol.join("dir")).unwrap();
        fs::write(vol.join("file"), b"data").unwrap();
        fs::write(vol.join("dir/inner"), b"data").unwrap();
        symlink(host.join("shadow"), vol.join("link")).unwrap();
        symlink(host.join("etc"), vol.join("dirlink")).unwrap();

        let files = Swapper::start(&vol, "file", "link");
        let dirs = Swapper::start(&vol, "dir", "dirlink");
        let started = Instant::now();
        let (mut walks, mut failed) = (0u32, 0u32);
        while walks < 3000 && started.elapsed() < Duration::from_secs(20) {
            // Another group each time, so every walk changes every entry.
            let gid = 4242 + walks % 2;
            if set_volume_ownership(&vol, gid, ChangePolicy::Always).is_err() {
                failed += 1;
            }
            walks += 1;
            assert_eq!(
                owners(&outside),
                before,
                "walk {walks} changed a file outside the volume"
            );
        }
        let swaps = files.stop() + dirs.stop();
        eprintln!("{walks} walks ({failed} failed) against {swaps} swaps");
        assert!(swaps > 0, "the swaps never ran");
        assert_eq!(failed, 0, "a walk under attack failed");
        // An odd number of swaps leaves a pair exchanged: put each back in place.
        for (entry, link) in [("file", "link"), ("dir", "dirlink")] {
            if vol.join(entry).is_symlink() {
                nix::fcntl::renameat2(
                    None,
                    &vol.join(entry),
                    None,
                    &vol.join(link),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
            }
        }
        set_volume_ownership(&vol, 4343, ChangePolicy::Always).unwrap();
        for p in ["file", "dir", "dir/inner"] {
            assert_eq!(gid_of(&vol.join(p)), 4343, "{p}");
        }
        assert_eq!(owners(&outside), before);
    }
}
