//! subPath mounts made safe against symlink swaps (upstream `pkg/volume/util/subpath`).
//!
//! A container's `subPath` names something inside a volume the pod itself can write.
//! Handing the runtime the joined path as a string lets the pod swap a component for
//! a symlink between our check and the runtime's mount, which then mounts whatever
//! the link points at (the host's `/`, read-write). So the path is never handed over:
//! [`prepare`] opens each component relative to the volume root without following
//! symlinks (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or a walk of
//! `openat(O_PATH | O_NOFOLLOW)` per component on kernels without it), creates a
//! missing directory through the same descriptors (`mkdirat` on the parent's
//! descriptor, `fchmod` on the new one's), and bind-mounts the opened descriptor
//! (`/proc/self/fd/N`) onto
//! `<root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, the path
//! the runtime gets. Nothing the pod controls lies on that path, and the mount holds
//! exactly the object we opened, whatever the name points at later.
//!
//! Symlinks inside the volume that stay inside it still work: they are resolved
//! first (refused when they leave the volume or lead nowhere), and the resolved,
//! symlink-free path is what gets opened; a symlink that appears on it after that
//! check fails the open, and the container waits for the next sync.
//!
//! [`clean_pod`] unmounts and removes the pod's `volume-subpaths` tree with the pod's
//! volumes (`VolumeManager::teardown_pod`, also what housekeeping runs for an
//! orphaned pod directory after a restart). It unmounts each level before reading
//! it and removes only empty directories and mount-point files, never recursively,
//! so it cannot delete through a bind mount of a host directory.
//!
//! [`prepare_container`] runs on the pod's worker thread (one per pod, so one caller
//! per pod directory at a time); [`clean_pod`] runs there too (volume teardown) and on
//! the `gc` thread for orphaned pod directories, which no worker owns any more.
//! Mounting needs CAP_SYS_ADMIN, as the rest of the volume code does.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{fchmod, fstat, mkdirat, FileStat, Mode, SFlag};

/// The directory under a pod's directory that holds the subPath bind mounts.
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// More mounts stacked on one target than this means something else keeps
/// mounting there; give up rather than loop.
const MAX_STACKED_MOUNTS: usize = 32;

