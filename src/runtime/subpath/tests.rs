//! Tests of the subPath open and clean-up steps that need no mounts (so no root):
//! spelling, symlinks inside and outside the volume, directory creation through
//! descriptors. The bind-mount, race and clean-up tests that need root are in
//! `tests/subpath.rs`.

use std::os::unix::fs::{symlink, PermissionsExt};

use super::*;

/// The path a descriptor refers to, as the kernel sees it.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
}

#[test]
fn a_sub_path_with_dot_dot_or_an_absolute_path_is_refused() {
    for bad in ["..", "../x", "a/../../b", "a/..", "/etc", "/"] {
        let err = check_spelling(bad).unwrap_err();
        assert!(
            matches!(err, SubPathError::NotRelative { .. }),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("must not contain '..'"), "{err}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let err = open_inside(tmp.path(), "../../etc").unwrap_err();
    assert!(matches!(err, SubPathError::NotRelative { .. }), "{err}");
    assert!(check_spelling("a/./b/").unwrap() == [OsStr::new("a"), OsStr::new("b")]);
    assert!(check_spelling(".").unwrap().is_empty());
}

#[test]
fn sub_paths_refuse_symlinks_that_leave_the_volume_and_follow_those_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    fs::create_dir_all(vol.join("real/dir")).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, vol.join("evil")).unwrap();
    symlink("../../outside", vol.join("real/up")).unwrap();
    symlink("real/dir", vol.join("inner")).unwrap();
    symlink("/nonexistent/x", vol.join("dangling")).unwrap();
    let real_vol = fs::canonicalize(&vol).unwrap();

    for bad in [
        "evil",
        "evil/sub",
        "real/up",
        "real/up/x",
        "dangling",
        "dangling/y",
    ] {
        let err = open_inside(&vol, bad).unwrap_err();
        assert!(
            matches!(
                err,
                SubPathError::Dangling { .. } | SubPathError::Escapes { .. }
            ),
            "{bad}: {err}"
        );
    }
    assert!(
        !outside.join("sub").exists(),
        "nothing is created through a link"
    );
    let fd = open_inside(&vol, "inner/new/deeper").unwrap();
    assert_eq!(fd_path(&fd), real_vol.join("real/dir/new/deeper"));
    assert_eq!(
        fd_path(&open_inside(&vol, "./real").unwrap()),
        real_vol.join("real")
    );
    assert_eq!(fd_path(&open_inside(&vol, ".").unwrap()), real_vol);
}

#[test]
fn missing_sub_path_dirs_are_made_through_descriptors_with_the_volume_root_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    fs::create_dir(&vol).unwrap();
    fs::set_permissions(&vol, fs::Permissions::from_mode(0o3777)).unwrap();
    let fd = open_inside(&vol, "a/b").unwrap();
    let real_vol = fs::canonicalize(&vol).unwrap();
    assert_eq!(fd_path(&fd), real_vol.join("a/b"));
    for made in [vol.join("a"), vol.join("a/b")] {
        let mode = fs::metadata(&made).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o3777, "{}", made.display());
    }
    // An existing subPath is left as it is.
    fs::set_permissions(vol.join("a/b"), fs::Permissions::from_mode(0o700)).unwrap();
    open_inside(&vol, "a/b").unwrap();
    let mode = fs::metadata(vol.join("a/b")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_file_sub_path_opens_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("conf"), "x").unwrap();
    let fd = open_inside(tmp.path(), "conf").unwrap();
    let stat = fstat(fd.as_raw_fd()).unwrap();
    assert_eq!(file_type(&stat), SFlag::S_IFREG);
    // A file in the middle of the path is not a directory.
    let err = open_inside(tmp.path(), "conf/x").unwrap_err();
    assert!(matches!(err, SubPathError::Changed { .. }), "{err}");
}

