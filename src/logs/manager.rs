//! The log manager's threads (upstream containerLogManager.Start): the `log-rotate`
//! timer lists the running containers every `containerLogMonitorInterval` and queues
//! each one not already queued; `containerLogMaxWorkers` threads named `log-rot-N`
//! take containers off the queue, ask the runtime for the log path and rotate it
//! ([`super::rotate`]).
//!
//! Channels: `shutdown` (disconnects on SIGTERM) ends the timer, which drops the work
//! sender, which ends the workers after their current container. The queued set is
//! one small mutex, never held across I/O. Idle cost: one ListContainers and one stat
//! per running container per interval; ContainerStatus once per container (its log
//! path is kept while the container is listed).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{select, tick, unbounded, Receiver, Sender};
use protobuf::MessageField;

use super::policy::RotatePolicy;
use super::rotate::{rotate_below, Rotated};
use super::LogManagerError;
use crate::cri::{pb, CriError, RuntimeClient};
use crate::runtime::{gc, labels};

/// Stack of a `log-rot-N` worker.
const WORKER_STACK: usize = 2 * 1024 * 1024;

/// The runtime calls the log manager makes.
pub trait LogRuntime: Send + Sync + 'static {
    /// IDs of the running containers (only they write; upstream rotates no others).
    fn running_containers(&self) -> Result<Vec<String>, CriError>;
    /// The container's log path as the runtime reports it.
    fn log_path(&self, id: &str) -> Result<LogPath, CriError>;
    /// CRI ReopenContainerLog.
    fn reopen(&self, id: &str) -> Result<(), CriError>;
}

