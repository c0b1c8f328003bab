//! Termination messages (issue 16, item 3): what an exited container wrote to its
//! `terminationMessagePath`, or with `FallbackToLogsOnError` the tail of its log after
//! a failed run, is in the runtime status litelet builds the container status from.
//! Over the fake CRI (the file written from the host side) and, with root, a real
//! containerd (written by the container, as root and as user 1000).

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use crate::support::pods;
use crate::support::runtime::{fake_with_busybox, sh_container, Harness};
use litelet::api::pod::{Container, Pod, RestartPolicy, SecurityContext, TerminationMessagePolicy};
use litelet::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};

/// The host files litelet made for `container`'s termination message.
fn termination_logs(h: &Harness, pod: &Pod, container: &str) -> Vec<PathBuf> {
    let dir = h
        .dir
        .path()
        .join("root/pods")
        .join(pod.uid())
        .join("containers")
        .join(container);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn pod(uid: &str, containers: Vec<Container>) -> Pod {
    let mut pod = pods::meta("default", "messages", uid);
    pod.spec.host_network = Some(true);
    pod.spec.restart_policy = Some(RestartPolicy::Never);
    pod.spec.termination_grace_period_seconds = Some(1);
    pod.spec.containers = containers;
    pod
}

fn exited<'a>(status: &'a PodRuntimeStatus, name: &str) -> Option<&'a ContainerStatus> {
    status
        .newest(name)
        .filter(|c| c.state == ContainerState::Exited)
}

fn fallback(mut c: Container) -> Container {
    c.termination_message_policy = Some(TerminationMessagePolicy::FallbackToLogsOnError);
    c
}

#[test]
fn termination_message_file_is_reported_once_the_container_exits_fake_cri() {
    let fake = fake_with_busybox();
    fake.exit_after_start("app", 2, Duration::from_millis(800));
    let h = Harness::new(&fake.endpoint(), "");
    let pod = pod("uid-term-fake", vec![sh_container("app", "exit 2")]);
    h.sync_until(&pod, "app started", |s| s.newest("app").is_some());

    // The container's side of the mount, written from the host.
    let files = termination_logs(&h, &pod, "app");
    assert_eq!(
        files.len(),
        1,
        "one termination log per instance: {files:?}"
    );
    let mode = std::fs::metadata(&files[0]).map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o777
    });
    assert_eq!(
        mode.ok(),
        Some(0o666),
        "any user in the container can write it"
    );
    std::fs::write(&files[0], "bye from the fake").unwrap();
    let running = h.status(&pod);
    if let Some(c) = running.newest("app") {
        if c.state == ContainerState::Running {
            assert_eq!(c.message, "", "running containers report no message");
        }
    }

    h.sync_until(&pod, "app exited", |s| exited(s, "app").is_some());
    let status = h.status(&pod);
    let app = exited(&status, "app").unwrap();
    assert_eq!(app.exit_code, 2);
    assert_eq!(app.message, "bye from the fake");
}

/// Writes a message as root, as user 1000 and at a non-default path; a failed
/// FallbackToLogsOnError container reports its log, a successful one nothing.
#[test]
fn termination_messages_on_real_containerd() {
    let Some(containerd) =
        support::containerd::Containerd::start("termination_messages_on_real_containerd")
    else {
        return;
    };
    let parent = format!("/litelet-term-{}", std::process::id());
    let h = Harness::new(&containerd.endpoint(), &parent);
    let mut as_user = sh_container(
        "as-user",
        "printf 'bye from 1000' > /dev/termination-log; exit 3",
    );
    as_user.security_context = Some(SecurityContext {
        run_as_user: Some(1000),
        ..Default::default()
    });
    let mut custom = sh_container("custom-path", "echo custom > /tmp/status; exit 4");
    custom.termination_message_path = Some("/tmp/status".into());
    let containers = vec![
        sh_container(
            "as-root",
            "printf 'bye from root' > /dev/termination-log; exit 2",
        ),
        as_user,
        custom,
        fallback(sh_container("logs-failed", "echo from-stdout; exit 1")),
        fallback(sh_container("logs-ok", "echo all-good; exit 0")),
        fallback(sh_container(
            "file-wins",
            "echo noise; printf written > /dev/termination-log; exit 5",
        )),
    ];
    let names: Vec<String> = containers.iter().map(|c| c.name.clone()).collect();
    let uid = format!("uid-term-{}", std::process::id());
    let pod = pod(&uid, containers);
    h.sync_until(&pod, "every container exited", |s| {
        names.iter().all(|n| exited(s, n).is_some())
    });

    let status = h.status(&pod);
    let message = |name: &str| exited(&status, name).map(|c| (c.exit_code, c.message.clone()));
    assert_eq!(message("as-root"), Some((2, "bye from root".into())));
    assert_eq!(message("as-user"), Some((3, "bye from 1000".into())));
    assert_eq!(message("custom-path"), Some((4, "custom\n".into())));
    assert_eq!(message("logs-failed"), Some((1, "from-stdout\n".into())));
    assert_eq!(message("logs-ok"), Some((0, String::new())));
    assert_eq!(message("file-wins"), Some((5, "written".into())));

    let killed = h
        .manager
        .kill_pod(Some(&pod), &h.status(&pod).to_running_pod(), Some(1));
    assert!(killed.is_ok(), "{killed}");
    drop(containerd);
    support::containerd::remove_cgroup_tree(&parent);
}
