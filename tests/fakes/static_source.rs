//! The static pod source (`sources::file`) as a real thread on a real folder: what it
//! sends when manifests are added, changed, renamed into place and deleted; that a
//! malformed file is skipped while the others keep running and fixing it starts its
//! pod; duplicate pod names; a folder created (and removed) after start; the periodic
//! resync; and that it ends promptly on shutdown or when the sync loop is gone.
//!
//! Absence ("no Remove was sent") is checked with a marker: after the change under
//! test, another manifest is written and its Add awaited; every read covers the
//! whole folder, so by then the change has been read too.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::support::sources::{count, join_within, summary};
use crate::support::wait_until;
use crossbeam_channel::{Receiver, Sender};
use litelet::sources::file::{self, Options};
use litelet::sources::{PodOperation, PodUpdate};

const NODE: &str = "node-1";
const LONG: Duration = Duration::from_secs(20);

/// Options where only inotify (not the resync) can explain a prompt update.
fn inotify_only() -> Options {
    Options {
        resync: Duration::from_secs(3600),
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        debounce: Duration::from_millis(20),
    }
}

struct Source {
    updates: Option<Receiver<PodUpdate>>,
    shutdown: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
    seen: Vec<PodUpdate>,
}

fn start(dir: &Path, options: Options) -> Source {
    let (tx, updates) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let handle =
        file::spawn_with(dir.to_owned(), NODE.to_owned(), options, tx, shutdown_rx).unwrap();
    Source {
        updates: Some(updates),
        shutdown: Some(shutdown),
        handle: Some(handle),
        seen: Vec::new(),
    }
}

impl Source {
    /// Collects updates until `check` holds on everything seen (or fails after LONG).
    fn wait(&mut self, what: &str, check: impl Fn(&[PodUpdate]) -> bool) {
        let updates = self.updates.as_ref().unwrap();
        let seen = &mut self.seen;
        let ok = wait_until(LONG, || {
            while let Ok(u) = updates.try_recv() {
                seen.push(u);
            }
            check(seen)
        });
        assert!(
            ok,
            "timed out waiting for {what}; seen: {:#?}",
            summary(&self.seen)
        );
    }

    /// Waits for an Add of `name` (the pod name before the node suffix).
    fn wait_add(&mut self, name: &str) {
        let full = pod_name(name);
        self.wait(&format!("add of {full}"), |s| {
            count(s, PodOperation::Add).contains_key(&full)
        });
    }

    fn count(&self, op: PodOperation, name: &str) -> usize {
        count(&self.seen, op)
            .get(&pod_name(name))
            .copied()
            .unwrap_or(0)
    }

    /// The UID of the last Add of `name`.
    fn uid(&self, name: &str) -> String {
        let full = pod_name(name);
        self.seen
            .iter()
            .filter(|u| u.op == PodOperation::Add)
            .flat_map(|u| &u.pods)
            .filter(|p| p.name() == full)
            .map(|p| p.uid().to_owned())
            .next_back()
            .unwrap_or_else(|| panic!("no add of {full}"))
    }

    /// Stops the source and joins it, failing if it does not end within LONG.
    fn stop(&mut self) {
        drop(self.shutdown.take());
        assert_ends(self.handle.take().unwrap());
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        drop(self.shutdown.take());
    }
}

/// Fails unless the source's thread ends within LONG.
fn assert_ends(handle: JoinHandle<()>) {
    assert_eq!(
        join_within(handle, LONG),
        Ok(true),
        "static-pods did not end"
    );
}

fn pod_name(name: &str) -> String {
    format!("{name}-{NODE}")
}

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let path = dir.join(file);
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn first_snapshot_is_sent_even_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = start(dir.path(), inotify_only());
    src.wait("the empty ready signal", |s| {
        matches!(s, [u] if u.op == PodOperation::Add && u.pods.is_empty() && u.source == "file")
    });
    src.stop();
}

