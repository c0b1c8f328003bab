//! The kubelet's sync loop (upstream syncLoop / syncLoopIteration) and its handlers.
//!
//! Runs on the `sync` thread, which owns the desired pods ([`PodManager`]) and never
//! calls the API or cgroupfs, nor writes the allocation checkpoint (admissions are
//! recorded in memory; pod workers and the `gc` thread write it): slow work goes to
//! pod workers and the `gc` thread. Its only I/O is housekeeping's: a CRI listing when
//! the PLEG's last relist is stale, the device checkpoint when devices are freed.
//! One `select!` reads:
//! - `updates`: PodUpdates from the sources (API watch, static files) → handlers;
//! - `pleg`: container lifecycle events → a sync of the pod, if known;
//! - `sync_tick` (1 s): pods whose work-queue entry is due, and active deadlines;
//! - `housekeeping_tick` (2 s): `housekeeping`, once every source has reported;
//! - `probes`: liveness/readiness/startup results → status and a sync;
//! - `reachable_again`: the API server answers after an outage → a sync of every
//!   pod, so volumes waiting for it are set up and tokens and objects kept from the
//!   node's copy (`volumes`, `poddata`) are read afresh at once, not at the next resync;
//! - `shutdown`: leave the loop (containers keep running).
//!
//! While the runtime is unhealthy (status not checked, down, PLEG stale) no channel
//! but shutdown is read, as upstream does.

pub mod active;
mod cleaner;
pub mod deps;
pub mod gc_loop;
mod housekeeping;
pub mod housekeeping_plan;
pub mod mirror;
pub mod node_allocatable;
mod pod_manager;
pub mod pull_secrets;
pub mod snapshot;
pub mod sync_error;
pub mod syncer;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, never, select_biased, tick, Receiver};

pub use pod_manager::PodManager;

use crate::admission::{admit, admit_devices, NodeView, Rejection};
use crate::api::meta::Time;
use crate::api::pod::{is_terminal_phase, Pod, PodPhase};
use crate::cgroups::manager::PodCgroupManager;
use crate::events::{EventType, Recorder};
use crate::node::NodeLister;
use crate::pleg::{LastRelist, PodLifecycleEvent, PodLifecycleEventType};
use crate::pod_workers::{PodWorkers, UpdatePodOptions, UpdateType, WorkQueue};
use crate::prober::{ProbeKind, ProbeUpdate};
use crate::runtime::actions::ProbeResult;
use crate::runtime::manager::RuntimeManager;
use crate::runtime::resize::ResizeManager;
use crate::runtime::state::RuntimeState;
use crate::sources::{PodOperation, PodUpdate};
use crate::status::manager::StatusManager;
use deps::PodProbes;
use mirror::MirrorClient;

/// Period of the work-queue check.
pub const SYNC_PERIOD: Duration = Duration::from_secs(1);
/// Period of housekeeping.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// A housekeeping run longer than this is logged as an error.
const HOUSEKEEPING_WARNING: Duration = Duration::from_secs(1);

