//! The `static-pods` thread: watches `--pod-manifest-path` with inotify, re-reads it
//! on change (after a short debounce) and every `resync`, and sends the difference to
//! the sync loop (upstream `file_linux.go` + `file.go`'s `run`).
//!
//! One loop, one `poll(2)` over two descriptors: the inotify instance (when a watch is
//! set up) and the read end of a socket pair whose other end the `static-stop` helper
//! holds; the helper waits on the `shutdown` channel and drops its end, which wakes
//! the poll at once. The poll's timeout is the earliest of: the debounced re-read, the
//! periodic resync, and the next attempt to set up a watch.
//!
//! Any event (except those of hidden files) re-reads the whole folder: with a
//! handful of manifests that is cheap, and it leaves no per-event bookkeeping to get
//! wrong. When the watched folder is deleted or moved, the watch is dropped, the
//! folder re-read (missing: every static pod is removed, as upstream) and the watch
//! set up again with backoff until the folder exists again; the same happens when it
//! is missing at start. The first read is always sent, even empty.
//!
//! State (what was sent, each file's last good pods, the last error report) is
//! owned by this thread alone.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver, Sender};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::dir::{read_manifests, Manifests};
use super::{ManifestError, Options};
use crate::api::pod::Pod;
use crate::sources::merge::SourcePods;
use crate::sources::{PodUpdate, SOURCE_FILE};

/// What a folder (or a single manifest file) is watched for.
fn watch_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
}

pub(super) fn spawn(
    path: PathBuf,
    node: String,
    options: Options,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    let (wake, wake_keep) = UnixStream::pair()?;
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    crate::process::spawn_essential("static-stop", 128 * 1024, move || {
        select! {
            recv(shutdown) -> _ => {}
            recv(done_rx) -> _ => {}
        }
        // Closing our end makes the watcher's end readable (EOF): it wakes and stops.
        drop(wake_keep);
    })?;
    let source = StaticSource {
        path,
        node,
        options,
        updates,
        sent: SourcePods::new(SOURCE_FILE),
        first_sent: false,
        manifests: Manifests::default(),
        report: Vec::new(),
        missing: false,
        dir_error: None,
        watch_error: None,
    };
    crate::process::spawn_essential("static-pods", 512 * 1024, move || {
        // Dropped when this thread ends, which releases the helper.
        let _done = done_tx;
        source.run(&wake);
    })
}

struct StaticSource {
    path: PathBuf,
    node: String,
    options: Options,
    updates: Sender<PodUpdate>,
    /// What the sync loop has been told.
    sent: SourcePods,
    first_sent: bool,
    manifests: Manifests,
    /// The errors of the last read, to log only what changed.
    report: Vec<ManifestError>,
    /// The path was missing at the last read (logged once).
    missing: bool,
    /// The last error reading the folder itself, or setting up the watch (logged once).
    dir_error: Option<String>,
    watch_error: Option<String>,
}

/// What woke the loop.
enum Woken {
    Shutdown,
    Timeout,
    Events(Vec<nix::sys::inotify::InotifyEvent>),
    /// Reading the inotify instance failed: drop it and set up a new one.
    WatchBroken,
}

