//! Container, sandbox, log and image garbage collection against the fake CRI: what goes
//! (dead containers beyond one per name with their log files, everything of removed
//! pods, unused images under disk pressure) and what never goes (running containers,
//! ready sandboxes, images in use, pinned or too young), and once against a real
//! containerd (absolute log paths, sandbox removal, the unpinned sandbox image).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::containerd::BUSYBOX;
use crate::support::fake_cri::{self, image_id, FakeCri};
use crate::support::pods;
use crate::support::runtime;
use crate::support::wait_until;
use litelet::api::pod::{Container, Pod};
use litelet::cri::{self, pb, ConnectOptions, Endpoint, ImageClient, RuntimeClient};
use litelet::events::Recorder;
use litelet::images::gc::{FsStats, ImageGc, ImageGcError, ImageGcPolicy};
use litelet::runtime::actions::ProbeResults;
use litelet::runtime::env::EnvContext;
use litelet::runtime::gc::GcPolicy;
use litelet::runtime::labels;
use litelet::runtime::manager::{RuntimeManager, RuntimeSettings};
use litelet::runtime::model::ContainerState;
use protobuf::MessageField;

const PAUSE: &str = "localhost/litelet/pause:1.0";

struct Harness {
    fake: FakeCri,
    runtime: RuntimeClient,
    images: ImageClient,
    manager: RuntimeManager,
    logs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Harness {
        let fake = FakeCri::start();
        fake.state().images.insert(BUSYBOX.into(), 1_000_000);
        let (runtime, images) = fake.clients(Duration::from_secs(10));
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("pods");
        let manager = manager(&runtime, &images, dir.path());
        Harness {
            fake,
            runtime,
            images,
            manager,
            logs,
            _dir: dir,
        }
    }

    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        self.logs
            .join(format!("{}_{}_{}", pod.namespace(), pod.name(), pod.uid()))
    }

    /// A ready sandbox for `pod`, labelled as litelet labels it.
    fn sandbox(&self, pod: &Pod, attempt: u32) -> String {
        let config = pb::PodSandboxConfig {
            metadata: MessageField::some(pb::PodSandboxMetadata {
                name: pod.name().into(),
                namespace: pod.namespace().into(),
                uid: pod.uid().into(),
                attempt,
                ..Default::default()
            }),
            labels: labels::sandbox_labels(pod).into_iter().collect(),
            log_directory: self.pod_dir(pod).display().to_string(),
            ..Default::default()
        };
        self.runtime
            .run_pod_sandbox(&pb::RunPodSandboxRequest {
                config: MessageField::some(config),
                ..Default::default()
            })
            .unwrap()
            .pod_sandbox_id
    }

    /// A started container `name` (instance `attempt`) whose log file exists.
    fn container(&self, pod: &Pod, sandbox: &str, name: &str, attempt: u32, image: &str) -> String {
        let log_path = format!("{name}/{attempt}.log");
        let file = self.pod_dir(pod).join(&log_path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "log line\n").unwrap();
        let mut config = fake_cri::container_config(
            name,
            image,
            labels::container_labels(pod, name).into_iter().collect(),
        );
        config.metadata.mut_or_insert_default().attempt = attempt;
        config.log_path = log_path;
        fake_cri::run_container(&self.runtime, sandbox, config)
    }

    fn dead_container(&self, pod: &Pod, sandbox: &str, name: &str, attempt: u32) -> String {
        let id = self.container(pod, sandbox, name, attempt, BUSYBOX);
        assert!(self.fake.exit_container(&id, 1));
        id
    }

    fn stop_sandbox(&self, id: &str) {
        self.runtime
            .stop_pod_sandbox(&pb::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
                ..Default::default()
            })
            .unwrap();
    }

    fn container_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .runtime
            .list_containers(&Default::default())
            .unwrap()
            .containers
            .into_iter()
            .map(|c| c.id)
            .collect();
        ids.sort();
        ids
    }

    fn sandbox_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .runtime
            .list_pod_sandbox(&Default::default())
            .unwrap()
            .items
            .into_iter()
            .map(|s| s.id)
            .collect();
        ids.sort();
        ids
    }

    fn targets(&self, method: &str) -> Vec<String> {
        self.fake
            .calls()
            .into_iter()
            .filter(|c| c.method == method)
            .map(|c| c.target)
            .collect()
    }
}

