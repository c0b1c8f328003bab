//! Pod volumes (upstream volume manager): the directories and files containers
//! mount, under `--root-dir/pods/<uid>/volumes/<plugin>/<name>`.
//!
//! Supported: emptyDir (disk, or tmpfs for medium Memory with sizeLimit), hostPath
//! (type-checked), configMap, secret, downwardAPI and projected (serviceAccountToken
//! via TokenRequest, configMap, secret, downwardAPI), persistentVolumeClaim and
//! generic ephemeral claims ([`pv`]: hostPath, local and CSI PVs) and inline CSI
//! volumes ([`csi`]). Secrets, downwardAPI and projected volumes live on tmpfs, as
//! upstream. Anything else (clusterTrustBundle, block volumes, ...) fails set-up
//! with a clear message. Attachable CSI volumes in use are tracked for the node's
//! `status.volumesInUse` ([`in_use`], [`VolumeManager::volumes_in_use`]).
//!
//! How the pod worker uses it (one caller per pod UID at a time; any number of pod
//! workers at once):
//! - every sync, before the sandbox starts: [`VolumeManager::setup_pod`]. The map it
//!   returns goes to the container config (`runtime::container::ContainerContext`).
//!   An error means "volumes not ready": record the `FailedMount` events
//!   ([`record_failed_mount`]), leave the pod waiting (ContainerCreating) and retry at
//!   the next sync. Running it again refreshes configMap, secret, downwardAPI and
//!   token content atomically (the `..data` swap); that repeated call is the resync.
//! - for the environment: [`VolumeManager::config_source`] (same cache as volumes).
//! - edge autonomy (`docs/autonomy.md`): with a pod data store
//!   ([`VolumeManager::with_pod_data`]) the secrets, configMaps and tokens pods need
//!   to start are kept on the node as they are read, stand in for the API server
//!   when it cannot be reached (a `FromNodeCopy` event says so, [`notice`]), and go
//!   with the pod's tear-down; pods the store still holds data for count as pod
//!   directories for housekeeping, so none outlives its pod.
//! - `kubelet::deps::PodVolumes` is implemented on `VolumeManager` (`kubelet.rs`),
//!   so the kubelet's syncer can take an `Arc<VolumeManager>` as is.
//! - after the pod terminated: [`VolumeManager::teardown_pod`] (the pod's subPath
//!   bind mounts under `<uid>/volume-subpaths`, `runtime::subpath`, go first), then poll
//!   [`VolumeManager::pod_volumes_exist`]; housekeeping walks
//!   [`VolumeManager::list_pod_dirs`] and calls [`VolumeManager::remove_pod_dir`] on
//!   orphans.
//!
//! Invariants: nothing is written outside `<root>/pods/<uid>/` except what a hostPath
//! type asks to create; a recursive removal never runs over a mounted file system;
//! a failing volume does not stop the pod's other volumes nor other pods.

pub mod atomic;
pub mod cache;
pub mod csi;
pub mod error;
pub mod hostpath;
pub mod in_use;
mod kubelet;
pub mod mount;
pub mod notice;
pub mod ownership;
pub mod paths;
pub mod payload;
pub mod pv;
mod setup;
pub mod source;
pub mod tally;
pub mod token;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::api::pod::{MountPropagationMode, Pod};
use crate::api::quantity::Quantity;
use crate::api::ApiClient;
use crate::events::Recorder;
use crate::poddata::Store;
use crate::runtime::env::EnvContext;
use crate::runtime::subpath;

pub use cache::{ObjectCache, ObjectKind, ObjectRef, DEFAULT_TTL};
pub use error::{record_failed_mount, NoCopy, VolumeError, FAILED_MOUNT, FAILED_UNMOUNT};
pub use in_use::VolumesInUse;
pub use source::PodConfigSource;
pub use token::TokenManager;

/// Sets up and tears down pod volumes; shared by all pod workers (`&self` methods).
pub struct VolumeManager {
    root: PathBuf,
    node_name: String,
    objects: ObjectCache,
    tokens: TokenManager,
    /// Node facts for downwardAPI resourceFieldRefs (allocatable cpu and memory).
    node: Mutex<EnvContext>,
    /// Mount tmpfs where upstream does, and shared mounts for propagation (needs
    /// root); off for unprivileged runs.
    mounts: bool,
    /// Volumes by plugin, wanted and set up, for `volume_manager_total_volumes`.
    tally: tally::Tally,
    /// The API client for claims and volumes (`None` standalone).
    api: Option<ApiClient>,
    /// CSI drivers registered by the plugin watcher, and the calls on them.
    csi: csi::mounter::Mounter,
    /// The node's copies of what pods need to start; `None` with
    /// `--checkpoint-secrets=false` (or standalone).
    store: Option<Arc<Store>>,
    /// Events saying a pod's data comes from the node's copy.
    notices: notice::KeptNotices,
}

