//! The API server pod source (`sources::apiserver`) against the fake API server over
//! real HTTP: what it sends for pods added, changed and deleted in the store; that it
//! recovers from dropped watches, 410 Gone and 500s without losing or duplicating a
//! pod; that it ignores other nodes' pods and bad objects; and that it ends promptly
//! on shutdown, even while blocked reading an idle watch. Edge autonomy: the pod
//! checkpoint is written, run from provisionally when the first list fails, replaced
//! by the first list that succeeds, and ignored when missing or damaged.

use crate::support;

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::sources::{count, join_within, summary};
use crate::support::wait_until;
use crossbeam_channel::{Receiver, Sender};
use litelet::sources::apiserver::{self, Options};
use litelet::sources::checkpoint::writer::Debounce;
use litelet::sources::checkpoint::CheckpointSpec;
use litelet::sources::{PodOperation, PodUpdate};
use serde_json::json;

const NODE: &str = "node-1";
const LONG: Duration = Duration::from_secs(20);

struct Source {
    updates: Receiver<PodUpdate>,
    shutdown: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
    seen: Vec<PodUpdate>,
}

fn start(fake: &FakeApi) -> Source {
    start_with(fake, None)
}

/// A source that keeps its checkpoint under `root` (quiet period 50 ms).
fn start_with(fake: &FakeApi, root: Option<&std::path::Path>) -> Source {
    let (tx, updates) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let checkpoint = root.map(|root| CheckpointSpec {
        debounce: Debounce {
            quiet: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
        },
        ..CheckpointSpec::new(root, NODE)
    });
    let options = Options {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        checkpoint,
        ..Options::new(NODE)
    };
    let handle = apiserver::spawn_with(fake.client(), options, tx, shutdown_rx).unwrap();
    Source {
        updates,
        shutdown: Some(shutdown),
        handle: Some(handle),
        seen: Vec::new(),
    }
}

impl Source {
    /// Collects updates until `check` holds on everything seen (or fails after LONG).
    fn wait(&mut self, what: &str, check: impl Fn(&[PodUpdate]) -> bool) {
        let ok = wait_until(LONG, || {
            while let Ok(u) = self.updates.try_recv() {
                self.seen.push(u);
            }
            check(&self.seen)
        });
        assert!(
            ok,
            "timed out waiting for {what}; seen: {:#?}",
            summary(&self.seen)
        );
    }

    /// Stops the source and joins it, failing if it does not end within LONG.
    fn stop(&mut self) {
        drop(self.shutdown.take());
        let handle = self.handle.take().unwrap();
        assert_eq!(join_within(handle, LONG), Ok(true), "api-watch did not end");
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        drop(self.shutdown.take());
    }
}

fn has(updates: &[PodUpdate], op: PodOperation, name: &str) -> bool {
    count(updates, op).get(name).copied().unwrap_or(0) > 0
}

/// Adds per UID, to catch a pod sent twice.
fn adds_per_uid(updates: &[PodUpdate]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for u in updates.iter().filter(|u| u.op == PodOperation::Add) {
        for p in &u.pods {
            *n.entry(p.uid().to_owned()).or_default() += 1;
        }
    }
    n
}

#[test]
fn sees_pods_added_updated_and_deleted() {
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    fake.create_pod("default", "other-node", "node-2");
    let mut src = start(&fake);
    src.wait("initial add", |s| has(s, PodOperation::Add, "a"));
    let first = &src.seen[0];
    assert_eq!(first.op, PodOperation::Add);
    assert_eq!(first.source, "api");
    assert_eq!(first.pods[0].config_source(), Some("api"));
    assert!(first.pods[0]
        .metadata
        .annotation("kubernetes.io/config.seen")
        .is_some());
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    fake.create_pod("default", "b", NODE);
    src.wait("add b", |s| has(s, PodOperation::Add, "b"));

    fake.modify("pods", "default", "a", |p| {
        p["metadata"]["labels"]["tier"] = "front".into();
    });
    src.wait("update a", |s| has(s, PodOperation::Update, "a"));

    fake.modify("pods", "default", "a", |p| {
        p["status"]["phase"] = "Running".into();
    });
    src.wait("reconcile a", |s| has(s, PodOperation::Reconcile, "a"));

    fake.delete("pods", "default", "a", Some(30)).unwrap();
    src.wait("graceful delete of a", |s| {
        has(s, PodOperation::Delete, "a")
    });
    let deleting = src
        .seen
        .iter()
        .find(|u| u.op == PodOperation::Delete)
        .unwrap();
    assert!(deleting.pods[0].deletion_requested());

    fake.remove("pods", "default", "a");
    src.wait("remove a", |s| has(s, PodOperation::Remove, "a"));

    // A pod scheduled later (bound by a MODIFIED event) arrives as an Add.
    fake.create_pod("default", "late", "");
    fake.modify("pods", "default", "late", |p| {
        p["spec"]["nodeName"] = NODE.into();
    });
    src.wait("add of a pod bound later", |s| {
        has(s, PodOperation::Add, "late")
    });

    // Nothing about the other node's pod, and nothing twice.
    let all: Vec<String> = src
        .seen
        .iter()
        .flat_map(|u| u.pods.iter().map(|p| p.name().to_owned()))
        .collect();
    assert!(!all.iter().any(|n| n == "other-node"), "{all:?}");
    assert!(adds_per_uid(&src.seen).values().all(|&n| n == 1));

    // The requests: one list and one watch, both limited to this node.
    let reqs = fake.requests();
    let list = reqs.iter().find(|r| r.verb == "list").unwrap();
    assert_eq!(list.path, "/api/v1/pods");
    assert!(
        list.query.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{}",
        list.query
    );
    let watch = reqs.iter().find(|r| r.verb == "watch").unwrap();
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
    assert!(
        watch.query.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{}",
        watch.query
    );
    let timeout: u64 = watch
        .query
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
        .unwrap()
        .parse()
        .unwrap();
    assert!((300..=600).contains(&timeout), "{timeout}");
    assert_eq!(fake.count_verb("list"), 1);
    src.stop();
}

