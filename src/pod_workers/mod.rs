//! Pod workers: one OS thread per pod UID running the pod's state machine
//! (syncing → terminating → terminated → finished), as upstream pod_workers.go.
//!
//! Any thread calls [`PodWorkers::update_pod`]; it decides what the update does
//! (`update_plan.rs`, a pure plan), records it as the pod's pending one (a newer
//! update replaces it) and wakes the pod's thread over a `bounded(1)` channel, so
//! signals coalesce. The worker (`worker.rs`) consumes the
//! pending update, waits for a fresh runtime status from the PLEG cache, calls the
//! [`PodSyncer`], and requeues the pod in the [`WorkQueue`]. All state sits behind one
//! lock that is never held across a sync call. A worker thread ends when its channel
//! is dropped: after the pod is finished, or when SyncKnownPods forgets it.

mod grace;
pub mod stack;
mod status;
mod types;
mod update_plan;
mod work_queue;
mod worker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

pub use crate::runtime::cancel::Cancel;
pub use grace::effective_grace_period;
pub use types::{
    KillPodOptions, PodWorkerSync, StatusFn, SyncError, Synced, UpdatePodOptions, UpdateType,
    WorkType,
};
pub use work_queue::{jitter, WorkQueue};

use crate::api::pod::Pod;
use crate::events::{EventType, Recorder};
use crate::runtime::cache::PodStatusCache;
use crate::runtime::model::{PodRuntimeStatus, RunningPod, SandboxState};
use status::PodSyncStatus;
use update_plan::{plan_update, KillStep, RecordView, Termination, UpdatePlan, UpdateView};

/// Stack of a pod worker thread: syncs are shallow, and 110 pods × this is reserved.
const WORKER_STACK: usize = 512 * 1024;

/// What the pod workers call to act on a pod (upstream podSyncer). Called from the
/// pods' worker threads, concurrently for different pods.
pub trait PodSyncer: Send + Sync {
    /// Makes the pod run as specified; says whether it reached a terminal phase and
    /// when a back-off it waits for ends.
    fn sync_pod(
        &self,
        cancel: &Cancel,
        update_type: UpdateType,
        pod: &Arc<Pod>,
        mirror: Option<&Arc<Pod>>,
        status: &PodRuntimeStatus,
    ) -> Result<Synced, SyncError>;
    /// Stops every container of the pod within the grace period.
    fn sync_terminating_pod(
        &self,
        cancel: &Cancel,
        pod: &Arc<Pod>,
        status: &PodRuntimeStatus,
        grace: Option<i64>,
        status_fn: Option<StatusFn>,
    ) -> Result<(), SyncError>;
    /// Stops a pod only the runtime knows about.
    fn sync_terminating_runtime_pod(
        &self,
        cancel: &Cancel,
        running: &RunningPod,
    ) -> Result<(), SyncError>;
    /// Cleans up after the pod stopped (volumes, cgroup, final status).
    fn sync_terminated_pod(
        &self,
        cancel: &Cancel,
        pod: &Arc<Pod>,
        status: &PodRuntimeStatus,
    ) -> Result<(), SyncError>;
}

/// Timings of the pod workers.
#[derive(Clone, Debug)]
pub struct WorkerTimings {
    /// Requeue after a successful sync (jittered ×[1, 1.5)): the kubelet's SyncFrequency.
    pub resync: Duration,
    /// Requeue after a failed sync (jittered).
    pub backoff: Duration,
    /// Requeue when the network is not ready (jittered).
    pub network_backoff: Duration,
    /// The longest a worker waits for a fresh status from the PLEG cache.
    pub status_wait: Duration,
}

impl Default for WorkerTimings {
    fn default() -> Self {
        WorkerTimings {
            resync: Duration::from_secs(60),
            backoff: Duration::from_secs(10),
            network_backoff: Duration::from_secs(1),
            status_wait: Duration::from_secs(30),
        }
    }
}