/// The check resolved `d` as a directory, then the pod swapped in a symlink: the
/// descriptor open refuses it, both with openat2 and with the component walk.
#[test]
fn a_symlink_swapped_in_after_the_check_is_refused_by_the_open() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    fs::create_dir_all(vol.join("real")).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, vol.join("d")).unwrap();
    symlink("real", vol.join("inside-link")).unwrap();
    let root = open_fd(None, &vol, OFlag::O_PATH | OFlag::O_DIRECTORY).unwrap();
    let names = |p: &str| -> Vec<OsString> { p.split('/').map(OsString::from).collect() };

    for path in ["d", "d/new", "inside-link"] {
        let walked = walk(&root, &names(path), Some(0o755)).unwrap_err();
        assert!(
            matches!(walked, Errno::ELOOP | Errno::ENOTDIR),
            "{path}: {walked}"
        );
        match open_beneath(&root, Path::new(path)) {
            Err(Errno::ENOSYS) => {} // no openat2 here: the walk is what runs
            other => assert_eq!(other.err(), Some(Errno::ELOOP), "{path}"),
        }
    }
    assert!(
        !outside.join("new").exists(),
        "no directory made through it"
    );
}

#[test]
fn targets_are_laid_out_per_volume_container_and_mount_index() {
    let target = target_path(Path::new("/r"), "uid-1", "data", "app", 3).unwrap();
    assert_eq!(
        target,
        Path::new("/r/pods/uid-1/volume-subpaths/data/app/3")
    );
    for (uid, volume, container) in [
        ("..", "data", "app"),
        ("uid", "a/b", "app"),
        ("uid", "data", ""),
    ] {
        let err = target_path(Path::new("/r"), uid, volume, container, 0).unwrap_err();
        assert!(matches!(err, SubPathError::InvalidName { .. }), "{err}");
    }
}

#[test]
fn clean_up_of_a_pod_without_sub_paths_is_a_no_op() {
    let tmp = tempfile::tempdir().unwrap();
    clean_pod(tmp.path(), "uid-1").unwrap();
    assert!(!pod_has_subpaths(tmp.path(), "uid-1"));
    // Empty leftovers (a mount point made before its mount failed) go.
    let target = target_path(tmp.path(), "uid-1", "v", "c", 0).unwrap();
    fs::create_dir_all(&target).unwrap();
    assert!(pod_has_subpaths(tmp.path(), "uid-1"));
    if nix::unistd::geteuid().is_root() {
        clean_pod(tmp.path(), "uid-1").unwrap();
        assert!(!pod_has_subpaths(tmp.path(), "uid-1"));
        assert!(tmp.path().join("pods/uid-1").exists(), "only its own tree");
    }
}

/// Root tests run as root; elsewhere they skip loudly, unless CI=true, where that is
/// a failure.
pub(crate) fn can_mount(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{test}: needs root for bind mounts, and CI=true");
    }
    eprintln!(
        "\n*** SKIPPED {test}: bind mounts need root (set CI=true to make this a failure) ***\n"
    );
    false
}

/// Unmounts what a test mounted under a pod directory, even when it fails midway.
struct CleanOnDrop<'a>(&'a Path, &'a str);

impl Drop for CleanOnDrop<'_> {
    fn drop(&mut self) {
        let _ = clean_pod(self.0, self.1);
    }
}

const MARKER: &str = "HOST-MARKER";

