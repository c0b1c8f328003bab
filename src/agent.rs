//! The agent: resolves the flags against the machine and starts every thread of a
//! running litelet — PLEG, runtime-up, status manager, pod sources, pod workers and
//! the sync loop — then waits for shutdown. Wiring only; every part lives elsewhere.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver};

use crate::admission::sysctls::{kernel_version, SysctlAllowlist};
use crate::admission::NodeView;
use crate::api::client::ApiClient;
use crate::api::kubeconfig;
use crate::api::request_threads::RequestThreads;
use crate::certificate::rotation::{Rotation, Schedule};
use crate::certificate::store::CertStore;
use crate::certificate::CertKind;
use crate::cgroups::manager::{Driver as CgroupsDriver, ManagerConfig, PodCgroupManager};
use crate::cgroups::systemd::bus::DbusUnits;
use crate::config::{CgroupDriver, Flags};
use crate::credentialprovider::plugin::{
    self as credential_plugin, CredentialPlugins, ProviderConfig,
};
use crate::credentialprovider::NodeDockerConfig;
use crate::cri::{self, RuntimeClient};
use crate::devicemanager::DeviceManager;
use crate::events::{sink, EventType, Recorder};
use crate::images::gc::ImageGcPolicy;
use crate::images::manager::CredentialSettings;
use crate::images::pull_records::{PullRecords, RuntimeImage};
use crate::kubelet::deps::{NoProbes, PodProbes};
use crate::kubelet::gc_loop::{GcLoop, GcRequest};
use crate::kubelet::mirror::MirrorClient;
use crate::kubelet::node_allocatable::NodeAllocatable;
use crate::kubelet::syncer::{KubeletSyncer, NodeFacts, SyncerDeps};
use crate::kubelet::{Kubelet, KubeletDeps};
use crate::node::register;
use crate::node::status as node_status;
use crate::node::{MachineInfo, MachineReader, MachineRoots, NodeConfig, NodeInputs, NodeLister};
use crate::pleg::{
    LastRelist, Pleg, PlegHealth, PodLifecycleEvent, RelistNudge, EVENT_CHANNEL_CAPACITY,
};
use crate::pod_workers::{PodWorkers, WorkQueue, WorkerTimings};
use crate::prober::{ProbeManager, ProbeMetrics, ProbeUpdate};
use crate::process::Shutdown;
use crate::runtime::cache::PodStatusCache;
use crate::runtime::dns::{DnsSettings, ResolvConf};
use crate::runtime::gc::GcPolicy;
use crate::runtime::hooks::CriHookRunner;
use crate::runtime::manager::{RuntimeManager, RuntimeSettings};
use crate::runtime::resize::{PodResize, ResizeConfig, ResizeManager};
use crate::runtime::state::RuntimeState;
use crate::runtime_class::{RuntimeClassSource, RuntimeClasses};
use crate::server::{self, ServerContext};
use crate::sources::watched::WatchedPods;
use crate::sources::{self, PodUpdate, SOURCE_API, SOURCE_FILE};
use crate::status::manager::{PodHooks, StatusManager, UnstartedStatusManager};
use crate::volumes::VolumeManager;

/// A failure that stops the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error("cannot start thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error(transparent)]
    Swap(#[from] SwapOn),
}

/// `--fail-swap-on`: the host has swap areas on.
#[derive(Debug, thiserror::Error)]
#[error(
    "swap is on ({}): turn it off (swapoff -a) or start with --fail-swap-on=false \
     (failSwapOn: false), with memorySwap.swapBehavior saying what containers get",
    areas.join(", ")
)]
pub struct SwapOn {
    /// The active swap areas, as `/proc/swaps` names them.
    pub areas: Vec<String>,
}

/// The node name: `--hostname-override`, else the machine's hostname, lowercased.
pub fn node_name(flags: &Flags) -> String {
    let name = flags.hostname_override.clone().unwrap_or_else(|| {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into())
    });
    name.trim().to_lowercase()
}

/// The node as admission sees it before the API server's copy is known: the labels
/// and taints litelet registers it with, and its allocatable resources (machine
/// capacity minus the kube/system reservations and the hard eviction threshold, as
/// the node reports it).
fn node_view(
    name: &str,
    config: &NodeConfig,
    machine: &MachineInfo,
    flags: &Flags,
) -> Result<NodeView, AgentError> {
    let capacity = node_status::machine_capacity(machine, flags.max_pods);
    let reserved = node_status::reservation(config, &capacity);
    let sysctls = SysctlAllowlist::new(
        kernel_version(&machine.kernel_version),
        &flags.allowed_unsafe_sysctls,
    )
    .map_err(|e| AgentError::Config(format!("--allowed-unsafe-sysctls: {e}")))?;
    Ok(NodeView {
        name: name.to_owned(),
        labels: register::owned_labels(config, &machine.architecture),
        taints: config.register_with_taints.clone(),
        allocatable: node_status::allocatable(&capacity, &reserved),
        sysctls,
        support: crate::admission::fields::NodeSupport {
            // Filled from each CRI Status answer by the sync loop.
            runtime: Default::default(),
            runtime_classes: flags.kubeconfig.is_some(),
        },
    })
}

/// The pod volume manager, and its `plugins` thread (CSI node plugins registering
/// from plugins_registry). Without root nothing can be mounted: secrets and other
/// memory-backed volumes are then written to disk (with a warning).
fn start_volumes(
    w: &mut Wiring,
    root_dir: &std::path::Path,
    node: &str,
    mut allocatable: std::collections::BTreeMap<String, crate::api::quantity::Quantity>,
) -> Result<Arc<VolumeManager>, AgentError> {
    let mut volumes =
        VolumeManager::new(root_dir, w.worker_api.clone(), node).with_recorder(w.recorder.clone());
    if let Some(store) = pod_data_store(w.flags, root_dir, node, w.worker_api.is_some()) {
        volumes = volumes.with_pod_data(Arc::new(store));
    }
    if !nix::unistd::geteuid().is_root() {
        log::warn!("not running as root: secret and memory-backed volumes go to disk");
        volumes = volumes.without_mounts();
    }
    allocatable.remove("pods");
    volumes.set_node_allocatable(allocatable);
    let volumes = Arc::new(volumes);
    w.threads
        .add(volumes.spawn_plugin_watcher(w.threads.shutdown())?);
    Ok(volumes)
}

/// The volume manager seen by the pod workers, recording which claims each pod has
/// mounted where, for the `stats` thread's `kubelet_volume_stats_*`.
struct ClaimRecording {
    inner: Arc<VolumeManager>,
    claims: crate::stats::claims::ClaimMounts,
}

impl crate::kubelet::deps::PodVolumes for ClaimRecording {
    fn setup(
        &self,
        pod: &crate::api::pod::Pod,
    ) -> Result<
        std::collections::BTreeMap<String, std::path::PathBuf>,
        crate::kubelet::deps::PodVolumesError,
    > {
        let paths = self.inner.setup(pod)?;
        let mounts = crate::stats::claims::claim_mounts(pod, &paths);
        self.claims.set_pod(pod.uid(), mounts);
        Ok(paths)
    }

    fn teardown(&self, uid: &str) -> Result<(), crate::kubelet::deps::PodVolumesError> {
        self.claims.forget_pod(uid);
        self.inner.teardown(uid)
    }