impl VolumeManager {
    /// A manager for `root_dir`; `client` is `None` in standalone mode (then
    /// configMap, secret and token volumes fail with a clear message). Attachable CSI
    /// volumes that an earlier run left mounted (their `vol_data.json` records) count
    /// as in use from the start.
    pub fn new(root_dir: impl Into<PathBuf>, client: Option<ApiClient>, node_name: &str) -> Self {
        let root_dir: PathBuf = root_dir.into();
        let in_use = VolumesInUse::default();
        for (uid, record) in csi::mounter::records(&root_dir) {
            if !record.attachment_id.is_empty() {
                let name =
                    csi::plan::unique_volume_name(&record.driver_name, &record.volume_handle);
                in_use.add(&name, &uid);
            }
        }
        Self {
            root: root_dir.clone(),
            node_name: node_name.to_owned(),
            objects: ObjectCache::new(client.clone(), DEFAULT_TTL),
            tokens: TokenManager::new(client.clone()),
            csi: csi::mounter::Mounter {
                root: root_dir.clone(),
                node: node_name.to_owned(),
                drivers: csi::Drivers::default(),
                api: client.clone(),
                in_use,
            },
            notices: notice::KeptNotices::new(
                Recorder::log_only(),
                client.as_ref().map(|c| c.reachability().clone()),
            ),
            api: client,
            node: Mutex::new(EnvContext {
                node_name: node_name.to_owned(),
                ..EnvContext::default()
            }),
            mounts: true,
            store: None,
            tally: tally::Tally::default(),
        }
    }

    /// Keeps what pods need to start in `store`, and serves it when the API server
    /// cannot be reached (edge autonomy).
    pub fn with_pod_data(mut self, store: Arc<Store>) -> Self {
        self.objects = self.objects.with_store(store.clone());
        self.tokens = self.tokens.with_store(store.clone());
        self.store = Some(store);
        self
    }