#[derive(Default)]
struct State {
    pods_synced: bool,
    /// Wake-up channel per UID; dropping the sender ends the worker thread.
    updates: HashMap<String, Sender<()>>,
    statuses: HashMap<String, PodSyncStatus>,
    started_static: HashMap<String, String>,
    waiting_static: HashMap<String, VecDeque<String>>,
}

/// Wraps a new worker's signal channel before its thread starts (upstream's
/// workerChannelFn test hook), so a test can hold signals back.
#[cfg(test)]
type ChannelFn = Arc<dyn Fn(Receiver<()>) -> Receiver<()> + Send + Sync>;

struct Inner {
    state: Mutex<State>,
    syncer: Arc<dyn PodSyncer>,
    queue: WorkQueue,
    cache: PodStatusCache,
    recorder: Recorder,
    timings: WorkerTimings,
    live_threads: AtomicUsize,
    #[cfg(test)]
    worker_channel: Mutex<Option<ChannelFn>>,
}

/// The pod workers; cheap to clone, shared by the sync loop and housekeeping.
#[derive(Clone)]
pub struct PodWorkers {
    inner: Arc<Inner>,
}

fn is_terminal_phase(pod: &Pod) -> bool {
    crate::api::pod::is_terminal_phase(pod.status.phase.as_ref())
}

fn runtime_is_terminal(status: &PodRuntimeStatus) -> bool {
    !status.has_running_containers()
        && !status
            .sandboxes
            .iter()
            .any(|s| s.state == SandboxState::Ready)
}

/// A pod that stands in for a runtime-only pod (upstream RunningPod.ToAPIPod).
fn pod_from_running(running: &RunningPod) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(running.uid.clone());
    pod.metadata.name = Some(running.name.clone());
    pod.metadata.namespace = Some(running.namespace.clone());
    pod
}

/// The pod an update is about.
struct Target {
    uid: String,
    namespace: String,
    name: String,
    /// Only the runtime knows the pod.
    runtime_pod: bool,
}

/// The pod an update names, or `None` (logged) for an update that carries no pod or
/// asks a runtime-only pod for more than a kill.
fn identify(options: &UpdatePodOptions) -> Option<Target> {
    match (&options.pod, &options.running_pod) {
        (None, Some(running)) => {
            if options.update_type != UpdateType::Kill {
                log::warn!(
                    "pod {}/{}: runtime pods can only be killed; dropping update",
                    running.namespace,
                    running.name
                );
                return None;
            }
            Some(Target {
                uid: running.uid.clone(),
                namespace: running.namespace.clone(),
                name: running.name.clone(),
                runtime_pod: true,
            })
        }
        (Some(pod), running) => {
            if running.is_some() {
                log::debug!(
                    "pod {}: update carries both a pod and a runtime pod; using the pod",
                    pod.full_name()
                );
            }
            Some(Target {
                uid: pod.uid().to_owned(),
                namespace: pod.namespace().to_owned(),
                name: pod.name().to_owned(),
                runtime_pod: false,
            })
        }
        (None, None) => {
            log::error!("update_pod called without a pod");
            None
        }
    }
}

/// A runtime pod's update folds into the real pod spec when litelet knows it; the
/// pod the update is about (a stand-in when only the runtime knows it).
fn fold_runtime_pod(
    status: &mut PodSyncStatus,
    options: &mut UpdatePodOptions,
) -> Option<Arc<Pod>> {
    status.observed_runtime = true;
    let known = status
        .pending
        .as_ref()
        .and_then(|p| p.pod.clone())
        .or_else(|| status.active.as_ref().and_then(|a| a.pod.clone()));
    match known {
        Some(pod) => {
            options.pod = Some(pod.clone());
            options.running_pod = None;
            Some(pod)
        }
        None => options
            .running_pod
            .as_ref()
            .map(|r| Arc::new(pod_from_running(r))),
    }
}