    fn config_source<'a>(
        &'a self,
        pod: &'a crate::api::pod::Pod,
    ) -> Box<dyn crate::runtime::env::ConfigSource + 'a> {
        crate::kubelet::deps::PodVolumes::config_source(self.inner.as_ref(), pod)
    }

    fn pull_secret(
        &self,
        pod: &crate::api::pod::Pod,
        name: &str,
    ) -> Result<Option<crate::credentialprovider::PullSecret>, crate::kubelet::deps::PodVolumesError>
    {
        self.inner.pull_secret(pod, name)
    }
}

/// The pod data store (edge autonomy: tokens, secrets and configMaps pods need to
/// start), or `None`: standalone, `--checkpoint-secrets=false` (which removes what
/// was kept), or a store that cannot be opened or key that cannot be read (logged:
/// litelet runs on without it, and with a missing key reads and removes nothing).
fn pod_data_store(
    flags: &Flags,
    root_dir: &std::path::Path,
    node: &str,
    with_api: bool,
) -> Option<crate::poddata::Store> {
    if !flags.checkpoint_secrets {
        crate::poddata::remove_all(root_dir);
        return None;
    }
    if !with_api {
        return None;
    }
    let key = match &flags.checkpoint_secrets_key_file {
        None => None,
        Some(path) => match crate::poddata::SealKey::from_file(path) {
            Ok(key) => Some(key),
            Err(e) => {
                log::error!("{e}: pod data is neither kept nor read this run");
                return None;
            }
        },
    };
    crate::poddata::Store::open(root_dir, node, key)
        .map_err(|e| log::error!("{e}: pod data is neither kept nor read this run"))
        .ok()
}