#[test]
fn add_modify_delete() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "web.yaml", &manifest("web", "nginx:1"));
    let mut src = start(d, inotify_only());
    src.wait_add("web");
    let first = src.uid("web");
    let pod = &src.seen[0].pods[0];
    assert_eq!(
        pod.metadata.annotation("kubernetes.io/config.source"),
        Some("file")
    );
    assert_eq!(
        pod.metadata.annotation("kubernetes.io/config.hash"),
        Some(first.as_str())
    );
    assert!(pod
        .metadata
        .annotation("kubernetes.io/config.seen")
        .is_some());

    // New content is a new pod (new UID), as upstream: the old one is removed.
    write(d, "web.yaml", &manifest("web", "nginx:2"));
    src.wait("remove of the old web", |s| {
        count(s, PodOperation::Remove).contains_key(&pod_name("web"))
    });
    src.wait("add of the new web", |s| {
        count(s, PodOperation::Add)[&pod_name("web")] == 2
    });
    let second = src.uid("web");
    assert_ne!(first, second);
    let removed = src
        .seen
        .iter()
        .find(|u| u.op == PodOperation::Remove)
        .unwrap();
    assert_eq!(removed.pods[0].uid(), first);

    src.wait("nothing else", |s| s.len() == 3);
    fs::remove_file(d.join("web.yaml")).unwrap();
    src.wait("remove of the new web", |s| {
        count(s, PodOperation::Remove)[&pod_name("web")] == 2
    });
    let last = src.seen.last().unwrap();
    assert_eq!(
        (last.op, last.pods[0].uid()),
        (PodOperation::Remove, second.as_str())
    );
    src.stop();
}

#[test]
fn modify_with_a_fixed_uid_is_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pinned = |image: &str| {
        manifest("web", image).replace("  name: web\n", "  name: web\n  uid: pinned-uid\n")
    };
    write(d, "web.yaml", &pinned("nginx:1"));
    let mut src = start(d, inotify_only());
    src.wait_add("web");
    write(d, "web.yaml", &pinned("nginx:2"));
    src.wait("update of web", |s| {
        count(s, PodOperation::Update).contains_key(&pod_name("web"))
    });
    let update = src
        .seen
        .iter()
        .find(|u| u.op == PodOperation::Update)
        .unwrap();
    assert_eq!(update.pods[0].uid(), "pinned-uid");
    assert_eq!(
        update.pods[0].spec.containers[0].image.as_deref(),
        Some("nginx:2")
    );
    assert_eq!(src.count(PodOperation::Remove, "web"), 0);
    src.stop();
}

#[test]
fn malformed_file_is_skipped_and_fixing_it_adds_the_pod() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "good.yaml", &manifest("good", "nginx:1"));
    write(
        d,
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c}]}\n",
    );
    write(d, "ugly.yaml", "kind: [unclosed\n");
    let mut src = start(d, inotify_only());
    src.wait_add("good");
    assert_eq!(
        summary(&src.seen),
        [(PodOperation::Add, vec![pod_name("good")])]
    );

    write(d, "bad.yaml", &manifest("bad", "busybox:1"));
    src.wait_add("bad");
    write(d, "marker.yaml", &manifest("marker", "busybox:1"));
    src.wait_add("marker");
    assert_eq!(
        src.count(PodOperation::Remove, "good"),
        0,
        "{:?}",
        summary(&src.seen)
    );
    assert_eq!(src.count(PodOperation::Add, "good"), 1);
    src.stop();
}

/// A field litelet does not model (here a made-up one in the spec and in a container)
/// does not stop the pod, as upstream's non-strict decoding; a known field of the
/// wrong type still does.
#[test]
fn unknown_fields_do_not_stop_the_pod_but_a_wrongly_typed_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "future.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: future}\nspec:\n  someFutureField: true\n  containers:\n  - {name: c, image: nginx:1, notAField: {a: 1}}\n",
    );
    write(
        d,
        "typed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: typed}\nspec:\n  containers:\n  - {name: c, image: nginx:1, ports: [{containerPort: eighty}]}\n",
    );
    let mut src = start(d, inotify_only());
    src.wait_add("future");
    write(d, "marker.yaml", &manifest("marker", "busybox:1"));
    src.wait_add("marker");
    assert_eq!(
        src.count(PodOperation::Add, "typed"),
        0,
        "{:?}",
        summary(&src.seen)
    );
    src.stop();
}

#[test]
fn a_file_that_turns_bad_keeps_its_pod_until_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "web.yaml", &manifest("web", "nginx:1"));
    let mut src = start(d, inotify_only());
    src.wait_add("web");
    write(d, "web.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: x, resources: {limits: {cpu: lots}}}]}\n");
    write(d, "marker.yaml", &manifest("marker", "busybox:1"));
    src.wait_add("marker");
    assert_eq!(
        src.count(PodOperation::Remove, "web"),
        0,
        "{:?}",
        summary(&src.seen)
    );

    fs::remove_file(d.join("web.yaml")).unwrap();
    src.wait("remove of web", |s| {
        count(s, PodOperation::Remove).contains_key(&pod_name("web"))
    });
    src.stop();
}