/// Folds the kill options of an update into a terminating record: completion
/// channels and status functions wait for termination, the grace period only
/// shortens. Returns whether it shortened.
fn merge_kill(
    status: &mut PodSyncStatus,
    options: &mut UpdatePodOptions,
    pod: Option<&Pod>,
) -> bool {
    let kill = options.kill.get_or_insert_with(KillPodOptions::default);
    if let Some(done) = kill.completed.take() {
        status.notify_post_terminating.push(done);
    }
    if let Some(f) = kill.status_fn.clone() {
        status.status_post_terminating.push(f);
    }
    let (grace, shortened) = effective_grace_period(status.grace_period, pod, kill.grace_override);
    status.grace_period = grace;
    kill.grace_override = Some(grace);
    shortened
}

/// The [`UpdatePlan`] for an update of a pod with this record.
fn plan_for(
    status: &PodSyncStatus,
    target: &Target,
    options: &UpdatePodOptions,
    pod: Option<&Pod>,
    first_time: bool,
) -> UpdatePlan {
    let record = RecordView {
        first_time,
        termination_requested: status.is_termination_requested(),
        terminated: status.is_terminated(),
        finished: status.finished,
    };
    let update = UpdateView {
        update_type: options.update_type,
        runtime_pod: target.runtime_pod,
        pod,
        evict: options.kill.as_ref().is_some_and(|k| k.evict),
    };
    plan_update(&record, &update)
}

/// Marks the record terminating from `now`, deleted or evicted as the plan says.
fn start_terminating(status: &mut PodSyncStatus, termination: Termination, now: Instant) {
    status.deleted |= termination.deleted;
    if let Some(evicted) = termination.evicted {
        status.evicted = evicted;
    }
    status.terminating_at = Some(now);
}

/// Carries out the [`UpdatePlan`] for one update on the locked state; returns the
/// signal channel of a worker to spawn for a new UID.
fn record_update(
    state: &mut State,
    target: &Target,
    mut options: UpdatePodOptions,
    first_time: bool,
    now: Instant,
) -> Option<Receiver<()>> {
    let State {
        statuses,
        updates,
        waiting_static,
        ..
    } = state;
    let uid = &target.uid;
    let status = statuses.get_mut(uid)?;
    // 3. Runtime pod folding: prefer the real pod spec if litelet knows it.
    let pod_view = if target.runtime_pod {
        fold_runtime_pod(status, &mut options)
    } else {
        options.pod.clone()
    };
    // 4. Decide: a restart of a reused UID, a finished pod, termination, kill options.
    let plan = plan_for(status, target, &options, pod_view.as_deref(), first_time);
    let (terminate, kill) = match plan {
        UpdatePlan::RequestRestart => {
            status.restart_requested = true;
            log::debug!(
                "pod {}/{} ({uid}): create while terminating; restart requested",
                target.namespace,
                target.name
            );
            return None;
        }
        UpdatePlan::Ignore => return None,
        UpdatePlan::Accept { terminate, kill } => (terminate, kill),
    };
    // 5. Transition to terminating.
    if let Some(termination) = terminate {
        start_terminating(status, termination, now);
    }
    // 6. Kill options.
    let grace_shortened = match kill {
        KillStep::DropUpdate => return None,
        KillStep::Discard => {
            options.kill = None;
            false
        }
        KillStep::Merge => merge_kill(status, &mut options, pod_view.as_deref()),
    };
    // 7. A worker for a new UID.
    let new_worker = (!updates.contains_key(uid))
        .then(|| new_worker(updates, waiting_static, status, uid, &options));
    // 8. Keep the oldest start time of coalesced updates.
    if let Some(old) = status.pending.as_ref().and_then(|p| p.start_time) {
        if options.start_time.is_none_or(|t| old < t) {
            options.start_time = Some(old);
        }
    }
    // 9. The new update replaces the pending one; signal without blocking.
    status.pending = Some(options);
    status.working = true;
    if let Some(tx) = updates.get(uid) {
        let _ = tx.try_send(());
    }
    // 10. Interrupt the in-flight sync when termination starts or speeds up.
    if terminate.is_some() || grace_shortened {
        if let Some(cancel) = &status.cancel {
            cancel.cancel();
        }
    }
    new_worker
}

