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
use crate::certificate::rotation::Rotation;
use crate::certificate::store::CertStore;
use crate::certificate::CertKind;
use crate::cgroups::manager::{Driver as CgroupsDriver, ManagerConfig, PodCgroupManager};
use crate::cgroups::systemd::bus::DbusUnits;
use crate::config::{CgroupDriver, Flags};
use crate::credentialprovider::NodeDockerConfig;
use crate::cri::{self, RuntimeClient};
use crate::devicemanager::DeviceManager;
use crate::events::Recorder;
use crate::kubelet::deps::{NoProbes, PodProbes};
use crate::kubelet::gc_loop::GcLoop;
use crate::kubelet::mirror::MirrorClient;
use crate::kubelet::syncer::{KubeletSyncer, NodeFacts};
use crate::kubelet::{Kubelet, KubeletDeps};
use crate::node::register;
use crate::node::status as node_status;
use crate::node::{MachineInfo, MachineReader, MachineRoots, NodeConfig, NodeInputs, NodeLister};
use crate::pleg::{LastRelist, Pleg, PlegHealth, PodLifecycleEvent, EVENT_CHANNEL_CAPACITY};
use crate::pod_workers::{PodWorkers, WorkQueue, WorkerTimings};
use crate::prober::{ProbeManager, ProbeMetrics, ProbeUpdate};
use crate::process::Shutdown;
use crate::resize::{ResizeConfig, ResizeManager};
use crate::runtime::cache::PodStatusCache;
use crate::runtime::dns::{DnsSettings, ResolvConf};
use crate::runtime::gc::GcPolicy;
use crate::runtime::hooks::CriHookRunner;
use crate::runtime::image_gc::ImageGcPolicy;
use crate::runtime::images::CredentialSettings;
use crate::runtime::manager::{RuntimeManager, RuntimeSettings};
use crate::runtime::pull_records::PullRecords;
use crate::runtime::runtime_class::{RuntimeClassSource, RuntimeClasses};
use crate::runtime::state::RuntimeState;
use crate::server::{self, ServerContext};
use crate::sources::watched::WatchedPods;
use crate::sources::{self, PodUpdate, SOURCE_API, SOURCE_FILE};
use crate::status::events;
use crate::status::manager::{PodHooks, StatusManager, UnstartedStatusManager};
use crate::volumes::VolumeManager;

