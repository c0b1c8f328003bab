//! The CRI client against the fake runtime: containerd's rules as litelet relies on
//! them, and each kind of injected fault (delay, Nth-call failure, container exit,
//! server restart) seen through the client's typed errors.

use std::time::Duration;

use crate::support::fake_cri::{self, FakeCri};
use crate::support::wait_until;
use grpcio::RpcStatusCode;
use litelet::cri::{pb, CriError, RuntimeClient};
use protobuf::MessageField;

const BUSYBOX: &str = "localhost/litelet/busybox:1.0";

fn sandbox(runtime: &RuntimeClient, name: &str) -> String {
    let config = pb::PodSandboxConfig {
        metadata: MessageField::some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    runtime
        .run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(config),
            ..Default::default()
        })
        .expect("run sandbox")
        .pod_sandbox_id
}

fn create(runtime: &RuntimeClient, sandbox_id: &str, name: &str) -> Result<String, CriError> {
    let config = fake_cri::container_config(name, BUSYBOX, Default::default());
    runtime
        .create_container(&pb::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: MessageField::some(config),
            ..Default::default()
        })
        .map(|r| r.container_id)
}

fn start(runtime: &RuntimeClient, id: &str) -> Result<(), CriError> {
    runtime
        .start_container(&pb::StartContainerRequest {
            container_id: id.into(),
            ..Default::default()
        })
        .map(|_| ())
}

fn status(runtime: &RuntimeClient, id: &str) -> Result<pb::ContainerStatus, CriError> {
    runtime
        .container_status(&pb::ContainerStatusRequest {
            container_id: id.into(),
            ..Default::default()
        })
        .map(|r| r.status.unwrap_or_default())
}

fn fake_with_busybox() -> FakeCri {
    let fake = FakeCri::start();
    fake.state().images.insert(BUSYBOX.into(), 1_300_000);
    fake
}

#[test]
fn version_check_accepts_a_v1_runtime() {
    let fake = FakeCri::start();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    let version = runtime.check_version().unwrap();
    assert_eq!(version.runtime_api_version, "v1");
    assert_eq!(fake.count("Version"), 1);
}

#[test]
fn version_check_names_a_missing_socket() {
    let fake = FakeCri::start();
    let (runtime, _) = fake.clients(Duration::from_secs(1));
    let mut fake = fake;
    fake.stop();
    let err = runtime.check_version().unwrap_err();
    assert!(matches!(err, CriError::BadEndpoint { .. }), "{err}");
    assert!(err.to_string().contains("is the runtime running"), "{err}");
}

#[test]
fn unknown_ids_are_not_found_but_removal_is_idempotent() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    assert!(status(&runtime, "nope").unwrap_err().is_not_found());
    assert!(start(&runtime, "nope").unwrap_err().is_not_found());
    let err = runtime
        .pod_sandbox_status(&pb::PodSandboxStatusRequest {
            pod_sandbox_id: "nope".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.is_not_found());
    runtime
        .remove_container(&pb::RemoveContainerRequest {
            container_id: "nope".into(),
            ..Default::default()
        })
        .expect("removing an unknown container succeeds, as in containerd");
    runtime
        .remove_pod_sandbox(&pb::RemovePodSandboxRequest {
            pod_sandbox_id: "nope".into(),
            ..Default::default()
        })
        .expect("removing an unknown sandbox succeeds, as in containerd");
}

#[test]
fn containers_start_only_from_created_and_names_are_reserved() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    let pod = sandbox(&runtime, "web");
    let id = create(&runtime, &pod, "app").unwrap();
    start(&runtime, &id).unwrap();
    let again = start(&runtime, &id).unwrap_err();
    assert!(matches!(again, CriError::Other { .. }), "{again}");
    let dup = create(&runtime, &pod, "app").unwrap_err();
    assert!(dup.to_string().contains("name is reserved"), "{dup}");
    // A missing image is NotFound at create time.
    fake.state().images.remove(BUSYBOX);
    assert!(create(&runtime, &pod, "other").unwrap_err().is_not_found());
}

#[test]
fn stopping_a_sandbox_stops_its_containers() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    let pod = sandbox(&runtime, "web");
    let id = create(&runtime, &pod, "app").unwrap();
    start(&runtime, &id).unwrap();
    runtime
        .stop_pod_sandbox(&pb::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
            ..Default::default()
        })
        .unwrap();
    let after = status(&runtime, &id).unwrap();
    assert_eq!(
        after.state.enum_value_or_default(),
        pb::ContainerState::CONTAINER_EXITED
    );
    assert_eq!(after.exit_code, 137);
}

#[test]
fn fault_delay_turns_into_deadline_exceeded() {
    let fake = FakeCri::start();
    let (runtime, _) = fake.clients(Duration::from_millis(300));
    fake.delay("Status", Duration::from_secs(2));
    let err = runtime.status(&Default::default()).unwrap_err();
    assert!(matches!(err, CriError::DeadlineExceeded { .. }), "{err}");
    assert!(err.is_runtime_down());
    // Other methods are not held up by the slow one.
    runtime
        .version(&Default::default())
        .expect("version is not delayed");
    fake.clear_faults();
    runtime
        .status(&Default::default())
        .expect("status after clearing faults");
}

