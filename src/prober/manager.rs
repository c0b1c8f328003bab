//! The probe manager (upstream `prober_manager.go` plus the worker goroutines): the
//! [`ProbeManager`] handle and the `probe-timer` thread behind it.
//!
//! Threads: callers (sync loop, pod workers, housekeeping) send [`Command`]s and read
//! results through the handle; the `probe-timer` thread owns every worker (one per
//! probe kind per running container instance) in a map plus a min-heap of due times,
//! resolves due attempts (pure, see `action::action`), hands them to the attempt pool,
//! and applies the outcomes with the pure rules of `worker.rs`. Result changes go to
//! the shared cache and out as [`ProbeUpdate`]s. It ends when every handle is dropped
//! or `shutdown` disconnects; attempt threads then finish their attempt and end.
//!
//! Invariants: a worker exists only for a container instance the last `update_pod`
//! saw running; a worker has at most one attempt in flight and then no heap entry;
//! heap entries whose time differs from the worker's `due` are stale and skipped.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{select_biased, Receiver, Sender};

use crate::api::pod::{Container, Pod};
use crate::cri::RuntimeClient;
use crate::events::{EventType, Recorder};
use crate::runtime::actions::{self, ProbeResult};
use crate::runtime::model::{ContainerState, PodRuntimeStatus};
use crate::status::containers;

use super::action::{action, Prober};
use super::metrics::{ProbeMetrics, Probed};
use super::pool::{Done, Job, Pool};
use super::results::{ProbeUpdate, Results};
use super::worker::{first_due, next_due, spread, Gate, Phase, ProbeState, Timing, Verdict};
use super::{Attempt, ProbeKind, ProberConfig, ProberError};

/// A container instance the runtime reports running.
#[derive(Clone, Debug)]
struct Running {
    name: String,
    id: String,
    /// Unix nanoseconds; 0 when unknown.
    started_at: i64,
}

/// Requests to the `probe-timer` thread.
enum Command {
    /// Remember a pod (its workers start with its first update).
    AddPod(Arc<Pod>),
    /// The pod's running containers and IP: start and stop workers to match.
    UpdatePod {
        pod: Arc<Pod>,
        running: Vec<Running>,
        pod_ip: String,
    },
    /// Termination began: liveness and startup stop with a last Success.
    StopLivenessAndStartup(String),
    /// Forget the pod: stop every worker and drop its results.
    RemovePod(String),
    /// Remove every pod whose UID is not in the set.
    CleanupPods(HashSet<String>),
    /// Report counts.
    Stats(Sender<ProberStats>),
}

/// Counts for tests and measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProberStats {
    pub pods: usize,
    pub workers: usize,
    pub attempt_threads: usize,
    pub in_flight: usize,
}

/// The handle: cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct ProbeManager {
    commands: Sender<Command>,
    results: Results,
    updates: Receiver<ProbeUpdate>,
    metrics: ProbeMetrics,
}

impl ProbeManager {
    /// Starts the `probe-timer` thread; it ends when every handle is dropped or
    /// `shutdown` disconnects. Exec probes run through `runtime`; failures become
    /// events on `recorder`.
    pub fn start(
        config: ProberConfig,
        runtime: RuntimeClient,
        recorder: Recorder,
        shutdown: Receiver<()>,
    ) -> Result<(ProbeManager, JoinHandle<()>), ProberError> {
        let (commands, commands_rx) = crossbeam_channel::unbounded();
        let (updates_tx, updates) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let results = Results::new(updates_tx);
        let metrics = ProbeMetrics::default();
        let now = Instant::now();
        let pool = Pool::new(Arc::new(Prober::new(runtime)), config.clone(), done_tx, now);
        let timer = Timer {
            pods: HashMap::new(),
            workers: HashMap::new(),
            heap: BinaryHeap::new(),
            next_id: 0,
            results: results.clone(),
            metrics: metrics.clone(),
            recorder,
            pool,
            idle_timeout: config.idle_timeout,
            started: now,
        };
        let handle = crate::process::spawn_essential("probe-timer", config.stack_size, move || {
            timer.run(&commands_rx, &done_rx, &shutdown)
        })
        .map_err(|source| ProberError::Spawn {
            name: "probe-timer".into(),
            source,
        })?;
        let manager = ProbeManager {
            commands,
            results,
            updates,
            metrics,
        };
        Ok((manager, handle))
    }

