//! SyncPod and KillPod through the runtime manager against the fake CRI (and, with
//! root, a real containerd): init → sidecar → main → crash loop → delete, plus the
//! waiting reasons of image, create and start failures.

use crate::support;

use std::time::Duration;

use crate::support::pods;
use crate::support::runtime::{fake_with_busybox, sh_container, Harness};
use grpcio::RpcStatusCode;
use litelet::api::pod::{Pod, RestartPolicy};
use litelet::runtime::model::{ContainerState, SandboxState};

/// init "setup" → sidecar "proxy" → main "app".
fn pod(uid: &str, app_script: &str) -> Pod {
    let mut pod = pods::meta("default", "lifecycle", uid);
    pod.spec.host_network = Some(true);
    pod.spec.termination_grace_period_seconds = Some(2);
    pod.spec
        .init_containers
        .push(sh_container("setup", "echo setup-done"));
    let mut sidecar = sh_container("proxy", "exec sleep 3600");
    sidecar.restart_policy = Some(RestartPolicy::Always);
    pod.spec.init_containers.push(sidecar);
    pod.spec.containers.push(sh_container("app", app_script));
    pod
}

#[test]
fn init_then_sidecar_then_main_then_crash_loop_then_delete() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint(), "");
    let pod = pod("uid-lifecycle", "exit 1");
    fake.exit_after_start("setup", 0, Duration::from_millis(20));

    // First sync: a sandbox and the first init container only.
    let first = h.sync(&pod);
    assert!(first.is_ok(), "{first}");
    assert_eq!(fake.count("RunPodSandbox"), 1);
    // It exits on its own shortly after; either state shows it was started.
    assert!(
        h.state_of(&pod, "setup").is_some(),
        "the first init container started"
    );
    assert_eq!(h.state_of(&pod, "app"), None, "main waits for init");

    h.sync_until(&pod, "sidecar running", |s| {
        s.newest("proxy")
            .is_some_and(|c| c.state == ContainerState::Running)
    });
    assert_eq!(h.state_of(&pod, "setup"), Some(ContainerState::Exited));
    h.sync_until(&pod, "main started", |s| s.newest("app").is_some());

    // The main container crashes: first restart at once, then CrashLoopBackOff.
    let app = h.status(&pod).newest("app").unwrap().id.clone();
    fake.exit_container(&app, 1);
    let restart = h.sync(&pod);
    assert!(restart.is_ok(), "first restart is immediate: {restart}");
    assert_eq!(h.status(&pod).newest("app").unwrap().restart_count, 1);
    let again = h.status(&pod).newest("app").unwrap().id.clone();
    fake.exit_container(&again, 1);
    let backoff = h.sync(&pod);
    let errors = backoff.container_errors();
    assert_eq!(errors["app"].reason, "CrashLoopBackOff", "{backoff}");
    assert!(
        errors["app"].message.contains("back-off 10s"),
        "{}",
        errors["app"].message
    );
    assert!(backoff.only_backoff());
    assert_eq!(fake.count("RunPodSandbox"), 1, "no sandbox churn");

    // Delete: every container stops, the sandbox goes NOTREADY, the sidecar last.
    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), Some(0));
    assert!(killed.is_ok(), "{killed}");
    let after = h.status(&pod);
    assert!(!after.has_running_containers());
    assert!(after
        .sandboxes
        .iter()
        .all(|s| s.state == SandboxState::NotReady));
    // Killing again is harmless.
    assert!(h
        .manager
        .kill_pod(Some(&pod), &after.to_running_pod(), Some(0))
        .is_ok());
}

#[test]
fn image_pull_failures_become_err_image_pull_then_backoff() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint(), "");
    let mut pod = pod("uid-pull", "exit 0");
    pod.spec.init_containers.clear();
    pod.spec.containers[0].image = Some("registry.test/does-not-exist:1".into());
    let first = h.sync(&pod);
    assert_eq!(
        first.container_errors()["app"].reason,
        "ErrImagePull",
        "{first}"
    );
    let second = h.sync(&pod);
    assert_eq!(
        second.container_errors()["app"].reason,
        "ImagePullBackOff",
        "{second}"
    );
    assert_eq!(fake.count("PullImage"), 1, "no pull during back-off");

    pod.spec.containers[0].image = Some("Bad Image".into());
    let invalid = h.sync(&pod);
    assert_eq!(
        invalid.container_errors()["app"].reason,
        "InvalidImageName",
        "{invalid}"
    );
}