/// Where the sources keep their checkpoints, or `None` with
/// `--checkpoint-api-pods=false` (whose old files are then removed, so a later
/// re-enable never runs pods from a long-gone time).
fn checkpoint_spec(
    flags: &Flags,
    root_dir: &std::path::Path,
    node: &str,
) -> Option<sources::checkpoint::CheckpointSpec> {
    use sources::checkpoint::{CheckpointFile, API_PODS, SERVICES};
    if flags.checkpoint_api_pods {
        return Some(sources::checkpoint::CheckpointSpec::new(root_dir, node));
    }
    for kind in [API_PODS, SERVICES] {
        let file = CheckpointFile::new(root_dir, kind);
        match std::fs::remove_file(file.path()) {
            Ok(()) => log::info!("checkpoint {} removed (disabled)", file.path().display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("removing checkpoint {}: {e}", file.path().display()),
        }
    }
    None
}

/// Starts the `stats` thread (usage sampling for the node API); without a cgroup
/// reader the node API's usage paths are off, the rest of litelet is not affected.
fn start_stats(
    w: &mut Wiring,
    cgroups: Option<Arc<PodCgroupManager>>,
    claims: crate::stats::claims::ClaimMounts,
) -> Option<crate::stats::StatsStore> {
    let flags = w.flags;
    let reader = match crate::stats::cgroup::reader_from_system() {
        Ok(reader) => reader,
        Err(err) => {
            log::warn!("usage stats disabled: {err}");
            return None;
        }
    };
    let mut collector = crate::stats::Collector::new(
        w.runtime.clone(),
        Some(w.images.clone()),
        reader,
        cgroups,
        flags.root_dir.clone(),
        flags.pod_logs_dir.clone(),
    );
    collector.claims = claims;
    let store = crate::stats::StatsStore::new();
    match crate::stats::sampler::spawn(
        collector,
        store.clone(),
        crate::stats::DEFAULT_PERIOD,
        w.threads.shutdown(),
    ) {
        Ok(handle) => {
            w.threads.add(handle);
            Some(store)
        }
        Err(err) => {
            log::error!("usage stats disabled: {err}");
            None
        }
    }
}

/// How long shutdown waits for the started threads to end; one still blocked in I/O
/// after that (an API request in flight) is named in the log and left to the process
/// exit. Containers stay running either way.
const SHUTDOWN_JOIN_LIMIT: Duration = Duration::from_secs(3);

/// The threads the agent started, joined at shutdown, and the shutdown signal each
/// is given.
struct Threads {
    shutdown: Shutdown,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    fn new(shutdown: &Shutdown) -> Self {
        Threads {
            shutdown: shutdown.clone(),
            handles: Vec::new(),
        }
    }

    /// The shutdown signal for a new thread.
    fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    fn add(&mut self, handle: JoinHandle<()>) {
        self.handles.push(handle);
    }

    /// Joins every thread that ends within `limit` of the first call.
    fn join_within(self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut pending = self.handles;
        while !pending.is_empty() && Instant::now() < deadline {
            let (done, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|h| h.is_finished());
            for handle in done {
                let name = handle.thread().name().unwrap_or("?").to_owned();
                if handle.join().is_err() {
                    log::error!("thread {name} panicked");
                }
            }
            pending = rest;
            if !pending.is_empty() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if !pending.is_empty() {
            let names: Vec<&str> = pending
                .iter()
                .map(|h| h.thread().name().unwrap_or("?"))
                .collect();
            log::warn!("shutdown: threads still running after {limit:?}: {names:?}");
        }
    }
}

/// What the `start_*` functions share: the flags, the runtime's clients, the API
/// clients, the event recorder and the threads started so far.
struct Wiring<'a> {
    flags: &'a Flags,
    runtime: RuntimeClient,
    images: cri::ImageClient,
    /// The client of the threads that keep their own API connection.
    api: Option<ApiClient>,
    /// The pod workers' client (volume objects, tokens, mirror pods,
    /// RuntimeClasses): its requests run on two `api-req` threads, so that one
    /// worker thread per pod keeps a shallow stack.
    worker_api: Option<ApiClient>,
    recorder: Recorder,
    /// The eviction manager's pressure and the node shutdown's state.
    guards: Guards,
    threads: Threads,
}

/// What keeps pods out and the node unready besides the runtime: the eviction
/// manager's pressure conditions and the node shutdown's state.
#[derive(Default)]
struct Guards {
    pressure: crate::eviction::Pressure,
    shutdown: crate::nodeshutdown::ShutdownState,
}

/// The machine and the node as resolved once at start: name, directories, the node's
/// config and facts, and the view admission starts from.
struct Host {
    node: String,
    root_dir: PathBuf,
    node_config: NodeConfig,
    reader: MachineReader,
    machine: MachineInfo,
    /// Computed once; the sync loop and resize admission share it.
    view: NodeView,
}

fn resolve_host(flags: &Flags) -> Result<Host, AgentError> {
    let node = node_name(flags);
    let root_dir = flags.root_dir.clone();
    std::fs::create_dir_all(root_dir.join("pods"))
        .map_err(|e| AgentError::Config(format!("cannot create {}: {e}", root_dir.display())))?;
    let node_config = flags
        .node_config(Some(&node))
        .map_err(|e| AgentError::Config(e.to_string()))?;
    let reader = MachineReader::new(MachineRoots::host(), &root_dir, node_config.node_ip);
    let (machine, problems) = reader.read();
    for problem in problems {
        log::warn!("machine facts: {problem}");
    }
    let view = node_view(&node, &node_config, &machine, flags)?;
    Ok(Host {
        node,
        root_dir,
        node_config,
        reader,
        machine,
        view,
    })
}

/// The API client, and the client certificate (PEM) it presents, if any.
type Api = (ApiClient, Option<Vec<u8>>);

fn cert_dir(flags: &Flags) -> std::path::PathBuf {
    flags
        .cert_dir
        .clone()
        .unwrap_or_else(|| flags.root_dir.join("pki"))
}

fn api_client(flags: &Flags, node: &str) -> Result<Option<Api>, AgentError> {
    let Some(path) = &flags.kubeconfig else {
        return Ok(None);
    };
    let cert_dir = cert_dir(flags);
    if let Some(bootstrap_kubeconfig) = &flags.bootstrap_kubeconfig {
        let bootstrap = crate::certificate::Bootstrap {
            kubeconfig: path,
            bootstrap_kubeconfig,
            cert_dir: &cert_dir,
            node_name: node,
            // Upstream's kubelet waits an hour for its first certificate.
            wait: Duration::from_secs(3600),
        };
        crate::certificate::ensure_client_certificate(&bootstrap, &crate::certificate::unix_now)
            .map_err(|e| AgentError::Config(format!("TLS bootstrap: {e}")))?;
    }
    let mut config = kubeconfig::load(path).map_err(|e| AgentError::Config(e.to_string()))?;
    config.qps = flags.kube_api_qps as f32;
    config.burst = flags.kube_api_burst;
    if flags.rotate_certificates && config.client_cert_pem.is_some() {
        // A pair renewed since the kubeconfig was written wins (upstream's manager
        // starts from the store's current pair too).
        let store = crate::certificate::store::CertStore::new(&cert_dir, "kubelet-client");
        if let Ok(Some(pem)) = store.current() {
            let now = crate::certificate::unix_now();
            if crate::certificate::check_pair_at(&pem, &pem, now).is_ok() {
                config.client_cert_pem = Some(pem.clone());
                config.client_key_pem = Some(pem);
            }
        }
    }
    for risk in config.security_warnings() {
        log::warn!("{risk} (kubeconfig {})", path.display());
    }
    let client = ApiClient::new(&config).map_err(|e| AgentError::Config(e.to_string()))?;
    Ok(Some((client, config.client_cert_pem)))
}

/// Starts the `cert-rotate` thread when the client has a certificate and either
/// rotation is asked for or a bootstrap kubeconfig can replace it once it expires.
fn start_rotation(w: &mut Wiring, node: &str, api: &Option<Api>) -> Result<(), AgentError> {
    let (flags, recorder) = (w.flags, &w.recorder);
    let Some((client, Some(cert))) = api else {
        if flags.rotate_certificates && api.is_some() {
            log::warn!("--rotate-certificates: the kubeconfig has no client certificate to rotate");
        }
        return Ok(());
    };
    let schedule = match (flags.rotate_certificates, &flags.bootstrap_kubeconfig) {
        (true, _) => Schedule::Rotate,
        (false, Some(_)) => Schedule::AtExpiry,
        (false, None) => return Ok(()),
    };
    let kind = CertKind::Client;
    let swapped = client.clone();
    let rotation = Rotation {
        store: CertStore::new(&cert_dir(flags), kind.prefix()),
        kind,
        client: client.clone(),
        node: node.to_owned(),
        current: Some(cert.clone()),
        install: Box::new(move |cert, key| {
            swapped
                .set_client_certificate(cert, key)
                .map_err(Into::into)
        }),
        recorder: recorder.clone(),
        bootstrap: flags.bootstrap_kubeconfig.clone(),
        schedule,
    };
    w.threads.add(crate::certificate::rotation::spawn(
        rotation,
        w.threads.shutdown(),
    )?);
    Ok(())
}

/// With `--rotate-server-certificates`: the node server's serving pair, held so the
/// `srv-cert` thread can replace the self-signed (or file) pair with one the cluster
/// issues (signer `kubernetes.io/kubelet-serving`, for the node's name and
/// addresses) and renew it. A valid issued pair from an earlier run is used at once.
fn start_serving_rotation(
    w: &mut Wiring,
    host: &Host,
    api: &Option<Api>,
) -> Result<Option<server::tls::ServingCert>, AgentError> {
    let (flags, recorder) = (w.flags, &w.recorder);
    if !flags.rotate_server_certificates {
        return Ok(None);
    }
    let Some((client, Some(_))) = api else {
        log::warn!(
            "--rotate-server-certificates: no client certificate to ask the cluster with; \
             the node server keeps its own certificate"
        );
        return Ok(None);
    };
    let tls = flags.server_config(&host.node).tls;
    let (chain, key) = server::tls::serving_pair(&tls)
        .map_err(|e| AgentError::Config(format!("node server TLS: {e}")))?;
    let serving = server::tls::ServingCert::new(chain, key)
        .map_err(|e| AgentError::Config(format!("node server TLS: {e}")))?;
    let kind = CertKind::Serving {
        names: vec![host.node.clone()],
        ips: host.machine.node_ip.into_iter().collect(),
    };
    let store = CertStore::new(&cert_dir(flags), kind.prefix());
    let now = crate::certificate::unix_now();
    let current = match store.current() {
        Ok(Some(pem)) if crate::certificate::check_pair_at(&pem, &pem, now).is_ok() => {
            match serving.replace(&pem, &pem) {
                Ok(()) => Some(pem),
                Err(err) => {
                    log::warn!("the stored serving certificate is unusable: {err}");
                    None
                }
            }
        }
        _ => None,
    };
    let installed = serving.clone();
    let rotation = Rotation {
        kind,
        client: client.clone(),
        store,
        node: host.node.clone(),
        current,
        install: Box::new(move |cert, key| installed.replace(cert, key).map_err(Into::into)),
        recorder: recorder.clone(),
        bootstrap: None,
        schedule: Schedule::Rotate,
    };
    w.threads.add(crate::certificate::rotation::spawn(
        rotation,
        w.threads.shutdown(),
    )?);
    Ok(Some(serving))
}

/// What litelet loads before it waits for the runtime: the kubeconfig with its
/// certificates and the node server's TLS files. A file that cannot be used stops
/// litelet at once, named in the error, instead of failing later inside a thread
/// (or only once containerd is up).
pub struct Prepared {
    api: Option<Api>,
    /// `--image-credential-provider-config`'s plugins, checked (empty: none).
    credential_plugins: Vec<ProviderConfig>,
    /// How the node shutdown manager reaches logind (the system D-Bus; tests hand in
    /// a fake).
    logind: crate::nodeshutdown::logind::Connect,
}

impl Prepared {
    /// Replaces the logind connection of the node shutdown manager.
    pub fn with_logind(mut self, connect: crate::nodeshutdown::logind::Connect) -> Prepared {
        self.logind = connect;
        self
    }
}

/// Loads and checks the API client and the node server's certificates, and refuses a
/// host with swap on unless `--fail-swap-on=false`.
pub fn prepare(flags: &Flags) -> Result<Prepared, AgentError> {
    if flags.fail_swap_on {
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        check_swap(&swaps)?;
    }
    let api = api_client(flags, &node_name(flags))?;
    let tls = flags.server_config(&node_name(flags)).tls;
    server::tls::check(&tls).map_err(|e| AgentError::Config(format!("node server TLS: {e}")))?;
    let credential_plugins = load_credential_plugins(flags)?;
    Ok(Prepared {
        api,
        credential_plugins,
        logind: crate::nodeshutdown::dbus_logind::connector(),
    })
}

/// The plugins ready to run; token mode asks through the pod workers' API client.
fn ready_credential_plugins(
    flags: &Flags,
    providers: Vec<ProviderConfig>,
    api: Option<ApiClient>,
) -> Option<Arc<CredentialPlugins>> {
    let bin_dir = flags.image_credential_provider_bin_dir.as_deref()?;
    if providers.is_empty() {
        return None;
    }
    let accounts = api.map(|c| Box::new(c) as Box<dyn credential_plugin::ServiceAccounts>);
    Some(Arc::new(CredentialPlugins::new(
        providers,
        bin_dir,
        credential_plugin::exec::Limits::default(),
        crate::config::parse_duration,
        accounts,
    )))
}

/// `--image-credential-provider-config` and its bin dir, read and checked; a bad
/// file stops litelet, as upstream.
fn load_credential_plugins(flags: &Flags) -> Result<Vec<ProviderConfig>, AgentError> {
    let Some(path) = &flags.image_credential_provider_config else {
        return Ok(Vec::new());
    };
    let syntax = credential_plugin::Syntax {
        duration: crate::config::parse_duration,
        qualified_name: |key| crate::node::config::check_qualified_name(key).is_ok(),
    };
    let bin_dir = flags.image_credential_provider_bin_dir.as_deref();
    let providers = credential_plugin::load(path, bin_dir, syntax)
        .map_err(|e| AgentError::Config(e.to_string()))?;
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    log::info!(
        "credential provider plugins from {}: {}",
        path.display(),
        names.join(", ")
    );
    Ok(providers)
}

/// `--fail-swap-on`: the host must have no swap area on (upstream's check).
pub fn check_swap(proc_swaps: &str) -> Result<(), SwapOn> {
    let areas = crate::node::machine::parse_active_swaps(proc_swaps);
    if areas.is_empty() {
        return Ok(());
    }
    Err(SwapOn { areas })
}

/// The image pull records under the root dir; each problem reading them (they fail
/// closed: images are verified again) is logged and reported as a node event.
fn pull_records(
    root_dir: &Path,
    images: &cri::ImageClient,
    recorder: &Recorder,
    node: &str,
) -> PullRecords {
    let list = || {
        let listed = images.list_images(&Default::default())?;
        Ok(listed
            .images
            .into_iter()
            .map(|i| RuntimeImage {
                id: i.id,
                names: i.repo_tags.into_iter().chain(i.repo_digests).collect(),
            })
            .collect())
    };
    let (records, problems) = PullRecords::open(root_dir, &list);
    for problem in problems {
        log::error!("{problem}");
        recorder.node(
            node,
            EventType::Warning,
            "ImagePullRecordsUnusable",
            problem.to_string(),
        );
    }
    records
}

/// Swap for containers: the policy, the cgroup version, whether the memory controller
/// limits swap here, the machine's memory and swap.
fn swap_settings(flags: &Flags, machine: &MachineInfo) -> crate::runtime::swap::SwapSettings {
    use crate::cgroups::detect::{detect, swap_control_file, CgroupMode};
    let mountinfo = std::fs::read_to_string(crate::cgroups::MOUNTINFO_PATH).unwrap_or_default();
    let layout = detect(&mountinfo, Path::new(crate::cgroups::DEFAULT_MOUNT_ROOT)).ok();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let file = layout.as_ref().and_then(|l| swap_control_file(l, &own));
    let settings = crate::runtime::swap::SwapSettings {
        behavior: flags.memory_swap_behavior,
        cgroup_v2: layout.is_some_and(|l| l.mode == CgroupMode::Unified),
        controller: file.as_ref().is_some_and(|f| f.exists()),
        memory_capacity: machine
            .memory_bytes
            .map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)),
        swap_capacity: machine
            .swap_bytes
            .map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)),
    };
    log::info!(
        "swap: {} ({}), swap controller {}, {} bytes of swap",
        settings.behavior.as_str(),
        if settings.cgroup_v2 {
            "cgroup v2"
        } else {
            "cgroup v1"
        },
        if settings.controller {
            "present"
        } else {
            "absent: swap left to the runtime"
        },
        settings.swap_capacity
    );
    settings
}