#[test]
fn fault_fail_nth_call_with_a_code() {
    let fake = FakeCri::start();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    fake.fail_nth(
        "ListPodSandbox",
        2,
        RpcStatusCode::UNAVAILABLE,
        "injected outage",
    );
    fake.fail_nth(
        "ListContainers",
        1,
        RpcStatusCode::INVALID_ARGUMENT,
        "bad filter",
    );
    runtime
        .list_pod_sandbox(&Default::default())
        .expect("first call passes");
    let err = runtime.list_pod_sandbox(&Default::default()).unwrap_err();
    assert_eq!(
        err,
        CriError::Unavailable {
            op: "list_pod_sandbox",
            message: "injected outage".into()
        }
    );
    runtime
        .list_pod_sandbox(&Default::default())
        .expect("third call passes");
    let err = runtime.list_containers(&Default::default()).unwrap_err();
    assert!(matches!(err, CriError::InvalidArgument { .. }), "{err}");
    assert_eq!(err.code(), Some(3));
}

#[test]
fn fault_container_exit_now_and_after_start() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    let pod = sandbox(&runtime, "web");
    let id = create(&runtime, &pod, "app").unwrap();
    start(&runtime, &id).unwrap();
    assert!(fake.exit_container(&id, 3));
    let exited = status(&runtime, &id).unwrap();
    assert_eq!(
        exited.state.enum_value_or_default(),
        pb::ContainerState::CONTAINER_EXITED
    );
    assert_eq!(exited.exit_code, 3);
    assert_eq!(exited.reason, "Error");

    fake.exit_after_start("crasher", 42, Duration::from_millis(100));
    let crasher = create(&runtime, &pod, "crasher").unwrap();
    start(&runtime, &crasher).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        status(&runtime, &crasher).unwrap().exit_code == 42
    }));
}

#[test]
fn fault_server_restart_keeps_state_and_client_reconnects() {
    let mut fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(2));
    let pod = sandbox(&runtime, "web");
    fake.stop();
    let err = runtime.version(&Default::default()).unwrap_err();
    assert!(err.is_runtime_down(), "{err}");
    fake.restart();
    assert!(
        wait_until(Duration::from_secs(10), || runtime
            .version(&Default::default())
            .is_ok()),
        "client never reconnected"
    );
    let listed = runtime.list_pod_sandbox(&Default::default()).unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].id, pod);
}

#[test]
fn exec_sync_and_resources() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(5));
    let pod = sandbox(&runtime, "web");
    let id = create(&runtime, &pod, "app").unwrap();
    let exec = |cmd: &[&str]| {
        runtime.exec_sync(&pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 1,
            ..Default::default()
        })
    };
    assert!(exec(&["true"]).is_err(), "exec needs a running container");
    start(&runtime, &id).unwrap();
    assert_eq!(exec(&["echo", "hi"]).unwrap().stdout, b"hi\n");
    assert_eq!(exec(&["sh", "-c", "exit 4"]).unwrap().exit_code, 4);
    assert!(exec(&["no-such-binary"])
        .unwrap_err()
        .to_string()
        .contains("not found in $PATH"));

    runtime
        .update_container_resources(&pb::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: MessageField::some(pb::LinuxContainerResources {
                memory_limit_in_bytes: 256 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
    let applied = status(&runtime, &id).unwrap();
    assert_eq!(
        applied
            .resources
            .linux
            .as_ref()
            .map(|l| l.memory_limit_in_bytes),
        Some(256 << 20)
    );
}

#[test]
fn concurrent_calls_from_many_threads() {
    let fake = fake_with_busybox();
    let (runtime, _) = fake.clients(Duration::from_secs(10));
    let pod = sandbox(&runtime, "busy");
    std::thread::scope(|scope| {
        for t in 0..8 {
            let runtime = runtime.clone();
            let pod = pod.clone();
            scope.spawn(move || {
                for n in 0..10 {
                    let id = create(&runtime, &pod, &format!("c-{t}-{n}")).unwrap();
                    start(&runtime, &id).unwrap();
                }
            });
        }
    });
    let running = runtime
        .list_containers(&Default::default())
        .unwrap()
        .containers;
    assert_eq!(running.len(), 80);
    assert_eq!(fake.count("StartContainer"), 80);
}

#[test]
fn images_pull_status_and_remove() {
    let fake = FakeCri::start();
    let (_, images) = fake.clients(Duration::from_secs(5));
    let spec = |image: &str| {
        MessageField::some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        })
    };
    let missing = images
        .image_status(&pb::ImageStatusRequest {
            image: spec("example.test/app:1"),
            ..Default::default()
        })
        .unwrap();
    assert!(
        missing.image.is_none(),
        "a missing image is an empty answer"
    );
    images
        .pull_image(&pb::PullImageRequest {
            image: spec("example.test/app:1"),
            ..Default::default()
        })
        .unwrap();
    let listed = images.list_images(&Default::default()).unwrap();
    assert!(listed
        .images
        .iter()
        .any(|i| i.repo_tags == ["example.test/app:1"]));
    let err = images
        .pull_image(&pb::PullImageRequest {
            image: spec("example.test/does-not-exist:1"),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    images
        .remove_image(&pb::RemoveImageRequest {
            image: spec("example.test/app:1"),
            ..Default::default()
        })
        .unwrap();
    let fs = images.image_fs_info(&Default::default()).unwrap();
    assert_eq!(fs.image_filesystems.len(), 1);
}