/// What the sync loop is built from (upstream `kubelet.Dependencies`), given once to
/// [`Kubelet::new`]; nothing is set after construction. A struct literal, so every
/// part is required at compile time; the parts a node may run without are `Option`s:
/// pod cgroups (the manager failed to start), mirror pods and the API server's Node
/// (standalone mode). Tests fill it like production does (`NoProbes`, `NoVolumes`, a
/// `ResizeManager` over a temporary directory).
pub struct KubeletDeps {
    pub workers: PodWorkers,
    pub queue: WorkQueue,
    pub runtime: Arc<RuntimeManager>,
    pub runtime_state: RuntimeState,
    pub status: StatusManager,
    pub probes: Arc<dyn PodProbes>,
    pub recorder: Recorder,
    /// The node as registered (labels, taints, allocatable, sysctls).
    pub node: NodeView,
    pub root_dir: std::path::PathBuf,
    /// Sources that must report once before housekeeping runs.
    pub expected_sources: HashSet<&'static str>,
    /// Allocations (admission reads and records them) and Deferred retries.
    pub resize: Arc<ResizeManager>,
    /// Tears down the volumes of orphaned pod directories (tmpfs left by a restart).
    pub volumes: Arc<dyn deps::PodVolumes>,
    /// Requests to the `gc` thread: container deaths, finished pods, housekeeping's
    /// cleanup plans.
    pub deaths: crossbeam_channel::Sender<gc_loop::GcRequest>,
    /// The PLEG's last relist: housekeeping reads the runtime's pods from it when it is
    /// fresh instead of listing the runtime again.
    pub last_relist: LastRelist,
    pub cgroups: Option<Arc<PodCgroupManager>>,
    pub mirrors: Option<MirrorClient>,
    /// The Node's labels and taints as the API server has them (the `node-watch`
    /// thread); admission prefers them to `node`'s.
    pub node_lister: Option<NodeLister>,
    /// Checked before the built-in admission (the eviction manager's pressure check).
    pub extra_admission: Option<Arc<dyn deps::PodAdmitHandler>>,
    /// Device plugins: admission checks their free devices; `None`: no device manager.
    pub devices: Option<crate::devicemanager::DeviceManager>,
    /// A message each time the API server answers again after an outage
    /// (`ApiClient::reachability().subscribe()`; `never()` without one).
    pub reachable_again: Receiver<()>,
}

/// Everything the sync loop works with. Owned by the `sync` thread; other threads
/// read what it publishes through the handles [`Kubelet::heartbeat`],
/// [`Kubelet::snapshot`] and [`Kubelet::sources_ready_flag`].
pub struct Kubelet {
    pods: PodManager,
    workers: PodWorkers,
    queue: WorkQueue,
    runtime: Arc<RuntimeManager>,
    runtime_state: RuntimeState,
    status: StatusManager,
    probes: Arc<dyn PodProbes>,
    cgroups: Option<Arc<PodCgroupManager>>,
    mirrors: Option<MirrorClient>,
    recorder: Recorder,
    node: NodeView,
    node_lister: Option<NodeLister>,
    root_dir: std::path::PathBuf,
    expected_sources: HashSet<&'static str>,
    seen_sources: HashSet<&'static str>,
    /// Sources whose pods so far come from their checkpoint (cut off since start-up):
    /// housekeeping kills and removes nothing as an orphan while any is listed.
    provisional_sources: HashSet<&'static str>,
    /// Set once every source has reported (read by the `gc` thread).
    sources_ready: Arc<AtomicBool>,
    deaths: crossbeam_channel::Sender<gc_loop::GcRequest>,
    last_worker_count: usize,
    volumes: Arc<dyn deps::PodVolumes>,
    /// Unix seconds of the last loop iteration (read by /healthz).
    heartbeat: Arc<AtomicU64>,
    /// The desired pods as the node server reads them; published after config changes
    /// (a burst of updates once it is drained).
    snapshot: snapshot::PodSnapshot,
    /// The desired pods changed since the last publication (see [`Kubelet::run`]).
    snapshot_stale: bool,
    snapshot_published: Instant,
    resize: Arc<ResizeManager>,
    last_relist: LastRelist,
    extra_admission: Option<Arc<dyn deps::PodAdmitHandler>>,
    devices: Option<crate::devicemanager::DeviceManager>,
    reachable_again: Receiver<()>,
    /// UIDs of the desired pods admission refused. A refusal is final (upstream
    /// keeps such a pod away from the pod workers for good): no later update, sync or
    /// housekeeping round starts a worker for it, whatever the status manager holds.
    /// Only a kill, which runs nothing, may reach the workers. Pruned to the desired
    /// pods.
    rejected: HashSet<String>,
}

/// The events the loop reacts to.
enum Event {
    Config(PodUpdate),
    ConfigClosed,
    Pleg(PodLifecycleEvent),
    SyncTick,
    Housekeeping,
    Probe(ProbeUpdate),
    ApiReachable,
    Shutdown,
}

