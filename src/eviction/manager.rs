//! The `eviction` thread (upstream eviction manager's monitoring loop): every 10 s it
//! reads the `stats` thread's latest [`Sample`], runs one
//! [`State::step`], publishes the pressure conditions ([`Pressure`], read by the
//! `node` thread and by admission on the sync loop) and, when a threshold's grace
//! period is over:
//! 1. records `EvictionThresholdMet` on the node;
//! 2. for disk signals, reclaims node-level resources first: every dead container and
//!    every unused image (upstream DeleteAllUnusedContainers + DeleteUnusedImages; on
//!    a node whose image filesystem is its own, only imagefs signals do this), then
//!    measures nodefs again and stops when the threshold and its minimum reclaim are met;
//! 3. ranks the active pods ([`rank`]) and evicts the first non-critical one through
//!    the pod workers (`kill_pod_now` with `evict`: the pod ends `Failed`, reason
//!    `Evicted`, a `DisruptionTarget` condition, an `Evicted` event), waiting until it
//!    has stopped. One pod per round.
//!
//!
//! Before the thresholds, every round evicts at once the pods over their own local
//! storage limits (emptyDir `sizeLimit`, `ephemeral-storage` limits: [`local_storage`]).
//!
//! After acting it waits for a sample taken later than the action, so one shortage is
//! never counted twice (upstream asks cAdvisor for fresh stats instead). Never runs on
//! the sync loop; holds no lock across I/O; ends when the shutdown channel disconnects.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{select, Receiver};

use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{Pod, PodCondition, PodPhase, PodStatus, POD_DISRUPTION_TARGET};
use crate::events::{EventType, Recorder};
use crate::images::gc::ImageGc;
use crate::pod_workers::{PodWorkers, StatusFn};
use crate::runtime::gc::GcPolicy;
use crate::runtime::manager::RuntimeManager;
use crate::stats::sample::Sample;
use crate::stats::StatsStore;

use super::admit::{Pressure, REASON};
use super::config::{Condition, EvictionConfig, Signal, Threshold};
use super::decide::{amount, thresholds_met, State};
use super::local_storage;
use super::rank::{self, is_critical, Candidate};
use super::signals::{container_usage, observe, pod_usage, Observation, Observations};

/// Upstream's monitoring interval.
pub const PERIOD: Duration = Duration::from_secs(10);
/// The longest a round waits for the `stats` thread to read pods it did not read.
const POD_USAGE_WAIT: Duration = Duration::from_secs(5);
/// Grace period of a hard eviction (upstream immediateEvictionGracePeriodSeconds).
pub const HARD_EVICTION_GRACE_SECONDS: i64 = 1;
/// A pod's grace period when its spec has none.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The desired pods now (the sync loop's published snapshot; a closure because the
/// kubelet sits above this module).
pub type PodsFn = Box<dyn Fn() -> Arc<Vec<Arc<Pod>>> + Send>;

/// Everything the `eviction` thread works with.
pub struct EvictionManager {
    pub config: EvictionConfig,
    pub stats: StatsStore,
    pub pods: PodsFn,
    pub workers: PodWorkers,
    pub runtime: Arc<RuntimeManager>,
    pub recorder: Recorder,
    pub node_name: String,
    /// `--root-dir`: nodefs is measured again here after a reclaim.
    pub root_dir: PathBuf,
    pub sources_ready: Arc<AtomicBool>,
    pub pressure: Pressure,
    pub period: Duration,
}

impl EvictionManager {
    /// Starts the `eviction` thread.
    pub fn spawn(self, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
        crate::process::spawn_essential("eviction", 256 * 1024, move || self.run(shutdown))
    }