    fn send(&self, command: Command) {
        // The timer gone means litelet is shutting down: nothing left to probe.
        let _ = self.commands.send(command);
    }

    /// Registers a pod; its probes start once `update_pod` reports running containers.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        self.send(Command::AddPod(Arc::clone(pod)));
    }

    /// Matches workers to what runs: starts workers for probed containers whose newest
    /// instance is running (a new instance replaces the old one's workers and results)
    /// and stops those of containers no longer running. `pod_ip` is the default host
    /// (the node IP for host-network pods). A pod being deleted gets no new liveness or
    /// startup workers and its running ones stop with Success.
    pub fn update_pod(&self, pod: &Arc<Pod>, status: &PodRuntimeStatus, pod_ip: &str) {
        let mut running = Vec::new();
        for c in probed(pod) {
            if let Some(newest) = status.newest(&c.name) {
                if newest.state == ContainerState::Running {
                    running.push(Running {
                        name: c.name.clone(),
                        id: newest.id.clone(),
                        started_at: newest.started_at,
                    });
                }
            }
        }
        self.send(Command::UpdatePod {
            pod: Arc::clone(pod),
            running,
            pod_ip: pod_ip.to_owned(),
        });
    }

    /// Termination began: liveness and startup probes stop, leaving Success behind so
    /// nothing restarts a container that is being stopped. Readiness goes on.
    pub fn stop_liveness_and_startup(&self, pod: &Pod) {
        self.send(Command::StopLivenessAndStartup(pod.uid().to_owned()));
    }

    /// Stops every probe of the pod and forgets its results.
    pub fn remove_pod(&self, pod: &Pod) {
        self.send(Command::RemovePod(pod.uid().to_owned()));
    }

    /// Removes every pod whose UID is not in `keep` (housekeeping).
    pub fn cleanup_pods(&self, keep: &HashSet<String>) {
        self.send(Command::CleanupPods(keep.clone()));
    }

    /// Result changes (Success or Failure), for the sync loop. Every clone of the
    /// manager shares one queue: take it in one place.
    pub fn results(&self) -> Receiver<ProbeUpdate> {
        self.updates.clone()
    }

    /// Liveness and startup results by container ID, for `compute_pod_actions`.
    pub fn probe_results(&self, uid: &str) -> actions::ProbeResults {
        self.results.for_actions(uid)
    }

    /// Readiness and startup by container ID, for status generation.
    pub fn status_results(&self, uid: &str) -> containers::ProbeResults {
        self.results.for_status(uid)
    }

    /// Whether the container passed its readiness probe: None without a readiness
    /// worker, false until the first success.
    pub fn readiness(&self, uid: &str, container_id: &str) -> Option<bool> {
        self.results
            .get(uid, container_id, ProbeKind::Readiness)
            .map(|r| r == ProbeResult::Success)
    }

    /// Whether the container passed its startup probe: None without a startup worker,
    /// false until it passes.
    pub fn started(&self, uid: &str, container_id: &str) -> Option<bool> {
        self.results
            .get(uid, container_id, ProbeKind::Startup)
            .map(|r| r == ProbeResult::Success)
    }

    /// The attempt counters (`/metrics/probes`), shared with the timer thread.
    pub fn metrics(&self) -> ProbeMetrics {
        self.metrics.clone()
    }

    /// Counts from the timer thread; None once it has stopped.
    pub fn stats(&self) -> Option<ProberStats> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.commands.send(Command::Stats(tx)).ok()?;
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }
}

/// The containers whose probes litelet runs: regular ones and sidecars (restartable
/// init containers).
fn probed(pod: &Pod) -> impl Iterator<Item = &Container> {
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.is_sidecar());
    pod.spec.containers.iter().chain(sidecars)
}

/// Whether any probed container has a probe: the timer keeps nothing for other pods.
fn has_probes(pod: &Pod) -> bool {
    probed(pod).any(|c| ProbeKind::ALL.iter().any(|kind| kind.of(c).is_some()))
}

