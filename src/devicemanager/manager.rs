//! [`DeviceManager`]: the shared handle over the device state (one mutex, never held
//! across a plugin call or a file write: the checkpoint is encoded under it and
//! written after, numbered so an older snapshot never replaces a newer one), the
//! registration server, the endpoint threads and the allocation of devices to
//! containers on pod worker threads. The plugins folder and the state folder are
//! 0750 and every socket served here (`kubelet.sock`, PodResources') 0600, whatever
//! the umask ([`serve_unix`]). A plugin's GetPreferredAllocation answer is only a
//! preference: devices named twice or not offered are passed over.
//!
//! Threads: grpcio's `dp-reg` completion queue runs `Register` (validates, answers,
//! spawns); one `dp-<resource>` thread per registration calls
//! GetDevicePluginOptions and iterates `ListAndWatch` until the stream ends (the
//! plugin stopped, restarted or was replaced). They are not joined at shutdown: a
//! stream ends only when its plugin closes it, so they end with the process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use grpcio::{
    CallOption, ChannelBuilder, EnvBuilder, Environment, RpcContext, RpcStatus, RpcStatusCode,
    ServerBuilder, ServerCredentials, UnarySink,
};

use super::checkpoint;
use super::grpc::{create_registration, DevicePluginClient, Registration};
use super::pb;
use super::state::{container_need, ContainerKey, DeviceInfo, DeviceState, Unavailable, HEALTHY};
use crate::api::pod::{Container, Pod};
use crate::runtime::devices::{
    ContainerDevices, DeviceMount, DeviceNode, DeviceRunOptions, DevicesError,
};

/// The API version litelet speaks.
pub const VERSION: &str = "v1beta1";
/// The registration socket's name in the device plugins folder.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Where every plugin expects the registration socket (hard-coded in plugins).
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
/// Deadline of each unary plugin call (upstream's connection and call timeouts).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Stack of an endpoint thread: it only iterates a stream.
const STACK: usize = 256 * 1024;

/// A failure at a device-plugin seam.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device plugins folder {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("registration server at {path}: {source}")]
    Serve {
        path: PathBuf,
        source: Box<grpcio::Error>,
    },
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    #[error("no device plugin is registered for {resource}")]
    NoPlugin { resource: String },
    #[error("device plugin {resource}: {call}: {source}")]
    Call {
        resource: String,
        call: &'static str,
        source: Box<grpcio::Error>,
    },
    #[error("device plugin {resource}: {call}: {message}")]
    Answer {
        resource: String,
        call: &'static str,
        message: String,
    },
}

/// Why a plugin's `Register` request is refused; the plugin gets the text back.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    // Upstream's wording (errUnsupportedVersion).
    #[error(
        "requested API version {0:?} is not supported by kubelet. Supported versions are [{VERSION:?}]"
    )]
    UnsupportedVersion(String),
    #[error("the ResourceName {0:?} is invalid")]
    InvalidResourceName(String),
    #[error("invalid endpoint {0:?}")]
    InvalidEndpoint(String),
    #[error("cannot start endpoint thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// A registered plugin's client and options.
#[derive(Clone)]
struct Endpoint {
    client: DevicePluginClient,
    options: pb::DevicePluginOptions,
}

struct Shared {
    state: Mutex<DeviceState>,
    endpoints: Mutex<BTreeMap<String, Endpoint>>,
    /// Where plugins' sockets and `kubelet.sock` live.
    socket_dir: PathBuf,
    /// The checkpoint file.
    checkpoint: PathBuf,
    /// Numbers each checkpoint snapshot, taken under the state lock.
    seq: AtomicU64,
    /// The newest snapshot on disk; held while writing.
    written: Mutex<u64>,
    /// One-slot wake-up for the node status when capacity or health changed.
    changed: (
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    ),
}

/// The device manager: cheap to clone, shared by the registration server, the
/// endpoint threads, the node status, admission and the runtime manager.
#[derive(Clone)]
pub struct DeviceManager {
    shared: Arc<Shared>,
}