    fn run(self, shutdown: Receiver<()>) {
        for t in &self.config.thresholds {
            if matches!(
                t.signal,
                Signal::AllocatableMemoryAvailable
                    | Signal::ContainerFsAvailable
                    | Signal::ContainerFsInodesFree
            ) {
                log::warn!(
                    "eviction: signal {} is not observed by litelet; its threshold is never met",
                    t.signal.as_str()
                );
            }
        }
        let image_gc = ImageGc::new(Default::default())
            .map_err(|e| log::warn!("eviction: image reclaim disabled: {e}"))
            .ok();
        let mut state = State::default();
        let mut acted_at: Option<SystemTime> = None;
        loop {
            select! {
                recv(shutdown) -> _ => return,
                default(self.period) => {}
            }
            if let Some(sample) = self.stats.latest() {
                self.round(sample, &mut state, &mut acted_at, image_gc.as_ref());
            }
        }
    }

    /// One round over `sample`.
    fn round(
        &self,
        sample: Arc<Sample>,
        state: &mut State,
        acted_at: &mut Option<SystemTime>,
        image_gc: Option<&ImageGc>,
    ) {
        let thresholds = &self.config.thresholds;
        let obs = observe(&sample);
        let round = state.step(
            thresholds,
            &obs,
            self.config.pressure_transition_period,
            SystemTime::now(),
        );
        let before = self.pressure.get();
        if before != round.conditions {
            log::info!(
                "eviction: node conditions now {:?} (were {:?})",
                round.conditions,
                before
            );
        }
        self.pressure.set(round.conditions);
        let needed = !round.act_on.is_empty() || self.any_local_storage_limits();
        let Some(with_pods) = self.with_pod_usage(sample, needed) else {
            return;
        };
        let sample = &*with_pods;
        // Pods over their own storage limits go first, whatever the node's state
        // (upstream localStorageEviction); then a later sample for the rest.
        if self.evict_for_local_storage(sample) {
            *acted_at = Some(SystemTime::now());
            return;
        }
        let Some(&index) = round.act_on.first() else {
            return;
        };
        if acted_at.is_some_and(|at| sample.time <= at) {
            log::debug!("eviction: waiting for a sample taken after the last action");
            return;
        }
        let t = &thresholds[index];
        let resource = t.signal.resource();
        log::info!(
            "eviction: threshold {} met; attempting to reclaim {resource}",
            t.signal.as_str()
        );
        self.recorder.node(
            &self.node_name,
            EventType::Warning,
            "EvictionThresholdMet",
            format!("Attempting to reclaim {resource}"),
        );
        if t.signal.condition() == Condition::DiskPressure
            && self.reclaims_node_level(sample, t.signal)
        {
            self.reclaim_disk(image_gc);
            *acted_at = Some(SystemTime::now());
            if self.disk_relieved(sample, &obs, t.signal) {
                log::info!("eviction: reclaimed {resource} without evicting pods");
                return;
            }
            if !matches!(t.signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree) {
                // imagefs is measured by the `stats` thread only: judge its next sample.
                return;
            }
        }
        if self.evict_ranked(sample, t, obs.get(&t.signal)) {
            *acted_at = Some(SystemTime::now());
        }
    }

    /// Ranks the active pods for `t`'s signal and evicts the first that is not
    /// critical (upstream: one pod per round); true when one was.
    fn evict_ranked(&self, sample: &Sample, t: &Threshold, obs_t: Option<&Observation>) -> bool {
        let level = obs_t.map_or(0, |o| amount(&t.value, o.capacity));
        let pods = (self.pods)();
        let active: Vec<&Pod> = pods
            .iter()
            .map(Arc::as_ref)
            .filter(|p| {
                self.workers.active_pod(p.uid()).is_some()
                    && !self.workers.is_pod_termination_requested(p.uid())
            })
            .collect();
        if active.is_empty() {
            log::error!("eviction: thresholds met, but no pods are active to evict");
            return false;
        }
        let by_uid = |uid: &str| sample.pods.iter().find(|s| s.uid == uid);
        let mut candidates: Vec<Candidate<'_>> = active
            .iter()
            .map(|p| Candidate {
                pod: p,
                usage: by_uid(p.uid()).map(pod_usage),
            })
            .collect();
        rank::rank(t.signal, &mut candidates);
        for c in &candidates {
            if is_critical(c.pod) {
                log::warn!(
                    "eviction: cannot evict critical pod {}/{}",
                    c.pod.namespace(),
                    c.pod.name()
                );
                continue;
            }
            let containers = by_uid(c.pod.uid()).map(container_usage).unwrap_or_default();
            let message = rank::message(t.signal, level, obs_t, c.pod, &containers);
            let grace = self.grace_period(c.pod, t.hard);
            // The kill hands the pod workers the shared version, not a copy.
            let Some(pod) = pods.iter().find(|p| p.uid() == c.pod.uid()) else {
                continue;
            };
            self.evict(pod, message, grace);
            crate::metrics::evicted(t.signal.as_str());
            return true;
        }
        log::warn!("eviction: unable to evict any pod from the node");
        false
    }