struct PodEntry {
    pod: Arc<Pod>,
    pod_ip: String,
    /// Liveness and startup were stopped for termination; never restart them.
    quiet: bool,
    workers: BTreeMap<(String, ProbeKind), u64>,
}

struct Worker {
    uid: String,
    container: String,
    container_id: String,
    state: ProbeState,
    /// The first attempt's time; a trigger never runs a probe earlier.
    not_before: Instant,
    /// When the next attempt is due; None while one is in flight or once stopped.
    due: Option<Instant>,
}

struct Timer {
    pods: HashMap<String, PodEntry>,
    workers: HashMap<u64, Worker>,
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    next_id: u64,
    results: Results,
    metrics: ProbeMetrics,
    recorder: Recorder,
    pool: Pool,
    idle_timeout: Duration,
    started: Instant,
}

impl Timer {
    fn run(mut self, commands: &Receiver<Command>, done: &Receiver<Done>, shutdown: &Receiver<()>) {
        loop {
            let now = Instant::now();
            self.dispatch_due(now);
            self.pool.trim(now);
            let mut wake = now + self.idle_timeout;
            if let Some(Reverse((due, _))) = self.heap.peek() {
                wake = wake.min(*due);
            }
            if let Some(grow) = self.pool.grow(now) {
                wake = wake.min(grow);
            }
            let timeout = wake.saturating_duration_since(Instant::now());
            select_biased! {
                recv(shutdown) -> _ => return,
                recv(commands) -> command => match command {
                    Ok(command) => self.handle(command, Instant::now()),
                    Err(_) => return,
                },
                recv(done) -> report => {
                    if let Ok(report) = report {
                        self.pool.finished();
                        self.finish(report.worker, report.attempt, report.started, Instant::now());
                    }
                },
                default(timeout) => {}
            }
        }
    }

    fn handle(&mut self, command: Command, now: Instant) {
        match command {
            Command::AddPod(pod) => {
                if has_probes(&pod) {
                    self.entry(pod);
                }
            }
            Command::UpdatePod {
                pod,
                running,
                pod_ip,
            } => self.update(pod, &running, pod_ip, now),
            Command::StopLivenessAndStartup(uid) => self.quiet(&uid),
            Command::RemovePod(uid) => self.remove_pod(&uid),
            Command::CleanupPods(keep) => {
                let gone: Vec<String> = self
                    .pods
                    .keys()
                    .filter(|uid| !keep.contains(*uid))
                    .cloned()
                    .collect();
                for uid in gone {
                    self.remove_pod(&uid);
                }
            }
            Command::Stats(reply) => {
                let _ = reply.send(ProberStats {
                    pods: self.pods.len(),
                    workers: self.workers.len(),
                    attempt_threads: self.pool.alive(),
                    in_flight: self.pool.in_flight(),
                });
            }
        }
    }

    fn entry(&mut self, pod: Arc<Pod>) -> &mut PodEntry {
        let uid = pod.uid().to_owned();
        let entry = self.pods.entry(uid).or_insert_with(|| PodEntry {
            pod: pod.clone(),
            pod_ip: String::new(),
            quiet: false,
            workers: BTreeMap::new(),
        });
        entry.pod = pod;
        entry
    }