impl StaticSource {
    fn run(mut self, wake: &UnixStream) {
        log::info!(
            "static-pods: reading static pod manifests from {}",
            self.path.display()
        );
        let start = Instant::now();
        let mut watch: Option<Inotify> = None;
        let mut retry = self.options.retry_initial;
        let mut next_watch_try = start;
        let mut reread_at = Some(start);
        let mut next_resync = start + self.options.resync;
        loop {
            let now = Instant::now();
            if watch.is_none() && now >= next_watch_try {
                match self.start_watch() {
                    Some(w) => {
                        watch = Some(w);
                        retry = self.options.retry_initial;
                        // Read after the watch exists, so no change falls in between.
                        reread_at = Some(now);
                    }
                    None => {
                        next_watch_try = now + retry;
                        retry = (retry * 2).min(self.options.retry_max);
                    }
                }
            }
            if reread_at.is_some_and(|t| t <= now) || now >= next_resync {
                reread_at = None;
                next_resync = now + self.options.resync;
                if !self.reread() {
                    log::info!("static-pods: sync loop gone; stopping");
                    return;
                }
            }

            let mut deadline = next_resync;
            if let Some(t) = reread_at {
                deadline = deadline.min(t);
            }
            if watch.is_none() {
                deadline = deadline.min(next_watch_try);
            }
            let timeout = deadline.saturating_duration_since(Instant::now());
            match wait(wake, watch.as_ref(), timeout) {
                Woken::Shutdown => {
                    log::info!("static-pods: stopped");
                    return;
                }
                Woken::Timeout => {}
                Woken::WatchBroken => {
                    watch = None;
                    next_watch_try = Instant::now() + retry;
                    retry = (retry * 2).min(self.options.retry_max);
                    reread_at = Some(Instant::now());
                }
                Woken::Events(events) => {
                    let now = Instant::now();
                    for ev in events {
                        let mask = ev.mask;
                        let gone = AddWatchFlags::IN_IGNORED
                            | AddWatchFlags::IN_DELETE_SELF
                            | AddWatchFlags::IN_MOVE_SELF;
                        if mask.intersects(gone) {
                            log::info!(
                                "static-pods: {} was removed or moved; watching for it again",
                                self.path.display()
                            );
                            watch = None;
                            retry = self.options.retry_initial;
                            next_watch_try = now;
                            reread_at = Some(now);
                        } else if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                            reread_at = Some(now);
                        } else if ev
                            .name
                            .as_ref()
                            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
                        {
                            // Hidden files (editor swap files, ..data links) are not manifests.
                        } else {
                            reread_at = reread_at.or(Some(now + self.options.debounce));
                        }
                    }
                }
            }
        }
    }

    /// Sets up an inotify watch on the path; `None` (logged when new) when it cannot.
    fn start_watch(&mut self) -> Option<Inotify> {
        let result = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).and_then(|i| {
            i.add_watch(self.path.as_path(), watch_mask())?;
            Ok(i)
        });
        match result {
            Ok(i) => {
                self.watch_error = None;
                Some(i)
            }
            // A missing path is reported by the read.
            Err(Errno::ENOENT) => None,
            Err(e) => {
                let msg = e.to_string();
                if self.watch_error.as_deref() != Some(msg.as_str()) {
                    log::warn!(
                        "static-pods: cannot watch {}: {msg}; re-reading every {:?} instead",
                        self.path.display(),
                        self.options.resync
                    );
                    self.watch_error = Some(msg);
                }
                None
            }
        }
    }

    /// Reads the folder and sends what changed. False when the sync loop is gone.
    fn reread(&mut self) -> bool {
        let pods = match read_manifests(&self.path, &self.node) {
            Ok(files) => {
                if std::mem::take(&mut self.missing) {
                    log::info!("static-pods: {} exists now", self.path.display());
                }
                self.dir_error = None;
                let (pods, errors) = self.manifests.update(files);
                self.log_report(errors);
                pods
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !self.missing {
                    log::warn!(
                        "static-pods: {} does not exist; no static pods until it is created",
                        self.path.display()
                    );
                    self.missing = true;
                }
                self.manifests.clear();
                self.log_report(Vec::new());
                Vec::new()
            }
            Err(e) => {
                let msg = e.to_string();
                if self.dir_error.as_deref() != Some(msg.as_str()) {
                    log::warn!(
                        "static-pods: read {}: {msg}; keeping the current static pods",
                        self.path.display()
                    );
                    self.dir_error = Some(msg);
                }
                if self.first_sent {
                    return true;
                }
                // The sync loop still needs to hear that this source is ready.
                Vec::new()
            }
        };
        self.send(pods)
    }

    fn send(&mut self, pods: Vec<Pod>) -> bool {
        self.first_sent = true;
        let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
        for update in self.sent.apply_snapshot(&pods, SystemTime::now()) {
            log::debug!("static-pods: {:?} {} pod(s)", update.op, update.pods.len());
            if self.updates.send(update).is_err() {
                return false;
            }
        }
        true
    }

    /// Logs the errors that are new since the last read, and the files that are fine
    /// again; the full report stays available for events.
    fn log_report(&mut self, errors: Vec<ManifestError>) {
        for e in errors.iter().filter(|e| !self.report.contains(e)) {
            let kept =
                !matches!(e, ManifestError::Duplicate { .. }) && self.manifests.has_pods(e.path());
            if kept {
                log::warn!("{e}; the pods of its last good version keep running");
            } else {
                log::warn!("{e}; skipped");
            }
        }
        for old in &self.report {
            if !errors.iter().any(|e| e.path() == old.path()) {
                log::info!(
                    "static pod manifest {}: no errors any more",
                    old.path().display()
                );
            }
        }
        self.report = errors;
    }
}

/// Waits for a shutdown, an inotify event or the timeout.
fn wait(wake: &UnixStream, watch: Option<&Inotify>, timeout: Duration) -> Woken {
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    let mut fds = vec![PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
    if let Some(w) = watch {
        fds.push(PollFd::new(w.as_fd(), PollFlags::POLLIN));
    }
    match poll(&mut fds, timeout) {
        Ok(0) | Err(Errno::EINTR) => return Woken::Timeout,
        Ok(_) => {}
        Err(e) => {
            // Should not happen with valid descriptors; avoid a busy loop regardless.
            log::warn!("static-pods: poll: {e}");
            std::thread::sleep(Duration::from_millis(100));
            return Woken::Timeout;
        }
    }
    if fds[0].any().unwrap_or(true) {
        return Woken::Shutdown;
    }
    let Some(w) = watch else {
        return Woken::Timeout;
    };
    match w.read_events() {
        Ok(events) => Woken::Events(events),
        Err(Errno::EAGAIN) => Woken::Timeout,
        Err(e) => {
            log::warn!("static-pods: read inotify events: {e}; setting up a new watch");
            Woken::WatchBroken
        }
    }
}