/// The signal channel of a worker for a new UID; a static pod also queues behind
/// the others of its full name (they start in arrival order, one at a time).
fn new_worker(
    updates: &mut HashMap<String, Sender<()>>,
    waiting_static: &mut HashMap<String, VecDeque<String>>,
    status: &PodSyncStatus,
    uid: &str,
    options: &UpdatePodOptions,
) -> Receiver<()> {
    let (tx, rx) = bounded(1);
    updates.insert(uid.to_owned(), tx);
    if options.pod.as_ref().is_some_and(|p| p.is_static()) {
        waiting_static
            .entry(status.fullname.clone())
            .or_default()
            .push_back(uid.to_owned());
    }
    rx
}

impl PodWorkers {
    pub fn new(
        syncer: Arc<dyn PodSyncer>,
        queue: WorkQueue,
        cache: PodStatusCache,
        recorder: Recorder,
        timings: WorkerTimings,
    ) -> PodWorkers {
        PodWorkers {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                syncer,
                queue,
                cache,
                recorder,
                timings,
                live_threads: AtomicUsize::new(0),
                #[cfg(test)]
                worker_channel: Mutex::new(None),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Worker threads currently alive (for leak checks and metrics).
    pub fn live_threads(&self) -> usize {
        self.inner.live_threads.load(Ordering::SeqCst)
    }

    /// Hands an update to the pod's worker (upstream UpdatePod).
    pub fn update_pod(&self, mut options: UpdatePodOptions) {
        // 1. Identify the pod.
        let Some(target) = identify(&options) else {
            return;
        };
        if !target.runtime_pod {
            options.running_pod = None;
        }
        let now = Instant::now();
        let mut state = self.lock();

        // 2. First sighting.
        let first_time = !state.statuses.contains_key(&target.uid);
        if first_time {
            let record = self.first_record(&target, options.pod.as_deref(), now);
            state.statuses.insert(target.uid.clone(), record);
        }
        let new_worker = record_update(&mut state, &target, options, first_time, now);
        drop(state);
        if let Some(rx) = new_worker {
            self.spawn_worker(target.uid, rx);
        }
    }

    /// The record of a pod seen for the first time: a terminal pod whose containers
    /// and sandboxes are all down counts as terminated already.
    fn first_record(&self, target: &Target, pod: Option<&Pod>, now: Instant) -> PodSyncStatus {
        let mut record = PodSyncStatus {
            fullname: format!("{}_{}", target.name, target.namespace),
            ..Default::default()
        };
        if let Some(pod) = pod.filter(|p| is_terminal_phase(p)) {
            let cached = self.inner.cache.get(pod.uid());
            if let Ok(status) = cached.status {
                if runtime_is_terminal(&status) {
                    record.terminating_at = Some(now);
                    record.terminated_at = Some(now);
                    record.started_terminating = true;
                }
            }
        }
        record
    }

    fn spawn_worker(&self, uid: String, rx: Receiver<()>) {
        #[cfg(test)]
        let rx = match self
            .inner
            .worker_channel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(wrap) => wrap(rx),
            None => rx,
        };
        let name = format!("pw-{}", uid.chars().take(8).collect::<String>());
        let workers = self.clone();
        self.inner.live_threads.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(name)
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let stack = stack::StackTop::here(WORKER_STACK);
                workers.worker_loop(&uid, rx, stack);
                workers.inner.live_threads.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(err) = spawned {
            self.inner.live_threads.fetch_sub(1, Ordering::SeqCst);
            log::error!("cannot start a pod worker thread: {err}");
        }
    }

    // ---- queries (upstream podWorkers' Is*/Could*/Should* methods) ----

    /// The pod's containers have stopped (terminated or finished).
    pub fn is_pod_known_terminated(&self, uid: &str) -> bool {
        self.lock()
            .statuses
            .get(uid)
            .is_some_and(|s| s.is_terminated())
    }

    pub fn could_have_running_containers(&self, uid: &str) -> bool {
        let state = self.lock();
        match state.statuses.get(uid) {
            Some(s) => !s.is_terminated(),
            None => !state.pods_synced,
        }
    }

    pub fn should_pod_be_finished(&self, uid: &str) -> bool {
        let state = self.lock();
        match state.statuses.get(uid) {
            Some(s) => s.finished,
            None => state.pods_synced,
        }
    }

    pub fn is_pod_termination_requested(&self, uid: &str) -> bool {
        self.lock()
            .statuses
            .get(uid)
            .is_some_and(|s| s.is_termination_requested())
    }

    pub fn should_pod_containers_be_terminating(&self, uid: &str) -> bool {
        let state = self.lock();
        match state.statuses.get(uid) {
            Some(s) => s.started_terminating,
            None => state.pods_synced,
        }
    }

    pub fn should_pod_runtime_be_removed(&self, uid: &str) -> bool {
        let state = self.lock();
        match state.statuses.get(uid) {
            Some(s) => s.is_terminated(),
            None => state.pods_synced,
        }
    }

    pub fn should_pod_content_be_removed(&self, uid: &str) -> bool {
        let state = self.lock();
        match state.statuses.get(uid) {
            Some(s) => s.evicted || (s.deleted && s.is_terminated()),
            None => state.pods_synced,
        }
    }

    /// True while the started static pod of this full name is terminating.
    pub fn is_pod_for_mirror_pod_terminating_by_fullname(&self, fullname: &str) -> bool {
        let state = self.lock();
        let Some(uid) = state.started_static.get(fullname) else {
            return false;
        };
        state
            .statuses
            .get(uid)
            .is_some_and(|s| s.is_termination_requested() && !s.is_terminated())
    }

    /// Whether the pod's worker is busy (for tests and metrics).
    pub fn is_working(&self, uid: &str) -> bool {
        self.lock().statuses.get(uid).is_some_and(|s| s.working)
    }

    /// The pod the worker acts on (its last consumed update).
    pub fn active_pod(&self, uid: &str) -> Option<Arc<Pod>> {
        self.lock()
            .statuses
            .get(uid)
            .and_then(|s| s.active.as_ref().and_then(|a| a.pod.clone()))
    }

    /// Reconciles the workers with the desired pods (upstream SyncKnownPods): orphans
    /// start terminating, finished orphans and restarted UIDs are forgotten. Returns
    /// the state of every worker still known.
    pub fn sync_known_pods<'a>(
        &self,
        desired: impl IntoIterator<Item = &'a Pod>,
    ) -> HashMap<String, PodWorkerSync> {
        let wanted: HashSet<&str> = desired.into_iter().map(|p| p.uid()).collect();
        let mut state = self.lock();
        state.pods_synced = true;
        let uids: Vec<String> = state.statuses.keys().cloned().collect();
        let mut known = HashMap::new();
        for uid in uids {
            let orphan = !wanted.contains(uid.as_str());
            let restart = state
                .statuses
                .get(&uid)
                .is_some_and(|s| s.restart_requested);
            if (restart || orphan) && self.remove_terminated_worker(&mut state, &uid, orphan) {
                continue;
            }
            let Some(status) = state.statuses.get(&uid) else {
                continue;
            };
            let update = status.active.as_ref().or(status.pending.as_ref());
            let pod = update.and_then(|u| u.pod.as_ref());
            known.insert(
                uid.clone(),
                PodWorkerSync {
                    state: status.work_type(),
                    orphan,
                    has_config: pod.is_some(),
                    is_static: pod.is_some_and(|p| p.is_static()),
                },
            );
        }
        known
    }

