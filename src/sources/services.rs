//! The `services` thread: lists and watches every Service in the cluster
//! (`/api/v1/services`; the Node authorizer lets a node list and watch them all) into
//! a [`ServiceStore`], which the environment builder reads for service variables
//! (`runtime/envvars.rs`). Started only with an API server; standalone litelet has
//! no services.
//!
//! The loop has the pod watch's resilience (`apiserver.rs`): list, then watch from the
//! list's resourceVersion with bookmarks and a server timeout drawn from 5–10 minutes;
//! every event and bookmark advances the resourceVersion; a watch that ends or breaks
//! is resumed from it; 410 Gone lists again (the store is replaced whole, so services
//! deleted meanwhile disappear); failures back off exponentially, capped and
//! jittered. A service that does not decode is logged and skipped. The store is
//! marked synced by the first successful list and stays so through later outages
//! (upstream's informer HasSynced), so pods wait only at start-up.
//!
//! Shutdown: as `api-watch`, a `services-stop` helper closes this thread's own
//! connection pool and drops the channel its backoff sleeps wait on.
//!
//! Checkpoint (edge autonomy, `docs/autonomy.md`): with `Options::checkpoint`, lists
//! and events also go to the `ckpt-services` writer (debounced). When the first list
//! fails, the checkpoint's services fill the store and mark it synced, so pods
//! restarted while cut off get the service variables they had; the first list that
//! succeeds replaces them. A missing or bad checkpoint is logged and ignored.
//!
//! Channels: reads `shutdown` (in the stopper). The store is written by this thread
//! alone.

pub mod store;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, TryRecvError};
use serde_json::Value;

use crate::api::meta::{WatchEvent, WatchEventType};
use crate::api::ratelimit::{jitter, random_between, Backoff};
use crate::api::service::Service;
use crate::api::{paths, ApiClient, ApiError, ListOptions, WatchOptions};
use crate::sources::checkpoint::writer::Writer;
use crate::sources::checkpoint::{CheckpointFile, CheckpointSpec, SERVICES};

pub use store::ServiceStore;

/// Tunables; [`Options::default`] has the production values.
#[derive(Clone, Debug)]
pub struct Options {
    /// First delay after a failure; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Server-side watch timeout is drawn from this range, in seconds.
    pub watch_timeout_secs: (u64, u64),
    /// Keep a checkpoint of the services and fill the store from it when the API
    /// server is unreachable at start-up; `None` turns that off.
    pub checkpoint: Option<CheckpointSpec>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
            watch_timeout_secs: (300, 600),
            checkpoint: None,
        }
    }
}

/// Starts the `services` thread (and its `services-stop` helper) filling `store`.
/// The handle joins `services`, which ends soon after `shutdown` fires.
pub fn spawn(
    client: ApiClient,
    options: Options,
    store: ServiceStore,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let client = client.with_own_connections();
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let stopper_client = client.clone();
    crate::process::spawn_essential("services-stop", 256 * 1024, move || {
        select! {
            recv(shutdown) -> _ => {
                stopper_client.close_connections();
                drop(stop_tx);
            }
            recv(done_rx) -> _ => {}
        }
    })?;
    let checkpoint = match &options.checkpoint {
        Some(spec) => Some((spec.start::<Service>(SERVICES)?, spec.node.clone())),
        None => None,
    };
    let watcher = Watcher {
        checkpoint,
        listed: false,
        client,
        options,
        store,
        stop: stop_rx,
        resource_version: None,
        path: paths::all_services(),
    };
    crate::process::spawn_essential("services", 512 * 1024, move || {
        // Dropped when this thread ends, which releases the stopper.
        let _done = done_tx;
        watcher.run();
    })
}

/// How one watch request ended.
enum WatchEnd {
    /// The server ended the stream (its timeout).
    Closed { events: usize, lasted: Duration },
    /// 410: our resourceVersion is too old.
    Gone,
    /// The request or the stream failed after `events` events.
    Failed { err: ApiError, events: usize },
}

struct Watcher {
    client: ApiClient,
    options: Options,
    store: ServiceStore,
    /// Disconnected by the stopper on shutdown; what backoff sleeps wait on.
    stop: Receiver<()>,
    resource_version: Option<String>,
    path: String,
    /// The checkpoint file (read once), its writer, and this node's name.
    checkpoint: Option<((CheckpointFile, Writer<Service>), String)>,
    /// A list has succeeded (or the checkpoint was tried) since start-up.
    listed: bool,
}

