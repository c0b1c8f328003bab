//! Termination messages (issue 16, item 3): what an exited container wrote to its
//! `terminationMessagePath`, or with `FallbackToLogsOnError` the tail of its log after
//! a failed run, is in the runtime status litelet builds the container status from.
//! Over the fake CRI (the file written from the host side) and, with root, a real
//! containerd (written by the container, as root and as user 1000).

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use litelet::api::pod::{Container, Pod, RestartPolicy, SecurityContext, TerminationMessagePolicy};
use litelet::cri::{self, ConnectOptions, Endpoint};
use litelet::events::Recorder;
use litelet::runtime::actions::ProbeResults;
use litelet::runtime::env::{EnvContext, NoConfigSource};
use litelet::runtime::hooks::CriHookRunner;
use litelet::runtime::manager::{RuntimeManager, RuntimeSettings};
use litelet::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};
use litelet::runtime::sync::SyncInputs;
use support::fake_cri::FakeCri;
use support::wait_until;

const BUSYBOX: &str = "localhost/litelet/busybox:1.0";

struct Harness {
    manager: RuntimeManager,
    dir: tempfile::TempDir,
    cgroup_parent: String,
}

impl Harness {
    fn new(endpoint: &str, cgroup_parent: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint::parse(endpoint).unwrap();
        let options = ConnectOptions {
            request_timeout: Duration::from_secs(30),
            pull_timeout: Duration::from_secs(30),
        };
        let (runtime, images) = cri::connect(&endpoint, &options);
        let settings = RuntimeSettings {
            root_dir: dir.path().join("root"),
            pod_logs_dir: dir.path().join("logs"),
            dns: Default::default(),
            memory_capacity: 8 << 30,
            enforce_cpu_limits: true,
            apparmor_enabled: false,
            node_hosts_file: "/etc/hosts".into(),
            swap: Default::default(),
        };
        let hooks = Arc::new(CriHookRunner::new(runtime.clone()));
        let manager = RuntimeManager::new(runtime, images, hooks, Recorder::log_only(), settings);
        Harness {
            manager,
            dir,
            cgroup_parent: cgroup_parent.to_owned(),
        }
    }

    fn status(&self, pod: &Pod) -> PodRuntimeStatus {
        self.manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status")
    }

    /// Syncs until `done` holds, like a pod worker woken by the PLEG.
    fn sync_until(&self, pod: &Pod, what: &str, done: impl Fn(&PodRuntimeStatus) -> bool) {
        let volumes = BTreeMap::<String, PathBuf>::new();
        let env = EnvContext::default();
        let inputs = SyncInputs {
            cgroup_parent: self.cgroup_parent.clone(),
            volumes: &volumes,
            env: &env,
            config_source: &NoConfigSource,
            pull_secrets: None,
            cgroups: None,
            cancel: Default::default(),
        };
        let ok = wait_until(Duration::from_secs(30), || {
            let outcome =
                self.manager
                    .sync_pod(pod, &self.status(pod), &ProbeResults::default(), &inputs);
            if !outcome.is_ok() {
                eprintln!("sync outcome: {outcome}");
            }
            std::thread::sleep(Duration::from_millis(50));
            done(&self.status(pod))
        });
        assert!(ok, "never reached: {what}; status: {:#?}", self.status(pod));
    }

    /// The host files litelet made for `container`'s termination message.
    fn termination_logs(&self, pod: &Pod, container: &str) -> Vec<PathBuf> {
        let dir = self
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
}

fn container(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

fn pod(uid: &str, containers: Vec<Container>) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("messages".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(uid.into());
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
    let fake = FakeCri::start();
    fake.state().images.insert(BUSYBOX.into(), 1_300_000);
    fake.exit_after_start("app", 2, Duration::from_millis(800));
    let h = Harness::new(&fake.endpoint(), "");
    let pod = pod("uid-term-fake", vec![container("app", "exit 2")]);
    h.sync_until(&pod, "app started", |s| s.newest("app").is_some());

    // The container's side of the mount, written from the host.
    let files = h.termination_logs(&pod, "app");
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
    let mut as_user = container(
        "as-user",
        "printf 'bye from 1000' > /dev/termination-log; exit 3",
    );
    as_user.security_context = Some(SecurityContext {
        run_as_user: Some(1000),
        ..Default::default()
    });
    let mut custom = container("custom-path", "echo custom > /tmp/status; exit 4");
    custom.termination_message_path = Some("/tmp/status".into());
    let containers = vec![
        container(
            "as-root",
            "printf 'bye from root' > /dev/termination-log; exit 2",
        ),
        as_user,
        custom,
        fallback(container("logs-failed", "echo from-stdout; exit 1")),
        fallback(container("logs-ok", "echo all-good; exit 0")),
        fallback(container(
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