impl Event {
    /// The event's name in metrics.
    fn name(&self) -> &'static str {
        match self {
            Event::Config(_) | Event::ConfigClosed => "config",
            Event::Pleg(_) => "pleg",
            Event::SyncTick => "sync",
            Event::Housekeeping => "housekeeping",
            Event::Probe(_) => "probe",
            Event::ApiReachable => "api",
            Event::Shutdown => "shutdown",
        }
    }
}

fn creation_key(pod: &Pod) -> i64 {
    pod.metadata
        .creation_timestamp
        .map(|t| t.unix_seconds())
        .unwrap_or(0)
}

impl Kubelet {
    pub fn new(deps: KubeletDeps) -> Kubelet {
        Kubelet {
            pods: PodManager::new(),
            workers: deps.workers,
            queue: deps.queue,
            runtime: deps.runtime,
            runtime_state: deps.runtime_state,
            status: deps.status,
            probes: deps.probes,
            cgroups: deps.cgroups,
            mirrors: deps.mirrors,
            recorder: deps.recorder,
            node: deps.node,
            node_lister: deps.node_lister,
            root_dir: deps.root_dir,
            expected_sources: deps.expected_sources,
            seen_sources: HashSet::new(),
            provisional_sources: HashSet::new(),
            sources_ready: Arc::new(AtomicBool::new(false)),
            deaths: deps.deaths,
            last_worker_count: 0,
            rejected: HashSet::new(),
            volumes: deps.volumes,
            heartbeat: Arc::new(AtomicU64::new(0)),
            snapshot: snapshot::PodSnapshot::new(),
            snapshot_stale: false,
            snapshot_published: Instant::now(),
            resize: deps.resize,
            last_relist: deps.last_relist,
            extra_admission: deps.extra_admission,
            devices: deps.devices,
            reachable_again: deps.reachable_again,
        }
    }

    /// The executor of housekeeping's cleanup plans, for the `gc` thread.
    pub fn cleaner(&self) -> cleaner::Cleaner {
        cleaner::Cleaner {
            workers: self.workers.clone(),
            mirrors: self.mirrors.clone(),
            volumes: self.volumes.clone(),
            cgroups: self.cgroups.clone(),
            root_dir: self.root_dir.clone(),
            resize: self.resize.clone(),
            last_scan: Default::default(),
        }
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.node.name
    }

    /// Unix seconds of the loop's last turn, for `/healthz` (0 before the first).
    pub fn heartbeat(&self) -> Arc<AtomicU64> {
        self.heartbeat.clone()
    }

    /// The desired pods as the node server reads them.
    pub fn snapshot(&self) -> snapshot::PodSnapshot {
        self.snapshot.clone()
    }

    /// The desired pods with their activity, for readers on other threads.
    pub fn pods_view(&self) -> active::PodsView {
        active::PodsView {
            snapshot: self.snapshot.clone(),
            workers: self.workers.clone(),
            status: self.status.clone(),
        }
    }

    /// Set once every expected source has reported (the `gc` thread waits for it).
    pub fn sources_ready_flag(&self) -> Arc<AtomicBool> {
        self.sources_ready.clone()
    }

    fn sources_ready(&self) -> bool {
        self.expected_sources
            .iter()
            .all(|s| self.seen_sources.contains(s))
    }