#[test]
fn runtime_errors_become_waiting_reasons_and_are_retried() {
    let fake = fake_with_busybox();
    let h = Harness::new(&fake.endpoint(), "");
    let mut pod = pod("uid-errors", "exec sleep 3600");
    pod.spec.init_containers.clear();

    fake.fail_nth(
        "RunPodSandbox",
        1,
        RpcStatusCode::UNKNOWN,
        "cni plugin failed",
    );
    let sandbox = h.sync(&pod);
    assert!(
        sandbox.to_string().contains("cni plugin failed"),
        "{sandbox}"
    );

    fake.fail_nth("CreateContainer", 1, RpcStatusCode::UNKNOWN, "no such file");
    let create = h.sync(&pod);
    assert_eq!(
        create.container_errors()["app"].reason,
        "CreateContainerError",
        "{create}"
    );

    fake.fail_nth(
        "StartContainer",
        1,
        RpcStatusCode::UNKNOWN,
        "exec format error",
    );
    let start = h.sync(&pod);
    assert_eq!(
        start.container_errors()["app"].reason,
        "RunContainerError",
        "{start}"
    );

    h.sync_until(&pod, "app running after the faults", |s| {
        s.newest("app")
            .is_some_and(|c| c.state == ContainerState::Running)
    });
    assert_eq!(
        fake.count("RunPodSandbox"),
        2,
        "one failed, one good sandbox"
    );
}

#[test]
fn lifecycle_against_real_containerd() {
    let Some(containerd) =
        support::containerd::Containerd::start("lifecycle_against_real_containerd")
    else {
        return;
    };
    let parent = format!("/litelet-sync-{}", std::process::id());
    let h = Harness::new(&containerd.endpoint(), &parent);
    let pod = pod(
        &format!("uid-real-{}", std::process::id()),
        "echo main-ran; exit 3",
    );

    h.sync_until(&pod, "init done and sidecar running", |s| {
        s.newest("setup")
            .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0)
            && s.newest("proxy")
                .is_some_and(|c| c.state == ContainerState::Running)
    });
    h.sync_until(&pod, "main ran and exited with 3", |s| {
        s.newest("app")
            .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 3)
    });
    // It keeps crashing: one immediate restart, then back-off.
    h.sync_until(&pod, "main restarted once", |s| {
        s.newest("app")
            .is_some_and(|c| c.restart_count >= 1 && c.state == ContainerState::Exited)
    });
    let outcome = h.sync(&pod);
    assert_eq!(
        outcome.container_errors()["app"].reason,
        "CrashLoopBackOff",
        "{outcome}"
    );

    let log = h.status(&pod).newest("app").unwrap().log_path.clone();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("main-ran"), "container log {log}: {text:?}");

    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), Some(1));
    assert!(killed.is_ok(), "{killed}");
    let after = h.status(&pod);
    assert!(!after.has_running_containers(), "{after:#?}");
    assert!(after
        .sandboxes
        .iter()
        .all(|s| s.state == SandboxState::NotReady));
    drop(containerd);
    support::containerd::remove_cgroup_tree(&parent);
}

// Issue 23 item 4: with a real runtime, a pull that cannot succeed fails with
// ErrImagePull and arms upstream's back-off (10 s, then 20 s); the syncs in between
// wait with ImagePullBackOff and say when the next attempt is due.
#[test]
fn unpullable_image_on_real_containerd_backs_off_10s_then_20s() {
    let test = "unpullable_image_on_real_containerd_backs_off_10s_then_20s";
    let Some(containerd) = support::containerd::Containerd::start(test) else {
        return;
    };
    let h = Harness::new(&containerd.endpoint(), "");
    let mut pod = pod(&format!("uid-nopull-{}", std::process::id()), "exit 0");
    pod.spec.init_containers.clear();
    pod.spec.containers[0].image = Some("127.0.0.1:1/litelet/nope:1".into());
    let secs = Duration::from_secs;

    let first = h.sync(&pod);
    let failure = first
        .failures()
        .next()
        .map(|(_, f)| f.clone())
        .expect("failure");
    assert_eq!(failure.reason, "ErrImagePull", "{first}");
    assert_eq!(failure.retry_in, Some(secs(10)), "{first}");

    let waiting = h.sync(&pod);
    let failure = waiting
        .failures()
        .next()
        .map(|(_, f)| f.clone())
        .expect("failure");
    assert_eq!(failure.reason, "ImagePullBackOff", "{waiting}");
    let left = failure.retry_in.expect("a back-off says when it ends");
    assert!(left > secs(8) && left <= secs(10), "{left:?}");

    std::thread::sleep(left + Duration::from_millis(100));
    let second = h.sync(&pod);
    let failure = second
        .failures()
        .next()
        .map(|(_, f)| f.clone())
        .expect("failure");
    assert_eq!(failure.reason, "ErrImagePull", "{second}");
    assert_eq!(failure.retry_in, Some(secs(20)), "{second}");
    assert_eq!(second.retry_in(), Some(secs(20)));
}
