//! The agent: resolves the flags against the machine and starts every thread of a
//! running litelet — PLEG, runtime-up, status manager, pod sources, pod workers and
//! the sync loop — then waits for shutdown. Wiring only; every part lives elsewhere.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded};

use crate::admission::sysctls::{kernel_version, SysctlAllowlist};
use crate::admission::NodeView;
use crate::api::client::ApiClient;
use crate::api::kubeconfig;
use crate::cgroups::manager::{ManagerConfig, PodCgroupManager};
use crate::config::{CgroupDriver, Flags};
use crate::credentialprovider::NodeDockerConfig;
use crate::cri::{self, RuntimeClient};
use crate::events::Recorder;
use crate::kubelet::deps::{NoProbes, PodProbes};
use crate::kubelet::gc_loop::GcLoop;
use crate::kubelet::mirror::MirrorClient;
use crate::kubelet::syncer::{KubeletSyncer, NodeFacts};
use crate::kubelet::Kubelet;
use crate::node::register;
use crate::node::status as node_status;
use crate::node::{MachineInfo, MachineReader, MachineRoots, NodeConfig, NodeInputs};
use crate::pleg::{Pleg, EVENT_CHANNEL_CAPACITY};
use crate::pod_workers::{PodWorkers, WorkQueue, WorkerTimings};
use crate::prober::ProbeManager;
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
use crate::runtime::state::RuntimeState;
use crate::server::{self, ServerContext};
use crate::sources::{self, SOURCE_API, SOURCE_FILE};
use crate::status::events;
use crate::status::manager::{PodHooks, StatusManager};
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
    shutdown: &Shutdown,
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
        shutdown.clone(),
    ) {
        Ok(_) => Some(store),
        Err(err) => {
            log::error!("usage stats disabled: {err}");
            None
        }
    }
}