    fn update(&mut self, pod: Arc<Pod>, running: &[Running], pod_ip: String, now: Instant) {
        let uid = pod.uid().to_owned();
        if !has_probes(&pod) {
            // Nothing to run (probes cannot be added to a pod): keep no entry.
            if self.pods.contains_key(&uid) {
                self.remove_pod(&uid);
            }
            return;
        }
        let deleting = pod.deletion_requested();
        let entry = self.entry(pod.clone());
        entry.pod_ip = pod_ip;
        let quiet = entry.quiet;
        let mut wanted: Vec<((String, ProbeKind), &Running, Timing)> = Vec::new();
        for c in probed(&pod) {
            let Some(run) = running.iter().find(|r| r.name == c.name) else {
                continue;
            };
            for kind in ProbeKind::ALL {
                if let Some(probe) = kind.of(c) {
                    wanted.push(((c.name.clone(), kind), run, Timing::of(probe, kind)));
                }
            }
        }
        // Stop workers whose container stopped or was replaced.
        let existing: Vec<((String, ProbeKind), u64)> = self
            .pods
            .get(&uid)
            .map(|e| e.workers.iter().map(|(k, id)| (k.clone(), *id)).collect())
            .unwrap_or_default();
        for (key, id) in existing {
            let keep = wanted.iter().any(|(k, run, _)| {
                *k == key
                    && self
                        .workers
                        .get(&id)
                        .is_some_and(|w| w.container_id == run.id)
            });
            if !keep {
                self.stop_worker(&uid, &key, true);
            }
        }
        let wall_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for (key, run, timing) in wanted {
            if self
                .pods
                .get(&uid)
                .is_some_and(|e| e.workers.contains_key(&key))
            {
                continue;
            }
            if quiet && key.1 != ProbeKind::Readiness {
                continue;
            }
            let started = Duration::from_nanos(run.started_at.max(0) as u64);
            let running_for = if run.started_at > 0 {
                wall_now.saturating_sub(started)
            } else {
                Duration::ZERO
            };
            let seed = {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (&uid, &key).hash(&mut h);
                h.finish()
            };
            let up_for = now.saturating_duration_since(self.started);
            let spread = spread(seed, timing.period, up_for, running_for);
            let due = first_due(now, running_for, &timing, spread);
            let id = self.next_id;
            self.next_id += 1;
            self.results.set(&uid, &run.id, key.1, ProbeResult::Unknown);
            self.workers.insert(
                id,
                Worker {
                    uid: uid.clone(),
                    container: key.0.clone(),
                    container_id: run.id.clone(),
                    state: ProbeState::new(key.1, timing),
                    not_before: due,
                    due: None,
                },
            );
            if let Some(entry) = self.pods.get_mut(&uid) {
                entry.workers.insert(key, id);
            }
            self.schedule(id, due);
        }
        if deleting {
            self.quiet(&uid);
        }
    }

