//! The node server against a real containerd (busybox, host network): `kubectl
//! logs -f` while the container writes, `kubectl exec echo` through `/exec` (a
//! WebSocket `v4.channel.k8s.io` session proxied to containerd's streaming server),
//! and `/run`. Skips loudly without root unless CI=true. The same paths through a
//! real kube-apiserver (`kubectl logs -f`, `exec`, `port-forward`) are in
//! `tests/apiserver/real_apiserver.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::containerd::{host_network_sandbox, remove_cgroup_tree, Containerd, BUSYBOX};
use crate::support::https::{self, Pki};
use crate::support::pods;
use crossbeam_channel::bounded;
use litelet::api::pod::Container;
use litelet::cri::{self, pb, ConnectOptions, Endpoint};
use litelet::kubelet::snapshot::PodSnapshot;
use litelet::pleg::PlegHealth;
use litelet::server::authz::AuthorizationMode;
use litelet::server::{self, ServerConfig, ServerContext};

const NS: &str = "default";
const POD: &str = "talker";

/// Reads one WebSocket frame: (opcode, payload). Server frames are not masked.
fn read_frame(r: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head)?;
    let opcode = head[0] & 0x0f;
    let mut len = u64::from(head[1] & 0x7f);
    if len == 126 {
        let mut ext = [0u8; 2];
        r.read_exact(&mut ext)?;
        len = u64::from(u16::from_be_bytes(ext));
    } else if len == 127 {
        let mut ext = [0u8; 8];
        r.read_exact(&mut ext)?;
        len = u64::from_be_bytes(ext);
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok((opcode, payload))
}

#[test]
fn logs_follow_exec_and_run_against_real_containerd() {
    let Some(containerd) = Containerd::start("logs_follow_exec_and_run_against_real_containerd")
    else {
        return;
    };
    let endpoint = Endpoint::parse(&containerd.endpoint()).unwrap();
    let (runtime, _) = cri::connect(&endpoint, &ConnectOptions::default());
    let uid = format!("srv-{}", std::process::id());
    let logs_root = containerd.dir().join("pod-logs");
    let log_dir = logs_root.join(format!("{NS}_{POD}_{uid}"));
    std::fs::create_dir_all(&log_dir).unwrap();
    let cgroup_parent = format!("/litelet-server-test-{}", std::process::id());
    let sandbox = host_network_sandbox(POD, &uid, &log_dir, &cgroup_parent);
    let script = "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.2; done";
    let (sandbox_id, _) = containerd.run_busybox_pod(&runtime, &sandbox, &["sh", "-c", script]);

    let mut pod = pods::meta(NS, POD, &uid);
    pod.spec.containers = vec![Container {
        name: "main".into(),
        image: Some(BUSYBOX.into()),
        ..Default::default()
    }];
    let pods = PodSnapshot::new();
    pods.publish([Arc::new(pod)].iter());

    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("client-ca");
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    let mut config = ServerConfig::new("node-1", dir.path().to_owned());
    config.address = "127.0.0.1".parse().unwrap();
    config.port = 0;
    config.healthz_port = None;
    config.tls.client_ca_file = Some(dir.path().join("ca.crt"));
    config.tls.host_ips = vec!["127.0.0.1".parse().unwrap()];
    config.authorization_mode = AuthorizationMode::AlwaysAllow;
    config.pod_logs_dir = logs_root;
    let ctx = ServerContext {
        heartbeat: Arc::new(AtomicU64::new(0)),
        pleg: PlegHealth::default(),
        started: Instant::now(),
        pods,
        runtime: runtime.clone(),
        status: None,
        api: None,
        stats: None,
        probes: None,
        runtime_cache: None,
    };
    let (_stop, shutdown) = bounded::<()>(0);
    let handle = server::start(config, ctx, shutdown).unwrap();
    let server_ca = std::fs::read(dir.path().join("pki/litelet.crt")).unwrap();
    let admin = pki.client("kube-apiserver-kubelet-client", &["system:masters"]);

    // Logs follow while the container writes a line every 200 ms.
    let tls = https::connect(handle.api_addr, &server_ca, Some(&admin)).unwrap();
    let mut reader = BufReader::new(tls);
    https::send(
        reader.get_mut(),
        "GET",
        &format!("/containerLogs/{NS}/{POD}/main?follow=true&timestamps=true"),
        &[],
        b"",
    )
    .unwrap();
    let (status, _) = https::read_head(&mut reader).unwrap();
    assert_eq!(status, 200, "{}", containerd.log_tail());
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains("line-5\n") {
        assert!(Instant::now() < deadline, "follow saw only {seen:?}");
        let chunk = https::read_chunk(&mut reader)
            .unwrap()
            .expect("follow ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let first = seen.lines().next().unwrap();
    assert!(
        first.ends_with(" line-0") && first.contains('T'),
        "timestamped: {first:?}"
    );
    drop(reader);

    // kubectl exec echo: a WebSocket session through the node server's proxy.
    let tls = https::connect(handle.api_addr, &server_ca, Some(&admin)).unwrap();
    let mut reader = BufReader::new(tls);
    https::send(
        reader.get_mut(),
        "GET",
        &format!("/exec/{NS}/{POD}/main?command=echo&command=hello-from-exec&output=1&error=1"),
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
        ],
        b"",
    )
    .unwrap();
    let (status, headers) = https::read_head(&mut reader).unwrap();
    assert_eq!(status, 101, "{headers:?}\n{}", containerd.log_tail());
    let protocol = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-protocol"));
    assert_eq!(protocol.map(|(_, v)| v.as_str()), Some("v4.channel.k8s.io"));
    let mut stdout = Vec::new();
    let mut status_json = String::new();
    while let Ok((opcode, payload)) = read_frame(&mut reader) {
        if opcode == 8 {
            break;
        }
        match payload.split_first() {
            Some((1, data)) => stdout.extend_from_slice(data),
            Some((3, data)) => status_json.push_str(&String::from_utf8_lossy(data)),
            _ => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "hello-from-exec\n");
    assert!(
        status_json.contains("Success"),
        "exec status: {status_json:?}"
    );

    // /run: ExecSync through the node server.
    let answer = https::get(
        handle.api_addr,
        &server_ca,
        Some(&admin),
        "POST",
        &format!("/run/{NS}/{POD}/main?cmd=echo+ran"),
        &[],
    )
    .unwrap();
    assert_eq!((answer.status, answer.text().as_str()), (200, "ran\n"));

    let _ = runtime.stop_pod_sandbox(&pb::StopPodSandboxRequest {
        pod_sandbox_id: sandbox_id.clone(),
        ..Default::default()
    });
    let _ = runtime.remove_pod_sandbox(&pb::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox_id,
        ..Default::default()
    });
    remove_cgroup_tree(&cgroup_parent);
    let _ = reader.get_mut().flush();
    let _ = reader.fill_buf();
}