/// Starts every thread and runs the sync loop on the calling thread until shutdown.
pub fn run(
    flags: &Flags,
    runtime: RuntimeClient,
    images: cri::ImageClient,
    shutdown: Shutdown,
) -> Result<(), AgentError> {
    let node = node_name(flags);
    let root_dir = flags.root_dir.clone();
    std::fs::create_dir_all(root_dir.join("pods"))
        .map_err(|e| AgentError::Config(format!("cannot create {}: {e}", root_dir.display())))?;
    let pod_logs_dir = flags.pod_logs_dir.clone();
    let node_config = NodeConfig::from_flags(flags, Some(&node))
        .map_err(|e| AgentError::Config(e.to_string()))?;
    let eviction_config =
        crate::config::eviction_config(flags).map_err(|e| AgentError::Config(e.to_string()))?;
    let pressure = crate::eviction::Pressure::new();
    let reader = MachineReader::new(MachineRoots::host(), &root_dir, node_config.node_ip);
    let (machine, problems) = reader.read();
    for problem in problems {
        log::warn!("machine facts: {problem}");
    }
    let memory = machine.memory_bytes.map(|b| b as i64).unwrap_or(0);
    let view = node_view(&node, &node_config, &machine, flags)?;
    let api = match &flags.kubeconfig {
        Some(path) => {
            let mut config =
                kubeconfig::load(path).map_err(|e| AgentError::Config(e.to_string()))?;
            config.qps = flags.kube_api_qps;
            config.burst = flags.kube_api_burst;
            Some(ApiClient::new(&config).map_err(|e| AgentError::Config(e.to_string()))?)
        }
        None => None,
    };
    let recorder = match &api {
        Some(client) => {
            let (event_tx, event_rx) = bounded(1000);
            events::spawn(
                client.with_own_limit(flags.event_qps, flags.event_burst),
                events::Options::new(&node),
                event_rx,
                shutdown.clone(),
            )?;
            Recorder::new(event_tx)
        }
        None => Recorder::log_only(),
    };
    // Upstream's first node event (kubelet Run).
    recorder.node(
        &node,
        crate::events::EventType::Normal,
        "Starting",
        "Starting kubelet.",
    );

    let host_resolv = std::fs::read_to_string(&flags.resolv_conf).unwrap_or_default();
    let settings = RuntimeSettings {
        root_dir: root_dir.clone(),
        pod_logs_dir,
        dns: DnsSettings {
            cluster_dns: flags.cluster_dns.clone(),
            cluster_domain: flags.cluster_domain.clone(),
            host: ResolvConf::parse(&host_resolv),
        },
        memory_capacity: memory,
        enforce_cpu_limits: true,
        apparmor_enabled: crate::runtime::profiles::apparmor_enabled_on_host(),
        node_hosts_file: std::path::PathBuf::from(crate::runtime::hosts::ETC_HOSTS),
    };
    let runtime_name = runtime
        .version(&Default::default())
        .map(|v| v.runtime_name)
        .unwrap_or_else(|_| "cri".into());
    let stats_images = images.clone();
    let hooks = Arc::new(CriHookRunner::new(runtime.clone()));
    let cache = PodStatusCache::new();
    let (pleg_tx, pleg_rx) = bounded(EVENT_CHANNEL_CAPACITY);
    let pleg = Pleg::new(runtime.clone(), cache.clone(), pleg_tx);
    // What litelet changes itself, the PLEG sees at once rather than a period later,
    // and the pod's worker waits for a status taken after the change (and only then).
    let nudge = pleg.nudger();
    let last_relist = pleg.last_relist();
    let marks = cache.clone();
    let manager = Arc::new(
        RuntimeManager::new(runtime.clone(), images, hooks, recorder.clone(), settings)
            .with_credentials(CredentialSettings {
                node_config: NodeDockerConfig::for_root_dir(
                    &root_dir,
                    std::env::var_os("HOME")
                        .map(std::path::PathBuf::from)
                        .as_deref(),
                ),
                records: PullRecords::load(&root_dir),
                policy: flags.image_pull_credentials_verification_policy,
                allowlist: flags.preloaded_images_verification_allowlist.clone(),
            })
            .on_runtime_change(move |change| {
                marks.runtime_changed(change.uid, std::time::Instant::now());
                if change.lifecycle {
                    nudge.nudge();
                }
            }),
    );

    // RESIZE: litelet writes pod cgroups only through cgroupfs.
    let cgroups = if flags.cgroup_driver == CgroupDriver::Systemd {
        log::warn!("pod cgroups disabled: litelet manages them only with --cgroup-driver=cgroupfs");
        None
    } else {
        match PodCgroupManager::from_system(ManagerConfig {
            cgroup_root: flags.cgroup_root.clone(),
            ..Default::default()
        })
        .and_then(|m| m.ensure_qos_hierarchy().map(|()| m))
        {
            Ok(m) => {
                // Upstream's container manager says so once the pod cgroups hold the
                // node's allocatable.
                recorder.node(
                    &node,
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
        }
    };

    // RESIZE: allocations (the checkpoint under --root-dir), resize admission.
    let (resize, problem) = ResizeManager::open(
        &root_dir,
        ResizeConfig {
            node: view.clone(),
            driver: flags.cgroup_driver,
        },
    );
    if let Some(problem) = problem {
        log::error!("{problem}; pods are admitted at their spec");
    }
    let resize = Arc::new(resize);

    let pleg_health = pleg.health();
    let runtime_state = RuntimeState::new(pleg.health());
    pleg.spawn(shutdown.clone())?;
    runtime_state.spawn_updater(manager.clone(), shutdown.clone())?;

    // Node registration, status and lease (only with an API server).
    if let Some(client) = &api {
        let mut inputs = NodeInputs::from_host(reader, runtime_state.clone(), runtime.clone());
        inputs.health = pressure.wrap_health(inputs.health);
        inputs.images = Some(crate::node::inputs::images_from(stats_images.clone()));
        crate::node::start(
            client,
            node_config.clone(),
            inputs,
            recorder.clone(),
            shutdown.clone(),
        )?;
    }

    // The status manager asks the pod workers, which are built after it.
    let workers_cell: Arc<std::sync::OnceLock<PodWorkers>> = Arc::new(std::sync::OnceLock::new());
    let status = match &api {
        Some(client) => {
            let (w1, w2) = (workers_cell.clone(), workers_cell.clone());
            let hooks = PodHooks::new(
                Arc::new(move |uid: &str| {
                    w1.get()
                        .is_none_or(|w| w.could_have_running_containers(uid))
                }),
                Arc::new(move |uid: &str| {
                    w2.get().is_some_and(|w| {
                        !w.could_have_running_containers(uid) && w.should_pod_be_finished(uid)
                    })
                }),
            );
            StatusManager::spawn(client.clone(), hooks, Default::default(), shutdown.clone())?.0
        }
        None => StatusManager::standalone(),
    };

    let (updates_tx, updates_rx) = unbounded();
    let mut expected = HashSet::new();
    if let Some(dir) = &flags.pod_manifest_path {
        sources::file::spawn(
            dir.clone(),
            node.clone(),
            updates_tx.clone(),
            shutdown.clone(),
        )?;
        expected.insert(SOURCE_FILE);
    }
    // Edge autonomy: the API source's and the services' checkpoints (docs/autonomy.md).
    let checkpoint = checkpoint_spec(flags, &root_dir, &node);
    if let Some(client) = &api {
        let options = sources::apiserver::Options {
            checkpoint: checkpoint.clone(),
            ..sources::apiserver::Options::new(&node)
        };
        sources::apiserver::spawn_with(
            client.clone(),
            options,
            updates_tx.clone(),
            shutdown.clone(),
        )?;
        expected.insert(SOURCE_API);
    }
    drop(updates_tx);
    // Service variables: the cluster's Services, kept by the `services` thread.
    let services = match &api {
        Some(client) => {
            let store = sources::services::ServiceStore::new();
            sources::services::spawn(
                client.clone(),
                sources::services::Options {
                    checkpoint,
                    ..Default::default()
                },
                store.clone(),
                shutdown.clone(),
            )?;
            Some(store)
        }
        None => None,
    };

    let host_ips: Vec<String> = machine.node_ip.iter().map(|ip| ip.to_string()).collect();
    let (probes, probe_rx): (Arc<dyn PodProbes>, _) = match ProbeManager::start(
        Default::default(),
        runtime.clone(),
        recorder.clone(),
        shutdown.clone(),
    ) {
        Ok((manager, _thread)) => {
            let results = manager.results();
            (Arc::new(manager), results)
        }
        Err(err) => {
            log::error!("probes disabled: {err}");
            (Arc::new(NoProbes), crossbeam_channel::never())
        }
    };
    let allocatable = view.allocatable.clone();
    let volumes = Arc::new(volume_manager(
        &root_dir,
        api.clone(),
        &node,
        allocatable.clone(),
    ));
    let mut syncer = KubeletSyncer::new(
        manager.clone(),
        status.clone(),
        cgroups.clone(),
        volumes.clone(),
        probes.clone(),
        runtime_state.clone(),
        recorder.clone(),
        api.as_ref()
            .map(|c| MirrorClient::new(c.clone(), node.clone())),
        NodeFacts {
            name: node.clone(),
            host_ips,
            runtime_name,
            root_dir: root_dir.clone(),
        },
    )
    .with_resize(resize.clone(), cache.clone())
    .with_node_allocatable(allocatable);
    if let Some(store) = services {
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
        cache,
        recorder.clone(),
        timings,
    );
    let _ = workers_cell.set(workers.clone());
    let (gc_manager, gc_workers, gc_recorder) =
        (manager.clone(), workers.clone(), recorder.clone());
    let (evict_manager, evict_workers, evict_recorder) =
        (manager.clone(), workers.clone(), recorder.clone());

    let server_status = status.clone();
    let cgroups_for_stats = cgroups.clone();
    let mut kubelet = Kubelet::new(
        workers,
        queue,
        manager,
        runtime_state,
        status,
        probes,
        cgroups,
        api.as_ref()
            .map(|c| MirrorClient::new(c.clone(), node.clone())),
        recorder,
        view,
        root_dir,
        expected,
    );
    // Admission follows the Node's labels and taints as the API server has them.
    if let Some(client) = &api {
        let lister = crate::node::NodeLister::new();
        crate::node::lister::spawn(client, &node, lister.clone(), shutdown.clone())?;
        kubelet.node_lister = Some(lister);
    }
    let (deaths_tx, deaths_rx) = bounded(256);
    kubelet.deaths = Some(deaths_tx);
    kubelet.volumes = Some(volumes);
    GcLoop {
        manager: gc_manager,
        workers: gc_workers,
        sources_ready: kubelet.sources_ready.clone(),
        policy: GcPolicy {
            min_age: flags.minimum_container_ttl_duration,
            ..Default::default()
        },
        image_policy: ImageGcPolicy {
            high_threshold_percent: flags.image_gc_high_threshold,
            low_threshold_percent: flags.image_gc_low_threshold,
            ..Default::default()
        },
        recorder: gc_recorder,
        node_name: node.clone(),
    }
    .spawn(deaths_rx, shutdown.clone())?;
    // Log rotation has threads of its own: a slow disk never delays the sync loop.
    match flags.log_manager_config() {
        Some(config) => {
            crate::logs::manager::spawn(config, Arc::new(runtime.clone()), shutdown.clone())?;
        }
        None => log::info!("container log rotation is off (negative --container-log-max-size)"),
    }
    let stats = start_stats(flags, &runtime, stats_images, cgroups_for_stats, &shutdown);
    kubelet.extra_admission = Some(Arc::new(pressure.clone()));
    match &stats {
        Some(store) => {
            crate::eviction::EvictionManager {
                config: eviction_config,
                stats: store.clone(),
                pods: kubelet.snapshot.clone(),
                workers: evict_workers,
                runtime: evict_manager,
                recorder: evict_recorder,
                node_name: node.clone(),
                root_dir: flags.root_dir.clone(),
                sources_ready: kubelet.sources_ready.clone(),
                pressure,
                period: crate::eviction::manager::PERIOD,
            }
            .spawn(shutdown.clone())?;
        }
        None => log::warn!("eviction disabled: no usage stats"),
    }
    let server = ServerContext {
        heartbeat: kubelet.heartbeat.clone(),
        pleg: pleg_health,
        started: std::time::Instant::now(),
        pods: kubelet.snapshot.clone(),
        runtime: runtime.clone(),
        status: Some(server_status),
        api: api.clone(),
        stats,
    };
    // Pods keep running without the node API, so a taken port is loud, not fatal.
    if let Err(err) = server::spawn(
        server::config_from_flags(flags, &node),
        server,
        shutdown.clone(),
    ) {
        log::error!("node server disabled: {err}");
    }
    kubelet.resize = Some(resize);
    kubelet.last_relist = Some(last_relist);
    log::info!("litelet running as node {node:?}");
    kubelet.run(updates_rx, pleg_rx, probe_rx, shutdown);
    // Give threads a moment to notice the shutdown; containers stay running.
    std::thread::sleep(Duration::from_millis(50));
    Ok(())
}