    /// Records the `FromNodeCopy` events through `recorder` (else they are only logged).
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        let reachability = self.api.as_ref().map(|c| c.reachability().clone());
        self.notices = notice::KeptNotices::new(recorder, reachability);
        self
    }

    /// Starts the `plugins` thread: the CSI plugin watcher on
    /// `<root>/plugins_registry`, which registers drivers for this manager.
    pub fn spawn_plugin_watcher(
        &self,
        shutdown: crossbeam_channel::Receiver<()>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        csi::watcher::spawn(
            &self.root,
            &self.node_name,
            self.api.clone(),
            self.csi.drivers.clone(),
            shutdown,
        )
    }

    /// The attachable volumes in use, for the node's `status.volumesInUse`.
    pub fn volumes_in_use(&self) -> VolumesInUse {
        self.csi.in_use.clone()
    }

    /// Names of the CSI drivers registered now.
    pub fn csi_drivers(&self) -> Vec<String> {
        self.csi.drivers.names()
    }

    /// How long a configMap or secret copy is served before it is read again.
    pub fn with_cache_ttl(mut self, ttl: Duration) -> Self {
        self.objects = self.objects.with_ttl(ttl);
        self
    }

    /// Never mounts: memory-backed volumes become plain directories (for
    /// unprivileged runs and tests; a warning is logged per volume).
    pub fn without_mounts(mut self) -> Self {
        self.mounts = false;
        self
    }

    /// Sets the node's allocatable resources (read by downwardAPI resourceFieldRefs
    /// to containers without limits).
    pub fn set_node_allocatable(&self, allocatable: BTreeMap<String, Quantity>) {
        lock(&self.node).node_allocatable = allocatable;
    }

    fn node_facts(&self) -> EnvContext {
        lock(&self.node).clone()
    }

    /// Start-up: creates `<root>/pods`.
    pub fn prepare_root(&self) -> Result<(), VolumeError> {
        let pods = paths::pods_dir(&self.root);
        fs::create_dir_all(&pods).map_err(|e| VolumeError::io("create dir", &pods, e))
    }

    /// Sets up every volume of `pod` (idempotent; see the module doc). Returns the
    /// host path of each volume by name, or every failure.
    pub fn setup_pod(&self, pod: &Pod) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
        paths::check_segment("pod uid", pod.uid())?;
        let fs_group = pod
            .spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.fs_group)
            .and_then(|g| u32::try_from(g).ok());
        let mut ready = BTreeMap::new();
        let mut failures = Vec::new();
        let mut plugins = tally::PodPlugins::default();
        let propagated = propagated_volumes(pod);
        for volume in &pod.spec.volumes {
            let shared = self.mounts && propagated.contains(volume.name.as_str());
            let started = std::time::Instant::now();
            let (plugin, result) = self.setup_volume(pod, volume, fs_group);
            let result = result.and_then(|path| match shared {
                true => mount::ensure_shared(&path)
                    .map(|()| path)
                    .map_err(VolumeError::from),
                false => Ok(path),
            });
            if let Some(plugin) = plugin {
                let took = started.elapsed();
                crate::metrics::storage_operation("volume_mount", plugin, result.is_ok(), took);
                plugins.desired.push(plugin);
                if result.is_ok() {
                    plugins.actual.push(plugin);
                }
            }
            match result {
                Ok(path) => {
                    ready.insert(volume.name.clone(), path);
                }
                Err(e) => failures.push(e.in_volume(&volume.name)),
            }
        }
        self.tally.set_pod(pod.uid(), plugins);
        if failures.is_empty() {
            return Ok(ready);
        }
        Err(VolumeError::Pod {
            pod: format!("{}/{}", pod.namespace(), pod.name()),
            failures,
        })
    }

    /// The environment's configMap and secret reader for `pod`.
    pub fn config_source<'a>(&'a self, pod: &'a Pod) -> PodConfigSource<'a> {
        PodConfigSource {
            cache: &self.objects,
            notices: &self.notices,
            pod,
            no_copy: self.no_copy(),
        }
    }

    /// Tears down the volumes of pod `uid` (after it terminated): unmounts what is
    /// mounted under each volume directory, removes it, and forgets the pod's cached
    /// objects and tokens. Missing directories are fine; a volume that cannot be
    /// unmounted is left in place and reported, the others are still removed.
    pub fn teardown_pod(&self, uid: &str) -> Result<(), VolumeError> {
        let volumes = paths::pod_volumes_dir(&self.root, uid)?;
        self.objects.unregister_pod(uid);
        self.tokens.forget_pod(uid);
        self.notices.forget_pod(uid);
        if let Some(store) = &self.store {
            // A failure leaves the pod in the store: housekeeping retries it.
            if let Err(e) = store.forget_pod(uid) {
                log::warn!("pod {uid}: {e}");
            }
        }
        let mut failures = Vec::new();
        let mut csi_failed = false;
        // The subPath bind mounts first: each holds a piece of a volume (or, for a
        // hostPath, of the host), and nothing below them may be removed through them.
        if let Err(e) = subpath::clean_pod(&self.root, uid) {
            failures.push(e.into());
        }
        for plugin in list_dir(&volumes)? {
            let plugin_dir = volumes.join(&plugin);
            let entries = match list_dir(&plugin_dir) {
                Ok(entries) => entries,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            // `kubernetes.io~configmap` on disk is plugin `kubernetes.io/configmap`.
            let plugin_name = plugin.replace('~', "/");
            for name in entries {
                let started = std::time::Instant::now();
                let dir = plugin_dir.join(&name);
                let result = self.tear_down_volume(&plugin, &dir, &mut csi_failed);
                let took = started.elapsed();
                crate::metrics::storage_operation(
                    "volume_unmount",
                    &plugin_name,
                    result.is_ok(),
                    took,
                );
                if let Err(e) = result {
                    failures.push(e.in_volume(&name));
                }
            }
            remove_empty_dir(&plugin_dir, &mut failures);
        }
        remove_empty_dir(&volumes, &mut failures);
        // A CSI volume still published stays in use (the next pass retries it);
        // once all are unpublished the pod holds no attached volume.
        if !csi_failed {
            self.csi.in_use.release_pod(uid);
        }
        if failures.is_empty() {
            self.tally.forget_pod(uid);
            return Ok(());
        }
        Err(VolumeError::Pod {
            pod: uid.to_owned(),
            failures,
        })
    }

    /// Removes one volume directory of plugin directory `plugin`; a CSI driver
    /// first unmounts (and unstages) its own volumes, and when it fails the volume
    /// stays (`csi_failed`: still published).
    fn tear_down_volume(
        &self,
        plugin: &str,
        dir: &Path,
        csi_failed: &mut bool,
    ) -> Result<(), VolumeError> {
        if plugin == csi::plan::PLUGIN_CSI {
            if let Err(e) = self.csi.tear_down(dir) {
                *csi_failed = true;
                return Err(e.into());
            }
        }
        remove_tree(dir)
    }

    /// True while any volume directory or subPath mount directory of pod `uid` is
    /// left on disk (upstream podVolumesExist); a directory that cannot be read
    /// counts as present.
    pub fn pod_volumes_exist(&self, uid: &str) -> bool {
        let Ok(volumes) = paths::pod_volumes_dir(&self.root, uid) else {
            return false;
        };
        if subpath::pod_has_subpaths(&self.root, uid) {
            return true;
        }
        match list_dir(&volumes) {
            Ok(plugins) => plugins
                .iter()
                .any(|p| list_dir(&volumes.join(p)).map_or(true, |v| !v.is_empty())),
            Err(_) => true,
        }
    }

    /// UIDs of every pod directory under `<root>/pods`, and of every pod the pod
    /// data store holds something for (for orphan housekeeping: what an orphan left
    /// there goes with it).
    pub fn list_pod_dirs(&self) -> Result<Vec<String>, VolumeError> {
        let mut uids: BTreeSet<String> = list_dir(&paths::pods_dir(&self.root))?
            .into_iter()
            .collect();
        if let Some(store) = &self.store {
            uids.extend(store.pods());
        }
        Ok(uids
            .into_iter()
            .filter(|uid| paths::check_segment("pod uid", uid).is_ok())
            .collect())
    }

    /// Removes an orphan's whole `<root>/pods/<uid>` after tearing down its volumes;
    /// refuses while anything under it is still mounted.
    pub fn remove_pod_dir(&self, uid: &str) -> Result<(), VolumeError> {
        self.teardown_pod(uid)?;
        let dir = paths::pod_dir(&self.root, uid)?;
        mount::ensure_nothing_mounted(&dir)?;
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(VolumeError::io("remove", &dir, e)),
        }
    }

    /// The node this manager runs for.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The root directory (`--root-dir`).
    pub fn root_dir(&self) -> &Path {
        &self.root
    }

    /// Cached configMaps/secrets and tokens (for tests and stats).
    pub fn cached_counts(&self) -> (usize, usize) {
        (self.objects.len(), self.tokens.len())
    }
}

