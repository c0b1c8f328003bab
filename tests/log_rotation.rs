//! Container log rotation end to end (issue 23 item 1): litelet as a node of a real
//! kube-apiserver on a private real containerd, with `--container-log-max-size 1Mi
//! --container-log-max-files 3` and a 3 s `containerLogMonitorInterval`. A container
//! writes 25 MiB in numbered lines; meanwhile its log directory is watched (never more
//! than 3 files, rotations happen and older copies are gzipped) and `kubectl logs -f`
//! follows it across every rotation without losing or repeating a line; afterwards
//! `kubectl logs --tail` still returns the last lines. Skips loudly without the
//! assets or root unless CI=true.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::containerd::BUSYBOX;
use support::real_node::RealNode;

/// Lines of about 1 KiB: 25,600 of them are 25 MiB of output.
const LINES: u64 = 25_600;

/// Writes `LINES` numbered lines of ~1 KiB, 640 per second (about 3 rotations'
/// worth per monitor interval would be too fast to test the file count honestly),
/// then `done`, then idles.
fn writer_script() -> String {
    format!(
        "trap 'exit 0' TERM; p=x; for k in 1 2 3 4 5 6 7 8 9 10; do p=$p$p; done; \
         i=0; while [ $i -lt {LINES} ]; do echo \"line-$i $p\"; i=$((i+1)); \
         if [ $((i % 640)) -eq 0 ]; then sleep 1; fi; done; echo done; \
         while true; do sleep 1; done"
    )
}

/// The number in `line-N <padding>`.
fn number(line: &str) -> Option<u64> {
    line.strip_prefix("line-")?.split(' ').next()?.parse().ok()
}

/// Watches `dir` until `stop`: the most files seen at once and every name seen.
fn watch_dir(
    dir: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, BTreeSet<String>)> {
    std::thread::spawn(move || {
        let mut most = 0;
        let mut names = BTreeSet::new();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let now: Vec<String> = entries
                    .flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                most = most.max(now.len());
                names.extend(now);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (most, names)
    })
}

fn container_log_dir(logs: &Path, ns: &str, pod: &str) -> Option<PathBuf> {
    let prefix = format!("{ns}_{pod}_");
    std::fs::read_dir(logs)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join("main"))
}

#[test]
fn chatty_container_log_rotates_within_max_files_and_kubectl_logs_keeps_working() {
    let config = tempfile::tempdir().expect("config dir");
    let config_file = config.path().join("config.yaml");
    std::fs::write(
        &config_file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMonitorInterval: 3s\ncontainerLogMaxWorkers: 2\n",
    )
    .expect("write config");
    let config_arg = config_file.display().to_string();
    let Some(node) = RealNode::start(
        "chatty_container_log_rotates_within_max_files_and_kubectl_logs_keeps_working",
        "rn-logrot",
        &[
            "--config",
            &config_arg,
            "--container-log-max-size",
            "1Mi",
            "--container-log-max-files",
            "3",
        ],
    ) else {
        return;
    };
    let ns = "rn-logrot";
    node.cp.namespace(ns);
    node.wait_ready();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "chatty", "namespace": ns},
        "spec": {
            "nodeName": node.name,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "command": ["sh", "-c", writer_script()],
            }]
        }
    });
    node.cp
        .create(&format!("/api/v1/namespaces/{ns}/pods"), &pod);
    let logs_root = node.dir().join("logs");
    let mut dir = None;
    node.wait_for("the container's log directory", || {
        dir = container_log_dir(&logs_root, ns, "chatty").filter(|d| d.join("0.log").exists());
        dir.is_some()
    });
    let dir = dir.expect("log dir");
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_dir(dir.clone(), stop.clone());

    // The API server refuses logs of a container it still sees waiting (the log file
    // exists from creation on), so follow only once the status says running.
    node.wait_pod(ns, "chatty", "the container running", |p| {
        p["status"]["containerStatuses"][0]["state"]["running"].is_object()
    });
    // Follow from the start: every line once, in order, across every rotation.
    let mut follow = node
        .cp
        .kubectl_command()
        .args(["logs", "-f", "-n", ns, "chatty"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let stdout = follow.stdout.take().expect("stdout");
    let follower = std::thread::spawn(move || {
        let mut numbers = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "done" {
                return (numbers, true);
            }
            if let Some(n) = number(&line) {
                numbers.push(n);
            }
        }
        (numbers, false)
    });
    let done = support::wait_until(Duration::from_secs(180), || follower.is_finished());
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        done,
        "kubectl logs -f did not reach the end\n{}",
        node.tail()
    );
    let (numbers, saw_done) = follower.join().expect("follower");
    assert!(saw_done, "follow ended before `done`\n{}", node.tail());
    let first = numbers.first().copied().unwrap_or(0);
    let gaps: Vec<(u64, u64)> = numbers
        .windows(2)
        .filter(|w| w[1] != w[0] + 1)
        .map(|w| (w[0], w[1]))
        .take(5)
        .collect();
    assert!(
        gaps.is_empty(),
        "lines lost or repeated while following: {gaps:?}"
    );
    assert_eq!(numbers.last().copied(), Some(LINES - 1));
    // kubectl may attach after the first rotation; it still starts early.
    assert!(first < LINES / 4, "follow started at line {first}");

    // Let the final rotation round run, then stop watching.
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let (most, names) = watcher.join().expect("watcher");
    let rotated: Vec<&String> = names.iter().filter(|n| n.starts_with("0.log.")).collect();
    assert!(
        most <= 3,
        "the directory held {most} files at once: {names:?}"
    );
    assert!(
        rotated.len() >= 5,
        "25 MiB at 1 MiB should rotate many times: {names:?}\n{}",
        node.tail()
    );
    assert!(
        rotated.iter().any(|n| n.ends_with(".gz")),
        "older copies are gzipped: {names:?}"
    );
    let total: u64 = std::fs::read_dir(&dir)
        .expect("log dir")
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(total < 6 * 1024 * 1024, "{total} bytes kept on disk");

    eprintln!(
        "log rotation: at most {most} files at once, {} rotated names seen, {total} bytes kept, \
         live file {} bytes",
        rotated.len(),
        std::fs::metadata(dir.join("0.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    );

    // The tail still reads the last lines, whatever the last rotation left live.
    let out = node
        .cp
        .kubectl(&["logs", "--tail", "800", "-n", ns, "chatty"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 800, "tail length");
    assert_eq!(lines.last().copied(), Some("done"));
    let tail: Vec<u64> = lines.iter().filter_map(|l| number(l)).collect();
    let want: Vec<u64> = (LINES - 799..LINES).collect();
    assert_eq!(tail, want, "the last 799 numbered lines");
}