impl LogRuntime for RuntimeClient {
    fn running_containers(&self) -> Result<Vec<String>, CriError> {
        let filter = pb::ContainerFilter {
            state: MessageField::some(pb::ContainerStateValue {
                state: pb::ContainerState::CONTAINER_RUNNING.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let resp = self.list_containers(&pb::ListContainersRequest {
            filter: MessageField::some(filter),
            ..Default::default()
        })?;
        Ok(resp.containers.into_iter().map(|c| c.id).collect())
    }

    fn log_path(&self, id: &str) -> Result<LogPath, CriError> {
        let resp = self.container_status(&pb::ContainerStatusRequest {
            container_id: id.to_owned(),
            ..Default::default()
        })?;
        let labels = &resp.status.labels;
        let label = |key: &str| labels.get(key).cloned();
        let pod = match (
            label(labels::POD_NAMESPACE),
            label(labels::POD_NAME),
            label(labels::POD_UID),
        ) {
            (Some(ns), Some(name), Some(uid)) => Some((ns, name, uid)),
            _ => None,
        };
        Ok(LogPath {
            reported: resp.status.log_path.clone(),
            pod,
        })
    }

    fn reopen(&self, id: &str) -> Result<(), CriError> {
        self.reopen_container_log(&pb::ReopenContainerLogRequest {
            container_id: id.to_owned(),
            ..Default::default()
        })
        .map(|_| ())
    }
}

/// Where the runtime says a container logs: containerd reports an absolute path; a
/// relative one is below the pod's log directory, found from the pod labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogPath {
    pub reported: String,
    /// The pod's namespace, name and UID (the `io.kubernetes.pod.*` labels).
    pub pod: Option<(String, String, String)>,
}

impl LogPath {
    /// The file, if it is strictly below `root` (no `..`, no other directory).
    pub fn resolve(&self, root: &Path) -> Option<PathBuf> {
        if Path::new(&self.reported).is_absolute() {
            return gc::container_log_file(root, &self.reported);
        }
        let (ns, name, uid) = self.pod.as_ref()?;
        let dir = gc::pod_log_dir_of(root, ns, name, uid)?;
        gc::container_log_file(&dir, &self.reported)
    }
}

/// The log manager's settings, resolved from the flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogManagerConfig {
    pub policy: RotatePolicy,
    pub workers: usize,
    pub interval: Duration,
    /// Only log files below this directory are touched.
    pub pod_logs_dir: PathBuf,
}

/// Starts the timer and the workers; `None` when rotation is off. The handle joins
/// the timer thread.
pub fn spawn(
    config: LogManagerConfig,
    runtime: Arc<dyn LogRuntime>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    log::info!(
        "container log rotation: max size {} bytes, {} files, {} worker(s), every {:?}",
        config.policy.max_size,
        config.policy.max_files,
        config.workers,
        config.interval
    );
    let (work_tx, work_rx) = unbounded::<String>();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let config = Arc::new(config);
    for n in 1..=config.workers.max(1) {
        let worker = Worker {
            config: config.clone(),
            runtime: runtime.clone(),
            shared: shared.clone(),
        };
        let work = work_rx.clone();
        // Essential: a rotation that died quietly would let logs fill the disk.
        // The deflate state is a few hundred KiB and an unoptimised build moves it
        // through the stack; only the pages touched count.
        crate::process::spawn_essential(format!("log-rot-{n}"), WORKER_STACK, move || {
            worker.run(work)
        })?;
    }
    let interval = config.interval;
    crate::process::spawn_essential("log-rotate", 256 * 1024, move || {
        timer(interval, runtime, shared, work_tx, shutdown)
    })
}

fn timer(
    interval: Duration,
    runtime: Arc<dyn LogRuntime>,
    shared: Arc<Mutex<Shared>>,
    work: Sender<String>,
    shutdown: Receiver<()>,
) {
    let ticks = tick(interval);
    loop {
        select! {
            recv(shutdown) -> _ => return,
            recv(ticks) -> _ => {}
        }
        let ids = match runtime.running_containers() {
            Ok(ids) => ids,
            Err(err) => {
                log::warn!("container log rotation: cannot list containers: {err}");
                continue;
            }
        };
        let fresh: Vec<String> = match shared.lock() {
            Ok(mut shared) => {
                shared.failing.retain(|id, _| ids.contains(id));
                shared.paths.retain(|id, _| ids.contains(id));
                shared.refused.retain(|id, _| ids.contains(id));
                // A container still queued from an earlier round is not queued twice.
                ids.into_iter()
                    .filter(|id| shared.queued.insert(id.clone()))
                    .collect()
            }
            Err(_) => return,
        };
        for id in fresh {
            if work.send(id).is_err() {
                return;
            }
        }
    }
}

struct Worker {
    config: Arc<LogManagerConfig>,
    runtime: Arc<dyn LogRuntime>,
    shared: Arc<Mutex<Shared>>,
}

/// State the timer and the workers share (one small lock, never held across I/O).
#[derive(Default)]
struct Shared {
    /// Containers queued or being processed.
    queued: HashSet<String>,
    /// The last error per container, so a lasting failure is logged once.
    failing: HashMap<String, String>,
    /// Each running container's log file: it never changes, so ContainerStatus is
    /// asked once per container rather than every interval (upstream asks every time).
    paths: HashMap<String, PathBuf>,
    /// Rotated copies left alone because they are not regular files, per container,
    /// so each is warned about once.
    refused: HashMap<String, HashSet<String>>,
}

impl Worker {
    fn run(self, work: Receiver<String>) {
        for id in work {
            let result = self.process(&id).map_err(|e| e.to_string());
            let mut shared = match self.shared.lock() {
                Ok(shared) => shared,
                Err(_) => return,
            };
            shared.queued.remove(&id);
            match result {
                // The same failure every interval is said once per container.
                Err(err) if shared.failing.get(&id) != Some(&err) => {
                    log::warn!("container log rotation: {err}");
                    shared.failing.insert(id, err);
                }
                Err(err) => log::debug!("container log rotation: {err}"),
                Ok(()) => {
                    shared.failing.remove(&id);
                }
            }
        }
    }