/// A failure that stops the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error("cannot start thread: {0}")]
    Thread(#[from] std::io::Error),
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

/// The pod volume manager. Without root nothing can be mounted: secrets and other
/// memory-backed volumes are then written to disk (with a warning).
fn volume_manager(
    root_dir: &std::path::Path,
    api: Option<ApiClient>,
    node: &str,
    mut allocatable: std::collections::BTreeMap<String, crate::api::quantity::Quantity>,
) -> VolumeManager {
    let mut volumes = VolumeManager::new(root_dir, api, node);
    if !nix::unistd::geteuid().is_root() {
        log::warn!("not running as root: secret and memory-backed volumes go to disk");
        volumes = volumes.without_mounts();
    }
    allocatable.remove("pods");
    volumes.set_node_allocatable(allocatable);
    volumes
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
    flags: &Flags,
    runtime: &RuntimeClient,
    images: cri::ImageClient,
    cgroups: Option<Arc<PodCgroupManager>>,
    threads: &mut Threads,
) -> Option<crate::stats::StatsStore> {
    let reader = match crate::stats::cgroup::reader_from_system() {
        Ok(reader) => reader,
        Err(err) => {
            log::warn!("usage stats disabled: {err}");
            return None;
        }
    };
    let collector = crate::stats::Collector {
        runtime: runtime.clone(),
        images: Some(images),
        reader,
        cgroups,
        root_dir: flags.root_dir.clone(),
        pod_logs_dir: flags.pod_logs_dir.clone(),
        proc_root: "/proc".into(),
    };
    let store = crate::stats::StatsStore::new();
    match crate::stats::sampler::spawn(
        collector,
        store.clone(),
        crate::stats::DEFAULT_PERIOD,
        threads.shutdown(),
    ) {
        Ok(handle) => {
            threads.add(handle);
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
    let now = crate::certificate::unix_now();
    if let Some(bootstrap_kubeconfig) = &flags.bootstrap_kubeconfig {
        let bootstrap = crate::certificate::Bootstrap {
            kubeconfig: path,
            bootstrap_kubeconfig,
            cert_dir: &cert_dir,
            node_name: node,
            // Upstream's kubelet waits an hour for its first certificate.
            wait: Duration::from_secs(3600),
        };
        crate::certificate::ensure_client_certificate(&bootstrap, now)
            .map_err(|e| AgentError::Config(format!("TLS bootstrap: {e}")))?;
    }
    let mut config = kubeconfig::load(path).map_err(|e| AgentError::Config(e.to_string()))?;
    config.qps = flags.kube_api_qps;
    config.burst = flags.kube_api_burst;
    if flags.rotate_certificates && config.client_cert_pem.is_some() {
        // A pair renewed since the kubeconfig was written wins (upstream's manager
        // starts from the store's current pair too).
        let store = crate::certificate::store::CertStore::new(&cert_dir, "kubelet-client");
        if let Ok(Some(pem)) = store.current() {
            if crate::certificate::valid_at(&pem, now) {
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

/// Starts the `cert-rotate` thread when asked to and the client has a certificate.
fn start_rotation(
    flags: &Flags,
    node: &str,
    api: &Option<Api>,
    recorder: &Recorder,
    threads: &mut Threads,
) -> Result<(), AgentError> {
    let Some((client, Some(cert))) = api else {
        if flags.rotate_certificates && api.is_some() {
            log::warn!("--rotate-certificates: the kubeconfig has no client certificate to rotate");
        }
        return Ok(());
    };
    if !flags.rotate_certificates {
        return Ok(());
    }
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
    };
    threads.add(crate::certificate::rotation::spawn(
        rotation,
        threads.shutdown(),
    )?);
    Ok(())
}

/// With `--rotate-server-certificates`: the node server's serving pair, held so the
/// `srv-cert` thread can replace the self-signed (or file) pair with one the cluster
/// issues (signer `kubernetes.io/kubelet-serving`, for the node's name and
/// addresses) and renew it. A valid issued pair from an earlier run is used at once.
fn start_serving_rotation(
    flags: &Flags,
    host: &Host,
    api: &Option<Api>,
    recorder: &Recorder,
    threads: &mut Threads,
) -> Result<Option<server::tls::ServingCert>, AgentError> {
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
        Ok(Some(pem)) if crate::certificate::valid_at(&pem, now) => {
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
    };
    threads.add(crate::certificate::rotation::spawn(
        rotation,
        threads.shutdown(),
    )?);
    Ok(Some(serving))
}

/// What litelet loads before it waits for the runtime: the kubeconfig with its
/// certificates and the node server's TLS files. A file that cannot be used stops
/// litelet at once, named in the error, instead of failing later inside a thread
/// (or only once containerd is up).
pub struct Prepared {
    api: Option<Api>,
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
        check_swap(&swaps).map_err(AgentError::Config)?;
    }
    let api = api_client(flags, &node_name(flags))?;
    let tls = flags.server_config(&node_name(flags)).tls;
    server::tls::check(&tls).map_err(|e| AgentError::Config(format!("node server TLS: {e}")))?;
    Ok(Prepared {
        api,
        logind: crate::nodeshutdown::dbus_logind::connector(),
    })
}

/// `--fail-swap-on`: the host must have no swap area on (upstream's check).
pub fn check_swap(proc_swaps: &str) -> Result<(), String> {
    let areas = crate::node::machine::parse_active_swaps(proc_swaps);
    if areas.is_empty() {
        return Ok(());
    }
    Err(format!(
        "swap is on ({}): turn it off (swapoff -a) or start with --fail-swap-on=false \
         (failSwapOn: false), with memorySwap.swapBehavior saying what containers get",
        areas.join(", ")
    ))
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
fn start_events(
    flags: &Flags,
    host: &Host,
    api: Option<&ApiClient>,
    threads: &mut Threads,
) -> Result<Recorder, AgentError> {
    let Some(client) = api else {
        return Ok(Recorder::log_only());
    };
    let (event_tx, event_rx) = bounded(1000);
    threads.add(events::spawn(
        client.with_own_limit(flags.event_qps, flags.event_burst),
        events::Options::new(&host.node),
        event_rx,
        threads.shutdown(),
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
fn user_namespace_range(
) -> Result<crate::runtime::userns::IdRange, crate::runtime::userns::UsernsError> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let range = crate::runtime::userns::kubelet_range(&read("/etc/subuid"), &read("/etc/subgid"));
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

/// What the runtime manager consults besides the runtime: the API server (for
/// RuntimeClasses) and the device plugins' allocations; either may be absent.
struct RuntimeSources<'a> {
    api: Option<ApiClient>,
    devices: Option<&'a DeviceManager>,
}

fn start_runtime(
    flags: &Flags,
    host: &Host,
    runtime: &RuntimeClient,
    images: cri::ImageClient,
    sources: RuntimeSources<'_>,
    recorder: &Recorder,
    threads: &mut Threads,
) -> Result<RuntimeParts, AgentError> {
    let RuntimeSources { api, devices } = sources;
    check_cgroup_driver(flags.cgroup_driver, runtime)?;
    let root_dir = &host.root_dir;
    let host_resolv = std::fs::read_to_string(&flags.resolv_conf).unwrap_or_default();
    let settings = RuntimeSettings {
        root_dir: root_dir.clone(),
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
    };
    let runtime_name = runtime
        .version(&Default::default())
        .map(|v| v.runtime_name)
        .unwrap_or_else(|_| "cri".into());
    let hooks = Arc::new(CriHookRunner::new(runtime.clone()));
    let cache = PodStatusCache::new();
    let (pleg_tx, pleg_events) = bounded(EVENT_CHANNEL_CAPACITY);
    let pleg = Pleg::new(runtime.clone(), cache.clone(), pleg_tx);
    // What litelet changes itself, the PLEG sees at once rather than a period later,
    // and the pod's worker waits for a status taken after the change (and only then).
    let nudge = pleg.nudger();
    let last_relist = pleg.last_relist();
    let marks = cache.clone();
    let mut manager =
        RuntimeManager::new(runtime.clone(), images, hooks, recorder.clone(), settings);
    if let Some(devices) = devices {
        manager = manager.with_devices(Arc::new(devices.clone()));
    }
    let manager = Arc::new(
        manager
            .with_credentials(CredentialSettings {
                node_config: NodeDockerConfig::for_root_dir(
                    root_dir,
                    std::env::var_os("HOME").map(PathBuf::from).as_deref(),
                ),
                records: PullRecords::load(root_dir),
                policy: flags.image_pull_credentials_verification_policy,
                allowlist: flags.preloaded_images_verification_allowlist.clone(),
            })
            .with_user_namespace_range(user_namespace_range())
            .with_runtime_classes(RuntimeClasses::new(
                api.map(|c| Box::new(c) as Box<dyn RuntimeClassSource>),
            ))
            .on_runtime_change(move |change| {
                marks.runtime_changed(change.uid, Instant::now());
                if change.lifecycle {
                    nudge.nudge();
                }
            }),
    );

    // Pod cgroups through cgroupfs, or through systemd's slices (--cgroup-driver); the
    // runtime's driver was checked to be the same before.
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
    let cgroups = match PodCgroupManager::from_system_with(
        ManagerConfig {
            cgroup_root: flags.cgroup_root.clone(),
            pod_pids_limit: u64::try_from(flags.pod_max_pids).ok().filter(|n| *n > 0),
            ..Default::default()
        },
        driver,
    )
    .and_then(|m| m.ensure_qos_hierarchy().map(|()| m))
    {
        Ok(m) => {
            // Upstream's container manager says so once the pod cgroups hold the
            // node's allocatable.
            recorder.node(
                &host.node,
                crate::events::EventType::Normal,
                "NodeAllocatableEnforced",
                "Updated Node Allocatable limit across pods",
            );
            Some(Arc::new(m))
        }
        Err(err) => {
            log::warn!("pod cgroups disabled: {err}");
            None
        }
    };

    // Allocations (the checkpoint under --root-dir), resize admission.
    let (resize, problem) = ResizeManager::open(
        root_dir,
        ResizeConfig {
            node: host.view.clone(),
        },
    );
    if let Some(problem) = problem {
        log::error!("{problem}; pods are admitted at their spec");
    }

    let pleg_health = pleg.health();
    let runtime_state = RuntimeState::new(pleg.health());
    threads.add(pleg.spawn(threads.shutdown())?);
    threads.add(runtime_state.spawn_updater(manager.clone(), threads.shutdown())?);
    Ok(RuntimeParts {
        manager,
        cache,
        pleg_events,
        pleg_health,
        last_relist,
        runtime_state,
        cgroups,
        resize: Arc::new(resize),
        runtime_name,
    })
}

/// Node registration, status and lease, and the Node lister admission reads (only
/// with an API server).
#[allow(clippy::too_many_arguments)]
fn start_node(
    host: Host,
    api: Option<&ApiClient>,
    rt: &RuntimeParts,
    runtime: &RuntimeClient,
    images: &cri::ImageClient,
    pressure: &crate::eviction::Pressure,
    shutdown_state: &crate::nodeshutdown::ShutdownState,
    recorder: &Recorder,
    devices: Option<&DeviceManager>,
    threads: &mut Threads,
) -> Result<Option<NodeLister>, AgentError> {
    let Some(client) = api else {
        return Ok(None);
    };
    let mut inputs = NodeInputs::from_host(host.reader, rt.runtime_state.clone(), runtime.clone());
    // The pressure conditions are the eviction manager's; status.images the runtime's;
    // Ready false during a node shutdown, sent at once.
    inputs.health = shutdown_state.wrap_health(pressure.wrap_health(inputs.health));
    inputs.sync_now = Some(shutdown_state.node_wake());
    inputs.images = Some(crate::node::inputs::images_from(images.clone()));
    if let Some(devices) = devices.cloned() {
        inputs.devices_changed = Some(devices.changes());
        inputs.devices = Some(Box::new(move || devices.capacity()));
    }
    let handles = crate::node::start(
        client,
        host.node_config,
        inputs,
        recorder.clone(),
        threads.shutdown(),
    )?;
    threads.add(handles.node);
    threads.add(handles.lease);
    // Admission follows the Node's labels and taints as the API server has them.
    let lister = NodeLister::new();
    threads.add(crate::node::lister::spawn(
        client,
        &host.node,
        lister.clone(),
        threads.shutdown(),
    )?);
    Ok(Some(lister))
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
fn start_sources(
    flags: &Flags,
    node: &str,
    root_dir: &Path,
    api: Option<&ApiClient>,
    threads: &mut Threads,
) -> Result<Sources, AgentError> {
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
    runtime: &RuntimeClient,
    recorder: &Recorder,
    threads: &mut Threads,
) -> (
    Arc<dyn PodProbes>,
    Receiver<ProbeUpdate>,
    Option<ProbeMetrics>,
) {
    match ProbeManager::start(
        Default::default(),
        runtime.clone(),
        recorder.clone(),
        threads.shutdown(),
    ) {
        Ok((manager, thread)) => {
            threads.add(thread);
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

/// Starts the `status` thread, whose hooks ask the pod workers whether a pod may
/// still run containers and whether its API object may be deleted.
fn start_status(
    unstarted: UnstartedStatusManager,
    client: &ApiClient,
    workers: &PodWorkers,
    watched: Option<WatchedPods>,
    threads: &mut Threads,
) -> Result<(), AgentError> {
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
    threads.add(unstarted.spawn(
        client.clone(),
        hooks,
        Default::default(),
        threads.shutdown(),
    )?);
    Ok(())
}

/// Starts the usage sampler, log rotation and the node server: the parts that read
/// what the sync loop and the runtime publish.
fn start_readers(
    flags: &Flags,
    server_config: server::ServerConfig,
    runtime: &RuntimeClient,
    images: cri::ImageClient,
    rt: &RuntimeParts,
    server: ServerContext,
    threads: &mut Threads,
) -> Result<Option<crate::stats::StatsStore>, AgentError> {
    // Log rotation has threads of its own: a slow disk never delays the sync loop.
    match flags.log_manager_config() {
        Some(config) => threads.add(crate::logs::manager::spawn(
            config,
            Arc::new(runtime.clone()),
            threads.shutdown(),
        )?),
        None => log::info!("container log rotation is off (negative --container-log-max-size)"),
    }
    let stats = start_stats(flags, runtime, images, rt.cgroups.clone(), threads);
    let server = ServerContext {
        stats: stats.clone(),
        ..server
    };
    // Pods keep running without the node API, so a taken port is loud, not fatal.
    match server::spawn(server_config, server, threads.shutdown()) {
        Ok(handles) => handles.into_iter().for_each(|h| threads.add(h)),
        Err(err) => log::error!("node server disabled: {err}"),
    }
    Ok(stats)
}

/// What the node shutdown manager acts on.
struct ShutdownParts {
    pods: crate::kubelet::snapshot::PodSnapshot,
    workers: PodWorkers,
    status: StatusManager,
    state: crate::nodeshutdown::ShutdownState,
    recorder: Recorder,
    node: String,
}

/// Starts the `node-shutdown` thread when a shutdown grace period is configured.
fn start_node_shutdown(
    flags: &Flags,
    connect: crate::nodeshutdown::logind::Connect,
    parts: ShutdownParts,
    threads: &mut Threads,
) -> Result<(), AgentError> {
    let groups = flags.shutdown.groups();
    if groups.is_empty() {
        log::debug!("node shutdown: no grace period configured; the node's shutdown is immediate");
        return Ok(());
    }
    let snapshot = parts.pods;
    threads.add(
        crate::nodeshutdown::ShutdownManager {
            groups,
            connect,
            pods: Box::new(move || snapshot.pods()),
            workers: parts.workers,
            status: parts.status,
            state: parts.state,
            recorder: parts.recorder,
            node_name: parts.node,
        }
        .spawn(threads.shutdown())?,
    );
    Ok(())
}

/// Starts every thread, runs the sync loop on the calling thread until shutdown,
/// then joins the threads (for at most [`SHUTDOWN_JOIN_LIMIT`]).
pub fn run(
    flags: &Flags,
    prepared: Prepared,
    runtime: RuntimeClient,
    images: cri::ImageClient,
    shutdown: Shutdown,
) -> Result<(), AgentError> {
    let mut threads = Threads::new(&shutdown);
    let host = resolve_host(flags)?;
    let eviction_config =
        crate::config::eviction_config(flags).map_err(|e| AgentError::Config(e.to_string()))?;
    let pressure = crate::eviction::Pressure::new();
    let shutdown_state = crate::nodeshutdown::ShutdownState::new();
    let (node, root_dir, view) = (host.node.clone(), host.root_dir.clone(), host.view.clone());
    let host_ips: Vec<String> = host
        .machine
        .node_ip
        .iter()
        .map(|ip| ip.to_string())
        .collect();
    let api_and_cert = prepared.api;
    let api = api_and_cert.as_ref().map(|(client, _)| client.clone());
    let recorder = start_events(flags, &host, api.as_ref(), &mut threads)?;
    start_rotation(flags, &node, &api_and_cert, &recorder, &mut threads)?;
    let serving = start_serving_rotation(flags, &host, &api_and_cert, &recorder, &mut threads)?;
    // Upstream's first node event (kubelet Run).
    recorder.node(
        &node,
        crate::events::EventType::Normal,
        "Starting",
        "Starting kubelet.",
    );
    let stats_images = images.clone();
    // Pod workers' own API reads (volume objects, tokens, mirror pods, RuntimeClasses)
    // run on two request threads, so that one worker thread per pod keeps a shallow
    // stack.
    let worker_api = match &api {
        Some(client) => Some(client.with_request_threads(&RequestThreads::start("api-req", 2)?)),
        None => None,
    };
    // Device plugins: the registration server lives until `run` returns.
    let device_plugins = start_devices(flags, &root_dir);
    let devices = device_plugins.as_ref().map(|(m, _)| m.clone());
    let rt = start_runtime(
        flags,
        &host,
        &runtime,
        images,
        RuntimeSources {
            api: worker_api.clone(),
            devices: devices.as_ref(),
        },
        &recorder,
        &mut threads,
    )?;
    let node_lister = start_node(
        host,
        api.as_ref(),
        &rt,
        &runtime,
        &stats_images,
        &pressure,
        &shutdown_state,
        &recorder,
        devices.as_ref(),
        &mut threads,
    )?;
    let sources = start_sources(flags, &node, &root_dir, api.as_ref(), &mut threads)?;
    let (probes, probe_rx, probe_metrics) = start_probes(&runtime, &recorder, &mut threads);
    let (status, unstarted_status) = status_manager(api.as_ref());

    let allocatable = view.allocatable.clone();
    let volumes = Arc::new(volume_manager(
        &root_dir,
        worker_api.clone(),
        &node,
        allocatable.clone(),
    ));
    // CSI node plugins: the `plugins` thread registers drivers from plugins_registry.
    threads.add(volumes.spawn_plugin_watcher(threads.shutdown())?);
    let mut syncer = KubeletSyncer::new(
        rt.manager.clone(),
        status.clone(),
        rt.cgroups.clone(),
        volumes.clone(),
        probes.clone(),
        rt.runtime_state.clone(),
        recorder.clone(),
        worker_api.map(|c| MirrorClient::new(c, node.clone())),
        NodeFacts {
            name: node.clone(),
            host_ips,
            runtime_name: rt.runtime_name.clone(),
            root_dir: root_dir.clone(),
        },
    )
    .with_resize(rt.resize.clone(), rt.cache.clone())
    .with_node_allocatable(allocatable);
    if let Some(store) = sources.services {
        syncer = syncer.with_services(store);
    }
    let queue = WorkQueue::new();
    let timings = WorkerTimings {
        resync: flags.sync_frequency,
        ..Default::default()
    };
    let workers = PodWorkers::new(
        Arc::new(syncer),
        queue.clone(),
        rt.cache.clone(),
        recorder.clone(),
        timings,
    );
    if let (Some(unstarted), Some(client)) = (unstarted_status, &api) {
        start_status(
            unstarted,
            client,
            &workers,
            sources.watched.clone(),
            &mut threads,
        )?;
    }

    let (deaths_tx, deaths_rx) = bounded(256);
    let kubelet = Kubelet::new(KubeletDeps {
        workers: workers.clone(),
        queue,
        runtime: rt.manager.clone(),
        runtime_state: rt.runtime_state.clone(),
        status: status.clone(),
        probes,
        recorder: recorder.clone(),
        node: view,
        root_dir,
        expected_sources: sources.expected,
        resize: rt.resize.clone(),
        volumes,
        deaths: deaths_tx,
        last_relist: rt.last_relist.clone(),
        cgroups: rt.cgroups.clone(),
        mirrors: api
            .as_ref()
            .map(|c| MirrorClient::new(c.clone(), node.clone())),
        node_lister,
        // Upstream's order: the eviction manager's handler, then the shutdown manager's.
        extra_admission: Some(Arc::new(crate::admission::AdmitHandlers(vec![
            Arc::new(pressure.clone()),
            Arc::new(shutdown_state.clone()),
        ]))),
        devices,
    });
    let evict_workers = workers.clone();
    let evict_recorder = recorder.clone();
    start_node_shutdown(
        flags,
        prepared.logind,
        ShutdownParts {
            pods: kubelet.snapshot(),
            workers: workers.clone(),
            status: status.clone(),
            state: shutdown_state,
            recorder: recorder.clone(),
            node: node.clone(),
        },
        &mut threads,
    )?;
    threads.add(
        GcLoop {
            cleaner: kubelet.cleaner(),
            manager: rt.manager.clone(),
            workers,
            sources_ready: kubelet.sources_ready_flag(),
            policy: GcPolicy {
                min_age: flags.minimum_container_ttl_duration,
                ..Default::default()
            },
            image_policy: ImageGcPolicy {
                high_threshold_percent: flags.image_gc_high_threshold,
                low_threshold_percent: flags.image_gc_low_threshold,
                ..Default::default()
            },
            recorder,
            node_name: node.clone(),
        }
        .spawn(deaths_rx, threads.shutdown())?,
    );
    let server = ServerContext {
        heartbeat: kubelet.heartbeat(),
        pleg: rt.pleg_health.clone(),
        started: Instant::now(),
        pods: kubelet.snapshot(),
        runtime: runtime.clone(),
        status: Some(status),
        api,
        stats: None,
        probes: probe_metrics,
    };
    let mut server_config = flags.server_config(&node);
    server_config.serving = serving;
    let stats = start_readers(
        flags,
        server_config,
        &runtime,
        stats_images,
        &rt,
        server,
        &mut threads,
    )?;
    match stats {
        Some(store) => threads.add(
            crate::eviction::EvictionManager {
                config: eviction_config,
                stats: store,
                pods: {
                    let snapshot = kubelet.snapshot();
                    Box::new(move || snapshot.pods())
                },
                workers: evict_workers,
                runtime: rt.manager.clone(),
                recorder: evict_recorder,
                node_name: node.clone(),
                root_dir: flags.root_dir.clone(),
                sources_ready: kubelet.sources_ready_flag(),
                pressure,
                period: crate::eviction::manager::PERIOD,
            }
            .spawn(threads.shutdown())?,
        ),
        None => log::warn!("eviction disabled: no usage stats"),
    }

    log::info!("litelet running as node {node:?}");
    kubelet.run(sources.updates, rt.pleg_events, probe_rx, shutdown);
    threads.join_within(SHUTDOWN_JOIN_LIMIT);
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
        let err = check_swap(&format!("{header}/swapfile file 2097148 0 -2\n")).unwrap_err();
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
