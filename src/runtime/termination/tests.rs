//! Tests of termination message selection and its size limits, over temp files.

use std::collections::HashMap;
use std::path::Path;

use super::*;
use crate::runtime::labels::{
    CONTAINER_TERMINATION_MESSAGE_PATH, CONTAINER_TERMINATION_MESSAGE_POLICY,
};

/// An exited container with a termination log mounted from `host` at `at`.
fn exited(exit_code: i32, policy: &str, at: &str, host: &Path, log: &Path) -> pb::ContainerStatus {
    pb::ContainerStatus {
        state: pb::ContainerState::CONTAINER_EXITED.into(),
        exit_code,
        annotations: HashMap::from([
            (CONTAINER_TERMINATION_MESSAGE_PATH.to_owned(), at.to_owned()),
            (
                CONTAINER_TERMINATION_MESSAGE_POLICY.to_owned(),
                policy.to_owned(),
            ),
        ]),
        mounts: vec![pb::Mount {
            container_path: at.to_owned(),
            host_path: host.display().to_string(),
            ..Default::default()
        }],
        log_path: log.display().to_string(),
        ..Default::default()
    }
}

/// A CRI log with one full stdout record per line of `lines`.
fn cri_log(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| format!("2024-01-01T00:00:01.000000001Z stdout F {l}\n"))
        .collect()
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn write(&self, name: &str, content: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
    fn missing(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

#[test]
fn which_source_gives_the_message() {
    let f = Files::new();
    let log = f.write("0.log", &cri_log(&["from the logs".into()]));
    let written = f.write("msg", "from the file");
    let empty = f.write("empty", "");
    let gone = f.missing("gone");
    let (written, empty, gone) = (written.as_path(), empty.as_path(), gone.as_path());
    let fallback = "FallbackToLogsOnError";
    let cases: &[(&str, i32, &str, &Path, &str)] = &[
        (
            "File policy reads the file",
            1,
            "File",
            written,
            "from the file",
        ),
        (
            "a written file wins over the logs",
            2,
            fallback,
            written,
            "from the file",
        ),
        (
            "empty file, failed run: the logs",
            1,
            fallback,
            empty,
            "from the logs\n",
        ),
        (
            "missing file, failed run: the logs",
            1,
            fallback,
            gone,
            "from the logs\n",
        ),
        ("empty file, success: nothing", 0, fallback, empty, ""),
        ("empty file, File policy: nothing", 1, "File", empty, ""),
        ("missing file, File policy: nothing", 1, "File", gone, ""),
    ];
    for (name, code, policy, host, want) in cases {
        let status = exited(*code, policy, "/dev/termination-log", host, &log);
        assert_eq!(message(&status), *want, "{name}");
    }
}

#[test]
fn a_non_default_path_is_found_among_the_mounts() {
    let f = Files::new();
    let log = f.missing("0.log");
    let host = f.write("msg", "custom path");
    let mut status = exited(1, "File", "/tmp/status", &host, &log);
    status.mounts.insert(
        0,
        pb::Mount {
            container_path: "/data".into(),
            host_path: f.write("other", "not this").display().to_string(),
            ..Default::default()
        },
    );
    assert_eq!(message(&status), "custom path");
    // The annotation names the path: a mount elsewhere is not the termination log.
    status.annotations.insert(
        CONTAINER_TERMINATION_MESSAGE_PATH.to_owned(),
        "/elsewhere".into(),
    );
    assert_eq!(message(&status), "");
}

#[test]
fn running_containers_and_containers_that_never_ran_read_no_logs() {
    let f = Files::new();
    let log = f.write("0.log", &cri_log(&["boom".into()]));
    let empty = f.write("empty", "");
    let mut running = exited(
        0,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &log,
    );
    running.state = pb::ContainerState::CONTAINER_RUNNING.into();
    assert_eq!(plan(&running), None);
    assert_eq!(message(&running), "");
    let mut cannot_run = exited(
        128,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &log,
    );
    cannot_run.reason = "ContainerCannotRun".into();
    assert!(!plan(&cannot_run).unwrap().fallback_to_logs);
    assert_eq!(message(&cannot_run), "");
}

#[test]
fn file_messages_keep_the_last_4096_bytes() {
    let f = Files::new();
    let log = f.missing("0.log");
    let long = format!("{}{}", "a".repeat(5000), "z".repeat(96));
    let host = f.write("msg", &long);
    let got = message(&exited(1, "File", "/dev/termination-log", &host, &log));
    assert_eq!(got.len(), MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH);
    assert!(got.ends_with(&"z".repeat(96)), "the tail is kept");
}

#[test]
fn a_character_cut_by_the_limit_is_dropped_not_replaced() {
    let f = Files::new();
    let log = f.missing("0.log");
    // 4096 bytes from the end falls inside the first "é" (2 bytes).
    let long = format!("é{}", "b".repeat(4095));
    let host = f.write("msg", &long);
    let got = message(&exited(1, "File", "/dev/termination-log", &host, &log));
    assert_eq!(got, "b".repeat(4095));
}

#[test]
fn log_fallback_keeps_80_lines_and_2048_bytes() {
    let f = Files::new();
    let empty = f.write("empty", "");
    // 100 short lines: only the last 80 count.
    let lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
    let log = f.write("short.log", &cri_log(&lines));
    let got = message(&exited(
        1,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &log,
    ));
    assert!(got.starts_with("line 20\n"), "{got}");
    assert!(got.ends_with("line 99\n"), "{got}");
    assert_eq!(got.lines().count(), 80);
    // Long lines: the last 2048 bytes of the tail.
    let lines: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(500))).collect();
    let log = f.write("long.log", &cri_log(&lines));
    let got = message(&exited(
        1,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &log,
    ));
    assert_eq!(got.len(), MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH);
    assert!(got.ends_with(&format!("9{}\n", "x".repeat(500))));
}

#[test]
fn an_unreadable_log_is_reported_as_the_message() {
    let f = Files::new();
    let empty = f.write("empty", "");
    let log = f.missing("no.log");
    let got = message(&exited(
        3,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &log,
    ));
    assert!(
        got.starts_with("Error on reading termination message from logs: "),
        "{got}"
    );
}

#[test]
fn the_log_fallback_refuses_a_symlinked_pod_log_folder() {
    let f = Files::new();
    let empty = f.write("empty", "");
    // Outside the pod logs root: a host folder shaped like a pod's logs.
    let outside = f.dir.path().join("host");
    std::fs::create_dir_all(outside.join("app")).unwrap();
    let secret = cri_log(&["host secret".to_owned()]);
    std::fs::write(outside.join("app/0.log"), secret).unwrap();
    // <root>/<ns>_<name>_<uid> is a symlink to it (the container folder below it is
    // a real one, so only the pod folder's check can catch it).
    std::fs::create_dir(f.dir.path().join("pods")).unwrap();
    let pod_dir = f.dir.path().join("pods/ns_web_u1");
    std::os::unix::fs::symlink(&outside, &pod_dir).unwrap();
    let got = message(&exited(
        1,
        "FallbackToLogsOnError",
        "/dev/termination-log",
        &empty,
        &pod_dir.join("app/0.log"),
    ));
    assert!(!got.contains("host secret"), "{got}");
    assert!(
        got.starts_with("Error on reading termination message from logs: "),
        "{got}"
    );
}

#[test]
fn messages_are_appended_to_the_runtime_message() {
    assert_eq!(append("", ""), "");
    assert_eq!(append("OOMKilled", ""), "OOMKilled");
    assert_eq!(append("", "bye"), "bye");
    assert_eq!(append("runtime says", "bye"), "runtime says: bye");
}