#[test]
fn works_over_https_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = FakeApi::start_tls(dir.path(), NODE) else {
        eprintln!("skipped: no openssl command to make certificates");
        return;
    };
    fake.create_pod("default", "a", NODE);
    let mut src = start(&fake);
    src.wait("add of a", |s| has(s, PodOperation::Add, "a"));
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    fake.create_pod("default", "b", NODE);
    src.wait("add of b", |s| has(s, PodOperation::Add, "b"));
    assert!(fake.requests().iter().all(|r| r.client_cert));
    src.stop();
}

#[test]
fn empty_node_still_says_ready() {
    let fake = FakeApi::start();
    let mut src = start(&fake);
    src.wait("ready signal", |s| !s.is_empty());
    assert_eq!(summary(&src.seen), vec![(PodOperation::Add, vec![])]);
    src.stop();
}

#[test]
fn recovers_after_a_dropped_watch_without_losing_or_repeating_pods() {
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    let mut src = start(&fake);
    src.wait("initial add", |s| has(s, PodOperation::Add, "a"));
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    // Keep it disconnected while pods come and go.
    fake.inject(Fail::status(503).always().verb("watch"));
    assert_eq!(fake.drop_watches(), 1);
    fake.create_pod("default", "b", NODE);
    fake.create_pod("default", "c", NODE);
    fake.modify("pods", "default", "a", |p| {
        p["metadata"]["labels"]["v"] = "2".into();
    });
    assert!(wait_until(LONG, || fake.count_verb("watch") >= 3));
    fake.clear_faults();

    src.wait("adds of b and c and update of a", |s| {
        has(s, PodOperation::Add, "b")
            && has(s, PodOperation::Add, "c")
            && has(s, PodOperation::Update, "a")
    });
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    // Watched again from the last version: no relist, every pod added once.
    assert_eq!(fake.count_verb("list"), 1);
    let adds = adds_per_uid(&src.seen);
    assert_eq!(adds.len(), 3);
    assert!(adds.values().all(|&n| n == 1), "{adds:?}");
    src.stop();
}

#[test]
fn relists_after_410_and_removes_what_went_away() {
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    fake.create_pod("default", "b", NODE);
    let mut src = start(&fake);
    src.wait("initial adds", |s| {
        has(s, PodOperation::Add, "a") && has(s, PodOperation::Add, "b")
    });
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    fake.inject(Fail::status(503).always().verb("watch"));
    fake.drop_watches();
    fake.remove("pods", "default", "b");
    fake.create_pod("default", "c", NODE);
    // The history no longer reaches back to the source's version.
    fake.compact();
    assert!(wait_until(LONG, || fake.count_verb("watch") >= 3));
    fake.clear_faults();

    src.wait("remove of b and add of c", |s| {
        has(s, PodOperation::Remove, "b") && has(s, PodOperation::Add, "c")
    });
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    assert_eq!(fake.count_verb("list"), 2, "one relist after the 410");
    assert_eq!(count(&src.seen, PodOperation::Remove).get("b"), Some(&1));
    let adds = adds_per_uid(&src.seen);
    assert!(adds.values().all(|&n| n == 1), "{adds:?}");
    assert_eq!(adds.len(), 3);

    // And it keeps working afterwards.
    fake.create_pod("default", "d", NODE);
    src.wait("add of d", |s| has(s, PodOperation::Add, "d"));
    src.stop();
}