/// Starts the `events` thread (with an API server) and returns the recorder.
fn start_events(w: &mut Wiring, node: &str) -> Result<Recorder, AgentError> {
    let Some(client) = &w.api else {
        return Ok(Recorder::log_only());
    };
    let (event_tx, event_rx) = bounded(1000);
    let (qps, burst) =
        crate::api::ratelimit::client_go_limit(w.flags.event_qps as f32, w.flags.event_burst);
    w.threads.add(sink::spawn(
        client.with_own_limit(qps, burst),
        sink::Options::new(node),
        event_rx,
        w.threads.shutdown(),
    )?);
    Ok(Recorder::new(event_tx))
}

/// The runtime side, started: the runtime manager, the PLEG and its cache, the
/// runtime-up gate, pod cgroups and the resize allocations.
struct RuntimeParts {
    manager: Arc<RuntimeManager>,
    cache: PodStatusCache,
    pleg_events: Receiver<PodLifecycleEvent>,
    pleg_health: PlegHealth,
    last_relist: LastRelist,
    runtime_state: RuntimeState,
    cgroups: Option<Arc<PodCgroupManager>>,
    /// The `kubepods` limits, retried by the `gc` thread until they hold.
    allocatable: Option<Arc<NodeAllocatable>>,
    resize: Arc<ResizeManager>,
    /// Container ID prefix in statuses, e.g. `containerd`.
    runtime_name: String,
}

/// Refuses to go on when the runtime puts containers under the other cgroup driver
/// (pods and their containers would end up in two trees); an unknown driver is a
/// warning.
fn check_cgroup_driver(
    configured: CgroupDriver,
    runtime: &RuntimeClient,
) -> Result<(), AgentError> {
    let detected = cri::cgroup_driver::detect(runtime);
    match cri::cgroup_driver::check(configured.as_str(), &detected) {
        Ok(Some(warning)) => log::warn!("{warning}"),
        Ok(None) => log::info!(
            "cgroup driver {}, the same as the runtime's",
            configured.as_str()
        ),
        Err(refusal) => return Err(AgentError::Config(refusal)),
    }
    Ok(())
}

/// The host IDs pods' user namespaces come from: the `kubelet` entries of
/// `/etc/subuid` and `/etc/subgid`, else upstream's default range. A bad entry leaves
/// `hostUsers: false` pods without a range (their sandboxes fail, saying why).
fn user_namespace_range() -> Result<crate::userns::IdRange, crate::userns::UsernsError> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let range = crate::userns::kubelet_range(&read("/etc/subuid"), &read("/etc/subgid"));
    if let Err(err) = &range {
        log::error!("user namespaces: {err}; pods with hostUsers: false will not start");
    }
    range
}

/// The device manager with its checkpoint read back, serving plugin registration.
/// A failure leaves the node without device plugins (logged), never stops litelet.
fn start_devices(
    flags: &Flags,
    root_dir: &Path,
) -> Option<(DeviceManager, crate::devicemanager::RegistrationServer)> {
    let started = DeviceManager::new(&flags.device_plugins_dir, &root_dir.join("device-plugins"))
        .and_then(|m| m.serve().map(|server| (m, server)));
    match started {
        Ok(started) => Some(started),
        Err(e) => {
            log::error!("device plugins disabled: {e}");
            None
        }
    }
}