/// The running registration server; dropping it stops serving (endpoint threads end
/// with their streams).
pub struct RegistrationServer {
    _server: grpcio::Server,
    pub socket: PathBuf,
}

/// The one grpcio environment of the device plugin side (one completion-queue
/// thread, `dp-0`); the PodResources server shares it through [`serve_unix`] rather
/// than adding threads.
fn environment() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(EnvBuilder::new().cq_count(1).name_prefix("dp").build()))
        .clone()
}

/// Why [`serve_unix`] did not start.
#[derive(Debug)]
pub enum UnixServeError {
    /// The socket an earlier run left could not be removed.
    StaleSocket(std::io::Error),
    /// grpcio refused to build or listen.
    Grpc(grpcio::Error),
    /// The bound socket could not be given its mode or its name.
    Socket(std::io::Error),
}

/// The mode of every unix socket litelet serves: only root connects (a socket needs
/// write permission to connect), whatever the umask; upstream's follow the umask,
/// which under systemd's 0022 comes to the same.
pub const SOCKET_MODE: u32 = 0o600;

/// Creates `dir` (and its parents) and makes it 0750, as upstream's device plugin
/// and pod resources folders: other users can neither list nor reach the sockets.
pub fn private_folder(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
}

/// Removes `path` if it is there.
fn remove_stale(path: &Path) -> Result<(), UnixServeError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(UnixServeError::StaleSocket(e)),
    }
}

/// Serves `service` on the device plugin side's grpcio environment (`dp-0`) at the
/// unix socket `socket`, replacing one an earlier run left (clients watch for its
/// creation). The socket is bound under a temp name, given [`SOCKET_MODE`], then
/// renamed into place, so it never appears with the umask's mode (upstream binds
/// under a temp name too, so that it appears whole).
pub fn serve_unix(
    service: grpcio::Service,
    socket: &Path,
) -> Result<grpcio::Server, UnixServeError> {
    use std::os::unix::fs::PermissionsExt;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(socket.file_name().unwrap_or_default());
    temp_name.push(".binding");
    let temp = socket.with_file_name(temp_name);
    remove_stale(socket)?;
    remove_stale(&temp)?;
    let mut server = ServerBuilder::new(environment())
        .register_service(service)
        .build()
        .map_err(UnixServeError::Grpc)?;
    server
        .add_listening_port(
            format!("unix:{}", temp.display()),
            ServerCredentials::insecure(),
        )
        .map_err(UnixServeError::Grpc)?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(SOCKET_MODE))
        .and_then(|()| std::fs::rename(&temp, socket))
        .map_err(UnixServeError::Socket)?;
    server.start();
    Ok(server)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic under the lock leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Upstream's resource-name check: a domain-prefixed name outside `kubernetes.io`,