    /// Stops liveness and startup workers of a pod, leaving Success as their result.
    fn quiet(&mut self, uid: &str) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.quiet = true;
        let keys: Vec<(String, ProbeKind)> = entry
            .workers
            .keys()
            .filter(|(_, kind)| *kind != ProbeKind::Readiness)
            .cloned()
            .collect();
        for key in keys {
            if let Some(w) = self.stop_worker(uid, &key, false) {
                self.results
                    .set(uid, &w.container_id, key.1, ProbeResult::Success);
            }
        }
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some(entry) = self.pods.remove(uid) {
            for id in entry.workers.values() {
                self.workers.remove(id);
            }
            let pod = &entry.pod;
            self.metrics.forget_pod(pod.name(), pod.namespace(), uid);
        }
        self.results.remove_pod(uid);
    }

    /// Removes a worker (its in-flight attempt, if any, is ignored when it reports).
    fn stop_worker(
        &mut self,
        uid: &str,
        key: &(String, ProbeKind),
        forget: bool,
    ) -> Option<Worker> {
        let id = self.pods.get_mut(uid)?.workers.remove(key)?;
        let worker = self.workers.remove(&id)?;
        if forget {
            self.results.remove(uid, &worker.container_id, key.1);
        }
        Some(worker)
    }

    fn schedule(&mut self, id: u64, due: Instant) {
        if let Some(w) = self.workers.get_mut(&id) {
            w.due = Some(due);
            self.heap.push(Reverse((due, id)));
        }
    }

    /// Starts every attempt due by `now`.
    fn dispatch_due(&mut self, now: Instant) {
        while let Some(Reverse((due, id))) = self.heap.peek().copied() {
            if due > now {
                return;
            }
            self.heap.pop();
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if w.due != Some(due) {
                continue;
            }
            w.due = None;
            let started = self.container_started(id);
            let Some(w) = self.workers.get(&id) else {
                continue;
            };
            match w.state.gate(started) {
                Gate::Stop => {}
                Gate::Wait => self.schedule(id, now + w.state.timing.period),
                Gate::Run => self.run_attempt(id, now),
            }
        }
    }

    /// True when the worker's container has no startup probe or passed it.
    fn container_started(&self, id: u64) -> bool {
        let Some(w) = self.workers.get(&id) else {
            return false;
        };
        let has_startup = self.pods.get(&w.uid).is_some_and(|entry| {
            probed(&entry.pod).any(|c| c.name == w.container && c.startup_probe.is_some())
        });
        !has_startup
            || self
                .results
                .get(&w.uid, &w.container_id, ProbeKind::Startup)
                == Some(ProbeResult::Success)
    }

    fn run_attempt(&mut self, id: u64, now: Instant) {
        let Some(w) = self.workers.get(&id) else {
            return;
        };
        let resolved = match self.pods.get(&w.uid) {
            None => Err("the pod is gone".to_owned()),
            Some(entry) => match probed(&entry.pod).find(|c| c.name == w.container) {
                None => Err(format!(
                    "container {:?} is not in the pod spec",
                    w.container
                )),
                Some(c) => match w.state.kind.of(c) {
                    None => Err("the probe is gone from the spec".to_owned()),
                    Some(probe) => {
                        action(probe, c, &w.container_id, &entry.pod_ip).map_err(|e| e.to_string())
                    }
                },
            },
        };
        let timeout = w.state.timing.timeout;
        match resolved {
            // Nothing to run: a failure at once, without an attempt thread.
            Err(message) => self.finish(id, Attempt::Failure(message), now, now),
            Ok(action) => {
                let job = Job {
                    worker: id,
                    action,
                    timeout,
                    started: now,
                };
                if self.pool.submit(job, now).is_err() {
                    let attempt = Attempt::Unknown("no probe thread could be started".into());
                    self.finish(id, attempt, now, now);
                }
            }
        }
    }

    /// Applies an attempt's outcome: event, thresholds, result, next time.
    fn finish(&mut self, id: u64, attempt: Attempt, started: Instant, now: Instant) {
        let Some(w) = self.workers.get_mut(&id) else {
            return; // Stopped while the attempt ran.
        };
        let kind = w.state.kind;
        let event = match &attempt {
            Attempt::Success(_) => None,
            Attempt::Warning(m) => Some(("ProbeWarning", format!("{kind} probe warning: {m}"))),
            Attempt::Failure(m) => Some(("Unhealthy", format!("{kind} probe failed: {m}"))),
            Attempt::Unknown(m) => Some(("Unhealthy", format!("{kind} probe errored: {m}"))),
        };
        let published = Verdict::of(&attempt).and_then(|v| w.state.record(v));
        let (uid, container, container_id) =
            (w.uid.clone(), w.container.clone(), w.container_id.clone());
        let (phase, period) = (w.state.phase, w.state.timing.period);
        if let Some(entry) = self.pods.get(&uid) {
            let probed = Probed {
                kind,
                container: &container,
                pod: entry.pod.name(),
                namespace: entry.pod.namespace(),
                uid: &uid,
            };
            self.metrics
                .record(&probed, &attempt, now.saturating_duration_since(started));
            if let Some((reason, message)) = event {
                self.recorder.container(
                    &entry.pod,
                    &container,
                    EventType::Warning,
                    reason,
                    message,
                );
            }
        }
        if let Some(result) = published {
            self.results.set(&uid, &container_id, kind, result);
            if kind == ProbeKind::Startup && result == ProbeResult::Success {
                self.wake_siblings(&uid, &container, now);
            }
        }
        if phase == Phase::Probing {
            self.schedule(id, next_due(started, now, period));
        }
    }

    /// The container just started: its liveness and readiness run now (not before
    /// their initial delay) instead of waiting out a period.
    fn wake_siblings(&mut self, uid: &str, container: &str, now: Instant) {
        let Some(entry) = self.pods.get(uid) else {
            return;
        };
        let ids: Vec<u64> = entry
            .workers
            .iter()
            .filter(|((name, kind), _)| name == container && *kind != ProbeKind::Startup)
            .map(|(_, id)| *id)
            .collect();
        for id in ids {
            let Some(w) = self.workers.get(&id) else {
                continue;
            };
            let at = w.not_before.max(now);
            if w.due.is_some_and(|due| due > at) {
                self.schedule(id, at);
            }
        }
    }
}

#[cfg(test)]
mod tests;