    fn process(&self, id: &str) -> Result<(), LogManagerError> {
        let known = self
            .shared
            .lock()
            .ok()
            .and_then(|s| s.paths.get(id).cloned());
        let path = match known {
            Some(path) => path,
            None => match self.log_file(id)? {
                Some(path) => {
                    if let Ok(mut shared) = self.shared.lock() {
                        shared.paths.insert(id.to_owned(), path.clone());
                    }
                    path
                }
                None => return Ok(()),
            },
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let reopen = || self.runtime.reopen(id);
        let root = &self.config.pod_logs_dir;
        if let Rotated::Yes { to, size, refused } =
            rotate_below(root, &path, &self.config.policy, now, id, &reopen)?
        {
            crate::metrics::log_rotated();
            log::debug!(
                "container {id}: rotated {} ({size} bytes) to {to}",
                path.display()
            );
            self.warn_refused(id, &path, refused);
        }
        Ok(())
    }

    /// Warns once per file about rotated copies that are not regular files.
    fn warn_refused(&self, id: &str, path: &Path, refused: Vec<String>) {
        let Ok(mut shared) = self.shared.lock() else {
            return;
        };
        let seen = shared.refused.entry(id.to_owned()).or_default();
        for name in refused {
            if seen.insert(name.clone()) {
                let dir = path.parent().unwrap_or(path);
                log::warn!(
                    "container {id}: {} is not a regular file; not compressing it",
                    dir.join(name).display()
                );
            }
        }
    }

    /// The container's log file from the runtime; None when it has none (or is gone).
    fn log_file(&self, id: &str) -> Result<Option<PathBuf>, LogManagerError> {
        let reported = match self.runtime.log_path(id) {
            Ok(path) => path,
            // Gone since the listing: nothing to rotate.
            Err(err) if err.is_not_found() => return Ok(None),
            Err(source) => {
                return Err(LogManagerError::Runtime {
                    id: id.to_owned(),
                    step: "ContainerStatus",
                    source,
                })
            }
        };
        if reported.reported.is_empty() {
            return Ok(None);
        }
        let path = reported.resolve(&self.config.pod_logs_dir).ok_or_else(|| {
            LogManagerError::UnsafePath {
                id: id.to_owned(),
                path: reported.reported.clone(),
            }
        })?;
        Ok(Some(path))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    struct FakeRuntime {
        logs: PathBuf,
        reopened: Mutex<Vec<String>>,
        asked: Mutex<Vec<String>>,
    }

    impl LogRuntime for FakeRuntime {
        fn running_containers(&self) -> Result<Vec<String>, CriError> {
            Ok(vec!["c1".into(), "evil".into(), "gone".into()])
        }
        fn log_path(&self, id: &str) -> Result<LogPath, CriError> {
            self.asked.lock().unwrap().push(id.to_owned());
            let path = |reported: String| LogPath {
                reported,
                pod: None,
            };
            match id {
                "c1" => Ok(path(self.logs.join("pod/c/0.log").display().to_string())),
                "evil" => Ok(path(format!("{}/../etc/passwd", self.logs.display()))),
                _ => Err(CriError::NotFound {
                    op: "container_status",
                    message: id.into(),
                }),
            }
        }
        fn reopen(&self, id: &str) -> Result<(), CriError> {
            self.reopened.lock().unwrap().push(id.to_owned());
            fs::write(self.logs.join("pod/c/0.log"), b"").unwrap();
            Ok(())
        }
    }

    #[test]
    fn workers_rotate_listed_containers_and_refuse_paths_outside_the_logs_dir() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().to_owned();
        fs::create_dir_all(logs.join("pod/c")).unwrap();
        fs::write(logs.join("pod/c/0.log"), vec![b'x'; 100]).unwrap();
        let runtime = Arc::new(FakeRuntime {
            logs: logs.clone(),
            reopened: Mutex::new(Vec::new()),
            asked: Mutex::new(Vec::new()),
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let config = LogManagerConfig {
            policy: RotatePolicy {
                max_size: 50,
                max_files: 2,
            },
            workers: 2,
            interval: Duration::from_millis(20),
            pod_logs_dir: logs.clone(),
        };
        let handle = spawn(config, runtime.clone(), stop_rx).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while runtime.reopened.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never rotated");
            std::thread::sleep(Duration::from_millis(10));
        }
        // A few more rounds: the log path is asked for once per container.
        std::thread::sleep(Duration::from_millis(200));
        drop(stop_tx);
        handle.join().unwrap();
        assert_eq!(*runtime.reopened.lock().unwrap(), ["c1"]);
        let asked = runtime.asked.lock().unwrap();
        assert_eq!(
            asked.iter().filter(|id| *id == "c1").count(),
            1,
            "{asked:?}"
        );
        let files = fs::read_dir(logs.join("pod/c")).unwrap().count();
        assert_eq!(files, 2, "the live file and one rotated copy");
    }

    #[test]
    fn relative_log_paths_resolve_below_the_pods_log_dir() {
        let root = Path::new("/var/log/pods");
        let pod = Some(("ns".to_owned(), "web".to_owned(), "u1".to_owned()));
        let path = |reported: &str, pod: &Option<(String, String, String)>| {
            LogPath {
                reported: reported.into(),
                pod: pod.clone(),
            }
            .resolve(root)
        };
        assert_eq!(
            path("main/0.log", &pod),
            Some(PathBuf::from("/var/log/pods/ns_web_u1/main/0.log"))
        );
        assert_eq!(path("main/0.log", &None), None, "no pod labels");
        assert_eq!(path("../../x/0.log", &pod), None);
        assert_eq!(
            path("/var/log/pods/ns_web_u1/main/0.log", &None),
            Some(PathBuf::from("/var/log/pods/ns_web_u1/main/0.log"))
        );
        assert_eq!(path("/etc/passwd", &None), None);
    }
}
