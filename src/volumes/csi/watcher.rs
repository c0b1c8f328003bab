//! The plugin watcher (upstream `pluginmanager`, CSI plugins only): the `plugins`
//! thread watches `<root-dir>/plugins_registry` with inotify and keeps the node's
//! registered drivers equal to the registration sockets found there.
//!
//! For each new socket (not hidden, a unix socket): GetInfo, [`validate`], the
//! driver's NodeGetInfo, publish on the Node ([`publish::register`]), add to
//! [`Drivers`], NotifyRegistrationStatus(true). An invalid plugin is told
//! NotifyRegistrationStatus(false) and ignored until its socket is replaced. A
//! transient failure (driver or API server not answering) is retried with back-off
//! without telling the plugin, so a registrar is not made to exit (which is what
//! upstream's "false" causes) while the node is merely cut off. A socket that goes
//! away deregisters its driver (Node annotation and CSINode entry).
//!
//! The watch is only a prompt: every wake-up (an event, a failed registration's
//! retry time, or a rescan once a minute) reconciles the folder's listing against
//! what is registered, so a missed event only delays things; without a watch the
//! folder is listed every second. The thread sleeps in `poll` in between, shutdown
//! (a [`crate::process::ShutdownFd`]) in the same set.

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::client::{CsiClient, RegistrationClient, VOLUME_TIMEOUT};
use super::publish::{self, DriverInfo};
use super::registration::{validate, Accepted};
use super::{CsiError, Driver, Drivers};
use crate::api::{ApiClient, ApiError};
use crate::process::ShutdownFd;

/// `<root-dir>/plugins_registry`.
pub fn registry_dir(root: &Path) -> PathBuf {
    root.join("plugins_registry")
}