/// not a quota `requests.` name.
pub fn valid_resource_name(name: &str) -> bool {
    let Some((domain, rest)) = name.split_once('/') else {
        return false;
    };
    !domain.is_empty()
        && !rest.is_empty()
        && !rest.contains('/')
        && domain != "kubernetes.io"
        && !domain.ends_with(".kubernetes.io")
        && !name.starts_with("requests.")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl DeviceManager {
    /// A manager with plugins' sockets in `socket_dir` and its checkpoint in
    /// `state_dir`, read back now.
    pub fn new(socket_dir: &Path, state_dir: &Path) -> Result<DeviceManager, DeviceError> {
        for dir in [socket_dir, state_dir] {
            private_folder(dir).map_err(|source| DeviceError::Folder {
                path: dir.to_owned(),
                source,
            })?;
        }
        let path = state_dir.join(checkpoint::FILE);
        let state = checkpoint::restore(&path, Instant::now());
        if !state.allocations().is_empty() {
            log::info!(
                "device plugins: {} containers hold devices (checkpoint {})",
                state.allocations().len(),
                path.display()
            );
        }
        Ok(DeviceManager {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                endpoints: Mutex::new(BTreeMap::new()),
                socket_dir: socket_dir.to_owned(),
                checkpoint: path,
                seq: AtomicU64::new(0),
                written: Mutex::new(0),
                changed: crossbeam_channel::bounded(1),
            }),
        })
    }

    /// Serves `Registration` at `<socket_dir>/kubelet.sock` (a stale socket from an
    /// earlier run is replaced: plugins watch for its creation and register again).
    pub fn serve(&self) -> Result<RegistrationServer, DeviceError> {
        let socket = self.shared.socket_dir.join(KUBELET_SOCKET);
        let service = create_registration(RegistrationService(self.clone()));
        let server = serve_unix(service, &socket).map_err(|e| match e {
            UnixServeError::StaleSocket(source) | UnixServeError::Socket(source) => {
                DeviceError::Folder {
                    path: socket.clone(),
                    source,
                }
            }
            UnixServeError::Grpc(source) => DeviceError::Serve {
                path: socket.clone(),
                source: Box::new(source),
            },
        })?;
        log::info!("device plugins: registration at {}", socket.display());
        Ok(RegistrationServer {
            _server: server,
            socket,
        })
    }

    /// Checks a `Register` request; on success starts the plugin's endpoint thread.
    pub fn register(&self, req: &pb::RegisterRequest) -> Result<(), RegisterError> {
        if req.version != VERSION {
            return Err(RegisterError::UnsupportedVersion(req.version.clone()));
        }
        if !valid_resource_name(&req.resource_name) {
            return Err(RegisterError::InvalidResourceName(
                req.resource_name.clone(),
            ));
        }
        let endpoint = Path::new(&req.endpoint);
        if req.endpoint.is_empty() || endpoint.is_absolute() || endpoint.components().count() != 1 {
            return Err(RegisterError::InvalidEndpoint(req.endpoint.clone()));
        }
        let manager = self.clone();
        let resource = req.resource_name.clone();
        let socket = self.shared.socket_dir.join(endpoint);
        let name: String = format!("dp-{resource}").chars().take(15).collect();
        std::thread::Builder::new()
            .name(name)
            .stack_size(STACK)
            .spawn(move || manager.run_endpoint(&resource, &socket))
            .map_err(RegisterError::Thread)?;
        Ok(())
    }

    /// One plugin's life: options, then its device stream until it ends.
    fn run_endpoint(&self, resource: &str, socket: &Path) {
        let channel = ChannelBuilder::new(environment())
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(1))
            .connect(&format!("unix:{}", socket.display()));
        let client = DevicePluginClient::new(channel);
        let options = match client.get_device_plugin_options_opt(
            &pb::Empty::new(),
            CallOption::default()
                .timeout(CALL_TIMEOUT)
                .wait_for_ready(true),
        ) {
            Ok(o) => o,
            Err(e) => {
                log::error!("device plugin {resource}: GetDevicePluginOptions: {e}");
                return;
            }
        };
        let generation = lock(&self.shared.state).register(resource);
        lock(&self.shared.endpoints).insert(
            resource.to_owned(),
            Endpoint {
                client: client.clone(),
                options,
            },
        );
        log::info!(
            "device plugin {resource}: registered at {} (generation {generation})",
            socket.display()
        );
        let ended = match client.list_and_watch(&pb::Empty::new()) {
            Ok(stream) => {
                let mut result = Ok(());
                for item in crate::blocking::iter_stream(stream) {
                    match item {
                        Ok(list) => {
                            if !self.on_list(resource, generation, &list) {
                                // Replaced by a newer registration: dropping the
                                // stream cancels the call.
                                log::info!("device plugin {resource}: generation {generation} replaced; its stream is closed");
                                return;
                            }
                        }
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                result
            }
            Err(e) => Err(e),
        };
        match ended {
            Ok(()) => log::warn!("device plugin {resource}: ListAndWatch ended"),
            Err(e) => log::warn!("device plugin {resource}: ListAndWatch: {e}"),
        }
        let mut state = lock(&self.shared.state);
        if state.stopped(resource, generation, Instant::now()) {
            let mut endpoints = lock(&self.shared.endpoints);
            endpoints.remove(resource);
            drop(endpoints);
            drop(state);
            self.notify();
        }
    }

    /// Applies one device list; false when a newer registration replaced this one.
    fn on_list(&self, resource: &str, generation: u64, list: &pb::ListAndWatchResponse) -> bool {
        let devices: Vec<(String, bool)> = list
            .devices
            .iter()
            .map(|d| (d.ID.clone(), d.health == HEALTHY))
            .collect();
        log::info!(
            "device plugin {resource}: {} devices, {} healthy",
            devices.len(),
            devices.iter().filter(|(_, h)| *h).count()
        );
        let numa: BTreeMap<String, Vec<i64>> = list
            .devices
            .iter()
            .filter_map(|d| {
                let nodes: Vec<i64> = d.topology.as_ref()?.nodes.iter().map(|n| n.ID).collect();
                (!nodes.is_empty()).then(|| (d.ID.clone(), nodes))
            })
            .collect();
        let mut state = lock(&self.shared.state);
        if state.set_devices(resource, generation, devices) {
            state.set_topology(resource, generation, numa);
            self.store(state);
            self.notify();
            return true;
        }
        false
    }

    /// Writes the checkpoint of `state` after releasing its lock, so admission on
    /// the sync loop never waits for an fsync; a newer snapshot written first is
    /// never overwritten by an older one.
    fn store(&self, state: MutexGuard<'_, DeviceState>) {
        let bytes = checkpoint::encode(&state);
        let seq = self.shared.seq.fetch_add(1, Ordering::Relaxed) + 1;
        drop(state);
        let mut written = lock(&self.shared.written);
        if seq <= *written {
            return;
        }
        match checkpoint::write(&self.shared.checkpoint, &bytes) {
            Ok(()) => *written = seq,
            Err(e) => log::error!("device plugins: {e}"),
        }
    }

    /// Receives a message when a plugin's devices or health changed (the `node`
    /// thread then publishes the status at once; a full slot is enough).
    pub fn changes(&self) -> crossbeam_channel::Receiver<()> {
        self.shared.changed.1.clone()
    }

    fn notify(&self) {
        let _ = self.shared.changed.0.try_send(());
    }

    /// Capacity and allocatable per device-plugin resource, for the node status.
    pub fn capacity(&self) -> BTreeMap<String, (i64, i64)> {
        lock(&self.shared.state).capacity(Instant::now())
    }

    /// Admission (on the sync loop; no plugin call): does `pod` fit among the
    /// `active` pods' device requests?
    pub fn admit(&self, pod: &Pod, active: &[&Pod]) -> Result<(), Unavailable> {
        lock(&self.shared.state).admit(pod, active, Instant::now())
    }

    /// Frees the devices of every pod not in `active` (housekeeping, once the sources
    /// are ready: before that a pod not yet listed again would lose its devices).
    pub fn retain_pods(&self, active: &BTreeSet<String>) {
        let mut state = lock(&self.shared.state);
        let before: BTreeSet<String> = state
            .allocations()
            .keys()
            .map(|(uid, _)| uid.clone())
            .collect();
        if state.retain_pods(active) {
            for uid in before.difference(active) {
                log::info!("device plugins: pod {uid} is gone; its devices are free");
            }
            self.store(state);
        }
    }

    /// Whether a device plugin serves `resource`.
    pub fn serves(&self, resource: &str) -> bool {
        lock(&self.shared.state).serves(resource)
    }

    /// The devices a container holds of `resource` (tests, diagnostics).
    pub fn held(&self, pod_uid: &str, container: &str, resource: &str) -> Vec<String> {
        let key = (pod_uid.to_owned(), container.to_owned());
        lock(&self.shared.state)
            .assigned(&key, resource)
            .map(|a| a.ids.clone())
            .unwrap_or_default()
    }

    /// What a container holds per resource, with topology (the PodResources API).
    pub fn container_devices(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> BTreeMap<String, Vec<DeviceInfo>> {
        let key = (pod_uid.to_owned(), container.to_owned());
        lock(&self.shared.state).container_devices(&key)
    }

    /// Every healthy device per resource, with topology (the PodResources API).
    pub fn healthy_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>> {
        lock(&self.shared.state).healthy_devices()
    }

    fn endpoint(&self, resource: &str) -> Result<Endpoint, DeviceError> {
        lock(&self.shared.endpoints)
            .get(resource)
            .cloned()
            .ok_or_else(|| DeviceError::NoPlugin {
                resource: resource.to_owned(),
            })
    }

    /// The devices of `resource` for `container`: the checkpointed answer (no plugin
    /// needed: a container restarting while its plugin is away still gets them;
    /// the endpoint is then `None`), else free devices picked (the plugin's
    /// preference first) and `Allocate`d now.
    fn allocate(
        &self,
        key: &ContainerKey,
        resource: &str,
        needed: i64,
        reusable: &[ContainerKey],
    ) -> Result<(Vec<String>, DeviceRunOptions, Option<Endpoint>), DeviceError> {
        let held = lock(&self.shared.state).assigned(key, resource).cloned();
        if let Some(held) = held {
            if let Some(options) = held.options {
                return Ok((held.ids, options, self.endpoint(resource).ok()));
            }
        }
        let endpoint = self.endpoint(resource)?;
        let call = |call, source| DeviceError::Call {
            resource: resource.to_owned(),
            call,
            source: Box::new(source),
        };
        let mut preferred = Vec::new();
        if endpoint.options.get_preferred_allocation_available {
            let free = lock(&self.shared.state).free_for(resource, reusable);
            let req = pb::PreferredAllocationRequest {
                container_requests: vec![pb::ContainerPreferredAllocationRequest {
                    available_deviceIDs: free.clone(),
                    allocation_size: i32::try_from(needed).unwrap_or(i32::MAX),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let answer = endpoint
                .client
                .get_preferred_allocation_opt(&req, CallOption::default().timeout(CALL_TIMEOUT))
                .map_err(|e| call("GetPreferredAllocation", e))?;
            if let Some(first) = answer.container_responses.into_iter().next() {
                preferred = first.deviceIDs;
            }
            let distinct: BTreeSet<&String> = preferred.iter().collect();
            if distinct.len() != preferred.len() || !distinct.iter().all(|id| free.contains(id)) {
                log::warn!(
                    "device plugin {resource}: GetPreferredAllocation named a device twice or one not offered ({preferred:?}); only the distinct offered ones count"
                );
            }
        }
        let ids = {
            let mut state = lock(&self.shared.state);
            let ids = state.pick(key, resource, needed, &preferred, reusable)?;
            self.store(state);
            ids
        };
        let req = pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: ids.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let answer = endpoint
            .client
            .allocate_opt(&req, CallOption::default().timeout(CALL_TIMEOUT));
        let options = match answer {
            Ok(a) if a.container_responses.len() == 1 => {
                a.container_responses.into_iter().next().map(run_options)
            }
            Ok(a) => {
                self.release(key, resource);
                return Err(DeviceError::Answer {
                    resource: resource.to_owned(),
                    call: "Allocate",
                    message: format!(
                        "{} container responses for 1 request",
                        a.container_responses.len()
                    ),
                });
            }
            Err(e) => {
                self.release(key, resource);
                return Err(call("Allocate", e));
            }
        }
        .unwrap_or_default();
        let mut state = lock(&self.shared.state);
        state.set_options(key, resource, options.clone());
        self.store(state);
        Ok((ids, options, Some(endpoint)))
    }

    fn release(&self, key: &ContainerKey, resource: &str) {
        let mut state = lock(&self.shared.state);
        state.release(key, resource);
        self.store(state);
    }

    /// Every device-plugin resource `container` asks for, allocated, plus
    /// PreStartContainer where the plugin asks for it.
    pub fn container_options(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<DeviceRunOptions, DeviceError> {
        let wanted: Vec<(String, i64)> = {
            let state = lock(&self.shared.state);
            let names: BTreeSet<&String> = container
                .resources
                .iter()
                .flat_map(|r| r.limits.keys().chain(r.requests.keys()))
                .collect();
            names
                .into_iter()
                .filter(|n| state.serves(n))
                .map(|n| (n.clone(), container_need(container, n)))
                .filter(|(_, need)| *need > 0)
                .collect()
        };
        let key = (pod.uid().to_owned(), container.name.clone());
        // Init containers run to completion before the next container starts, so
        // what they held may be handed on; sidecars keep theirs.
        let reusable: Vec<ContainerKey> = pod
            .spec
            .init_containers
            .iter()
            .filter(|c| !c.is_sidecar() && c.name != container.name)
            .map(|c| (pod.uid().to_owned(), c.name.clone()))
            .collect();
        let mut merged = DeviceRunOptions::default();
        for (resource, needed) in wanted {
            let (ids, options, endpoint) = self.allocate(&key, &resource, needed, &reusable)?;
            if let Some(endpoint) = endpoint.filter(|e| e.options.pre_start_required) {
                let req = pb::PreStartContainerRequest {
                    devices_ids: ids,
                    ..Default::default()
                };
                endpoint
                    .client
                    .pre_start_container_opt(&req, CallOption::default().timeout(CALL_TIMEOUT))
                    .map_err(|source| DeviceError::Call {
                        resource: resource.clone(),
                        call: "PreStartContainer",
                        source: Box::new(source),
                    })?;
            }
            merged.merge(options);
        }
        Ok(merged)
    }
}

impl ContainerDevices for DeviceManager {
    fn run_options(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<DeviceRunOptions, DevicesError> {
        Ok(self.container_options(pod, container)?)
    }
}

/// A plugin's answer for one container as litelet keeps it.
fn run_options(r: pb::ContainerAllocateResponse) -> DeviceRunOptions {
    DeviceRunOptions {
        envs: r.envs.into_iter().collect(),
        mounts: r
            .mounts
            .into_iter()
            .map(|m| DeviceMount {
                container_path: m.container_path,
                host_path: m.host_path,
                read_only: m.read_only,
            })
            .collect(),
        devices: r
            .devices
            .into_iter()
            .map(|d| DeviceNode {
                container_path: d.container_path,
                host_path: d.host_path,
                permissions: d.permissions,
            })
            .collect(),
        annotations: r.annotations.into_iter().collect(),
        cdi_devices: r.cdi_devices.into_iter().map(|c| c.name).collect(),
    }
}

/// The `Registration` service.
#[derive(Clone)]
struct RegistrationService(DeviceManager);

impl Registration for RegistrationService {
    fn register(&mut self, ctx: RpcContext, req: pb::RegisterRequest, sink: UnarySink<pb::Empty>) {
        let result = self.0.register(&req);
        match &result {
            Ok(()) => log::info!(
                "device plugins: {} registers at {}",
                req.resource_name,
                req.endpoint
            ),
            Err(e) => log::warn!("device plugins: refused registration: {e}"),
        }
        ctx.spawn(async move {
            let sent = match result {
                Ok(()) => sink.success(pb::Empty::new()).await,
                Err(err) => {
                    sink.fail(RpcStatus::with_message(
                        RpcStatusCode::INVALID_ARGUMENT,
                        err.to_string(),
                    ))
                    .await
                }
            };
            if let Err(e) = sent {
                log::debug!("device plugins: register answer: {e}");
            }
        });
    }
}