/// The PodResources API on `<root-dir>/pod-resources/kubelet.sock`, on the device
/// plugin side's grpcio environment (no thread of its own). A failure leaves
/// monitoring agents without it (logged), never stops litelet.
fn start_pod_resources(
    root_dir: &Path,
    pods: &PodSide,
    devices: Option<DeviceManager>,
) -> Option<crate::podresources::PodResourcesServer> {
    let devices: Arc<dyn crate::podresources::DeviceSource> = match devices {
        Some(devices) => Arc::new(devices),
        None => Arc::new(crate::podresources::NoDevices),
    };
    let pods_view = Arc::new(pods.kubelet.pods_view());
    match crate::podresources::PodResourcesServer::start(root_dir, pods_view, devices) {
        Ok(server) => Some(server),
        Err(e) => {
            log::error!("pod resources API disabled: {e}");
            None
        }
    }
}

/// Starts the runtime side: the runtime manager (which also consults the pod workers'
/// API client for RuntimeClasses and the device plugins' allocations, either may be
/// absent), the PLEG and the runtime-up gate; opens pod cgroups and the allocations.
fn start_runtime(
    w: &mut Wiring,
    host: &Host,
    devices: Option<&DeviceManager>,
    credential_plugins: Vec<ProviderConfig>,
) -> Result<RuntimeParts, AgentError> {
    let (flags, runtime) = (w.flags, &w.runtime);
    check_cgroup_driver(flags.cgroup_driver, runtime)?;
    let settings = runtime_settings(flags, host);
    let runtime_name = runtime
        .version(&Default::default())
        .map(|v| v.runtime_name)
        .unwrap_or_else(|_| "cri".into());
    let cache = PodStatusCache::new();
    let (pleg_tx, pleg_events) = bounded(EVENT_CHANNEL_CAPACITY);
    let mut pleg = Pleg::new(runtime.clone(), cache.clone(), pleg_tx);
    if !crate::config::gates::evented_pleg(&flags.feature_gates) {
        pleg = pleg.without_events();
    }
    // What litelet changes itself, the PLEG sees at once rather than a period later,
    // and the pod's worker waits for a status taken after the change (and only then).
    let nudge = pleg.nudger();
    let last_relist = pleg.last_relist();
    let parts = ManagerParts {
        settings,
        devices,
        credential_plugins,
        cache: cache.clone(),
        nudge,
    };
    let manager = runtime_manager(w, host, parts);
    let cgroups = pod_cgroups(w.flags)?;
    let allocatable = match &cgroups {
        Some(cgroups) => Some(enforce_node_allocatable(
            w.flags,
            host,
            cgroups,
            &w.recorder,
        )?),
        None => None,
    };

    // Allocations (the checkpoint under --root-dir), resize admission.
    let (resize, problem) =
        ResizeManager::open(&host.root_dir, ResizeConfig::new(host.view.clone()));
    if let Some(problem) = problem {
        log::error!("{problem}; pods are admitted at their spec");
    }

    let pleg_health = pleg.health();
    let runtime_state = RuntimeState::new(pleg.health());
    w.threads.add(pleg.spawn(w.threads.shutdown())?);
    w.threads
        .add(runtime_state.spawn_updater(manager.clone(), w.threads.shutdown())?);
    Ok(RuntimeParts {
        manager,
        cache,
        pleg_events,
        pleg_health,
        last_relist,
        runtime_state,
        cgroups,
        allocatable,
        resize: Arc::new(resize),
        runtime_name,
    })
}

/// The runtime manager's settings from the flags and the host (the host's
/// resolv.conf read once, for pods with the host's DNS).
fn runtime_settings(flags: &Flags, host: &Host) -> RuntimeSettings {
    let host_resolv = std::fs::read_to_string(&flags.resolv_conf).unwrap_or_default();
    RuntimeSettings {
        root_dir: host.root_dir.clone(),
        pod_logs_dir: flags.pod_logs_dir.clone(),
        dns: DnsSettings {
            cluster_dns: flags.cluster_dns.clone(),
            cluster_domain: flags.cluster_domain.clone(),
            host: ResolvConf::parse(&host_resolv),
        },
        memory_capacity: host.machine.memory_bytes.map(|b| b as i64).unwrap_or(0),
        enforce_cpu_limits: true,
        apparmor_enabled: crate::runtime::profiles::apparmor_enabled_on_host(),
        node_hosts_file: PathBuf::from(crate::runtime::hosts::ETC_HOSTS),
        swap: swap_settings(flags, &host.machine),
        seccomp_default: flags.seccomp_default,
    }
}

/// What [`runtime_manager`] builds the manager from besides the wiring.
struct ManagerParts<'a> {
    settings: RuntimeSettings,
    devices: Option<&'a DeviceManager>,
    credential_plugins: Vec<ProviderConfig>,
    /// Marked on every runtime change the manager makes.
    cache: PodStatusCache,
    /// Wakes the PLEG on a lifecycle change.
    nudge: RelistNudge,
}

/// The runtime manager: hooks over CRI, devices, pull concurrency, image
/// credentials, user namespaces and RuntimeClasses, and the runtime changes it
/// reports to the PLEG.
fn runtime_manager(w: &Wiring, host: &Host, parts: ManagerParts<'_>) -> Arc<RuntimeManager> {
    let (flags, runtime, recorder) = (w.flags, &w.runtime, &w.recorder);
    let (images, api) = (w.images.clone(), w.worker_api.clone());
    let root_dir = &host.root_dir;
    let ManagerParts {
        settings,
        devices,
        credential_plugins,
        cache: marks,
        nudge,
    } = parts;
    let hooks = Arc::new(CriHookRunner::new(runtime.clone()));
    let images_for_records = images.clone();
    let mut manager =
        RuntimeManager::new(runtime.clone(), images, hooks, recorder.clone(), settings);
    if let Some(devices) = devices {
        manager = manager.with_devices(Arc::new(devices.clone()));
    }
    // Checked when the settings were loaded; the fallback is never reached.
    if let Ok(concurrency) = flags.pull_concurrency() {
        manager = manager.with_pull_concurrency(concurrency);
    }
    Arc::new(
        manager
            .with_credentials(CredentialSettings {
                node_config: NodeDockerConfig::for_root_dir(
                    root_dir,
                    std::env::var_os("HOME").map(PathBuf::from).as_deref(),
                ),
                plugins: ready_credential_plugins(flags, credential_plugins, api.clone()),
                records: pull_records(root_dir, &images_for_records, recorder, &host.node),
                policy: flags.image_pull_credentials_verification_policy,
                allowlist: flags.preloaded_images_verification_allowlist.clone(),
            })
            .with_user_namespace_range(user_namespace_range())
            .with_runtime_classes(RuntimeClasses::new(
                api.map(|c| Box::new(c) as Box<dyn RuntimeClassSource>),
            ))
            .on_runtime_change(move |change| {
                marks.runtime_changed(change.uid, Instant::now());
                // The mark holds the pod's worker until a status taken after it, so a
                // relist must follow every mark: the evented PLEG relists only every
                // 300 s, and a resize or a failed step brings no container event.
                nudge.nudge();
            }),
    )
}

/// Pod cgroups through cgroupfs, or through systemd's slices (--cgroup-driver; the
/// runtime's driver was checked to be the same before), with the QoS hierarchy made;
/// `None` (logged) when they cannot be managed.
fn pod_cgroups(flags: &Flags) -> Result<Option<Arc<PodCgroupManager>>, AgentError> {
    let driver = match flags.cgroup_driver {
        CgroupDriver::Cgroupfs => CgroupsDriver::Cgroupfs,
        CgroupDriver::Systemd => {
            CgroupsDriver::Systemd(Box::new(DbusUnits::system().map_err(|e| {
                AgentError::Config(format!(
                    "--cgroup-driver=systemd needs systemd on the system bus: {e}"
                ))
            })?))
        }
    };
    let config = ManagerConfig {
        cgroup_root: flags.cgroup_root.clone(),
        pod_pids_limit: u64::try_from(flags.pod_max_pids).ok().filter(|n| *n > 0),
        ..Default::default()
    };
    match PodCgroupManager::from_system_with(config, driver)
        .and_then(|m| m.ensure_qos_hierarchy().map(|()| m))
    {
        Ok(m) => Ok(Some(Arc::new(m))),
        Err(err) => {
            log::warn!("pod cgroups disabled: {err}");
            Ok(None)
        }
    }
}

