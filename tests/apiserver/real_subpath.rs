//! The subPath symlink-swap escape, attempted for real: a real kube-apiserver, litelet
//! and real containerd + runc. One pod; a restartable init container flips the name
//! `d` in an emptyDir between a directory and a symlink to a host directory holding a
//! marker file, as fast as busybox can; several containers mount `subPath: d` and
//! write what they see to a second emptyDir, which the test reads from the host.
//! A container that sees the marker has the host directory mounted (read-write):
//! a container escape. Skips loudly without the assets or root unless CI=true.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::containerd::BUSYBOX;
use crate::support::real_node::RealNode;
use serde_json::json;

/// The file only the host directory has.
const MARKER: &str = "HOST-MARKER";
/// Containers that mount the swapped name.
const MOUNTERS: usize = 8;
/// How long the attack runs at most.
const ATTACK_TIME: Duration = Duration::from_secs(60);
/// How long it runs at least (litelet before the fix let a container escape within
/// 2 to 13 s of this attack).
const MIN_ATTACK_TIME: Duration = Duration::from_secs(20);
/// Container starts with `d` after which the attack has been tried enough.
const ENOUGH_ATTEMPTS: usize = 32;

/// What became of the starts of the mounting containers.
#[derive(Debug)]
struct Attempts {
    /// Started with `d` mounted (a line in the report volume each).
    mounted: usize,
    /// Refused by litelet: `d` was a symlink out of the volume when checked.
    refused_at_check: usize,
    /// Refused by litelet: a symlink appeared while `d` was being opened.
    refused_at_open: usize,
    /// Failed in the runtime (e.g. the mounted directory was deleted meanwhile).
    runtime_failed: usize,
}

impl Attempts {
    fn count(mounted: usize, log: &str) -> Attempts {
        let count = |what: &str| log.lines().filter(|l| l.contains(what)).count();
        Attempts {
            mounted,
            refused_at_check: count("Error: subPath \"d\" goes through a symlink that leaves"),
            refused_at_open: count("Error: subPath \"d\" changed while it was opened"),
            runtime_failed: count("Failed: Error: cri start_container"),
        }
    }

    fn total(&self) -> usize {
        self.mounted + self.refused_at_check + self.refused_at_open + self.runtime_failed
    }
}

/// Every line the mounting containers wrote to the report volume: `safe <name>` or
/// `escaped <name>`, one per container start.
fn report_lines(report: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(report) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

#[test]
fn a_subpath_flipped_to_a_symlink_never_mounts_a_host_directory() {
    let test = "a_subpath_flipped_to_a_symlink_never_mounts_a_host_directory";
    let Some(node) = RealNode::start(test, "rs-subpath", &[]) else {
        return;
    };
    node.cp.namespace(&node.name);
    node.wait_ready();

    // The host directory the symlink points at, with the marker file.
    let host_dir: PathBuf = node.dir().join("host-secret");
    std::fs::create_dir_all(&host_dir).expect("host dir");
    std::fs::write(host_dir.join(MARKER), "host").expect("marker");
    std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o700))
        .expect("host dir mode");

    // The flipper renames a directory and a symlink onto `d` in turn (a directory
    // cannot replace a symlink in one rename, so `d` is briefly absent between them;
    // litelet may fill that gap with a fresh directory, which the loop then replaces).
    // The directory is only ever renamed, never deleted, so a container that got it
    // mounted starts.
    let flipper = format!(
        "cd /vol; mkdir -p n; ln -sfn {target} l; \
         while :; do mv -T n d; mv -T d n; mv -T l d; mv -T d l; done 2>/dev/null",
        target = host_dir.display()
    );
    let check = format!(
        "trap 'exit 0' TERM; if [ -e /mnt/{MARKER} ]; then echo escaped $NAME >> /report/$NAME; \
         else echo safe $NAME >> /report/$NAME; fi; sleep 1"
    );
    let mounters: Vec<_> = (0..MOUNTERS)
        .map(|i| {
            let name = format!("m{i}");
            json!({
                "name": name,
                "image": BUSYBOX,
                "command": ["sh", "-c", check],
                "env": [{"name": "NAME", "value": name}],
                "volumeMounts": [
                    {"name": "vol", "mountPath": "/mnt", "subPath": "d"},
                    {"name": "report", "mountPath": "/report"}
                ]
            })
        })
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "flip", "namespace": node.name},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "initContainers": [{
                "name": "flipper", "image": BUSYBOX, "restartPolicy": "Always",
                "command": ["sh", "-c", flipper],
                "volumeMounts": [{"name": "vol", "mountPath": "/vol"}]
            }],
            "containers": mounters,
            "volumes": [
                {"name": "vol", "emptyDir": {}},
                {"name": "report", "emptyDir": {}}
            ]
        }
    });
    let created = node
        .cp
        .create(&format!("/api/v1/namespaces/{}/pods", node.name), &pod);
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("the created pod has a UID")
        .to_owned();
    let report = node
        .root()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/report");

    let started = Instant::now();
    let mut polls = 0u32;
    while started.elapsed() < ATTACK_TIME {
        let lines = report_lines(&report);
        let escaped: Vec<&String> = lines.iter().filter(|l| l.starts_with("escaped")).collect();
        assert!(
            escaped.is_empty(),
            "a container saw the host directory through subPath d after {:?}: {escaped:?}",
            started.elapsed()
        );
        // litelet's log is long: read it once a second.
        if polls % 5 == 0 {
            let seen = Attempts::count(lines.len(), &node.log());
            let enough = seen.total() >= ENOUGH_ATTEMPTS && seen.mounted >= MOUNTERS / 2;
            if enough && started.elapsed() >= MIN_ATTACK_TIME {
                break;
            }
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let lines = report_lines(&report);
    assert!(
        lines.iter().all(|l| l.starts_with("safe")),
        "a container saw the host directory through subPath d: {lines:?}"
    );
    let seen = Attempts::count(lines.len(), &node.log());
    eprintln!(
        "{test}: in {:?}, {seen:?}; no container saw the host directory",
        started.elapsed()
    );
    // The attack was really tried: starts went through with `d` mounted, and more
    // were tried while the flipper ran.
    assert!(
        seen.mounted >= MOUNTERS / 2 && seen.total() >= MOUNTERS * 2,
        "too few attempts in {ATTACK_TIME:?} to say anything: {seen:?}\nlitelet log:\n{}",
        node.tail()
    );
    assert!(
        std::fs::read_to_string(host_dir.join(MARKER)).is_ok_and(|m| m == "host"),
        "the host directory's file is intact"
    );
    // Making the missing `d` must not have changed the mode of what `d` pointed at.
    let mode = std::fs::metadata(&host_dir).map(|m| m.permissions().mode() & 0o7777);
    assert_eq!(
        mode.ok(),
        Some(0o700),
        "the host directory's mode is intact"
    );
}
