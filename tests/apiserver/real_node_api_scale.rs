//! The node API at cluster scale, through a real kube-apiserver (v1.33+,
//! `KUBEBUILDER_ASSETS`): what `stern` or a log shipper does to a busy node. 120
//! `kubectl logs -f` at once each reach litelet as one connection from the
//! apiserver's kubelet client certificate; every one of them must keep streaming new
//! lines while `kubectl exec` and a metrics scrape still answer, and litelet's
//! threads must come back down once the followers hang up. Skips loudly without the
//! assets or root unless CI=true.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use crate::support::real_node::{busybox_pod, RealNode, WAIT};
use crate::support::wait_until;
use serde_json::Value;

const FOLLOWERS: usize = 120;

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// `Threads:` of `/proc/<pid>/status`.
fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One `kubectl logs -f`, its lines' numbers collected by a reader thread.
struct Follower {
    child: Child,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Follower {
    fn start(node: &RealNode, ns: &str, pod: &str) -> Follower {
        let mut child = node
            .cp
            .kubectl_command()
            .args(["logs", "-f", "--tail=1", "-n", ns, pod])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl logs -f");
        let out = child.stdout.take().expect("stdout");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("line-").and_then(|n| n.parse().ok()) {
                    sink.lock().expect("lines").push(n);
                }
            }
        });
        Follower { child, seen }
    }

    /// The highest line number it received.
    fn last(&self) -> Option<u64> {
        self.seen.lock().expect("lines").iter().copied().max()
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_hundred_and_twenty_log_followers_all_stream_while_exec_and_scrapes_answer() {
    let test = "a_hundred_and_twenty_log_followers_all_stream_while_exec_and_scrapes_answer";
    let Some(node) = RealNode::start(test, "rn-scale", &[]) else {
        return;
    };
    let ns = "rn-scale";
    node.cp.namespace(ns);
    node.wait_ready();
    let script =
        "trap 'exit 0' TERM; i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.5; done";
    node.cp.create(
        &format!("/api/v1/namespaces/{ns}/pods"),
        &busybox_pod(ns, "talker", &node.name, 2, script),
    );
    node.wait_pod(ns, "talker", "Running", |p| phase(p) == "Running");
    let pid = node.pid().expect("litelet runs");
    let idle_threads = threads(pid);

    let mut followers: Vec<Follower> = (0..FOLLOWERS)
        .map(|_| Follower::start(&node, ns, "talker"))
        .collect();
    // Every follower is connected once it has received a line; from then on each
    // must keep receiving new ones.
    let connected = wait_until(WAIT, || followers.iter().all(|f| f.last().is_some()));
    let streaming = followers.iter().filter(|f| f.last().is_some()).count();
    assert!(
        connected,
        "{streaming} of {FOLLOWERS} followers received a line; litelet log:\n{}\nDEBUG {:?}",
        node.tail(),
        node.log()
            .lines()
            .filter(|l| l.contains("node server"))
            .map(|l| l
                .split("node server")
                .nth(1)
                .unwrap_or("")
                .chars()
                .take(60)
                .collect::<String>())
            .fold(
                std::collections::BTreeMap::<String, usize>::new(),
                |mut m, l| {
                    *m.entry(l).or_default() += 1;
                    m
                }
            )
    );
    let started: Vec<u64> = followers.iter().map(|f| f.last().unwrap_or(0)).collect();
    node.wait_for("every follower received new lines", || {
        followers
            .iter()
            .zip(&started)
            .all(|(f, first)| f.last().is_some_and(|n| n >= first + 4))
    });
    let ended = followers
        .iter_mut()
        .map(Follower::exited)
        .filter(|e| *e)
        .count();
    assert_eq!(ended, 0, "followers that got EOF:\n{}", node.tail());

    // With all of them held, exec and a scrape still answer.
    let exec = node
        .cp
        .kubectl(&["exec", "-n", ns, "talker", "--", "echo", "still-answering"]);
    assert_eq!(
        String::from_utf8_lossy(&exec.stdout),
        "still-answering\n",
        "kubectl exec: {}\n{}",
        String::from_utf8_lossy(&exec.stderr),
        node.tail()
    );
    let scrape = node.cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", node.name),
    ]);
    assert!(
        String::from_utf8_lossy(&scrape.stdout).contains("kubelet_running_pods"),
        "scrape: {}\n{}",
        String::from_utf8_lossy(&scrape.stderr),
        node.tail()
    );
    let held = threads(pid);
    assert!(
        held >= idle_threads + FOLLOWERS,
        "a thread per held stream: {held} threads, {idle_threads} idle"
    );

    // The followers hang up: their connection threads end.
    drop(followers);
    let mut now = held;
    let back = wait_until(WAIT, || {
        now = threads(pid);
        now <= idle_threads + 8
    });
    assert!(
        back,
        "litelet still has {now} threads ({idle_threads} before the followers)"
    );
    eprintln!(
        "litelet threads: {idle_threads} idle, {held} with {FOLLOWERS} followers, {now} after"
    );
}