#[test]
fn bookmarks_keep_the_version_fresh() {
    let fake = FakeApi::start();
    fake.set_bookmark_interval(Duration::from_millis(50));
    let mut src = start(&fake);
    src.wait("ready", |s| !s.is_empty());
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    // Writes the watch does not show (another node's pods) move the version on.
    for i in 0..3 {
        fake.create_pod("default", &format!("elsewhere-{i}"), "node-2");
    }
    fake.compact();
    let floor = fake.resource_version();
    let before = fake.bookmarks_sent();
    assert!(wait_until(LONG, || fake.bookmarks_sent() >= before + 3));

    // Reconnecting from the bookmarked version needs no relist.
    fake.drop_watches();
    assert!(wait_until(LONG, || fake.count_verb("watch") >= 2
        && fake.open_watches() == 1));
    assert_eq!(fake.count_verb("list"), 1);
    let rewatch = fake
        .requests()
        .into_iter()
        .filter(|r| r.verb == "watch")
        .nth(1)
        .unwrap();
    let rv: u64 = rewatch
        .query
        .split('&')
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rv >= floor,
        "re-watched from {rv}, history starts at {floor}"
    );
    src.stop();
}

#[test]
fn survives_500s_with_backoff() {
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    fake.inject(Fail::status(500).always().verb("list"));
    let mut src = start(&fake);
    // Several rounds of (client retries + source backoff) go by without a send.
    assert!(wait_until(LONG, || fake.count_verb("list") >= 12));
    assert!(src.updates.try_recv().is_err());
    fake.clear_faults();
    src.wait("add after recovery", |s| has(s, PodOperation::Add, "a"));
    let lists = fake.count_verb("list");

    // Failing watches are retried too, from the same version (no relist).
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    fake.inject(Fail::status(500).times(7).verb("watch"));
    fake.drop_watches();
    fake.create_pod("default", "b", NODE);
    src.wait("add of b after failing watches", |s| {
        has(s, PodOperation::Add, "b")
    });
    assert_eq!(fake.count_verb("list"), lists);
    assert!(adds_per_uid(&src.seen).values().all(|&n| n == 1));
    src.stop();
}

#[test]
fn bad_objects_are_skipped() {
    let fake = FakeApi::start();
    fake.create_pod("default", "good", NODE);
    let mut bad = support::fake_api::pod_json("default", "bad", NODE);
    bad["spec"]["containers"] = json!("not a list");
    fake.create("pods", "default", bad.clone());
    let mut src = start(&fake);
    src.wait("good pod", |s| has(s, PodOperation::Add, "good"));
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    bad["metadata"]["name"] = "bad-2".into();
    fake.create("pods", "default", bad);
    fake.create_pod("default", "after", NODE);
    src.wait("pod after the bad one", |s| {
        has(s, PodOperation::Add, "after")
    });
    assert!(!src
        .seen
        .iter()
        .any(|u| u.pods.iter().any(|p| p.name().starts_with("bad"))));
    src.stop();
}

#[test]
fn ends_on_shutdown_while_blocked_on_an_idle_watch() {
    let fake = FakeApi::start();
    // No bookmarks for an hour: the watch read is truly blocked.
    fake.set_bookmark_interval(Duration::from_secs(3600));
    let mut src = start(&fake);
    src.wait("ready", |s| !s.is_empty());
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    src.stop();
}

#[test]
fn ends_on_shutdown_while_backing_off() {
    let fake = FakeApi::start();
    fake.inject(Fail::status(500).always());
    let (tx, updates) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    // Long backoff: the thread is asleep in it when shutdown comes.
    let options = Options {
        backoff_initial: Duration::from_secs(600),
        backoff_max: Duration::from_secs(600),
        ..Options::new(NODE)
    };
    let handle = apiserver::spawn_with(fake.client(), options, tx, shutdown_rx).unwrap();
    assert!(wait_until(LONG, || fake.count_verb("list") >= 5));
    let mut src = Source {
        updates,
        shutdown: Some(shutdown),
        handle: Some(handle),
        seen: Vec::new(),
    };
    src.stop();
}