/// How often the folder is listed when no inotify watch could be set up.
const POLL: Duration = Duration::from_secs(1);
/// How often the folder is listed while the watch works: only a safety net for a
/// missed event (upstream's watcher has none).
const RESCAN: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why one registration attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The plugin is not acceptable; it is told so and not retried.
    #[error(transparent)]
    Invalid(#[from] super::registration::RegistrationError),
    /// A socket did not answer as expected; retried.
    #[error(transparent)]
    Call(#[from] CsiError),
    /// Publishing on the Node failed; retried.
    #[error("publish driver on the node: {0}")]
    Publish(#[from] ApiError),
}

/// What the watcher knows of one registration socket.
enum SocketState {
    Registered(String),
    /// Refused for good (until the socket is replaced).
    Refused,
    /// Failed; try again at `retry_at`.
    Failing {
        retry_at: Instant,
        backoff: Duration,
    },
}

/// Starts the `plugins` thread. `api` is `None` in standalone mode (drivers are
/// still used for inline volumes, nothing is published).
pub fn spawn(
    root: &Path,
    node: &str,
    api: Option<ApiClient>,
    drivers: Drivers,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let dir = registry_dir(root);
    fs::create_dir_all(&dir)?;
    let mut watcher = Watcher {
        dir,
        node: node.to_owned(),
        api,
        drivers,
        sockets: BTreeMap::new(),
    };
    let stop = ShutdownFd::new(shutdown)?;
    crate::process::spawn_essential("plugins", 512 * 1024, move || watcher.run(&stop))
}

struct Watcher {
    dir: PathBuf,
    node: String,
    api: Option<ApiClient>,
    drivers: Drivers,
    sockets: BTreeMap<PathBuf, SocketState>,
}

impl Watcher {
    fn run(&mut self, stop: &ShutdownFd) {
        log::info!(
            "plugins: watching {} for plugin sockets",
            self.dir.display()
        );
        let mut inotify: Option<Inotify> = None;
        loop {
            if inotify.is_none() {
                inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                    .and_then(|i| {
                        let mask = AddWatchFlags::IN_CREATE
                            | AddWatchFlags::IN_DELETE
                            | AddWatchFlags::IN_MOVED_TO
                            | AddWatchFlags::IN_MOVED_FROM;
                        i.add_watch(&self.dir, mask).map(|_| i)
                    })
                    .map_err(|e| log::warn!("plugins: inotify on {}: {e}", self.dir.display()))
                    .ok();
            }
            self.reconcile();
            let wait = match &inotify {
                Some(_) => self.next_retry(Instant::now()).unwrap_or(RESCAN),
                None => POLL,
            };
            let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
            let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
            if let Some(i) = &inotify {
                fds.push(PollFd::new(i.as_fd(), PollFlags::POLLIN));
            }
            let woken = poll(&mut fds, timeout).is_ok_and(|n| n > 0);
            let stopping = fds[0].revents().is_some_and(|r| !r.is_empty());
            let event = fds
                .get(1)
                .and_then(|fd| fd.revents())
                .is_some_and(|r| !r.is_empty());
            drop(fds);
            if stopping {
                return;
            }
            if woken && event && inotify.as_ref().is_some_and(|i| i.read_events().is_err()) {
                inotify = None;
            }
        }
    }

    /// How long until the earliest failed registration is due again, if any.
    fn next_retry(&self, now: Instant) -> Option<Duration> {
        self.sockets
            .values()
            .filter_map(|state| match state {
                SocketState::Failing { retry_at, .. } => {
                    Some(retry_at.saturating_duration_since(now))
                }
                _ => None,
            })
            .min()
    }

    /// Registers new sockets, deregisters vanished ones.
    fn reconcile(&mut self) {
        let present = list_sockets(&self.dir);
        let gone: Vec<PathBuf> = self
            .sockets
            .keys()
            .filter(|s| !present.contains(s))
            .cloned()
            .collect();
        for socket in gone {
            if let Some(SocketState::Registered(name)) = self.sockets.remove(&socket) {
                self.deregister(&socket, &name);
            }
        }
        let now = Instant::now();
        for socket in present {
            let backoff = match self.sockets.get(&socket) {
                Some(SocketState::Registered(_) | SocketState::Refused) => continue,
                Some(SocketState::Failing { retry_at, .. }) if *retry_at > now => continue,
                Some(SocketState::Failing { backoff, .. }) => (*backoff * 2).min(MAX_BACKOFF),
                None => Duration::from_secs(1),
            };
            let state = match self.register(&socket) {
                Ok(name) => SocketState::Registered(name),
                Err(RegisterError::Invalid(e)) => {
                    log::warn!("plugins: {}: refused: {e}", socket.display());
                    let _ = RegistrationClient::new(&socket).notify(false, &e.to_string());
                    SocketState::Refused
                }
                Err(e) => {
                    log::warn!(
                        "plugins: {}: registration failed, retrying in {backoff:?}: {e}",
                        socket.display()
                    );
                    SocketState::Failing {
                        retry_at: Instant::now() + backoff,
                        backoff,
                    }
                }
            };
            self.sockets.insert(socket, state);
        }
    }

    fn register(&self, socket: &Path) -> Result<String, RegisterError> {
        let registration = RegistrationClient::new(socket);
        let Accepted {
            name,
            endpoint,
            version,
        } = validate(&registration.info()?)?;
        let csi = CsiClient::new(&endpoint, VOLUME_TIMEOUT);
        let info = csi.node_info()?;
        let mut topology: Vec<(String, String)> = info
            .accessible_topology
            .as_ref()
            .map(|t| {
                t.segments
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        topology.sort();
        let driver = DriverInfo {
            name: name.clone(),
            node_id: info.node_id.clone(),
            topology,
            max_volumes: info.max_volumes_per_node,
        };
        if let Some(api) = &self.api {
            publish::register(api, &self.node, &driver)?;
        }
        self.drivers.insert(
            &name,
            Driver {
                endpoint: endpoint.clone(),
                node_id: info.node_id,
                registration: socket.to_path_buf(),
            },
        );
        if let Err(e) = registration.notify(true, "") {
            // Registered all the same: the driver is usable.
            log::warn!("plugins: {name}: NotifyRegistrationStatus: {e}");
        }
        log::info!(
            "plugins: registered CSI driver {name} (version {version}) at {}",
            endpoint.display()
        );
        Ok(name)
    }

    fn deregister(&self, socket: &Path, name: &str) {
        self.drivers.remove_by_socket(socket);
        log::info!("plugins: CSI driver {name} deregistered (socket removed)");
        if let Some(api) = &self.api {
            if let Err(e) = publish::deregister(api, &self.node, name) {
                log::warn!("plugins: unpublish driver {name} from the node: {e}");
            }
        }
    }
}

/// Unix sockets in `dir` whose names do not start with '.'.
fn list_sockets(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sockets: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .collect();
    sockets.sort();
    sockets
}
