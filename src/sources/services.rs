//! The `services` thread: lists and watches every Service in the cluster
//! (`/api/v1/services`; the Node authorizer lets a node list and watch them all) into
//! a [`ServiceStore`], which the environment builder reads for service variables
//! (`runtime/envvars.rs`). Started only with an API server; standalone litelet has
//! no services.
//!
//! The loop is the shared list+watch loop (`api/reflector.rs`): list, then watch
//! from the list's resourceVersion with bookmarks and a server timeout drawn from
//! 5–10 minutes; a watch that ends or breaks is resumed; 410 Gone lists again (the
//! store is replaced whole, so services deleted meanwhile disappear); failures back
//! off exponentially, capped and jittered. A service that does not decode is logged
//! and skipped. The store is marked synced by the first successful list and stays so
//! through later outages (upstream's informer HasSynced), so pods wait only at
//! start-up.
//!
//! Shutdown: as `api-watch`, a `services-stop` helper closes this thread's own
//! connection pool and drops the channel its back-off sleeps wait on.
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
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::api::reflector::{Config, DecodeError, Event, EventKind, Handler, Reflector};
use crate::api::service::Service;
use crate::api::{paths, ApiClient, ApiError};
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
    let config = Config {
        backoff_initial: options.backoff_initial,
        backoff_max: options.backoff_max,
        watch_timeout_secs: options.watch_timeout_secs,
        ..Config::new("services", "services".into(), paths::all_services())
    };
    let (reflector, stopper) = Reflector::new(&client, config, shutdown);
    crate::process::spawn_essential("services-stop", 256 * 1024, move || stopper.run())?;
    let checkpoint = match &options.checkpoint {
        Some(spec) => Some((spec.start::<Service>(SERVICES)?, spec.node.clone())),
        None => None,
    };
    let mut mirror = Mirror {
        checkpoint,
        listed: false,
        store,
    };
    crate::process::spawn_essential("services", 512 * 1024, move || {
        reflector.run(&mut mirror);
    })
}

/// The store (and the checkpoint) as the reflector's handler.
struct Mirror {
    store: ServiceStore,
    /// The checkpoint file (read once), its writer, and this node's name.
    checkpoint: Option<((CheckpointFile, Writer<Service>), String)>,
    /// A list has succeeded (or the checkpoint was tried) since start-up.
    listed: bool,
}

impl Handler for Mirror {
    type Object = Service;

    /// Replaces the store with every service listed.
    fn listed(
        &mut self,
        items: Vec<Result<Service, DecodeError>>,
        resource_version: Option<&str>,
    ) -> bool {
        let services: Vec<Service> = items.into_iter().filter_map(checked).collect();
        log::debug!(
            "services: listed {} services at resourceVersion {resource_version:?}",
            services.len(),
        );
        if let Some(((_, writer), _)) = &self.checkpoint {
            let items = services
                .iter()
                .map(|s| (service_key(s), s.clone()))
                .collect();
            writer.replace(items, resource_version.map(str::to_owned));
        }
        self.store.replace(services);
        self.listed = true;
        true
    }

    fn list_failed(&mut self, _: &ApiError) -> bool {
        if !std::mem::replace(&mut self.listed, true) {
            self.restore();
        }
        true
    }

    /// Applies one watch event to the store.
    fn event(&mut self, event: Event<Service>, resource_version: Option<&str>) -> bool {
        let Some(service) = checked(event.object) else {
            return true;
        };
        let rv = resource_version.map(str::to_owned);
        match event.kind {
            EventKind::Added | EventKind::Modified => {
                if let Some(((_, writer), _)) = &self.checkpoint {
                    writer.upsert(service_key(&service), service.clone(), rv);
                }
                self.store.upsert(service);
            }
            EventKind::Deleted => {
                let meta = &service.metadata;
                if self.store.remove(&meta.namespace, &meta.name) {
                    if let Some(((_, writer), _)) = &self.checkpoint {
                        writer.remove(service_key(&service), rv);
                    }
                }
            }
        }
        true
    }
}

impl Mirror {
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
}

/// A service's key in the checkpoint.
fn service_key(service: &Service) -> String {
    format!("{}/{}", service.metadata.namespace, service.metadata.name)
}

/// A decoded service with a name, or logs why not.
fn checked(decoded: Result<Service, DecodeError>) -> Option<Service> {
    match decoded {
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