/// How an object served from the node's copy is named in its event.
fn kept_object(object: &ObjectRef<'_>, resource_version: &str) -> String {
    format!(
        "{} {}/{} (resourceVersion {resource_version})",
        object.kind.as_str(),
        object.namespace,
        object.name
    )
}

/// Volumes under the root that some container mounts with HostToContainer or
/// Bidirectional propagation (a hostPath's propagation is the host's business).
fn propagated_volumes(pod: &Pod) -> BTreeSet<&str> {
    let containers = pod.spec.init_containers.iter().chain(&pod.spec.containers);
    containers
        .flat_map(|c| &c.volume_mounts)
        .filter(|m| {
            matches!(
                m.mount_propagation,
                Some(MountPropagationMode::HostToContainer | MountPropagationMode::Bidirectional)
            )
        })
        .filter(|m| {
            pod.spec
                .volumes
                .iter()
                .any(|v| v.name == m.name && v.host_path.is_none())
        })
        .map(|m| m.name.as_str())
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded value is replaced whole; a panic elsewhere cannot tear it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Names in `dir`; a missing directory is empty.
fn list_dir(dir: &Path) -> Result<Vec<String>, VolumeError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(VolumeError::io("read dir", dir, e)),
    };
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect())
}

/// Unmounts everything under `path`, checks nothing is left mounted, removes it.
fn remove_tree(path: &Path) -> Result<(), VolumeError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(VolumeError::io("stat", path, e)),
    };
    if !meta.is_dir() {
        return fs::remove_file(path).map_err(|e| VolumeError::io("remove", path, e));
    }
    mount::unmount_all_under(path)?;
    mount::ensure_nothing_mounted(path)?;
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(VolumeError::io("remove", path, e)),
    }
}

fn remove_empty_dir(dir: &Path, failures: &mut Vec<VolumeError>) {
    match fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        // Not empty because a volume failed above: already reported.
        Err(_) if !failures.is_empty() => {}
        Err(e) => failures.push(VolumeError::io("remove", dir, e)),
    }
}

#[cfg(test)]
mod tests;