#[test]
fn ends_when_the_sync_loop_is_gone() {
    let fake = FakeApi::start();
    let (tx, updates) = crossbeam_channel::unbounded();
    let (_shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    let handle = apiserver::spawn_with(fake.client(), Options::new(NODE), tx, shutdown_rx).unwrap();
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    drop(updates);
    fake.create_pod("default", "a", NODE);
    assert_eq!(join_within(handle, LONG), Ok(true));
}

fn checkpoint_file(root: &std::path::Path) -> std::path::PathBuf {
    root.join("checkpoints").join("api-pods")
}

#[test]
fn checkpoint_pods_are_provisional_until_the_first_list_replaces_them() {
    let root = tempfile::tempdir().unwrap();
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    fake.create_pod("default", "b", NODE);
    let mut src = start_with(&fake, Some(root.path()));
    src.wait("both listed", |s| has(s, PodOperation::Add, "b"));
    assert!(src.seen.iter().all(|u| !u.provisional));
    let file = checkpoint_file(root.path());
    assert!(wait_until(LONG, || std::fs::read_to_string(&file)
        .is_ok_and(|t| t.contains("\"a\"") && t.contains("\"b\""))));
    src.stop();

    // While litelet is down, b is deleted for good and c is bound here; then the
    // API server is unreachable when the source starts again.
    fake.remove("pods", "default", "b");
    fake.create_pod("default", "c", NODE);
    fake.inject(Fail::status(500).always().verb("list"));
    let mut src = start_with(&fake, Some(root.path()));
    src.wait("the checkpoint's pods", |s| has(s, PodOperation::Add, "b"));
    assert!(has(&src.seen, PodOperation::Add, "a"));
    assert!(!has(&src.seen, PodOperation::Add, "c"));
    assert!(
        src.seen.iter().all(|u| u.provisional),
        "{:?}",
        summary(&src.seen)
    );
    // The checkpoint is left as it was while nothing was listed.
    std::thread::sleep(Duration::from_millis(300));
    assert!(std::fs::read_to_string(&file).unwrap().contains("\"b\""));

    fake.clear_faults();
    let provisional = src.seen.len();
    src.wait("the first list's diff", |s| {
        has(s, PodOperation::Remove, "b") && has(s, PodOperation::Add, "c")
    });
    src.wait("the non-provisional signal", |s| {
        s[provisional..]
            .iter()
            .any(|u| !u.provisional && u.op == PodOperation::Add && u.pods.is_empty())
    });
    let after = &src.seen[provisional..];
    assert!(after.iter().all(|u| !u.provisional));
    assert!(!has(after, PodOperation::Add, "a"), "a is not sent twice");
    assert!(adds_per_uid(&src.seen).values().all(|&n| n == 1));
    assert!(wait_until(LONG, || std::fs::read_to_string(&file)
        .is_ok_and(|t| !t.contains("\"b\"") && t.contains("\"c\""))));
    src.stop();
}

#[test]
fn a_missing_or_corrupt_checkpoint_is_ignored() {
    for content in [
        None,
        Some(&b"litelet-api-pods v1 0000\n{not json"[..]),
        Some(b"\0\0\0"),
    ] {
        let root = tempfile::tempdir().unwrap();
        if let Some(bytes) = content {
            std::fs::create_dir_all(root.path().join("checkpoints")).unwrap();
            std::fs::write(checkpoint_file(root.path()), bytes).unwrap();
        }
        let fake = FakeApi::start();
        fake.create_pod("default", "a", NODE);
        fake.inject(Fail::status(500).always().verb("list"));
        let mut src = start_with(&fake, Some(root.path()));
        assert!(wait_until(LONG, || fake.count_verb("list") >= 8));
        assert!(
            src.updates.try_recv().is_err(),
            "nothing sent from {content:?}"
        );
        fake.clear_faults();
        src.wait("the list after recovery", |s| {
            has(s, PodOperation::Add, "a")
        });
        assert!(src.seen.iter().all(|u| !u.provisional));
        // The first list rewrites the checkpoint whole.
        assert!(wait_until(LONG, || std::fs::read(checkpoint_file(
            root.path()
        ))
        .is_ok_and(|t| t.starts_with(b"litelet-api-pods v1 "))));
        src.stop();
    }
}

/// Catching up after an outage: the source does not wait out a back-off grown
/// during it. The first answer the API server gives any request of the client (here
/// the test's own GET through a clone) makes it list again at once.
#[test]
fn the_api_servers_return_ends_a_long_back_off_at_once() {
    let fake = FakeApi::start();
    fake.create_pod("default", "a", NODE);
    fake.inject(Fail::status(503).always().verb("list"));
    let client = fake.client();
    let (tx, updates) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    let options = Options {
        backoff_initial: Duration::from_secs(600),
        backoff_max: Duration::from_secs(600),
        ..Options::new(NODE)
    };
    let handle = apiserver::spawn_with(client.clone(), options, tx, shutdown_rx).unwrap();
    let mut src = Source {
        updates,
        shutdown: Some(shutdown),
        handle: Some(handle),
        seen: Vec::new(),
    };
    // The first list and the client's 4 retries failed: the source sleeps 10 minutes.
    assert!(wait_until(LONG, || fake.count_verb("list") >= 5));
    fake.clear_faults();
    let pod: Result<serde_json::Value, _> = client.get(&litelet::api::paths::pod("default", "a"));
    assert!(pod.is_ok(), "{pod:?}");
    src.wait("the pods, listed at once", |s| {
        has(s, PodOperation::Add, "a")
    });
    src.stop();
}
