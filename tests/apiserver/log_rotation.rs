//! Container log rotation end to end (issue 23 item 1): litelet as a node of a real
//! kube-apiserver on a private real containerd, with `--container-log-max-size 1Mi
//! --container-log-max-files 3` and a 3 s `containerLogMonitorInterval`. A container
//! writes 25 MiB in numbered lines; meanwhile its log directory is watched (never more
//! than 3 files, rotations happen and older copies are gzipped) and `kubectl logs -f`
//! follows it across every rotation without losing or repeating a line; afterwards
//! `kubectl logs --tail` still returns the last lines. Skips loudly without the
//! assets or root unless CI=true.
//!
//! Also, on real files in a temp dir with rotation driven through the library: links
//! a pod plants in its log folder (`0.log.<ts> -> a host file`, a raced `<copy>.tmp`
//! name, a symlinked live log or container folder) are never read, written or chmodded
//! through.

use crate::support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::real_node::{busybox_pod, RealNode};

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
    let pod = busybox_pod(ns, "chatty", &node.name, 2, &writer_script());
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

/// A pod's log folder with a file of host secrets beside it and a file to protect, as
/// a pod that can write its log folder (a hostPath on `/var/log`) would plant them.
struct Planted {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    secret: PathBuf,
    victim: PathBuf,
}

const SECRET: &[u8] = b"root:$6$a-host-password-hash:19000:0:99999:7:::\n";
const VICTIM: &[u8] = b"a host file nobody may truncate\n";

fn planted() -> Planted {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("temp dir");
    let host = tmp.path().join("host");
    std::fs::create_dir(&host).expect("host dir");
    let (secret, victim) = (host.join("shadow"), host.join("victim"));
    for (file, body) in [(&secret, SECRET), (&victim, VICTIM)] {
        std::fs::write(file, body).expect("host file");
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let dir = tmp.path().join("pods/ns_p_uid/c");
    std::fs::create_dir_all(&dir).expect("log dir");
    Planted {
        _tmp: tmp,
        dir,
        secret,
        victim,
    }
}

impl Planted {
    /// The host files are as they were: same bytes, same mode.
    fn assert_host_files_untouched(&self) {
        use std::os::unix::fs::PermissionsExt;
        for (file, body) in [(&self.secret, SECRET), (&self.victim, VICTIM)] {
            assert_eq!(std::fs::read(file).expect("host file"), body, "{file:?}");
            let mode = std::fs::metadata(file).expect("stat").permissions().mode();
            assert_eq!(mode & 0o7777, 0o600, "{file:?}");
        }
    }

    /// No regular file in the log folder holds the secret, plain or gzipped.
    fn assert_secret_not_copied(&self) {
        use std::io::Read;
        for entry in std::fs::read_dir(&self.dir).expect("list").flatten() {
            let path = entry.path();
            if !entry.file_type().expect("type").is_file() {
                continue;
            }
            let mut bytes = std::fs::read(&path).expect("read");
            if path.extension().is_some_and(|e| e == "gz") {
                let mut plain = Vec::new();
                let _ = flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut plain);
                bytes = plain;
            }
            let leaked = bytes.windows(SECRET.len()).any(|w| w == SECRET);
            assert!(!leaked, "{path:?} holds the host secret");
        }
    }

    fn live(&self) -> PathBuf {
        self.dir.join("0.log")
    }

    /// Writes a live file over the size limit (as the runtime does after a reopen).
    fn fill_live(&self) {
        let line = "2024-01-01T00:00:00Z stdout F some output of the container\n";
        std::fs::write(self.live(), line.repeat(4)).expect("live log");
    }
}

const POLICY: litelet::logs::RotatePolicy = litelet::logs::RotatePolicy {
    max_size: 100,
    max_files: 4,
};