/// A runtime manager whose pod logs go to `<dir>/pods`.
fn manager(runtime: &RuntimeClient, images: &ImageClient, dir: &Path) -> RuntimeManager {
    let logs = dir.join("pods");
    std::fs::create_dir_all(&logs).unwrap();
    let settings = RuntimeSettings {
        pod_logs_dir: logs,
        memory_capacity: 1 << 30,
        ..runtime::settings(dir)
    };
    runtime::manager(
        runtime.clone(),
        images.clone(),
        Recorder::log_only(),
        settings,
    )
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[test]
fn dead_containers_beyond_one_per_name_go_with_their_log_files() {
    let h = Harness::new();
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    let app0 = h.dead_container(&web, &sandbox, "app", 0);
    let app1 = h.dead_container(&web, &sandbox, "app", 1);
    let app2 = h.dead_container(&web, &sandbox, "app", 2);
    let app3 = h.container(&web, &sandbox, "app", 3, BUSYBOX);
    let side0 = h.dead_container(&web, &sandbox, "side", 0);
    let dir = h.pod_dir(&web);
    std::fs::write(dir.join("app/0.log.20240101-000000"), "rotated\n").unwrap();

    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), true, &|_| false, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");

    assert_eq!(
        sorted(h.targets("RemoveContainer")),
        sorted(vec![app0, app1])
    );
    assert_eq!(h.container_ids(), sorted(vec![app2, app3.clone(), side0]));
    assert!(!dir.join("app/0.log").exists());
    assert!(!dir.join("app/0.log.20240101-000000").exists());
    assert!(!dir.join("app/1.log").exists());
    for kept in ["app/2.log", "app/3.log", "side/0.log"] {
        assert!(dir.join(kept).exists(), "{kept} was removed");
    }
    // The running container and the ready sandbox were not touched.
    assert_eq!(h.sandbox_ids(), [sandbox]);
    assert!(h.targets("StopContainer").is_empty());
    assert!(h.targets("StopPodSandbox").is_empty());
    assert_eq!(
        h.fake
            .state()
            .container_ids(pb::ContainerState::CONTAINER_RUNNING),
        [app3]
    );

    // A second round finds nothing more to do.
    let before = h.targets("RemoveContainer").len();
    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), true, &|_| false, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(h.targets("RemoveContainer").len(), before);
}

#[test]
fn unknown_containers_are_killed_before_removal() {
    let h = Harness::new();
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    let lost = h.container(&web, &sandbox, "app", 0, BUSYBOX);
    let stuck = h.container(&web, &sandbox, "app", 1, BUSYBOX);
    // The newest dead instance stays; the two unknown ones are beyond the limit.
    h.dead_container(&web, &sandbox, "app", 2);
    for id in [&lost, &stuck] {
        assert!(h
            .fake
            .state()
            .set_container_state(id, pb::ContainerState::CONTAINER_UNKNOWN));
    }
    // The kill of the older one (removed first) fails: it stays.
    h.fake.fail_nth(
        "StopContainer",
        1,
        grpcio::RpcStatusCode::UNKNOWN,
        "runc did not answer",
    );
    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), true, &|_| false, SystemTime::now());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].to_string().contains("unknown state"),
        "{}",
        errors[0]
    );
    assert_eq!(h.targets("StopContainer"), [lost.clone(), stuck.clone()]);
    assert_eq!(h.targets("RemoveContainer"), std::slice::from_ref(&stuck));
    let calls = h.fake.calls();
    let stop = calls
        .iter()
        .position(|c| c.method == "StopContainer" && c.target == stuck);
    let remove = calls
        .iter()
        .position(|c| c.method == "RemoveContainer" && c.target == stuck);
    assert!(stop < remove, "stopped before removal");
    assert!(h.container_ids().contains(&lost));
}