    /// `sample`, or a newer one with pods' usage when the round `needed` it and
    /// `sample` has none: pods are read only while something uses them
    /// (`stats::sampler`), here local storage limits and ranking. None when the
    /// `stats` thread did not read them in time.
    fn with_pod_usage(&self, sample: Arc<Sample>, needed: bool) -> Option<Arc<Sample>> {
        if !needed {
            return Some(sample);
        }
        if !sample.pods_skipped {
            self.stats.want_pods();
            return Some(sample);
        }
        let fresh = self
            .stats
            .latest_with_pods(POD_USAGE_WAIT)
            .filter(|s| !s.pods_skipped);
        if fresh.is_none() {
            log::warn!("eviction: pods' usage not sampled yet; judging pods next round");
        }
        fresh
    }

    /// Whether an active pod has a limit `evict_for_local_storage` judges.
    fn any_local_storage_limits(&self) -> bool {
        (self.pods)()
            .iter()
            .any(|p| local_storage::has_limits(p) && self.workers.active_pod(p.uid()).is_some())
    }

    /// Evicts, at once (grace 0, as upstream), every active non-critical pod over an
    /// emptyDir sizeLimit or an ephemeral-storage limit; true when one was.
    fn evict_for_local_storage(&self, sample: &Sample) -> bool {
        let pods = (self.pods)();
        let mut evicted = false;
        for pod in pods.iter() {
            if self.workers.active_pod(pod.uid()).is_none()
                || self.workers.is_pod_termination_requested(pod.uid())
            {
                continue;
            }
            let Some(stats) = sample.pods.iter().find(|s| s.uid == pod.uid()) else {
                continue;
            };
            let Some(violation) = local_storage::violation(pod, stats) else {
                continue;
            };
            if is_critical(pod) {
                log::error!(
                    "eviction: cannot evict critical pod {}/{}: {}",
                    pod.namespace(),
                    pod.name(),
                    violation.message
                );
                continue;
            }
            self.evict(pod, violation.message, 0);
            crate::metrics::evicted(violation.signal);
            evicted = true;
        }
        evicted
    }

    /// Whether `signal` has node-level resources to reclaim (upstream
    /// buildSignalToNodeReclaimFuncs): every disk signal on a shared filesystem, only
    /// imagefs ones when the image filesystem is its own.
    fn reclaims_node_level(&self, sample: &Sample, signal: Signal) -> bool {
        let (nodefs, imagefs) = (&sample.node.nodefs, &sample.node.imagefs);
        let dedicated = match (nodefs, imagefs) {
            (Some(n), Some(i)) => n.capacity_bytes != i.capacity_bytes,
            _ => false,
        };
        !dedicated || !matches!(signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree)
    }