/// `0.log.<ts> -> /etc/shadow` next to a live log: rotation must neither gzip the
/// secret into the pod's folder nor change it; the live log still rotates.
#[test]
fn planted_rotated_copy_symlinks_are_never_read_nor_changed_by_rotation() {
    use litelet::logs::rotate::{rotate_below, rotate_if_needed, Rotated};
    let p = planted();
    std::os::unix::fs::symlink(&p.secret, p.dir.join("0.log.20240101-000000")).expect("plant");
    std::os::unix::fs::symlink(&p.victim, p.dir.join("0.log.20240101-000001.gz")).expect("plant");
    let reopen = || {
        p.fill_live();
        Ok(())
    };
    let base = 1_800_000_000;
    let mut rotated = 0;
    for round in 0..6 {
        p.fill_live();
        let result = rotate_if_needed(&p.live(), &POLICY, base + round, "c1", &reopen);
        if let Ok(Rotated::Yes { .. }) = result {
            rotated += 1;
        }
        p.assert_host_files_untouched();
        p.assert_secret_not_copied();
    }
    assert!(rotated >= 5, "the live log kept rotating ({rotated} times)");

    // A live log that is itself a link to a host file is not rotated at all.
    std::fs::remove_file(p.live()).expect("remove live");
    std::os::unix::fs::symlink(&p.secret, p.live()).expect("plant live");
    let result = rotate_if_needed(&p.live(), &POLICY, base + 100, "c1", &reopen);
    assert!(
        !matches!(result, Ok(Rotated::Yes { .. })),
        "a symlinked live log was rotated"
    );
    p.assert_host_files_untouched();
    p.assert_secret_not_copied();

    // The pod swaps its container folder for a link to a host folder that holds a
    // `0.log` of its own: the manager's rotation (below the pod logs root) leaves it.
    let host_app = p.secret.with_file_name("app");
    std::fs::create_dir(&host_app).expect("host app dir");
    std::fs::write(host_app.join("0.log"), SECRET.repeat(4)).expect("host log");
    std::fs::rename(&p.dir, p.dir.with_file_name("c-old")).expect("move folder");
    std::os::unix::fs::symlink(&host_app, &p.dir).expect("plant folder");
    let root = p.dir.parent().and_then(Path::parent).expect("pods root");
    let result = rotate_below(root, &p.live(), &POLICY, base + 200, "c1", &reopen);
    assert!(
        !matches!(result, Ok(Rotated::Yes { .. })),
        "a log in a symlinked folder was rotated"
    );
    let names: Vec<_> = std::fs::read_dir(&host_app)
        .expect("list")
        .flatten()
        .collect();
    assert_eq!(names.len(), 1, "the host folder changed: {names:?}");
    p.assert_host_files_untouched();
}

/// While rotation runs, the pod keeps planting `<copy>.tmp -> a host file` for the
/// copy about to be compressed (the race between removing a leftover temp file and
/// creating it): the host file is never truncated or written, and rotation resumes
/// once the pod stops.
#[test]
fn a_symlinked_temp_name_raced_into_rotation_never_truncates_its_target() {
    use litelet::logs::rotate::{rotate_if_needed, Rotated};
    use std::sync::Mutex;
    let p = planted();
    let target: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let planter = {
        let (target, stop, victim) = (target.clone(), stop.clone(), p.victim.clone());
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                let name = target.lock().expect("lock").clone();
                if let Some(name) = name {
                    for _ in 0..200 {
                        let _ = std::os::unix::fs::symlink(&victim, &name);
                    }
                }
            }
        })
    };
    let reopen = || {
        p.fill_live();
        Ok(())
    };
    let base = 1_800_000_000;
    let mut last_rotated: Option<String> = None;
    let (mut rotated, mut refused) = (0, 0);
    let started = std::time::Instant::now();
    for round in 0..150 {
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
        // The copy this round compresses is the one the last rotation made.
        if let Some(copy) = &last_rotated {
            *target.lock().expect("lock") = Some(p.dir.join(format!("{copy}.tmp")));
        }
        if std::fs::metadata(p.live()).map(|m| m.len()).unwrap_or(0) < POLICY.max_size {
            p.fill_live();
        }
        match rotate_if_needed(&p.live(), &POLICY, base + round, "c1", &reopen) {
            Ok(Rotated::Yes { to, .. }) => {
                rotated += 1;
                last_rotated = Some(to);
            }
            Ok(_) => {}
            Err(_) => refused += 1,
        }
        p.assert_host_files_untouched();
    }
    eprintln!("temp-name race: {rotated} rotations, {refused} rounds lost to the planted name");
    stop.store(true, Ordering::Relaxed);
    planter.join().expect("planter");
    p.assert_host_files_untouched();
    // Without the pod racing, rotation goes on (leftover links are removed, not followed).
    let result = rotate_if_needed(&p.live(), &POLICY, base + 1000, "c1", &reopen);
    assert!(
        matches!(result, Ok(Rotated::Yes { .. })),
        "rotation did not resume: {result:?}"
    );
    p.assert_host_files_untouched();
}