/// The race the pod runs against the kubelet: `d` is swapped, atomically and as fast
/// as one thread can, between a directory inside the volume and a symlink to a host
/// directory holding a marker file, while subPath `d` is prepared again and again,
/// with openat2 and with the component walk. Whatever the timing, the prepared mount
/// shows the volume's directory or nothing (a refused start), never the host's.
#[test]
fn a_subpath_swapped_with_a_symlink_during_preparation_never_mounts_the_host_directory() {
    use nix::fcntl::{renameat2, RenameFlags};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let test =
        "a_subpath_swapped_with_a_symlink_during_preparation_never_mounts_the_host_directory";
    if !can_mount(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let host = tmp.path().join("host");
    let root_dir = tmp.path().join("root");
    fs::create_dir_all(vol.join("d")).unwrap();
    fs::create_dir(&host).unwrap();
    fs::write(host.join(MARKER), "host").unwrap();
    symlink(&host, vol.join("l")).unwrap();
    let target = target_path(&root_dir, "uid-race", "vol", "c", 0).unwrap();
    let _clean = CleanOnDrop(&root_dir, "uid-race");

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = {
        let stop = Arc::clone(&stop);
        let dir = fs::File::open(&vol).unwrap();
        std::thread::spawn(move || {
            let fd = Some(dir.as_raw_fd());
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if renameat2(fd, "d", fd, "l", RenameFlags::RENAME_EXCHANGE).is_err() {
                    break;
                }
                swaps += 1;
            }
            swaps
        })
    };

    let started = Instant::now();
    let (mut mounted, mut refused) = (0u32, 0u32);
    for attempt in 0..2000 {
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
        let opener = match attempt % 2 {
            0 => Opener::Openat2,
            _ => Opener::Walk,
        };
        match prepare_with(&vol, "d", &target, opener) {
            Ok(path) => {
                mounted += 1;
                assert!(
                    !path.join(MARKER).exists(),
                    "attempt {attempt} ({opener:?}) mounted the host directory"
                );
            }
            Err(
                SubPathError::Escapes { .. }
                | SubPathError::Changed { .. }
                | SubPathError::Dangling { .. },
            ) => refused += 1,
            Err(other) => panic!("attempt {attempt} ({opener:?}): {other}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    eprintln!(
        "{test}: {mounted} mounted, {refused} refused in {:?}, {swaps} swaps",
        started.elapsed()
    );
    assert!(mounted > 0, "the race never let a preparation through");
    assert!(refused > 0, "the swaps never met a preparation");
    clean_pod(&root_dir, "uid-race").unwrap();
    assert!(!target.exists(), "the mount and its target are gone");
    assert_eq!(fs::read_to_string(host.join(MARKER)).unwrap(), "host");
}

#[test]
fn a_file_sub_path_is_bind_mounted_onto_a_file_and_a_restart_remounts_what_is_there_now() {
    let test =
        "a_file_sub_path_is_bind_mounted_onto_a_file_and_a_restart_remounts_what_is_there_now";
    if !can_mount(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let root_dir = tmp.path().join("root");
    fs::create_dir(&vol).unwrap();
    fs::write(vol.join("app.conf"), "first").unwrap();
    let target = target_path(&root_dir, "uid-file", "vol", "c", 2).unwrap();
    let _clean = CleanOnDrop(&root_dir, "uid-file");

    let mounted = prepare(&vol, "app.conf", &target).unwrap();
    assert!(fs::symlink_metadata(&mounted).unwrap().is_file());
    assert_eq!(fs::read_to_string(&mounted).unwrap(), "first");

    // The container restarts after the name came to mean a directory: the old mount
    // goes and the target becomes a directory.
    fs::rename(vol.join("app.conf"), vol.join("old.conf")).unwrap();
    fs::create_dir(vol.join("app.conf")).unwrap();
    fs::write(vol.join("app.conf/inner"), "second").unwrap();
    let mounted = prepare(&vol, "app.conf", &target).unwrap();
    assert_eq!(fs::read_to_string(mounted.join("inner")).unwrap(), "second");
    // One mount there, not two stacked.
    umount2(&target, MntFlags::MNT_DETACH).unwrap();
    assert!(!is_mount_point(&target).unwrap());

    clean_pod(&root_dir, "uid-file").unwrap();
    assert!(!pod_has_subpaths(&root_dir, "uid-file"));
    assert_eq!(fs::read_to_string(vol.join("old.conf")).unwrap(), "first");
}