    fn reclaim_disk(&self, image_gc: Option<&ImageGc>) {
        let all_dead = GcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 0,
            max_containers: 0,
        };
        let workers = &self.workers;
        let removable = |uid: &str| workers.should_pod_content_be_removed(uid);
        let errors = self.runtime.garbage_collect(
            &all_dead,
            self.sources_ready.load(Ordering::Relaxed),
            &removable,
            SystemTime::now(),
        );
        for e in errors {
            log::warn!("eviction: removing dead containers: {e}");
        }
        if let Some(gc) = image_gc {
            let report = gc.delete_unused(
                &self.runtime.images,
                &self.runtime.runtime,
                SystemTime::now(),
            );
            log::info!(
                "eviction: removed {} unused images ({} bytes)",
                report.removed.len(),
                report.freed_bytes
            );
        }
    }

    /// Measures nodefs again; true when no threshold on `signal` is met any more,
    /// minimum reclaim included.
    fn disk_relieved(&self, sample: &Sample, obs: &Observations, signal: Signal) -> bool {
        if !matches!(signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree) {
            return false;
        }
        let Ok(fs) = crate::stats::fs::statvfs(&self.root_dir) else {
            return false;
        };
        let mut fresh = sample.node.clone();
        fresh.nodefs = Some(fs);
        let again = observe(&Sample {
            time: SystemTime::now(),
            node: fresh,
            pods: Vec::new(),
            claims: Vec::new(),
            errors: Vec::new(),
            pods_skipped: true,
        });
        let mut obs = obs.clone();
        for s in [Signal::NodeFsAvailable, Signal::NodeFsInodesFree] {
            if let Some(o) = again.get(&s) {
                obs.insert(s, *o);
            }
        }
        let thresholds = &self.config.thresholds;
        let on_signal = (0..thresholds.len()).filter(|&i| thresholds[i].signal == signal);
        thresholds_met(thresholds, on_signal, &obs, true).is_empty()
    }

    /// Hard: 1 s. Soft: the pod's own, capped by `--eviction-max-pod-grace-period`
    /// when that is positive (upstream used the cap even when longer than the pod's
    /// own, kubernetes#64530; litelet never lengthens a pod's grace period).
    fn grace_period(&self, pod: &Pod, hard: bool) -> i64 {
        if hard {
            return HARD_EVICTION_GRACE_SECONDS;
        }
        let own = pod
            .spec
            .termination_grace_period_seconds
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        match self.config.max_pod_grace_period_seconds {
            max if max > 0 => own.min(max),
            _ => own,
        }
    }

    fn evict(&self, pod: &Arc<Pod>, message: String, grace: i64) {
        log::info!(
            "eviction: evicting pod {}/{} ({}): {message}",
            pod.namespace(),
            pod.name(),
            pod.uid()
        );
        self.recorder
            .pod(pod, EventType::Warning, REASON, message.clone());
        let edit: StatusFn =
            Arc::new(move |status: &mut PodStatus| evicted_status(status, &message));
        match self
            .workers
            .kill_pod_now(pod, true, Some(grace), Some(edit))
        {
            Ok(()) => log::info!(
                "eviction: pod {}/{} is evicted",
                pod.namespace(),
                pod.name()
            ),
            Err(e) => log::error!(
                "eviction: pod {}/{} failed to evict: {e}",
                pod.namespace(),
                pod.name()
            ),
        }
    }
}

/// The status of an evicted pod: Failed, reason `Evicted`, the message, and a
/// `DisruptionTarget` condition (reason `TerminationByKubelet`), as upstream.
pub fn evicted_status(status: &mut PodStatus, message: &str) {
    status.phase = Some(PodPhase::Failed);
    status.reason = Some(REASON.to_owned());
    status.message = Some(message.to_owned());
    let condition = PodCondition {
        type_: POD_DISRUPTION_TARGET.to_owned(),
        status: ConditionStatus::True,
        observed_generation: None,
        last_probe_time: None,
        last_transition_time: Some(Time::now()),
        reason: Some("TerminationByKubelet".to_owned()),
        message: Some(message.to_owned()),
    };
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == POD_DISRUPTION_TARGET)
    {
        Some(c) if c.status == ConditionStatus::True => {}
        Some(c) => *c = condition,
        None => status.conditions.push(condition),
    }
}

/// The conditions as a set, for tests and logs.
pub fn condition_names(c: &BTreeSet<Condition>) -> Vec<&'static str> {
    c.iter().map(|c| c.as_str()).collect()
}