/// Limits `kubepods` to the node allocatable (or the capacity without `pods`
/// enforced), and the reserved cgroups to their reservations (upstream
/// `enforceNodeAllocatableCgroups`). A refused `kubepods` write is retried by the `gc`
/// thread; a reserved cgroup that cannot be limited stops litelet, as upstream.
fn enforce_node_allocatable(
    flags: &Flags,
    host: &Host,
    cgroups: &Arc<PodCgroupManager>,
    recorder: &Recorder,
) -> Result<Arc<NodeAllocatable>, AgentError> {
    use crate::cgroups::allocatable::{kubepods_resources, Enforcement, MachineCapacity};
    let config = flags
        .node_allocatable_enforcement()
        .map_err(|problems| AgentError::Config(problems.join("; ")))?;
    let capacity = MachineCapacity {
        milli_cpu: host.machine.num_cpus.map(|n| i64::from(n) * 1000),
        memory_bytes: host.machine.memory_bytes,
        pids: host.reader.max_pids(),
    };
    let reserved = [
        &host.node_config.system_reserved,
        &host.node_config.kube_reserved,
    ];
    let kubepods = kubepods_resources(&capacity, &reserved, config.has(Enforcement::Pods));
    log::info!("node allocatable: kubepods gets {kubepods:?}");
    let allocatable = Arc::new(NodeAllocatable::new(
        cgroups.clone(),
        kubepods,
        recorder.clone(),
        &host.node,
    ));
    allocatable.enforce();
    allocatable
        .enforce_reserved(
            &config,
            &host.node_config.system_reserved,
            &host.node_config.kube_reserved,
        )
        .map_err(AgentError::Config)?;
    Ok(allocatable)
}

/// Node registration, status and lease, and the Node lister admission reads (only
/// with an API server).
fn start_node(
    w: &mut Wiring,
    host: Host,
    rt: &RuntimeParts,
    devices: Option<&DeviceManager>,
    volumes: crate::volumes::VolumesInUse,
) -> Result<Option<NodeLister>, AgentError> {
    let Some(client) = &w.api else {
        return Ok(None);
    };
    let (pressure, shutdown_state) = (&w.guards.pressure, &w.guards.shutdown);
    let mut inputs =
        NodeInputs::from_host(host.reader, rt.runtime_state.clone(), w.runtime.clone());
    // The pressure conditions are the eviction manager's; status.images the runtime's;
    // Ready false during a node shutdown, sent at once.
    inputs.health = shutdown_state.wrap_health(pressure.wrap_health(inputs.health));
    inputs.sync_now = Some(shutdown_state.node_wake());
    inputs.images = Some(crate::node::inputs::images_from(w.images.clone()));
    if let Some(devices) = devices.cloned() {
        inputs.devices_changed = Some(devices.changes());
        inputs.devices = Some(Box::new(move || devices.capacity()));
    }
    inputs.volumes = Some(Box::new(volumes));
    let handles = crate::node::start(
        client,
        host.node_config,
        inputs,
        w.recorder.clone(),
        w.threads.shutdown(),
    )?;
    w.threads.add(handles.node);
    w.threads.add(handles.lease);
    // Admission follows the Node's labels and taints as the API server has them.
    w.threads.add(handles.watch);
    Ok(Some(handles.lister))
}

/// What the pod sources give the sync loop: the merged updates, the sources that
/// must report before housekeeping, and the cluster's Services.
struct Sources {
    updates: Receiver<PodUpdate>,
    expected: HashSet<&'static str>,
    services: Option<sources::services::ServiceStore>,
    /// The pods the API watch shows (for the status thread's reading of a 403).
    watched: Option<WatchedPods>,
}

/// Starts the static pod (file), API server and services sources.
fn start_sources(w: &mut Wiring, node: &str, root_dir: &Path) -> Result<Sources, AgentError> {
    let (flags, api, threads) = (w.flags, w.api.as_ref(), &mut w.threads);
    let (updates_tx, updates) = unbounded();
    let mut expected = HashSet::new();
    if let Some(dir) = &flags.pod_manifest_path {
        threads.add(sources::file::spawn(
            dir.clone(),
            node.to_owned(),
            updates_tx.clone(),
            threads.shutdown(),
        )?);
        expected.insert(SOURCE_FILE);
    }
    // Edge autonomy: the API source's and the services' checkpoints (docs/autonomy.md).
    let checkpoint = checkpoint_spec(flags, root_dir, node);
    let Some(client) = api else {
        return Ok(Sources {
            updates,
            expected,
            services: None,
            watched: None,
        });
    };
    let watched = WatchedPods::new();
    let options = sources::apiserver::Options {
        checkpoint: checkpoint.clone(),
        watched: Some(watched.clone()),
        ..sources::apiserver::Options::new(node)
    };
    threads.add(sources::apiserver::spawn_with(
        client.clone(),
        options,
        updates_tx,
        threads.shutdown(),
    )?);
    expected.insert(SOURCE_API);
    // Service variables: the cluster's Services, kept by the `services` thread.
    let store = sources::services::ServiceStore::new();
    threads.add(sources::services::spawn(
        client.clone(),
        sources::services::Options {
            checkpoint,
            ..Default::default()
        },
        store.clone(),
        threads.shutdown(),
    )?);
    Ok(Sources {
        updates,
        expected,
        services: Some(store),
        watched: Some(watched),
    })
}

/// Starts the prober threads; without them (a failed start) pods run unprobed.
/// Also returns the attempt counters the node server's `/metrics/probes` renders.
fn start_probes(
    w: &mut Wiring,
) -> (
    Arc<dyn PodProbes>,
    Receiver<ProbeUpdate>,
    Option<ProbeMetrics>,
) {
    match ProbeManager::start(
        Default::default(),
        w.runtime.clone(),
        w.recorder.clone(),
        w.threads.shutdown(),
    ) {
        Ok((manager, thread)) => {
            w.threads.add(thread);
            let results = manager.results();
            let metrics = manager.metrics();
            (Arc::new(manager), results, Some(metrics))
        }
        Err(err) => {
            log::error!("probes disabled: {err}");
            (Arc::new(NoProbes), crossbeam_channel::never(), None)
        }
    }
}

/// The status manager's handle and, with an API server, its thread to start once the
/// pod workers its hooks ask exist.
fn status_manager(api: Option<&ApiClient>) -> (StatusManager, Option<UnstartedStatusManager>) {
    match api {
        Some(_) => {
            let unstarted = StatusManager::unstarted();
            (unstarted.handle(), Some(unstarted))
        }
        None => (StatusManager::standalone(), None),
    }
}

/// Starts the two `api-req` threads the pod workers' API client hands its requests
/// to (with an API server).
fn start_worker_api(w: &mut Wiring) -> Result<(), AgentError> {
    if let Some(client) = &w.api {
        let threads = RequestThreads::start("api-req", 2)?;
        w.worker_api = Some(client.with_request_threads(&threads));
    }
    Ok(())
}