/// Why a subPath could not be prepared or cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    /// A subPath climbs out by its spelling (absolute, or a `..` element).
    #[error("subPath {sub_path:?} must be relative and must not contain '..'")]
    NotRelative { sub_path: String },
    /// A subPath goes through a symlink that resolves nowhere.
    #[error("subPath {sub_path:?} goes through a symlink that leads nowhere")]
    Dangling { sub_path: String },
    /// A subPath goes through a symlink out of its volume.
    #[error("subPath {sub_path:?} goes through a symlink that leaves the volume")]
    Escapes { sub_path: String },
    /// A symlink or a non-directory appeared on the checked path while it was being
    /// opened (the pod changed it under us); nothing was mounted.
    #[error("subPath {sub_path:?} changed while it was opened: {why}")]
    Changed { sub_path: String, why: &'static str },
    /// A pod UID, volume or container name that is not one path segment.
    #[error("invalid {what} {name:?} for a subPath mount: must be one path segment")]
    InvalidName { what: &'static str, name: String },
    /// A file system step by path (the volume root, the mount target).
    #[error("cannot {step} {}: {source}", path.display())]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A step on a descriptor inside the volume, or a mount step.
    #[error("cannot {step} {}: {source}", path.display())]
    Sys {
        step: &'static str,
        path: PathBuf,
        source: Errno,
    },
    /// The subPath tree of a pod could not be taken down whole.
    #[error("cleaning subPath mounts of pod {uid}: {}", join_errors(failures))]
    Cleanup {
        uid: String,
        failures: Vec<SubPathError>,
    },
}

fn join_errors(failures: &[SubPathError]) -> String {
    let texts: Vec<String> = failures.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

fn io<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SubPathError + 'a {
    move |source| SubPathError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn sys<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> SubPathError + 'a {
    move |source| SubPathError::Sys {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn check_segment(what: &'static str, name: &str) -> Result<(), SubPathError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(SubPathError::InvalidName {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The elements of a subPath, refusing an absolute path or any `..` (pure; `.` and
/// empty elements drop out, so `"."` names the volume root).
pub fn check_spelling(sub_path: &str) -> Result<Vec<&OsStr>, SubPathError> {
    let mut parts = Vec::new();
    for component in Path::new(sub_path).components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => {
                return Err(SubPathError::NotRelative {
                    sub_path: sub_path.to_owned(),
                })
            }
        }
    }
    Ok(parts)
}

/// `<root>/pods/<uid>/volume-subpaths`.
pub fn pod_subpaths_dir(root_dir: &Path, uid: &str) -> Result<PathBuf, SubPathError> {
    check_segment("pod uid", uid)?;
    Ok(root_dir.join("pods").join(uid).join(SUBPATHS_DIR))
}

/// Where mount number `index` of `container` (its index in the container's
/// volumeMounts) of volume `volume` is bind-mounted for the runtime.
pub fn target_path(
    root_dir: &Path,
    uid: &str,
    volume: &str,
    container: &str,
    index: usize,
) -> Result<PathBuf, SubPathError> {
    check_segment("volume name", volume)?;
    check_segment("container name", container)?;
    Ok(pod_subpaths_dir(root_dir, uid)?
        .join(volume)
        .join(container)
        .join(index.to_string()))
}

/// One subPath mount of a container, as `runtime::container::sub_path_requests`
/// finds them in its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubPathRequest {
    /// The volumeMount's index in the container's `volumeMounts`.
    pub index: usize,
    /// The volume's name.
    pub volume: String,
    /// The volume's host directory.
    pub volume_path: PathBuf,
    /// The subPath (subPathExpr expanded), checked by spelling.
    pub sub_path: String,
}

/// Prepares every subPath mount of one container (the sync step before its
/// CreateContainer): host path to hand the runtime, by volumeMount index.
pub fn prepare_container(
    root_dir: &Path,
    uid: &str,
    container: &str,
    requests: &[SubPathRequest],
) -> Result<std::collections::BTreeMap<usize, PathBuf>, SubPathError> {
    let mut prepared = std::collections::BTreeMap::new();
    for request in requests {
        let target = target_path(root_dir, uid, &request.volume, container, request.index)?;
        let path = prepare(&request.volume_path, &request.sub_path, &target)?;
        log::debug!(
            "pod {uid} container {container}: subPath {:?} of volume {} mounted at {}",
            request.sub_path,
            request.volume,
            path.display()
        );
        prepared.insert(request.index, path);
    }
    Ok(prepared)
}

/// Opens `sub_path` inside `volume` as [`open_inside`] does and bind-mounts what it
/// opened onto `target` (replacing whatever an earlier start mounted there). Returns
/// `target`, the path for the runtime.
pub fn prepare(volume: &Path, sub_path: &str, target: &Path) -> Result<PathBuf, SubPathError> {
    prepare_with(volume, sub_path, target, Opener::best())
}

fn prepare_with(
    volume: &Path,
    sub_path: &str,
    target: &Path,
    opener: Opener,
) -> Result<PathBuf, SubPathError> {
    let opened = open_inside_with(volume, sub_path, opener)?;
    let stat = fstat(opened.as_raw_fd()).map_err(sys("stat the subPath for", target))?;
    make_mount_point(target, file_type(&stat) == SFlag::S_IFDIR)?;
    let source = PathBuf::from(format!("/proc/self/fd/{}", opened.as_raw_fd()));
    // The magic link resolves to the very file the descriptor holds; the kernel does
    // not look the subPath up again.
    mount(
        Some(&source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys("bind-mount the subPath onto", target))?;
    Ok(target.to_path_buf())
}

/// Opens `sub_path` below `volume` without following any symlink the pod could have
/// swapped in, creating missing directories with the volume root's mode. Returns the
/// descriptor (`O_PATH` for what existed, `O_RDONLY` for a directory made here).
pub fn open_inside(volume: &Path, sub_path: &str) -> Result<OwnedFd, SubPathError> {
    open_inside_with(volume, sub_path, Opener::best())
}

/// How the subPath's names are opened below the volume root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opener {
    /// One openat2 for the whole path, the component walk when something is missing.
    Openat2,
    /// The component walk only (kernels before 5.6, or openat2 filtered out).
    Walk,
}

impl Opener {
    fn best() -> Opener {
        match OPENAT2_MISSING.load(Ordering::Relaxed) {
            true => Opener::Walk,
            false => Opener::Openat2,
        }
    }
}

fn open_inside_with(
    volume: &Path,
    sub_path: &str,
    opener: Opener,
) -> Result<OwnedFd, SubPathError> {
    let parts = check_spelling(sub_path)?;
    let real_volume = fs::canonicalize(volume).map_err(io("resolve volume", volume))?;
    let root = open_fd(
        None,
        &real_volume,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
    )
    .map_err(sys("open volume", &real_volume))?;
    let inside = resolve_links(&real_volume, &parts, sub_path)?;
    let mode = root_mode(&root, &real_volume)?;
    let changed = |why| SubPathError::Changed {
        sub_path: sub_path.to_owned(),
        why,
    };
    if inside.is_empty() {
        return Ok(root);
    }
    let relative: PathBuf = inside.iter().collect();
    let first = match opener {
        Opener::Openat2 => open_beneath(&root, &relative),
        Opener::Walk => walk(&root, &inside, Some(mode)),
    };
    let opened = match first {
        Ok(fd) => Ok(fd),
        // Something is missing: walk, creating it.
        Err(Errno::ENOENT) => walk(&root, &inside, Some(mode)),
        Err(Errno::ENOSYS | Errno::EPERM | Errno::E2BIG) if opener == Opener::Openat2 => {
            OPENAT2_MISSING.store(true, Ordering::Relaxed);
            walk(&root, &inside, Some(mode))
        }
        // A rename raced the lookup: the walk gives a definite answer.
        Err(Errno::EAGAIN) => walk(&root, &inside, Some(mode)),
        Err(other) => Err(other),
    };
    let fd = opened.map_err(|errno| match errno {
        Errno::ELOOP => changed("a symlink appeared on it"),
        Errno::EXDEV => changed("it led out of the volume"),
        Errno::ENOTDIR => changed("a name on it is not a directory"),
        source => SubPathError::Sys {
            step: "open subPath in",
            path: real_volume.join(&relative),
            source,
        },
    })?;
    let stat = fstat(fd.as_raw_fd()).map_err(sys("stat", &real_volume.join(&relative)))?;
    if file_type(&stat) == SFlag::S_IFLNK {
        return Err(changed("a symlink appeared on it"));
    }
    Ok(fd)
}

/// Set once openat2 turned out unusable here (old kernel, or a seccomp filter).
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

fn open_fd(dir: Option<&OwnedFd>, path: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    let raw = openat(
        dir.map(AsRawFd::as_raw_fd),
        path,
        flags | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: openat just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// One openat2 below `root` that fails on any symlink or any step out of it.
fn open_beneath(root: &OwnedFd, relative: &Path) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let raw = openat2(root.as_raw_fd(), relative, how)?;
    // SAFETY: openat2 just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Opens `parts` one at a time, each relative to the descriptor of the one before
/// and with `O_NOFOLLOW`, so no symlink is followed and no name is looked up by a
/// full path. With `create`, a missing directory is made with `mkdirat` on its
/// parent's descriptor and given that mode with `fchmod` on its own.
fn walk(root: &OwnedFd, parts: &[OsString], create: Option<u32>) -> Result<OwnedFd, Errno> {
    let mut current = root.try_clone().map_err(|e| {
        e.raw_os_error()
            .map(Errno::from_raw)
            .unwrap_or(Errno::EBADF)
    })?;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let name = Path::new(part);
        let mut flags = OFlag::O_PATH | OFlag::O_NOFOLLOW;
        if !last {
            flags |= OFlag::O_DIRECTORY;
        }
        let next = match (open_fd(Some(&current), name, flags), create) {
            (Err(Errno::ENOENT), Some(mode)) => make_dir_at(&current, name, mode)?,
            (opened, _) => opened?,
        };
        let kind = file_type(&fstat(next.as_raw_fd())?);
        if kind == SFlag::S_IFLNK {
            return Err(Errno::ELOOP);
        }
        if !last && kind != SFlag::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        current = next;
    }
    Ok(current)
}

/// Makes directory `name` in `parent` and sets `mode` on the new directory's own
/// descriptor (mkdir's mode is cut by the umask and drops setgid and sticky bits).
/// Ownership is the kernel's: root's user, and the volume's group where the volume
/// root is setgid (an fsGroup volume), as upstream.
fn make_dir_at(parent: &OwnedFd, name: &Path, mode: u32) -> Result<OwnedFd, Errno> {
    let private = Mode::from_bits_truncate(0o700);
    let made = match mkdirat(Some(parent.as_raw_fd()), name, private) {
        Ok(()) => true,
        // Someone made it first: open what is there (refusing a symlink), as it is.
        Err(Errno::EEXIST) => false,
        Err(other) => return Err(other),
    };
    let dir = open_fd(
        Some(parent),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
    )
    .map_err(|errno| match errno {
        // O_NOFOLLOW met a symlink put there after mkdirat.
        Errno::ELOOP | Errno::ENOTDIR => Errno::ELOOP,
        other => other,
    })?;
    if made {
        fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(mode))?;
    }
    Ok(dir)
}

/// The volume root's permission bits (with setgid and sticky), which directories
/// made for a subPath get, so an fsGroup volume stays group-writable below it.
fn root_mode(root: &OwnedFd, path: &Path) -> Result<u32, SubPathError> {
    let stat = fstat(root.as_raw_fd()).map_err(sys("stat volume", path))?;
    Ok(stat.st_mode & 0o7777)
}

/// The subPath with the symlinks that stay inside the volume resolved: the names to
/// open, none of them a symlink at the time of this check. A link that leaves the
/// volume or leads nowhere is refused; the part that does not exist yet is kept as
/// spelled. These reads go by path, so they only decide which names to open; the
/// descriptor walk is what guarantees no symlink is followed.
fn resolve_links(
    real_volume: &Path,
    parts: &[&OsStr],
    sub_path: &str,
) -> Result<Vec<OsString>, SubPathError> {
    let mut current = real_volume.to_path_buf();
    let mut rest = parts.iter();
    for part in rest.by_ref() {
        current.push(part);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let resolved = fs::canonicalize(&current).map_err(|_| SubPathError::Dangling {
                    sub_path: sub_path.to_owned(),
                })?;
                if !resolved.starts_with(real_volume) {
                    return Err(SubPathError::Escapes {
                        sub_path: sub_path.to_owned(),
                    });
                }
                current = resolved;
            }
            Ok(_) => {}
            // The rest does not exist yet, so no link can lie on it.
            Err(_) => break,
        }
    }
    current.extend(rest);
    let inside = current
        .strip_prefix(real_volume)
        .map_err(|_| SubPathError::Escapes {
            sub_path: sub_path.to_owned(),
        })?;
    Ok(inside
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .collect())
}