impl Watcher {
    fn run(mut self) {
        log::info!("services: watching services for environment variables");
        let mut backoff = Backoff::new(self.options.backoff_initial, self.options.backoff_max);
        'list: while !self.stopped() {
            if let Err(e) = self.relist() {
                if self.stopped() {
                    break;
                }
                if !std::mem::replace(&mut self.listed, true) {
                    self.restore();
                }
                let delay = jitter(backoff.next_delay());
                log::warn!("services: list services: {e}; retry in {delay:?}");
                if !self.sleep(delay) {
                    break;
                }
                continue;
            }
            backoff.reset();
            while !self.stopped() {
                let delay = match self.watch_once() {
                    WatchEnd::Gone => {
                        log::info!(
                            "services: resourceVersion {} expired; listing again",
                            self.resource_version.as_deref().unwrap_or("")
                        );
                        continue 'list;
                    }
                    // A server that ends every watch at once must not make us spin.
                    WatchEnd::Closed { events, lasted }
                        if events > 0 || lasted >= Duration::from_secs(1) =>
                    {
                        backoff.reset();
                        continue;
                    }
                    WatchEnd::Closed { .. } => jitter(backoff.next_delay()),
                    WatchEnd::Failed { err, events } => {
                        if self.stopped() {
                            break 'list;
                        }
                        if events > 0 {
                            backoff.reset();
                        }
                        let delay = jitter(backoff.next_delay());
                        log::warn!("services: watch services: {err}; again in {delay:?}");
                        delay
                    }
                };
                if !self.sleep(delay) {
                    break 'list;
                }
            }
        }
        log::info!("services: stopped");
    }

    fn stopped(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// Sleeps `d` unless stopped first; false when stopped.
    fn sleep(&self, d: Duration) -> bool {
        matches!(self.stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }

    /// Lists every service and replaces the store with them.
    fn relist(&mut self) -> Result<(), ApiError> {
        // Items decode one by one so that one bad service cannot hide the others.
        let list = self
            .client
            .list::<Value>(&self.path, &ListOptions::default())?;
        let services: Vec<Service> = list.items.into_iter().filter_map(decode).collect();
        log::debug!(
            "services: listed {} services at resourceVersion {:?}",
            services.len(),
            list.metadata.resource_version
        );
        if let Some(((_, writer), _)) = &self.checkpoint {
            let items = services
                .iter()
                .map(|s| (service_key(s), s.clone()))
                .collect();
            writer.replace(items, list.metadata.resource_version.clone());
        }
        self.store.replace(services);
        self.resource_version = list.metadata.resource_version;
        self.listed = true;
        Ok(())
    }

    /// Fills the store from the checkpoint (the first list failed).
    fn restore(&mut self) {
        let Some(((file, _), node)) = &self.checkpoint else {
            return;
        };
        match file.load::<Service>(node) {
            Ok(Some(contents)) => {
                log::warn!(
                    "services: API server unreachable at start-up; using {} services from the checkpoint",
                    contents.items.len()
                );
                self.store.replace(contents.items.into_values());
            }
            Ok(None) => log::info!("services: no checkpoint at {}", file.path().display()),
            Err(err) => log::error!("services: {err}; pods wait for the API server"),
        }
    }

    fn watch_once(&mut self) -> WatchEnd {
        let (low, high) = self.options.watch_timeout_secs;
        let opts = WatchOptions {
            resource_version: self.resource_version.clone(),
            allow_bookmarks: true,
            timeout_seconds: Some(random_between(low, high)),
            ..WatchOptions::default()
        };
        let started = Instant::now();
        let stream = match self.client.watch(&self.path, &opts) {
            Ok(s) => s,
            Err(e) if e.is_gone() => return WatchEnd::Gone,
            Err(err) => return WatchEnd::Failed { err, events: 0 },
        };
        let mut events = 0;
        for item in stream {
            match item {
                Ok(event) => {
                    events += 1;
                    self.handle(event);
                }
                Err(e) if e.is_gone() => return WatchEnd::Gone,
                Err(err) => return WatchEnd::Failed { err, events },
            }
        }
        WatchEnd::Closed {
            events,
            lasted: started.elapsed(),
        }
    }

    /// Applies one watch event to the store.
    fn handle(&mut self, event: WatchEvent) {
        if let Some(rv) = event
            .object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
        {
            self.resource_version = Some(rv.to_owned());
        }
        match event.type_ {
            WatchEventType::Added | WatchEventType::Modified => {
                if let Some(service) = decode(event.object) {
                    if let Some(((_, writer), _)) = &self.checkpoint {
                        let rv = self.resource_version.clone();
                        writer.upsert(service_key(&service), service.clone(), rv);
                    }
                    self.store.upsert(service);
                }
            }
            WatchEventType::Deleted => {
                if let Some(service) = decode(event.object) {
                    let meta = &service.metadata;
                    if self.store.remove(&meta.namespace, &meta.name) {
                        if let Some(((_, writer), _)) = &self.checkpoint {
                            writer.remove(service_key(&service), self.resource_version.clone());
                        }
                    }
                }
            }
            WatchEventType::Bookmark => {}
            other => log::debug!("services: ignoring watch event of type {other}"),
        }
    }
}

/// A service's key in the checkpoint.
fn service_key(service: &Service) -> String {
    format!("{}/{}", service.metadata.namespace, service.metadata.name)
}

/// Decodes a service from the API, or logs why not.
fn decode(object: Value) -> Option<Service> {
    match serde_json::from_value::<Service>(object) {
        Ok(s) if !s.metadata.name.is_empty() => Some(s),
        Ok(s) => {
            log::warn!(
                "services: a service in {:?} has no name; skipped",
                s.metadata.namespace
            );
            None
        }
        Err(e) => {
            log::warn!("services: a service does not decode, skipped: {e}");
            None
        }
    }
}
