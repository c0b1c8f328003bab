//! Giving a volume to the pod's fsGroup (upstream `SetVolumeOwnership`,
//! pkg/volume/volume_linux.go), for volumes whose content the kubelet did not write
//! itself (CSI): every file and directory below the root gets the group, group read
//! and write (directories also search and setgid, so new files inherit the group).
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the root already has the
//! group, the permissions and setgid; `Always` (the default) walks every time.
//!
//! Runs on pod worker threads, once per publish. Symlinks are changed themselves
//! (`lchown`), never followed.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::AtFlags;
use nix::unistd::{fchownat, Gid};

/// A file system step of the ownership change that failed, on which path.
#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub struct OwnershipError {
    pub step: &'static str,
    pub path: std::path::PathBuf,
    pub source: std::io::Error,
}

fn io(step: &'static str, path: &Path, source: std::io::Error) -> OwnershipError {
    OwnershipError {
        step,
        path: path.to_path_buf(),
        source,
    }
}
use crate::api::pod::Pod;

/// Group read and write, the mask every entry gets (upstream rwMask).
const RW: u32 = 0o660;
/// Search, for directories (upstream execMask).
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;

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
/// `requiresPermissionChange`, negated).
fn root_matches(root: &Path, gid: u32) -> bool {
    let Ok(meta) = fs::metadata(root) else {
        return false;
    };
    let wanted = RW | EXEC;
    meta.is_dir()
        && meta.gid() == gid
        && meta.mode() & wanted == wanted
        && meta.mode() & SETGID != 0
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
    change(root, gid)
}

fn change(path: &Path, gid: u32) -> Result<(), OwnershipError> {
    let meta = fs::symlink_metadata(path).map_err(|e| io("stat", path, e))?;
    fchownat(
        None,
        path,
        None,
        Some(Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|e| io("chown", path, std::io::Error::from_raw_os_error(e as i32)))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mode = (meta.mode() & 0o7777) | RW;
    if meta.is_dir() {
        mode |= EXEC | SETGID;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io("chmod", path, e))?;
    if meta.is_dir() {
        let entries = fs::read_dir(path).map_err(|e| io("read dir", path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("read dir", path, e))?;
            change(&entry.path(), gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