/// Makes `target` an empty directory (or an empty file, for a file subPath) with
/// nothing mounted on it.
fn make_mount_point(target: &Path, is_dir: bool) -> Result<(), SubPathError> {
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    unmount_stacked(target)?;
    match fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() == is_dir && !meta.file_type().is_symlink() => return Ok(()),
        // The other kind (the subPath changed between a file and a directory since
        // an earlier start): an empty leftover, removed without recursion.
        Ok(meta) if meta.is_dir() => fs::remove_dir(target).map_err(io("remove", target))?,
        Ok(_) => fs::remove_file(target).map_err(io("remove", target))?,
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("stat", target)(e)),
    }
    if is_dir {
        fs::create_dir(target).map_err(io("create", target))
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(target)
            .map(drop)
            .map_err(io("create", target))
    }
}

/// Unmounts everything stacked on `path` (never following a symlink there); a path
/// that is not a mount point, or not there, is fine. A mount busy in some process is
/// detached rather than left behind (a container holds its own copy). Returns only
/// once `path` is no mount point, so a caller may read below it.
fn unmount_stacked(path: &Path) -> Result<(), SubPathError> {
    for _ in 0..MAX_STACKED_MOUNTS {
        if !is_mount_point(path)? {
            return Ok(());
        }
        match umount2(path, MntFlags::UMOUNT_NOFOLLOW | MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => {}
            Err(source) => return Err(sys("unmount", path)(source)),
        }
    }
    Err(SubPathError::Sys {
        step: "unmount every mount stacked on",
        path: path.to_path_buf(),
        source: Errno::EBUSY,
    })
}