#[test]
fn min_age_keeps_young_dead_containers() {
    let h = Harness::new();
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    h.dead_container(&web, &sandbox, "app", 0);
    h.dead_container(&web, &sandbox, "app", 1);
    let policy = GcPolicy {
        min_age: Duration::from_secs(3600),
        ..Default::default()
    };
    let errors = h
        .manager
        .garbage_collect(&policy, true, &|_| true, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(h.container_ids().len(), 2);
    assert!(h.targets("RemoveContainer").is_empty());
}

#[test]
fn a_removed_pods_containers_sandboxes_and_log_dir_go() {
    let h = Harness::new();
    let gone = pods::meta("default", "gone", "uid-gone");
    let live = pods::meta("default", "live", "uid-live");

    // The removed pod: two stopped sandboxes, each with dead containers.
    let gone_old = h.sandbox(&gone, 0);
    h.dead_container(&gone, &gone_old, "app", 0);
    h.stop_sandbox(&gone_old);
    let gone_new = h.sandbox(&gone, 1);
    h.dead_container(&gone, &gone_new, "app", 1);
    h.container(&gone, &gone_new, "side", 0, BUSYBOX);
    h.stop_sandbox(&gone_new);

    // The live pod: an old empty stopped sandbox and a ready one with a running container.
    let live_old = h.sandbox(&live, 0);
    h.stop_sandbox(&live_old);
    let live_ready = h.sandbox(&live, 1);
    let live_app = h.container(&live, &live_ready, "app", 0, BUSYBOX);

    let removable = |uid: &str| uid == "uid-gone";

    // Sources not all ready: the removed pod's content stays (one dead container per
    // name), its log directory too; its sandboxes still hold containers.
    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), false, &removable, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(h.pod_dir(&gone).exists());
    assert_eq!(
        h.container_ids().len(),
        3,
        "app/1, side/0 and the live app remain"
    );
    assert!(h.sandbox_ids().contains(&gone_new));
    // The live pod's old empty sandbox goes either way.
    assert!(!h.sandbox_ids().contains(&live_old));

    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), true, &removable, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(h.container_ids(), std::slice::from_ref(&live_app));
    assert_eq!(h.sandbox_ids(), std::slice::from_ref(&live_ready));
    assert!(!h.pod_dir(&gone).exists());
    assert!(h.pod_dir(&live).join("app/0.log").exists());

    // Every removed sandbox was stopped first; the ready one never was.
    let calls = h.fake.calls();
    for id in [&gone_old, &gone_new, &live_old] {
        let stop = calls
            .iter()
            .rposition(|c| c.method == "StopPodSandbox" && &c.target == id);
        let remove = calls
            .iter()
            .position(|c| c.method == "RemovePodSandbox" && &c.target == id);
        assert!(
            stop.is_some() && stop < remove,
            "sandbox {id}: stop before remove"
        );
    }
    assert!(!h.targets("StopPodSandbox").contains(&live_ready));
    assert!(!h.targets("StopContainer").contains(&live_app));
    assert_eq!(
        h.fake
            .state()
            .container_ids(pb::ContainerState::CONTAINER_RUNNING),
        [live_app]
    );
}

#[test]
fn log_files_outside_the_pod_dir_are_left_alone() {
    let h = Harness::new();
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    let outside = h.logs.parent().unwrap().join("precious.log");
    std::fs::write(&outside, "keep me\n").unwrap();
    // A container whose runtime log path points outside the pod's directory.
    let config = pb::ContainerConfig {
        log_path: "../../precious.log".into(),
        ..fake_cri::container_config(
            "app",
            BUSYBOX,
            labels::container_labels(&web, "app").into_iter().collect(),
        )
    };
    let old = h
        .runtime
        .create_container(&pb::CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: MessageField::some(config),
            ..Default::default()
        })
        .unwrap()
        .container_id;
    h.dead_container(&web, &sandbox, "app", 1);

    let errors =
        h.manager
            .garbage_collect(&GcPolicy::default(), true, &|_| false, SystemTime::now());
    assert!(outside.exists());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].to_string().contains("left alone"),
        "{}",
        errors[0]
    );
    // The container itself still went.
    assert_eq!(h.targets("RemoveContainer"), [old]);
}

/// A filesystem that holds exactly the fake's images, of a capacity the test sets.
fn image_fs(images: ImageClient, capacity: Arc<AtomicU64>) -> ImageGc {
    let probe = move |path: &Path| {
        assert_eq!(path, Path::new("/fake/images"));
        let used = images
            .image_fs_info(&Default::default())
            .map_err(std::io::Error::other)?
            .image_filesystems[0]
            .used_bytes
            .value;
        let capacity = capacity.load(Ordering::SeqCst);
        Ok(FsStats {
            capacity_bytes: capacity,
            available_bytes: capacity.saturating_sub(used),
        })
    };
    let policy = ImageGcPolicy {
        protected_images: vec!["registry/keep:1".into()],
        ..Default::default()
    };
    ImageGc::with_fs_stats(policy, Box::new(probe)).unwrap()
}

