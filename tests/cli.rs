//! The litelet binary, run for real: `runtime-info`, start-up against a runtime that
//! is down, and clean shutdown on SIGTERM.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::fake_cri::FakeCri;
use support::wait_until;

const LITELET: &str = env!("CARGO_BIN_EXE_litelet");

#[test]
fn version_flag() {
    let out = Command::new(LITELET).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("litelet "));
}

#[test]
fn runtime_info_prints_name_version_and_conditions() {
    let fake = FakeCri::start();
    fake.set_condition("NetworkReady", false, "NetworkPluginNotReady");
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