#[test]
fn duplicate_pod_names_keep_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "a.yaml", &manifest("web", "nginx:a"));
    write(d, "b.yaml", &manifest("web", "nginx:b"));
    let mut src = start(d, inotify_only());
    src.wait_add("web");
    let add = &src.seen[0];
    assert_eq!(add.pods.len(), 1, "{:?}", summary(&src.seen));
    assert_eq!(
        add.pods[0].spec.containers[0].image.as_deref(),
        Some("nginx:a")
    );

    // The first file goes away: the second one's pod takes over.
    fs::remove_file(d.join("a.yaml")).unwrap();
    src.wait("b's web", |s| {
        s.iter().any(|u| {
            u.op == PodOperation::Add
                && u.pods
                    .iter()
                    .any(|p| p.spec.containers[0].image.as_deref() == Some("nginx:b"))
        })
    });
    assert_eq!(src.count(PodOperation::Remove, "web"), 1);
    src.stop();
}

#[test]
fn hidden_files_and_atomic_saves() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut src = start(d, inotify_only());
    src.wait("ready", |s| !s.is_empty());
    write(d, ".hidden.yaml", &manifest("hidden", "nginx:1"));
    // An editor's save: write a hidden temporary file, then rename it into place.
    let tmp = write(d, ".web.yaml.tmp", &manifest("web", "nginx:1"));
    fs::rename(&tmp, d.join("web.yaml")).unwrap();
    src.wait_add("web");
    write(d, "marker.yaml", &manifest("marker", "busybox:1"));
    src.wait_add("marker");
    assert_eq!(src.count(PodOperation::Add, "hidden"), 0);
    src.stop();
}

#[test]
fn folder_created_after_start_then_removed() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("manifests");
    let mut src = start(&d, inotify_only());
    src.wait(
        "the empty ready signal",
        |s| matches!(s, [u] if u.op == PodOperation::Add && u.pods.is_empty()),
    );

    fs::create_dir(&d).unwrap();
    write(&d, "web.yaml", &manifest("web", "nginx:1"));
    src.wait_add("web");

    fs::remove_dir_all(&d).unwrap();
    src.wait("remove of web", |s| {
        count(s, PodOperation::Remove).contains_key(&pod_name("web"))
    });

    fs::create_dir(&d).unwrap();
    write(&d, "db.yaml", &manifest("db", "postgres:16"));
    src.wait_add("db");
    src.stop();
}

#[test]
fn periodic_resync_sees_what_inotify_cannot() {
    // The manifest is a link to a file outside the folder: editing the target makes
    // no event in the folder, so only the resync can see it.
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = write(outside.path(), "web.yaml", &manifest("web", "nginx:1"));
    std::os::unix::fs::symlink(&target, dir.path().join("web.yaml")).unwrap();
    let options = Options {
        resync: Duration::from_millis(100),
        ..inotify_only()
    };
    let mut src = start(dir.path(), options);
    src.wait_add("web");
    fs::write(&target, manifest("web", "nginx:2")).unwrap();
    src.wait("the new web", |s| {
        count(s, PodOperation::Add)[&pod_name("web")] == 2
    });
    assert_eq!(src.count(PodOperation::Remove, "web"), 1);
    src.stop();
}

#[test]
fn shutdown_ends_the_thread_promptly() {
    // Production options: the thread sleeps in poll for up to 20 s; shutdown must not
    // wait for that.
    let dir = tempfile::tempdir().unwrap();
    let mut src = start(dir.path(), Options::default());
    src.wait("ready", |s| !s.is_empty());
    src.stop();

    // Also while the folder is missing (retry backoff) and by disconnection only.
    let root = tempfile::tempdir().unwrap();
    let (tx, updates) = crossbeam_channel::unbounded();
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
    let handle = file::spawn(root.path().join("missing"), NODE.into(), tx, shutdown_rx).unwrap();
    assert!(updates.recv_timeout(LONG).is_ok());
    shutdown.send(()).unwrap();
    assert_ends(handle);
}

#[test]
fn ends_when_the_sync_loop_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut src = start(d, inotify_only());
    src.wait("ready", |s| !s.is_empty());
    drop(src.updates.take());
    // The next change has nowhere to go: the thread ends.
    write(d, "web.yaml", &manifest("web", "nginx:1"));
    assert_ends(src.handle.take().unwrap());
}