#[test]
fn image_gc_removes_only_unused_images_over_the_threshold() {
    let h = Harness::new();
    {
        let mut state = h.fake.state();
        state.image_fs_mountpoint = "/fake/images".into();
        state.pinned_images.insert(PAUSE.into());
        state.images.insert("registry/old-a:1".into(), 2_000_000);
        state.images.insert("registry/old-b:1".into(), 2_000_000);
        state.images.insert("registry/keep:1".into(), 100_000);
    }
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    // busybox stays in use by a dead container; old-b is used for a while.
    h.dead_container(&web, &sandbox, "app", 0);
    let user_of_b = h.container(&web, &sandbox, "b", 0, "registry/old-b:1");

    let capacity = Arc::new(AtomicU64::new(100_000_000));
    let gc = image_fs(h.images.clone(), capacity.clone());
    let t0 = SystemTime::now();

    // Plenty of room: nothing goes, but the records start.
    let report = gc.run(&h.images, &h.runtime, t0);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.usage_percent, Some(6));
    assert!(report.removed.is_empty());
    assert!(h.targets("RemoveImage").is_empty());

    // old-b is no longer used; a new image arrives.
    h.runtime
        .remove_container(&pb::RemoveContainerRequest {
            container_id: user_of_b,
            ..Default::default()
        })
        .unwrap();
    h.fake
        .state()
        .images
        .insert("registry/new:1".into(), 1_000_000);

    // 6.4 MB of images on 7.5 MB: 86 % used, free 0.4 MB to get to 80 %. old-a
    // (never used) goes first, and is enough.
    capacity.store(7_500_000, Ordering::SeqCst);
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(60));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.usage_percent, Some(86));
    assert_eq!(report.wanted_bytes, 400_000);
    assert_eq!(report.removed, [image_id("registry/old-a:1")]);
    assert_eq!(report.freed_bytes, 2_000_000);

    // Still over: old-b (used longest ago) goes next.
    capacity.store(4_600_000, Ordering::SeqCst);
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(100));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.removed, [image_id("registry/old-b:1")]);

    // Still over: the new image is younger than two minutes, the rest is in use,
    // pinned or protected, so nothing can go.
    capacity.store(2_500_000, Ordering::SeqCst);
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(100));
    assert!(report.removed.is_empty());
    assert!(
        matches!(report.errors[..], [ImageGcError::NotEnoughFreed { .. }]),
        "{:?}",
        report.errors
    );

    // Once old enough, the new image goes; busybox (in use), pause (pinned) and keep
    // (protected) never.
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(200));
    assert_eq!(report.removed, [image_id("registry/new:1")]);
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(300));
    assert!(report.removed.is_empty());
    let left: Vec<String> = h.fake.state().images.keys().cloned().collect();
    assert_eq!(left, [BUSYBOX, PAUSE, "registry/keep:1"]);
    assert_eq!(
        sorted(h.targets("RemoveImage")),
        sorted(vec![
            image_id("registry/old-a:1"),
            image_id("registry/old-b:1"),
            image_id("registry/new:1"),
        ])
    );
}

#[test]
fn images_unused_past_the_maximum_gc_age_go_with_plenty_of_room() {
    let h = Harness::new();
    {
        let mut state = h.fake.state();
        state.image_fs_mountpoint = "/fake/images".into();
        state.pinned_images.insert(PAUSE.into());
        state.images.insert("registry/stale:1".into(), 1_000);
    }
    let web = pods::meta("default", "web", "uid-web");
    let sandbox = h.sandbox(&web, 0);
    h.container(&web, &sandbox, "app", 0, BUSYBOX);
    let probe = |_: &Path| {
        Ok(FsStats {
            capacity_bytes: 1 << 40,
            available_bytes: 1 << 39,
        })
    };
    let policy = ImageGcPolicy {
        max_age: Duration::from_secs(3600),
        ..Default::default()
    };
    let gc = ImageGc::with_fs_stats(policy, Box::new(probe)).unwrap();
    let t0 = SystemTime::now();
    // 50 % used: the usage never asks for anything; only the age does, and only once
    // litelet has watched the images for the maximum age.
    for secs in [0, 1800, 3600] {
        let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(secs));
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert!(
            report.expired.is_empty(),
            "at {secs} s: {:?}",
            report.expired
        );
    }
    let report = gc.run(&h.images, &h.runtime, t0 + Duration::from_secs(3601));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.expired, [image_id("registry/stale:1")]);
    assert!(report.removed.is_empty(), "nothing removed for space");
    let left: Vec<String> = h.fake.state().images.keys().cloned().collect();
    assert_eq!(
        left,
        [BUSYBOX, PAUSE],
        "the image in use and the pinned one stay"
    );
}

