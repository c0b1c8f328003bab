//! The CRI client against a real containerd: a host-network pod through its whole
//! life, asserting on what containerd reports (log file, exec output, exit codes,
//! cgroup limits after UpdateContainerResources).

use std::time::Duration;

use crate::support::containerd::{
    busybox_container, host_network_sandbox, remove_cgroup_tree, remove_sandbox, Containerd,
    BUSYBOX,
};
use crate::support::wait_until;
use litelet::cri::{self, pb, ConnectOptions, Endpoint, RuntimeClient};
use protobuf::MessageField;

/// Busybox container `name` of `sandbox`'s pod running `script`, with `memory` bytes.
fn container_config(
    sandbox: &pb::PodSandboxConfig,
    name: &str,
    script: &str,
    memory: i64,
) -> pb::ContainerConfig {
    let mut config = busybox_container(sandbox, name, &["sh", "-c", script]);
    config.linux.mut_or_insert_default().resources =
        MessageField::some(pb::LinuxContainerResources {
            cpu_shares: 512,
            memory_limit_in_bytes: memory,
            ..Default::default()
        });
    config
}

fn container_state(runtime: &RuntimeClient, id: &str) -> pb::ContainerStatus {
    runtime
        .container_status(&pb::ContainerStatusRequest {
            container_id: id.into(),
            ..Default::default()
        })
        .expect("container status")
        .status
        .unwrap_or_default()
}

/// Reads a v1 memory cgroup limit for a container under `parent`.
fn memory_limit(parent: &str, container_id: &str) -> Option<i64> {
    let path = format!("/sys/fs/cgroup/memory{parent}/{container_id}/memory.limit_in_bytes");
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[test]
fn pod_lifecycle_against_real_containerd() {
    let Some(containerd) = Containerd::start("pod_lifecycle_against_real_containerd") else {
        return;
    };
    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let (runtime, images) = cri::connect(&endpoint, &ConnectOptions::default());
    let version = runtime.check_version().expect("containerd speaks CRI v1");
    assert_eq!(version.runtime_name, "containerd");
    assert_eq!(version.runtime_api_version, "v1");

    let image = images
        .image_status(&pb::ImageStatusRequest {
            image: MessageField::some(pb::ImageSpec {
                image: BUSYBOX.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
    assert!(image.image.is_some(), "busybox image is imported");

    let uid = format!("test-{}", std::process::id());
    let log_dir = containerd.dir().join("pod-logs");
    std::fs::create_dir_all(&log_dir).unwrap();
    let cgroup_parent = format!("/litelet-cri-test-{}", std::process::id());
    let config = host_network_sandbox("cri-lifecycle", &uid, &log_dir, &cgroup_parent);
    let sandbox_id = containerd.run_sandbox(&runtime, &config);

    // A long-running container with a memory limit.
    let main = containerd.run_container(
        &runtime,
        &sandbox_id,
        &config,
        container_config(
            &config,
            "main",
            "echo hello-from-litelet; exec sleep 3600",
            64 << 20,
        ),
    );
    let status = container_state(&runtime, &main);
    assert_eq!(
        status.state.enum_value_or_default(),
        pb::ContainerState::CONTAINER_RUNNING
    );
    assert!(status.started_at > 0);

    // Its output reaches the CRI log file, in the CRI log format.
    let log_file = log_dir.join("main/0.log");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(
            &log_file
        )
        .is_ok_and(|log| log.contains(" stdout F hello-from-litelet"))),
        "log file {} never showed the container's output",
        log_file.display()
    );

    // ExecSync gives stdout and the exit code.
    let exec = runtime
        .exec_sync(&pb::ExecSyncRequest {
            container_id: main.clone(),
            cmd: vec!["sh".into(), "-c".into(), "echo exec-ok; exit 3".into()],
            timeout: 10,
            ..Default::default()
        })
        .expect("exec sync");
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "exec-ok\n");
    assert_eq!(exec.exit_code, 3);

    // UpdateContainerResources reaches the container's memory cgroup.
    assert_eq!(memory_limit(&cgroup_parent, &main), Some(64 << 20));
    runtime
        .update_container_resources(&pb::UpdateContainerResourcesRequest {
            container_id: main.clone(),
            linux: MessageField::some(pb::LinuxContainerResources {
                cpu_shares: 1024,
                memory_limit_in_bytes: 128 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("update resources");
    assert_eq!(memory_limit(&cgroup_parent, &main), Some(128 << 20));
    let shares = std::fs::read_to_string(format!(
        "/sys/fs/cgroup/cpu{cgroup_parent}/{main}/cpu.shares"
    ));
    assert_eq!(shares.ok().as_deref().map(str::trim), Some("1024"));

    // A container that exits by itself reports its exit code.
    let quitter_config = container_config(&config, "quitter", "exit 7", 32 << 20);
    let quitter = containerd.run_container(&runtime, &sandbox_id, &config, quitter_config);
    assert!(wait_until(Duration::from_secs(10), || {
        container_state(&runtime, &quitter)
            .state
            .enum_value_or_default()
            == pb::ContainerState::CONTAINER_EXITED
    }));
    assert_eq!(container_state(&runtime, &quitter).exit_code, 7);

    // StopContainer: sh as PID 1 ignores SIGTERM, so the runtime kills it after the timeout.
    runtime
        .stop_container(&pb::StopContainerRequest {
            container_id: main.clone(),
            timeout: 1,
            ..Default::default()
        })
        .expect("stop container");
    let stopped = container_state(&runtime, &main);
    assert_eq!(
        stopped.state.enum_value_or_default(),
        pb::ContainerState::CONTAINER_EXITED
    );
    assert_ne!(stopped.exit_code, 0);
    assert!(stopped.finished_at >= stopped.started_at);

    // Sandbox teardown; afterwards the runtime no longer knows the IDs.
    remove_sandbox(&runtime, &sandbox_id);
    let err = runtime
        .pod_sandbox_status(&pb::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox_id.clone(),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let left = runtime.list_containers(&Default::default()).unwrap();
    assert!(
        left.containers.is_empty(),
        "containers left: {:?}",
        left.containers
    );
    remove_cgroup_tree(&cgroup_parent);
}