/// True when `path` (not followed if a symlink) is on another mount than its parent
/// directory: the mount IDs of the two descriptors differ. Unlike a device number,
/// this tells a bind mount of the same file system apart.
fn is_mount_point(path: &Path) -> Result<bool, SubPathError> {
    let Some(parent) = path.parent() else {
        return Ok(true);
    };
    let own = match open_fd(None, path, OFlag::O_PATH | OFlag::O_NOFOLLOW) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(false),
        Err(source) => return Err(sys("open", path)(source)),
    };
    let parent_fd =
        open_fd(None, parent, OFlag::O_PATH | OFlag::O_DIRECTORY).map_err(sys("open", parent))?;
    Ok(mount_id(&own, path)? != mount_id(&parent_fd, parent)?)
}

/// The mount ID of a descriptor, from `/proc/self/fdinfo`.
fn mount_id(fd: &OwnedFd, path: &Path) -> Result<u64, SubPathError> {
    let info_path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let info = fs::read_to_string(&info_path).map_err(io("read the mount of", path))?;
    info.lines()
        .find_map(|line| line.strip_prefix("mnt_id:"))
        .and_then(|id| id.trim().parse().ok())
        .ok_or_else(|| SubPathError::Io {
            step: "read the mount of",
            path: path.to_path_buf(),
            source: std::io::Error::new(ErrorKind::InvalidData, "no mnt_id in fdinfo"),
        })
}