#[test]
fn image_gc_without_a_mountpoint_reports_it() {
    let h = Harness::new();
    let gc = ImageGc::with_fs_stats(
        ImageGcPolicy::default(),
        Box::new(|_: &Path| -> std::io::Result<FsStats> { unreachable!("no mountpoint") }),
    )
    .unwrap();
    let report = gc.run(&h.images, &h.runtime, SystemTime::now());
    assert!(matches!(report.errors[..], [ImageGcError::NoImageFs]));
    assert!(h.targets("RemoveImage").is_empty());
}

#[test]
fn gc_against_real_containerd() {
    let Some(containerd) = support::containerd::Containerd::start("gc_against_real_containerd")
    else {
        return;
    };
    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let options = ConnectOptions {
        request_timeout: Duration::from_secs(30),
        pull_timeout: Duration::from_secs(30),
    };
    let (runtime, images) = cri::connect(&endpoint, &options);
    let dir = tempfile::tempdir().unwrap();
    let manager = manager(&runtime, &images, dir.path());
    let parent = format!("/litelet-gc-{}", std::process::id());

    let mut crash = pods::meta(
        "default",
        "crash",
        &format!("uid-gc-{}", std::process::id()),
    );
    crash.spec.host_network = Some(true);
    crash.spec.termination_grace_period_seconds = Some(1);
    crash.spec.containers.push(Container {
        name: "app".into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sh".into(), "-c".into(), "echo ran; exit 1".into()],
        ..Default::default()
    });
    let status = || {
        manager
            .pod_status(crash.uid(), crash.name(), crash.namespace())
            .unwrap()
    };
    let volumes = Default::default();
    let env = EnvContext::default();
    let inputs = runtime::inputs(parent.clone(), &volumes, &env);
    // Two dead instances: the first run and its immediate restart.
    let two_dead = wait_until(Duration::from_secs(60), || {
        manager.sync_pod(&crash, &status(), &ProbeResults::default(), &inputs);
        std::thread::sleep(Duration::from_millis(100));
        let s = status();
        s.instances("app")
            .filter(|c| c.state == ContainerState::Exited)
            .count()
            >= 2
    });
    assert!(two_dead, "never got two dead instances: {:#?}", status());
    let before = status();
    let instances: Vec<_> = before.instances("app").collect();
    let (newest, older) = (instances[0].clone(), instances[1].clone());
    assert!(
        Path::new(&older.log_path).is_absolute(),
        "{}",
        older.log_path
    );
    assert!(Path::new(&older.log_path).exists(), "{}", older.log_path);

    let errors = manager.garbage_collect(&GcPolicy::default(), true, &|_| false, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    let after = status();
    assert!(after.containers.iter().all(|c| c.id != older.id));
    assert!(after.containers.iter().any(|c| c.id == newest.id));
    assert!(!Path::new(&older.log_path).exists(), "{}", older.log_path);
    assert!(Path::new(&newest.log_path).exists(), "{}", newest.log_path);

    // The pod is deleted: kill it, then everything of it goes.
    let killed = manager.kill_pod(Some(&crash), &after.to_running_pod(), Some(1));
    assert!(killed.is_ok(), "{killed}");
    let errors = manager.garbage_collect(&GcPolicy::default(), true, &|_| true, SystemTime::now());
    assert!(errors.is_empty(), "{errors:?}");
    let gone = status();
    assert!(
        gone.containers.is_empty() && gone.sandboxes.is_empty(),
        "{gone:#?}"
    );
    let pod_dir = dir.path().join("pods").join(format!(
        "{}_{}_{}",
        crash.namespace(),
        crash.name(),
        crash.uid()
    ));
    assert!(!pod_dir.exists());

    // Image GC with every threshold at 0: busybox is unused now and goes; the pause
    // image is containerd's sandbox image (not pinned by containerd 1.6) and stays.
    let policy = ImageGcPolicy {
        high_threshold_percent: 0,
        low_threshold_percent: 0,
        min_age: Duration::ZERO,
        protected_images: Vec::new(),
        max_age: Duration::ZERO,
    };
    let gc = ImageGc::new(policy).unwrap();
    let report = gc.run(&images, &runtime, SystemTime::now());
    assert!(
        report
            .errors
            .iter()
            .all(|e| matches!(e, ImageGcError::NotEnoughFreed { .. })),
        "{:?}",
        report.errors
    );
    assert_eq!(report.removed.len(), 1, "{report:?}");
    let left: Vec<Vec<String>> = images
        .list_images(&Default::default())
        .unwrap()
        .images
        .into_iter()
        .map(|i| i.repo_tags)
        .collect();
    assert_eq!(left, [vec![PAUSE.to_owned()]]);

    drop(containerd);
    support::containerd::remove_cgroup_tree(&parent);
}