/// Starts the `status` thread (with an API server), whose hooks ask the pod workers
/// whether a pod may still run containers and whether its API object may be deleted.
fn start_status(
    w: &mut Wiring,
    unstarted: Option<UnstartedStatusManager>,
    workers: &PodWorkers,
    watched: Option<WatchedPods>,
) -> Result<(), AgentError> {
    let (Some(unstarted), Some(client)) = (unstarted, &w.api) else {
        return Ok(());
    };
    let (w1, w2) = (workers.clone(), workers.clone());
    let mut hooks = PodHooks::new(
        Arc::new(move |uid: &str| w1.could_have_running_containers(uid)),
        Arc::new(move |uid: &str| {
            !w2.could_have_running_containers(uid) && w2.should_pod_be_finished(uid)
        }),
    );
    if let Some(watched) = watched {
        hooks = hooks.with_watch(Arc::new(move |uid: &str| watched.shows(uid)));
    }
    w.threads.add(unstarted.spawn(
        client.clone(),
        hooks,
        Default::default(),
        w.threads.shutdown(),
    )?);
    Ok(())
}

/// The sync loop and what it drives, built: the kubelet, its pod workers and status
/// manager, and the channels the loop reads.
struct PodSide {
    kubelet: Kubelet,
    workers: PodWorkers,
    status: StatusManager,
    updates: Receiver<PodUpdate>,
    probe_updates: Receiver<ProbeUpdate>,
    probe_metrics: Option<ProbeMetrics>,
    /// The sync loop's requests to the `gc` thread.
    gc_requests: Receiver<GcRequest>,
    /// The claims the pod workers mounted, measured by the `stats` thread.
    claims: crate::stats::claims::ClaimMounts,
}

/// Starts the pod workers over the kubelet's syncer, and the status thread their
/// hooks ask.
fn start_pod_workers(
    w: &mut Wiring,
    syncer: KubeletSyncer,
    cache: PodStatusCache,
    status: Option<UnstartedStatusManager>,
    watched: Option<WatchedPods>,
) -> Result<(PodWorkers, WorkQueue), AgentError> {
    let queue = WorkQueue::new();
    let timings = WorkerTimings {
        resync: w.flags.sync_frequency,
        ..Default::default()
    };
    let workers = PodWorkers::new(
        Arc::new(syncer),
        queue.clone(),
        cache,
        w.recorder.clone(),
        timings,
    );
    start_status(w, status, &workers, watched)?;
    Ok((workers, queue))
}

/// Starts everything pods come from and go through — node registration, the
/// sources, probes, volumes (and the CSI plugin watcher), the pod workers and the
/// status thread — and builds the sync loop over them.
fn start_pods(
    w: &mut Wiring,
    host: Host,
    rt: &RuntimeParts,
    devices: Option<DeviceManager>,
) -> Result<PodSide, AgentError> {
    let (node, root_dir, view) = (host.node.clone(), host.root_dir.clone(), host.view.clone());
    let host_ips = host
        .machine
        .node_ip
        .iter()
        .map(|ip| ip.to_string())
        .collect();
    // Before the node thread: its status lists the volumes in use.
    let manager = start_volumes(w, &root_dir, &node, view.allocatable.clone())?;
    let node_lister = start_node(w, host, rt, devices.as_ref(), manager.volumes_in_use())?;
    let claims = crate::stats::claims::ClaimMounts::default();
    let volumes: Arc<dyn crate::kubelet::deps::PodVolumes> = Arc::new(ClaimRecording {
        inner: manager,
        claims: claims.clone(),
    });
    let sources = start_sources(w, &node, &root_dir)?;
    let (probes, probe_updates, probe_metrics) = start_probes(w);
    let (status, unstarted_status) = status_manager(w.api.as_ref());
    let syncer = KubeletSyncer::new(SyncerDeps {
        runtime: rt.manager.clone(),
        status: status.clone(),
        volumes: volumes.clone(),
        probes: probes.clone(),
        runtime_state: rt.runtime_state.clone(),
        recorder: w.recorder.clone(),
        node: NodeFacts {
            name: node.clone(),
            host_ips,
            runtime_name: rt.runtime_name.clone(),
            root_dir: root_dir.clone(),
        },
        resize: PodResize::new(rt.resize.clone(), rt.cache.clone(), w.recorder.clone()),
        allocatable: view.allocatable.clone(),
        cgroups: rt.cgroups.clone(),
        mirrors: w
            .worker_api
            .clone()
            .map(|c| MirrorClient::new(c, node.clone())),
        services: sources.services,
    });
    let (workers, queue) = start_pod_workers(
        w,
        syncer,
        rt.cache.clone(),
        unstarted_status,
        sources.watched,
    )?;
    let (gc_tx, gc_requests) = bounded(256);
    let kubelet = Kubelet::new(KubeletDeps {
        workers: workers.clone(),
        queue,
        runtime: rt.manager.clone(),
        runtime_state: rt.runtime_state.clone(),
        status: status.clone(),
        probes,
        recorder: w.recorder.clone(),
        node: view,
        root_dir,
        expected_sources: sources.expected,
        resize: rt.resize.clone(),
        volumes,
        deaths: gc_tx,
        last_relist: rt.last_relist.clone(),
        cgroups: rt.cgroups.clone(),
        mirrors: w.api.clone().map(|c| MirrorClient::new(c, node.clone())),
        node_lister,
        // Upstream's order: the eviction manager's handler, then the shutdown manager's.
        extra_admission: Some(Arc::new(crate::admission::AdmitHandlers(vec![
            Arc::new(w.guards.pressure.clone()),
            Arc::new(w.guards.shutdown.clone()),
        ]))),
        devices,
        reachable_again: w
            .api
            .as_ref()
            .map_or_else(crossbeam_channel::never, |c| c.reachability().subscribe()),
    });
    Ok(PodSide {
        kubelet,
        workers,
        status,
        updates: sources.updates,
        probe_updates,
        probe_metrics,
        gc_requests,
        claims,
    })
}

/// Starts the `gc` thread: container and image garbage collection, and the cleanup
/// the sync loop asks for (dead containers, finished pods, housekeeping's plans).
fn start_gc(w: &mut Wiring, pods: &PodSide, rt: &RuntimeParts) -> Result<(), AgentError> {
    let flags = w.flags;
    let gc = GcLoop {
        cleaner: pods.kubelet.cleaner(),
        manager: rt.manager.clone(),
        workers: pods.workers.clone(),
        sources_ready: pods.kubelet.sources_ready_flag(),
        policy: GcPolicy {
            min_age: flags.minimum_container_ttl_duration,
            ..Default::default()
        },
        image_policy: ImageGcPolicy {
            high_threshold_percent: flags.image_gc_high_threshold,
            low_threshold_percent: flags.image_gc_low_threshold,
            min_age: flags.minimum_image_ttl_duration,
            max_age: flags.image_maximum_gc_age,
            ..Default::default()
        },
        recorder: w.recorder.clone(),
        node_name: pods.kubelet.node_name().to_owned(),
        allocatable: rt.allocatable.clone(),
    };
    w.threads
        .add(gc.spawn(pods.gc_requests.clone(), w.threads.shutdown())?);
    Ok(())
}

