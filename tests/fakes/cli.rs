//! The litelet binary, run for real: `runtime-info`, start-up against a runtime that
//! is down, clean shutdown on SIGTERM, certificates refused at start, and the process
//! ending when an essential thread panics.

use crate::support;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::support::fake_api::{tls, FakeApi};
use crate::support::fake_cri::FakeCri;
use crate::support::wait_until;
use litelet::kernel_tunables::TEST_ROOT_ENV;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LITELET: &str = env!("CARGO_BIN_EXE_litelet");

#[test]
fn version_flag() {
    let out = Command::new(LITELET).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Kubernetes v1.36."), "{text}");
}

#[test]
fn runtime_info_prints_name_version_and_conditions() {
    let fake = FakeCri::start();
    fake.set_condition("NetworkReady", false, "NetworkPluginNotReady");
    fake.state().status_info = containerd_status_info(true);
    let out = Command::new(LITELET)
        .args([
            "runtime-info",
            "--container-runtime-endpoint",
            &fake.endpoint(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("RuntimeName:     fake-cri"), "{text}");
    assert!(text.contains("RuntimeApiVersion: v1"), "{text}");
    assert!(text.contains("RuntimeReady   true"), "{text}");
    assert!(
        text.contains("NetworkReady   false  reason=NetworkPluginNotReady"),
        "{text}"
    );
    assert!(
        text.contains("CgroupDriver:    systemd (from containerd's"),
        "{text}"
    );
}

#[test]
fn runtime_info_fails_clearly_without_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let out = Command::new(LITELET)
        .args(["runtime-info", "--container-runtime-endpoint", &endpoint])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing.sock") && err.contains("is the runtime running"),
        "{err}"
    );

    let out = Command::new(LITELET)
        .args([
            "runtime-info",
            "--container-runtime-endpoint",
            "tcp://1.2.3.4:5",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only unix://"));
}

/// Starts the agent, waits for `ready` in its log, sends SIGTERM, expects exit 0.
fn agent_stops_cleanly(endpoint: &str, ready: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("litelet.log");
    let child = Command::new(LITELET)
        .env(TEST_ROOT_ENV, support::proc_sys(dir.path()))
        .arg("--device-plugins-dir")
        .arg(dir.path().join("device-plugins"))
        .args(["--container-runtime-endpoint", endpoint, "--root-dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || read_log().contains(ready)),
        "never saw {ready:?}:\n{}",
        read_log()
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let mut child = child;
    let mut status = None;
    wait_until(Duration::from_secs(10), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("litelet did not exit after SIGTERM:\n{}", read_log())
    });
    assert!(status.success(), "exit {status:?}:\n{}", read_log());
    assert!(read_log().contains("shutting down"), "{}", read_log());
}

#[test]
fn agent_connects_and_shuts_down_on_sigterm() {
    let fake = FakeCri::start();
    agent_stops_cleanly(&fake.endpoint(), "is ready");
}

#[test]
fn agent_keeps_retrying_while_the_runtime_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("unix://{}/later.sock", dir.path().display());
    // The agent must not exit: it logs the retry and still honours SIGTERM.
    agent_stops_cleanly(&endpoint, "retrying in");
}

/// Runs the agent with `args` (and `env`) until it exits or `timeout` passes; the
/// exit status (`None`: still running, then killed) and everything it logged.
fn run_agent(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> (Option<ExitStatus>, String) {
    let log = dir.join("litelet.log");
    let mut child = Command::new(LITELET)
        .env(TEST_ROOT_ENV, support::proc_sys(dir))
        .args(args)
        .arg("--device-plugins-dir")
        .arg(dir.join("device-plugins"))
        .arg("--root-dir")
        .arg(dir.join("root"))
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until(timeout, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

/// A throwaway CA and a client certificate signed by `openssl x509 -req` without
/// extensions, which makes an X.509 v1 certificate; `None` without openssl.
fn v1_client_certificate(dir: &Path) -> Option<()> {
    tls::make_ca(dir, "ca")?;
    tls::signed_leaf(dir, "node", "/CN=system:node:n1", None)
}

/// A client certificate rustls refuses (X.509 v1) stops litelet at start, with the
/// file and the reason, before it even waits for the runtime. It used to pass the
/// load and panic inside every API thread's HTTP client, leaving litelet running
/// without them.
#[test]
fn a_v1_client_certificate_stops_litelet_at_start() {
    let dir = tempfile::tempdir().unwrap();
    if v1_client_certificate(dir.path()).is_none() {
        eprintln!("skipped: no openssl command to make a v1 certificate");
        return;
    }
    let kubeconfig = dir.path().join("kubelet.conf");
    std::fs::write(
        &kubeconfig,
        "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority: ca.crt\ncontexts:\n- {name: c, context: {cluster: k, user: u}}\nusers:\n- name: u\n  user:\n    client-certificate: node.crt\n    client-key: node.key\n",
    )
    .unwrap();
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let (status, log) = run_agent(
        dir.path(),
        &[
            "--container-runtime-endpoint",
            &endpoint,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(10),
    );
    let status = status.unwrap_or_else(|| panic!("litelet kept running:\n{log}"));
    assert!(!status.success(), "{log}");
    let cert = dir.path().join("node.crt");
    assert!(
        log.contains(&format!("client-certificate (file {})", cert.display()))
            && log.contains("X.509 version 1"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// The same v1 certificate as the node server's `--tls-cert-file`: refused at start
/// with the file named (it used to disable the node server with a bare rustls error
/// while litelet went on).
#[test]
fn a_v1_serving_certificate_stops_litelet_at_start() {
    let dir = tempfile::tempdir().unwrap();
    if v1_client_certificate(dir.path()).is_none() {
        eprintln!("skipped: no openssl command to make a v1 certificate");
        return;
    }
    let (cert, key) = (dir.path().join("node.crt"), dir.path().join("node.key"));
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let (status, log) = run_agent(
        dir.path(),
        &[
            "--container-runtime-endpoint",
            &endpoint,
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-private-key-file",
            key.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(10),
    );
    let status = status.unwrap_or_else(|| panic!("litelet kept running:\n{log}"));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&format!("node server TLS: {}", cert.display()))
            && log.contains("X.509 version 1"),
        "{log}"
    );
}

/// A plain http:// server and insecure-skip-tls-verify still work, but each is
/// named in a warning at start.
#[test]
fn insecure_api_settings_are_warned_about_at_start() {
    let cases = [
        ("server: http://127.0.0.1:1", "is plain http://"),
        (
            "server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true",
            "insecure-skip-tls-verify is set",
        ),
    ];
    for (cluster, warning) in cases {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubelet.conf");
        std::fs::write(
            &kubeconfig,
            format!("current-context: c\nclusters:\n- name: k\n  cluster:\n    {cluster}\ncontexts:\n- {{name: c, context: {{cluster: k}}}}\n"),
        )
        .unwrap();
        let endpoint = format!("unix://{}/missing.sock", dir.path().display());
        let log = dir.path().join("litelet.log");
        let mut child = Command::new(LITELET)
            .env(TEST_ROOT_ENV, support::proc_sys(dir.path()))
            .args(["--container-runtime-endpoint", &endpoint, "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--device-plugins-dir")
            .arg(dir.path().join("device-plugins"))
            .arg("--root-dir")
            .arg(dir.path().join("root"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let seen = wait_until(Duration::from_secs(10), || {
            read_log().contains("retrying in")
        });
        let _ = child.kill();
        let _ = child.wait();
        let text = read_log();
        assert!(seen, "litelet never reached the runtime wait:\n{text}");
        let line = text
            .lines()
            .find(|l| l.contains(warning))
            .unwrap_or_else(|| panic!("no warning {warning:?}:\n{text}"));
        assert!(line.contains("WARN"), "{line}");
    }
}

/// A panic in an essential thread ends the process with a non-zero code and names
/// the thread, so the service manager restarts litelet; it used to leave an agent
/// running without that thread. The test hook `LITELET_TEST_PANIC_THREAD` makes the
/// named thread panic as it starts. `signals` starts before the runtime wait, the
/// others once the agent runs against the fake runtime.
#[test]
fn a_panic_in_an_essential_thread_stops_litelet() {
    let fake = FakeCri::start();
    let api = FakeApi::start();
    let endpoint = fake.endpoint();
    let without_api = ["signals", "pleg", "gc", "srv-healthz", "log-rotate"];
    let with_api = ["events", "api-watch", "node", "status"];
    for (thread, needs_api) in without_api
        .iter()
        .map(|t| (*t, false))
        .chain(with_api.iter().map(|t| (*t, true)))
    {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "current-context: c\nclusters:\n- {{name: k, cluster: {{server: '{}'}}}}\ncontexts:\n- {{name: c, context: {{cluster: k}}}}\n",
                api.url()
            ),
        )
        .unwrap();
        let healthz = support::free_port().to_string();
        let mut args = vec![
            "--container-runtime-endpoint",
            &endpoint,
            "--port",
            "0",
            "--healthz-port",
            &healthz,
        ];
        if needs_api {
            args.extend(["--kubeconfig", kubeconfig.to_str().unwrap()]);
        }
        let (status, log) = run_agent(
            dir.path(),
            &args,
            &[("LITELET_TEST_PANIC_THREAD", thread)],
            Duration::from_secs(20),
        );
        let status = status.unwrap_or_else(|| panic!("{thread}: litelet kept running:\n{log}"));
        assert_eq!(status.code(), Some(70), "{thread}:\n{log}");
        assert!(
            log.contains(&format!("essential thread {thread:?} panicked")),
            "{thread}:\n{log}"
        );
    }
}

/// containerd's CRI config as its verbose Status carries it (`info["config"]`).
fn containerd_status_info(systemd_cgroup: bool) -> std::collections::HashMap<String, String> {
    let config = format!(
        r#"{{"containerd":{{"defaultRuntimeName":"runc","runtimes":{{"runc":{{"runtimeType":"io.containerd.runc.v2","options":{{"SystemdCgroup":{systemd_cgroup}}}}}}}}}}}"#
    );
    std::collections::HashMap::from([("config".to_owned(), config)])
}

/// litelet refuses to start when the runtime uses the other cgroup driver, whether
/// the runtime says so through CRI RuntimeConfig or (containerd 1.6/1.7, where that
/// is UNIMPLEMENTED) through its config in the verbose Status; the message names both.
#[test]
fn a_cgroup_driver_mismatch_stops_litelet_at_start() {
    use litelet::cri::pb;
    let via_runtime_config = || {
        let fake = FakeCri::start();
        let linux = pb::LinuxRuntimeConfiguration {
            cgroup_driver: pb::CgroupDriver::SYSTEMD.into(),
            ..Default::default()
        };
        fake.state().runtime_config = Some(pb::RuntimeConfigResponse {
            linux: protobuf::MessageField::some(linux),
            ..Default::default()
        });
        (fake, "CRI RuntimeConfig")
    };
    let via_status = || {
        let fake = FakeCri::start();
        fake.state().status_info = containerd_status_info(true);
        (fake, "SystemdCgroup")
    };
    for (fake, source) in [via_runtime_config(), via_status()] {
        let dir = tempfile::tempdir().unwrap();
        let (status, text) = run_agent(
            dir.path(),
            &["--container-runtime-endpoint", &fake.endpoint()],
            &[],
            Duration::from_secs(20),
        );
        let status = status.unwrap_or_else(|| panic!("litelet kept running:\n{text}"));
        assert!(!status.success(), "{text}");
        let line = text
            .lines()
            .find(|l| l.contains("cgroup driver mismatch"))
            .unwrap_or_else(|| panic!("no mismatch message:\n{text}"));
        assert!(
            line.contains("\"cgroupfs\"") && line.contains("\"systemd\"") && line.contains(source),
            "{line}"
        );
        assert_eq!(fake.count("RunPodSandbox"), 0);
        assert_eq!(fake.count("RuntimeConfig"), 1);
    }
}

/// "Starting kubelet." is said only once the start-up checks passed: a litelet that
/// refuses the runtime's cgroup driver sends no such event to the API server; one
/// whose runtime agrees does.
#[test]
fn starting_event_is_sent_only_after_the_cgroup_driver_check_passes() {
    for systemd in [true, false] {
        let fake = FakeCri::start();
        fake.state().status_info = containerd_status_info(systemd);
        let api = FakeApi::start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig);
        let (status, text) = run_agent(
            dir.path(),
            &[
                "--container-runtime-endpoint",
                &fake.endpoint(),
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(if systemd { 20 } else { 4 }),
        );
        let starting = api
            .requests()
            .into_iter()
            .filter_map(|r| r.body)
            .filter(|b| b.contains("Starting kubelet."))
            .count();
        if systemd {
            let status = status.unwrap_or_else(|| panic!("litelet kept running:\n{text}"));
            assert!(!status.success(), "{text}");
            assert!(text.contains("cgroup driver mismatch"), "{text}");
            assert_eq!(starting, 0, "{text}");
        } else {
            assert!(status.is_none(), "litelet exited {status:?}:\n{text}");
            assert_eq!(starting, 1, "{text}");
        }
    }
}

/// The same driver on both sides starts normally; a runtime that tells nothing is
/// only warned about.
#[test]
fn a_matching_or_unknown_runtime_cgroup_driver_lets_litelet_start() {
    for info in [containerd_status_info(false), Default::default()] {
        let fake = FakeCri::start();
        let unknown = info.is_empty();
        fake.state().status_info = info;
        let dir = tempfile::tempdir().unwrap();
        let (status, text) = run_agent(
            dir.path(),
            &["--container-runtime-endpoint", &fake.endpoint()],
            &[],
            Duration::from_secs(4),
        );
        assert!(status.is_none(), "litelet exited {status:?}:\n{text}");
        assert!(!text.contains("mismatch"), "{text}");
        if unknown {
            assert!(
                text.lines()
                    .any(|l| l.contains("WARN")
                        && l.contains("cannot tell the runtime's cgroup driver")),
                "{text}"
            );
        } else {
            assert!(text.contains("the same as the runtime's"), "{text}");
        }
    }
}

/// `--protect-kernel-defaults` (a CIS benchmark item): a tunable the kubelet depends
/// on at another value stops litelet at start, naming it, and litelet changes nothing.
#[test]
fn protected_kernel_defaults_that_differ_stop_litelet_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let root = support::proc_sys(dir.path());
    let panic = litelet::kernel_tunables::path_of(&root, "kernel.panic");
    std::fs::write(&panic, "0\n").unwrap();
    let endpoint = format!("unix://{}/missing.sock", dir.path().display());
    let out = Command::new(LITELET)
        .env(TEST_ROOT_ENV, &root)
        .args(["--container-runtime-endpoint", &endpoint])
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .arg("--protect-kernel-defaults")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kernel.panic"), "{err}");
    assert_eq!(std::fs::read_to_string(&panic).unwrap().trim(), "0");
}