    /// Runs the loop until shutdown or until the sources close.
    pub fn run(
        mut self,
        updates: Receiver<PodUpdate>,
        pleg: Receiver<PodLifecycleEvent>,
        probes: Receiver<ProbeUpdate>,
        shutdown: Receiver<()>,
    ) {
        let sync_tick = tick(SYNC_PERIOD);
        let housekeeping_tick = tick(HOUSEKEEPING_PERIOD);
        let mut updates = Some(updates);
        let mut backoff = Duration::from_millis(100);
        let mut last_gate_log: Option<Instant> = None;
        loop {
            let errors = self.runtime_state.runtime_errors(Instant::now());
            if !errors.is_empty() {
                if last_gate_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    log::warn!("skipping pod synchronization: {}", errors.join("; "));
                    last_gate_log = Some(Instant::now());
                }
                select_biased! {
                    recv(shutdown) -> _ => return,
                    recv(after(backoff)) -> _ => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            backoff = Duration::from_millis(100);
            self.beat();
            let config = updates.clone().unwrap_or_else(never);
            let reachable_again = self.reachable_again.clone();
            let event = select_biased! {
                recv(shutdown) -> _ => Event::Shutdown,
                recv(config) -> update => match update {
                    Ok(update) => Event::Config(update),
                    Err(_) => Event::ConfigClosed,
                },
                recv(pleg) -> event => match event {
                    Ok(event) => Event::Pleg(event),
                    Err(_) => Event::Shutdown,
                },
                recv(probes) -> update => match update {
                    Ok(update) => Event::Probe(update),
                    Err(_) => continue,
                },
                recv(sync_tick) -> _ => Event::SyncTick,
                recv(housekeeping_tick) -> _ => Event::Housekeeping,
                recv(reachable_again) -> msg => match msg {
                    Ok(()) => Event::ApiReachable,
                    Err(_) => {
                        self.reachable_again = never();
                        continue;
                    }
                },
            };
            match event {
                Event::Shutdown => return,
                Event::ConfigClosed => {
                    log::info!("pod sources closed; the sync loop keeps serving known pods");
                    updates = None;
                }
                other => self.handle(other),
            }
            // A burst of config updates (a watch relist, many pods created at once) is
            // published once it is drained, or at least every sync period: copying
            // every desired pod after each update made a burst quadratic.
            if self.snapshot_stale
                && (config.is_empty() || self.snapshot_published.elapsed() >= SYNC_PERIOD)
            {
                self.snapshot.publish(self.pods.pods());
                self.snapshot_stale = false;
                self.snapshot_published = Instant::now();
            }
            self.beat();
        }
    }

    fn beat(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.heartbeat.store(now, Ordering::Relaxed);
    }

    fn handle(&mut self, event: Event) {
        let started = Instant::now();
        let kind = event.name();
        match event {
            Event::Config(update) => {
                let source = update.source;
                let provisional = update.provisional;
                match update.op {
                    PodOperation::Add => self.handle_pod_additions(update.pods),
                    PodOperation::Update | PodOperation::Delete => {
                        self.handle_pod_updates(update.pods)
                    }
                    PodOperation::Remove => self.handle_pod_removes(update.pods),
                    PodOperation::Reconcile => self.handle_pod_reconcile(update.pods),
                }
                self.seen_sources.insert(source);
                if provisional {
                    if self.provisional_sources.insert(source) {
                        log::warn!(
                            "source {source}: running pods from its checkpoint until it answers"
                        );
                    }
                } else if self.provisional_sources.remove(source) {
                    log::info!("source {source}: answered; its checkpoint is replaced");
                }
                if self.sources_ready() {
                    self.sources_ready.store(true, Ordering::Relaxed);
                }
                self.snapshot_stale = true;
            }
            Event::Pleg(event) => {
                if event.kind == PodLifecycleEventType::ContainerDied {
                    let _ = self
                        .deaths
                        .try_send(gc_loop::GcRequest::ContainerDied(event.uid.clone()));
                }
                if event.kind != PodLifecycleEventType::ContainerRemoved {
                    if let Some(pod) = self.pods.get(&event.uid).cloned() {
                        self.handle_pod_syncs(vec![pod]);
                    }
                }
            }
            Event::SyncTick => {
                let due = self.queue.take_due(Instant::now());
                let mut pods: Vec<Arc<Pod>> = due
                    .iter()
                    .filter_map(|uid| self.pods.get(uid).cloned())
                    .collect();
                let now = Time::now();
                for pod in self.pods.pods() {
                    if deadline_passed(pod, &self.status, now)
                        && !pods.iter().any(|p| p.uid() == pod.uid())
                    {
                        pods.push(pod.clone());
                    }
                }
                // Resources were freed: judge Deferred resizes again now.
                for uid in self.resize.take_retries() {
                    match self.pods.get(&uid) {
                        Some(pod) if !pods.iter().any(|p| p.uid() == uid) => pods.push(pod.clone()),
                        _ => {}
                    }
                }
                if !pods.is_empty() {
                    self.handle_pod_syncs(pods);
                }
            }
            Event::Housekeeping => {
                if self.sources_ready() {
                    self.housekeeping();
                    if started.elapsed() > HOUSEKEEPING_WARNING {
                        log::error!("housekeeping took {:?}", started.elapsed());
                    }
                }
            }
            Event::Probe(update) => self.handle_probe(update),
            Event::ApiReachable => {
                let pods: Vec<Arc<Pod>> = self.pods.pods().cloned().collect();
                log::info!(
                    "the API server answers again: syncing {} pods at once",
                    pods.len()
                );
                if !pods.is_empty() {
                    self.handle_pod_syncs(pods);
                }
            }
            Event::ConfigClosed | Event::Shutdown => {}
        }
        log::trace!("sync loop iteration took {:?}", started.elapsed());
        crate::metrics::SYNC_LOOP_DURATION.observe_duration(&[kind], started.elapsed());
    }

    fn handle_probe(&mut self, update: ProbeUpdate) {
        let success = update.result == ProbeResult::Success;
        match update.kind {
            ProbeKind::Liveness if success => return,
            ProbeKind::Liveness => {}
            ProbeKind::Readiness => {
                self.status
                    .set_container_readiness(&update.uid, &update.container_id, success)
            }
            ProbeKind::Startup => {
                self.status
                    .set_container_startup(&update.uid, &update.container_id, success)
            }
        }
        if let Some(pod) = self.pods.get(&update.uid).cloned() {
            self.handle_pod_syncs(vec![pod]);
        }
    }

    /// Pods that count against admission (upstream filterOutInactivePods).
    fn active_pods<'a>(&self, pods: impl Iterator<Item = &'a Arc<Pod>>) -> Vec<&'a Arc<Pod>> {
        pods.filter(|p| {
            !self.rejected.contains(p.uid()) && active::is_active(p, &self.workers, &self.status)
        })
        .collect()
    }

    fn update(&self, kind: UpdateType, pod: Arc<Pod>, mirror: Option<Arc<Pod>>) {
        if kind != UpdateType::Kill && self.rejected.contains(pod.uid()) {
            log::debug!(
                "pod {} ({}) was rejected at admission; {kind:?} not sent to a worker",
                pod.full_name(),
                pod.uid()
            );
            return;
        }
        let mut options = UpdatePodOptions::new(kind, pod);
        options.mirror_pod = mirror;
        self.workers.update_pod(options);
    }

    fn handle_pod_additions(&mut self, mut pods: Vec<Arc<Pod>>) {
        pods.sort_by_key(|p| creation_key(p));
        // The whole batch is one admission against resize admissions.
        let resize = self.resize.clone();
        let batch = resize.admission_batch();
        let mut node = self
            .node
            .with_listed(self.node_lister.as_ref().and_then(|l| l.get()));
        node.support.runtime = self.runtime_state.features();
        for pod in pods {
            crate::metrics::pod_seen(pod.uid(), Instant::now());
            if pod.is_mirror() {
                self.pods.upsert(pod.clone());
                if let Some(static_pod) = self.pods.static_of(&pod).cloned() {
                    self.update(UpdateType::Update, static_pod, Some(pod));
                }
                continue;
            }
            if self.rejected.contains(pod.uid()) {
                // Seen again (a relist): the refusal stands, nothing is admitted twice.
                self.pods.upsert(pod);
                continue;
            }
            // Admission sees the pods desired before this one is added, so the pod
            // never counts against itself (upstream takes that list before AddPod).
            let admitted = if self.workers.is_pod_termination_requested(pod.uid()) {
                Ok(None)
            } else if let Some(Err(rejection)) =
                self.extra_admission.as_ref().map(|h| h.admit(&pod))
            {
                Err(rejection)
            } else {
                let active = self.active_pods(self.pods.pods());
                // Every pod counts at its allocated resources; an admitted pod's
                // allocation is kept.
                let wanted = batch.allocated_pod(&pod);
                let active: Vec<Arc<Pod>> = active.iter().map(|p| batch.allocated_pod(p)).collect();
                let active: Vec<&Pod> = active.iter().map(Arc::as_ref).collect();
                match &self.devices {
                    Some(devices) => admit_devices(devices, &wanted, &active, &node)
                        .and_then(|node| admit(&wanted, &active, &node)),
                    None => admit(&wanted, &active, &node),
                }
                .map(|()| Some(wanted))
            };
            // Rejected pods stay desired too (upstream keeps them in the pod manager).
            self.pods.upsert(pod.clone());
            match admitted {
                Err(rejection) => {
                    self.rejected.insert(pod.uid().to_owned());
                    self.reject_pod(&pod, &rejection);
                    continue;
                }
                Ok(Some(wanted)) => batch.admitted(&wanted),
                Ok(None) => {}
            }
            let mirror = self.pods.mirror_of(&pod).cloned();
            self.update(UpdateType::Create, pod, mirror);
        }
        // The new allocations reach the checkpoint from the first of the new pods'
        // workers, before it runs anything (`ResizeManager::sync`).
        drop(batch);
    }

    /// Fails a pod that cannot run here (upstream rejectPod).
    fn reject_pod(&self, pod: &Arc<Pod>, rejection: &Rejection) {
        self.recorder.pod(
            pod,
            EventType::Warning,
            &rejection.reason,
            &rejection.message,
        );
        let mut status = pod.status.clone();
        status.phase = Some(PodPhase::Failed);
        status.reason = Some(rejection.reason.clone());
        status.message = Some(format!("Pod was rejected: {}", rejection.message));
        self.status.set_pod_status(pod, status);
    }

    fn handle_pod_updates(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            self.pods.upsert(pod.clone());
            if pod.is_mirror() {
                if let Some(static_pod) = self.pods.static_of(&pod).cloned() {
                    self.update(UpdateType::Update, static_pod, Some(pod));
                }
                continue;
            }
            let mirror = self.pods.mirror_of(&pod).cloned();
            self.update(UpdateType::Update, pod, mirror);
        }
    }

    fn handle_pod_removes(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            self.pods.remove(&pod);
            crate::metrics::pod_forgotten(pod.uid());
            if pod.is_mirror() {
                if let Some(static_pod) = self.pods.static_of(&pod).cloned() {
                    self.update(UpdateType::Update, static_pod, None);
                }
                continue;
            }
            if !self.sources_ready() {
                // Housekeeping terminates it as an orphan once the sources are ready.
                log::debug!(
                    "pod {}: removal deferred until all sources are ready",
                    pod.full_name()
                );
                continue;
            }
            self.update(UpdateType::Kill, pod.clone(), None);
            self.rejected.remove(pod.uid());
        }
    }

    fn handle_pod_reconcile(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            self.pods.upsert(pod.clone());
            if !pod.spec.readiness_gates.is_empty() && !pod.is_mirror() {
                let mirror = self.pods.mirror_of(&pod).cloned();
                self.update(UpdateType::Sync, pod, mirror);
            }
        }
    }

    fn handle_pod_syncs(&self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            if pod.is_mirror() {
                log::error!("pod {}: sync requested for a mirror pod", pod.full_name());
                continue;
            }
            let mirror = self.pods.mirror_of(&pod).cloned();
            self.update(UpdateType::Sync, pod, mirror);
        }
    }
}

/// True when the pod has run longer than its activeDeadlineSeconds.
fn deadline_passed(pod: &Pod, status: &StatusManager, now: Time) -> bool {
    // Asked of every pod every second: most have no deadline, and the status lookup
    // copies the whole status.
    if pod.spec.active_deadline_seconds.is_none() {
        return false;
    }
    let start = status.get_pod_status(pod.uid()).and_then(|s| s.start_time);
    syncer::past_active_deadline(pod, start, now).is_some()
        && !is_terminal_phase(pod.status.phase.as_ref())
}

#[cfg(test)]
mod tests;