    /// Forgets a finished worker, or starts terminating an orphan. True when removed.
    fn remove_terminated_worker(&self, state: &mut State, uid: &str, orphan: bool) -> bool {
        let Some(status) = state.statuses.get_mut(uid) else {
            return false;
        };
        if !status.finished {
            if !orphan {
                return false;
            }
            status.deleted = true;
            let never_ran = !status.is_started() && !status.observed_runtime;
            if !never_ran {
                if !status.is_termination_requested() {
                    status.terminating_at = Some(Instant::now());
                    let pod = status.active.as_ref().and_then(|a| a.pod.clone());
                    status.grace_period = match pod {
                        Some(pod) => {
                            effective_grace_period(status.grace_period, Some(&pod), None).0
                        }
                        None => 1,
                    };
                }
                Self::requeue_last_update(state, uid);
                return false;
            }
        }
        let fullname = state
            .statuses
            .remove(uid)
            .map(|s| s.fullname)
            .unwrap_or_default();
        state.updates.remove(uid);
        Self::release_static(state, &fullname, uid);
        true
    }

    fn release_static(state: &mut State, fullname: &str, uid: &str) {
        if state.started_static.get(fullname).is_some_and(|u| u == uid) {
            state.started_static.remove(fullname);
        }
    }

    /// Replays the active update when nothing newer is pending (upstream
    /// requeueLastPodUpdate).
    fn requeue_last_update(state: &mut State, uid: &str) {
        let Some(status) = state.statuses.get_mut(uid) else {
            return;
        };
        if status.pending.is_some() {
            return;
        }
        let Some(active) = status.active.clone() else {
            return;
        };
        status.pending = Some(active);
        status.working = true;
        if let Some(tx) = state.updates.get(uid) {
            let _ = tx.try_send(());
        }
    }

