//! Tests of the volume manager's tear-down of subPath bind mounts (they need root for
//! the mounts; elsewhere they skip loudly, unless CI=true): with the pod, and after a
//! restart, when housekeeping removes an orphaned pod directory.

use std::fs;
use std::path::{Path, PathBuf};

use super::VolumeManager;
use crate::api::pod::{EmptyDirVolumeSource, HostPathVolumeSource, Pod, Volume};
use crate::runtime::subpath::{self, SubPathRequest};

const MARKER: &str = "HOST-MARKER";

fn can_mount(test: &str) -> bool {
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

/// Mount points at or below `dir` in this mount namespace.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    super::mount::mounts_under(&super::mount::parse_mountinfo(&mountinfo), dir)
}

/// Unmounts whatever a failing test left below its temp dir.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for point in mounts_below(&self.0) {
            let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// A pod with an emptyDir `data` and a hostPath `host` on `host_dir`.
fn pod(uid: &str, host_dir: &Path) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.into());
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("default".into());
    pod.spec.volumes = vec![
        Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "host".into(),
            host_path: Some(HostPathVolumeSource {
                path: host_dir.display().to_string(),
                type_: None,
            }),
            ..Default::default()
        },
    ];
    pod
}

/// Sets the pod's volumes up and prepares the subPath mounts a container `app`
/// would get: `data` at `sub` (mount 0) and `host` at `shared` (mount 1), a
/// directory of the host holding the marker file. Returns the two targets.
fn mount_sub_paths(volumes: &VolumeManager, pod: &Pod) -> Vec<PathBuf> {
    let ready = volumes.setup_pod(pod).unwrap();
    fs::create_dir_all(ready["data"].join("sub")).unwrap();
    fs::write(ready["data"].join("sub/file"), "data").unwrap();
    let requests = [
        SubPathRequest {
            index: 0,
            volume: "data".into(),
            volume_path: ready["data"].clone(),
            sub_path: "sub".into(),
        },
        SubPathRequest {
            index: 1,
            volume: "host".into(),
            volume_path: ready["host"].clone(),
            sub_path: "shared".into(),
        },
    ];
    let prepared =
        subpath::prepare_container(volumes.root_dir(), pod.uid(), "app", &requests).unwrap();
    assert_eq!(
        fs::read_to_string(prepared[&0].join("file")).unwrap(),
        "data"
    );
    assert!(
        prepared[&1].join(MARKER).exists(),
        "the host subPath is mounted"
    );
    prepared.into_values().collect()
}

fn host_dir(tmp: &Path) -> PathBuf {
    let host = tmp.join("host");
    fs::create_dir_all(host.join("shared")).unwrap();
    fs::write(host.join("shared").join(MARKER), "host").unwrap();
    host
}

#[test]
fn tearing_down_a_pod_unmounts_and_removes_its_subpath_mounts() {
    let test = "tearing_down_a_pod_unmounts_and_removes_its_subpath_mounts";
    if !can_mount(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = Unmount(tmp.path().to_path_buf());
    let host = host_dir(tmp.path());
    let root = tmp.path().join("root");
    let volumes = VolumeManager::new(&root, None, "n");
    volumes.prepare_root().unwrap();
    let pod = pod("uid-teardown", &host);
    let targets = mount_sub_paths(&volumes, &pod);
    assert!(volumes.pod_volumes_exist(pod.uid()));

    volumes.teardown_pod(pod.uid()).unwrap();
    assert_eq!(mounts_below(tmp.path()), Vec::<PathBuf>::new());
    for target in &targets {
        assert!(!target.exists(), "{} is gone", target.display());
    }
    assert!(!subpath::pod_has_subpaths(&root, pod.uid()));
    assert!(!volumes.pod_volumes_exist(pod.uid()));
    assert_eq!(
        fs::read_to_string(host.join("shared").join(MARKER)).unwrap(),
        "host",
        "the hostPath's content is never removed"
    );
}

#[test]
fn after_a_restart_orphan_cleanup_unmounts_stale_subpath_mounts_and_deletes_nothing_through_them() {
    let test = "after_a_restart_orphan_cleanup_unmounts_stale_subpath_mounts_and_deletes_nothing_through_them";
    if !can_mount(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = Unmount(tmp.path().to_path_buf());
    let host = host_dir(tmp.path());
    let root = tmp.path().join("root");
    let pod = pod("uid-orphan", &host);
    {
        // litelet ran the pod, then stopped (its mounts stay) while the pod was
        // deleted.
        let before = VolumeManager::new(&root, None, "n");
        before.prepare_root().unwrap();
        mount_sub_paths(&before, &pod);
    }
    let after = VolumeManager::new(&root, None, "n");
    assert_eq!(after.list_pod_dirs().unwrap(), ["uid-orphan"]);
    assert!(after.pod_volumes_exist("uid-orphan"));

    // What housekeeping runs for an orphaned pod directory.
    after.remove_pod_dir("uid-orphan").unwrap();
    assert_eq!(mounts_below(tmp.path()), Vec::<PathBuf>::new());
    assert!(!root.join("pods/uid-orphan").exists());
    assert_eq!(
        fs::read_to_string(host.join("shared").join(MARKER)).unwrap(),
        "host",
        "nothing is deleted through a stale bind mount of a host directory"
    );
}

/// A pod loops swapping a directory of its emptyDir with a symlink to a host folder
/// while the volume is torn down: the removal (std's `remove_dir_all`, which opens
/// each level with `O_NOFOLLOW` and unlinks relative to its descriptor) removes the
/// link, never what it points to. A removal that met a swap (an entry listed as a
/// link and a directory by the time it is unlinked) fails and is done again by the
/// next pass, once the pod's processes are gone, as the next one here.
#[test]
fn tearing_down_an_empty_dir_under_symlink_swaps_never_deletes_through_the_link() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host_dir(tmp.path());
    let root = tmp.path().join("root");
    let volumes = VolumeManager::new(&root, None, "n");
    volumes.prepare_root().unwrap();
    let (mut swaps, mut retried) = (0, 0);
    for attempt in 0..60 {
        let pod = pod(&format!("uid-swap-{attempt}"), &host);
        let data = volumes.setup_pod(&pod).unwrap()["data"].clone();
        for i in 0..20 {
            fs::create_dir_all(data.join(format!("d/sub-{i}"))).unwrap();
            fs::write(data.join(format!("d/sub-{i}/f")), "data").unwrap();
        }
        std::os::unix::fs::symlink(host.join("shared"), data.join("l")).unwrap();
        let swapper = crate::fswalk::swapper::Swapper::start(&data, "d", "l");
        let torn_down = volumes.teardown_pod(pod.uid());
        swaps += swapper.stop();
        if torn_down.is_err() {
            retried += 1;
            volumes.teardown_pod(pod.uid()).unwrap();
        }
        assert!(!data.exists(), "attempt {attempt}: the emptyDir is gone");
        assert_eq!(
            fs::read_to_string(host.join("shared").join(MARKER)).unwrap(),
            "host",
            "attempt {attempt} deleted through the link"
        );
    }
    eprintln!("{swaps} swaps, {retried} of 60 tear-downs done again");
    assert!(swaps > 0, "the swaps never ran");
}