/// Unmounts and removes `<root>/pods/<uid>/volume-subpaths` (see the module doc).
/// A missing tree is fine; what cannot be removed is left and reported.
pub fn clean_pod(root_dir: &Path, uid: &str) -> Result<(), SubPathError> {
    let dir = pod_subpaths_dir(root_dir, uid)?;
    let mut failures = Vec::new();
    clean_level(&dir, 3, &mut failures);
    if failures.is_empty() {
        return Ok(());
    }
    Err(SubPathError::Cleanup {
        uid: uid.to_owned(),
        failures,
    })
}

/// Unmounts `path`, then removes it: a directory after its entries (`depth` more
/// levels: volume, container, index), anything else with one unlink.
fn clean_level(path: &Path, depth: usize, failures: &mut Vec<SubPathError>) {
    if let Err(e) = unmount_stacked(path) {
        failures.push(e);
        return;
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return,
        Err(e) => return failures.push(io("stat", path)(e)),
    };
    if !meta.is_dir() {
        if let Err(e) = fs::remove_file(path) {
            failures.push(io("remove", path)(e));
        }
        return;
    }
    if depth > 0 {
        match fs::read_dir(path) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    clean_level(&entry.path(), depth - 1, failures);
                }
            }
            Err(e) => return failures.push(io("read", path)(e)),
        }
    }
    // Never recursive: a directory that is still not empty (something unexpected,
    // or a mount that would not go) is reported and left.
    match fs::remove_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => failures.push(io("remove", path)(e)),
    }
}

/// True while pod `uid` has a `volume-subpaths` directory (its mounts may be there).
pub fn pod_has_subpaths(root_dir: &Path, uid: &str) -> bool {
    pod_subpaths_dir(root_dir, uid).is_ok_and(|dir| fs::symlink_metadata(dir).is_ok())
}

#[cfg(test)]
mod tests;