    /// Kills a pod and waits until its containers have stopped (upstream killPodNow):
    /// at most [`kill_timeout`], after which an `ExceededGracePeriod` event is recorded
    /// and an error returned.
    ///
    /// Deliberate difference for a kill on a finished pod: upstream never
    /// closes the completion channel of a kill that reaches a finished pod, so its
    /// caller waits out the whole timeout and reports ExceededGracePeriod although the
    /// containers stopped long ago. Here every update that is ignored drops its
    /// options, and dropping the sender releases the waiter at once, as for a pod that
    /// is terminated but not yet finished.
    pub fn kill_pod_now(
        &self,
        pod: &Arc<Pod>,
        evict: bool,
        grace_override: Option<i64>,
        status_fn: Option<StatusFn>,
    ) -> Result<(), KillTimeout> {
        let timeout = kill_timeout(pod, grace_override);
        let (done_tx, done_rx) = bounded::<()>(1);
        let mut options = UpdatePodOptions::new(UpdateType::Kill, pod.clone());
        options.kill = Some(KillPodOptions {
            completed: Some(done_tx),
            evict,
            status_fn,
            grace_override,
        });
        self.update_pod(options);
        match done_rx.recv_timeout(timeout) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                self.inner.recorder.pod(
                    pod,
                    EventType::Warning,
                    "ExceededGracePeriod",
                    "Container runtime did not kill the pod within specified grace period.",
                );
                Err(KillTimeout)
            }
            _ => Ok(()),
        }
    }
}

/// [`PodWorkers::kill_pod_now`] stopped waiting: the pod's containers did not stop
/// within [`kill_timeout`] (the kill goes on in the pod's worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("timeout waiting to kill pod")]
pub struct KillTimeout;

/// How long [`PodWorkers::kill_pod_now`] waits: 1.5 × the grace period (the override,
/// else the spec's, else 0; whole seconds, rounded down), at least 10 s.
pub fn kill_timeout(pod: &Pod, grace_override: Option<i64>) -> Duration {
    let grace = grace_override
        .or(pod.spec.termination_grace_period_seconds)
        .unwrap_or(0)
        .max(0) as u64;
    Duration::from_secs((grace + grace / 2).max(10))
}

#[cfg(test)]
mod tests;