/// Starts the usage sampler, log rotation and the node server: the parts that read
/// what the sync loop and the runtime publish. Returns the usage store (`None`: no
/// usage stats on this host).
fn start_readers(
    w: &mut Wiring,
    pods: &PodSide,
    rt: &RuntimeParts,
    serving: Option<server::tls::ServingCert>,
) -> Result<Option<crate::stats::StatsStore>, AgentError> {
    // Log rotation has threads of its own: a slow disk never delays the sync loop.
    match w.flags.log_manager_config() {
        Some(config) => w.threads.add(crate::logs::manager::spawn(
            config,
            Arc::new(w.runtime.clone()),
            w.threads.shutdown(),
        )?),
        None => log::info!("container log rotation is off (negative --container-log-max-size)"),
    }
    let stats = start_stats(w, rt.cgroups.clone(), pods.claims.clone());
    let server = ServerContext {
        heartbeat: pods.kubelet.heartbeat(),
        pleg: rt.pleg_health.clone(),
        started: Instant::now(),
        pods: pods.kubelet.snapshot(),
        runtime: w.runtime.clone(),
        status: Some(pods.status.clone()),
        api: w.api.clone(),
        stats: stats.clone(),
        probes: pods.probe_metrics.clone(),
        runtime_cache: Some(rt.cache.clone()),
    };
    let mut config = w.flags.server_config(pods.kubelet.node_name());
    config.serving = serving;
    // Pods keep running without the node API, so a taken port is loud, not fatal.
    match server::spawn(config, server, w.threads.shutdown()) {
        Ok(handles) => handles.into_iter().for_each(|h| w.threads.add(h)),
        Err(err) => log::error!("node server disabled: {err}"),
    }
    Ok(stats)
}

/// Starts the `eviction` thread over the `stats` thread's samples (none without
/// usage stats).
fn start_eviction(
    w: &mut Wiring,
    config: crate::eviction::EvictionConfig,
    stats: Option<crate::stats::StatsStore>,
    pods: &PodSide,
    rt: &RuntimeParts,
) -> Result<(), AgentError> {
    let Some(store) = stats else {
        log::warn!("eviction disabled: no usage stats");
        return Ok(());
    };
    let snapshot = pods.kubelet.snapshot();
    let eviction = crate::eviction::EvictionManager {
        config,
        stats: store,
        pods: Box::new(move || snapshot.pods()),
        workers: pods.workers.clone(),
        runtime: rt.manager.clone(),
        recorder: w.recorder.clone(),
        node_name: pods.kubelet.node_name().to_owned(),
        root_dir: w.flags.root_dir.clone(),
        sources_ready: pods.kubelet.sources_ready_flag(),
        pressure: w.guards.pressure.clone(),
        period: crate::eviction::manager::PERIOD,
    };
    w.threads.add(eviction.spawn(w.threads.shutdown())?);
    Ok(())
}

/// Starts the `node-shutdown` thread when a shutdown grace period is configured.
fn start_node_shutdown(
    w: &mut Wiring,
    connect: crate::nodeshutdown::logind::Connect,
    pods: &PodSide,
) -> Result<(), AgentError> {
    let groups = w.flags.shutdown.groups();
    if groups.is_empty() {
        log::debug!("node shutdown: no grace period configured; the node's shutdown is immediate");
        return Ok(());
    }
    let snapshot = pods.kubelet.snapshot();
    let manager = crate::nodeshutdown::ShutdownManager {
        groups,
        connect,
        pods: Box::new(move || snapshot.pods()),
        workers: pods.workers.clone(),
        status: pods.status.clone(),
        state: w.guards.shutdown.clone(),
        recorder: w.recorder.clone(),
        node_name: pods.kubelet.node_name().to_owned(),
    };
    w.threads.add(manager.spawn(w.threads.shutdown())?);
    Ok(())
}

/// Starts every thread, runs the sync loop on the calling thread until shutdown,
/// then joins the threads (for at most `SHUTDOWN_JOIN_LIMIT`).
pub fn run(
    flags: &Flags,
    prepared: Prepared,
    runtime: RuntimeClient,
    images: cri::ImageClient,
    shutdown: Shutdown,
) -> Result<(), AgentError> {
    let host = resolve_host(flags)?;
    let eviction_config =
        crate::config::eviction_config(flags).map_err(|e| AgentError::Config(e.to_string()))?;
    let mut w = Wiring {
        flags,
        runtime,
        images,
        api: prepared.api.as_ref().map(|(client, _)| client.clone()),
        worker_api: None,
        recorder: Recorder::log_only(),
        guards: Guards::default(),
        threads: Threads::new(&shutdown),
    };
    w.recorder = start_events(&mut w, &host.node)?;
    start_rotation(&mut w, &host.node, &prepared.api)?;
    let serving = start_serving_rotation(&mut w, &host, &prepared.api)?;
    start_worker_api(&mut w)?;
    // Device plugins: the registration server lives until `run` returns.
    let device_plugins = start_devices(flags, &host.root_dir);
    let devices = device_plugins.as_ref().map(|(m, _)| m.clone());
    let rt = start_runtime(&mut w, &host, devices.as_ref(), prepared.credential_plugins)?;
    // Upstream's first node event, said once the start-up checks (the runtime's
    // cgroup driver among them) have passed and before any pod starts.
    w.recorder.node(
        &host.node,
        crate::events::EventType::Normal,
        "Starting",
        "Starting kubelet.",
    );
    let root_dir = host.root_dir.clone();
    let pods = start_pods(&mut w, host, &rt, devices.clone())?;
    start_node_shutdown(&mut w, prepared.logind, &pods)?;
    start_gc(&mut w, &pods, &rt)?;
    let stats = start_readers(&mut w, &pods, &rt, serving)?;
    start_eviction(&mut w, eviction_config, stats, &pods, &rt)?;
    // Lives until `run` returns, like the registration server.
    let _pod_resources = start_pod_resources(&root_dir, &pods, devices);

    log::info!("litelet running as node {:?}", pods.kubelet.node_name());
    let PodSide {
        kubelet,
        updates,
        probe_updates,
        ..
    } = pods;
    kubelet.run(updates, rt.pleg_events, probe_updates, shutdown);
    w.threads.join_within(SHUTDOWN_JOIN_LIMIT);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_swap_on_refuses_a_host_with_swap_naming_the_areas_and_the_way_out() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(check_swap(header).is_ok());
        assert!(check_swap("").is_ok(), "no /proc/swaps: no swap");
        let err = check_swap(&format!("{header}/swapfile file 2097148 0 -2\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/swapfile"), "{err}");
        assert!(err.contains("--fail-swap-on=false"), "{err}");
    }

    /// Shutdown joins the threads that stop on the signal and gives up, without
    /// hanging, on one that does not (blocked elsewhere), leaving it running.
    #[test]
    fn shutdown_joins_stopping_threads_and_leaves_a_stuck_one() {
        let (shutdown_tx, shutdown) = bounded::<()>(0);
        let mut threads = Threads::new(&shutdown);
        let stopped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for _ in 0..3 {
            let (rx, stopped) = (threads.shutdown(), stopped.clone());
            threads.add(std::thread::spawn(move || {
                let _ = rx.recv();
                stopped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        let (_never_tx, never_rx) = bounded::<()>(0);
        let stuck = std::thread::spawn(move || {
            let _ = never_rx.recv();
        });
        threads.add(std::thread::spawn(|| {}));
        drop(shutdown_tx);
        let mut with_stuck = threads;
        with_stuck.add(stuck);
        with_stuck.join_within(Duration::from_secs(2));
        assert_eq!(stopped.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
