//! The loop of one pod worker thread (upstream podWorkerLoop) and the bookkeeping
//! around each sync: consuming the pending update, static pod start gating, the
//! completion of each phase and the requeue delay.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::stack::StackTop;
use super::types::{StatusFn, SyncError, Synced, UpdatePodOptions, WorkType};
use super::work_queue::jitter;
use super::{PodWorkers, State};
use crate::api::pod::Pod;
use crate::events::EventType;
use crate::runtime::cancel::Cancel;
use crate::runtime::model::PodRuntimeStatus;

/// Whether a consumed update may run.
enum Start {
    Run,
    /// Not now (static pod waiting its turn); the update was put back.
    NotYet,
    /// Never: the worker was cleaned up.
    Never,
}

/// What a successful sync means for the state machine.
enum Done {
    Synced(Synced),
    Terminating,
    TerminatingRuntime,
    Terminated,
}

impl PodWorkers {
    pub(super) fn worker_loop(&self, uid: &str, rx: Receiver<()>, stack: StackTop) {
        loop {
            // The wait may last minutes: give the last sync's stack pages back first.
            stack.release_unused();
            if rx.recv().is_err() || self.on_signal(uid, &rx).is_break() {
                return;
            }
        }
    }

    /// Handles one wake-up of the worker: starts the pending work, if any, runs it and
    /// records how it went. `Break` when the worker is done for good. Never inlined:
    /// its frame (and everything a sync calls) lies below `worker_loop`'s, so the
    /// release before the next wait covers it.
    #[inline(never)]
    fn on_signal(&self, uid: &str, rx: &Receiver<()>) -> ControlFlow<()> {
        let Some((update, work, cancel, start)) = self.start_pod_sync(uid) else {
            return ControlFlow::Continue(());
        };
        // Signals that arrived meanwhile are covered by this consumption.
        while rx.try_recv().is_ok() {}
        match start {
            Start::Never => return ControlFlow::Break(()),
            Start::NotYet => return ControlFlow::Continue(()),
            Start::Run => {}
        }
        let sync_started = Instant::now();
        let result = self.run_sync(uid, &update, work, &cancel);
        crate::metrics::POD_WORKER_DURATION
            .observe_duration(&[work.name()], sync_started.elapsed());
        let mut phase_transition = false;
        let mut retry_in = None;
        let error = match result {
            Ok(Done::Terminated) => {
                self.complete_terminated(uid);
                return ControlFlow::Break(());
            }
            Ok(Done::TerminatingRuntime) => {
                self.complete_terminating_runtime_pod(uid);
                return ControlFlow::Break(());
            }
            Ok(Done::Terminating) => {
                self.complete_terminating(uid);
                phase_transition = true;
                None
            }
            Ok(Done::Synced(synced)) => {
                if synced.terminal {
                    self.complete_sync(uid);
                    phase_transition = true;
                }
                retry_in = synced.retry_in;
                None
            }
            Err(err) => {
                match &err {
                    SyncError::Canceled => log::debug!("pod {uid}: sync canceled"),
                    SyncError::RetryAfter(msg, after) => {
                        log::error!("error syncing pod {uid}, retry in {after:?}: {msg}")
                    }
                    other => log::error!("error syncing pod {uid}, skipping: {other}"),
                }
                Some(err)
            }
        };
        self.complete_work(uid, phase_transition, error.as_ref(), retry_in);
        ControlFlow::Continue(())
    }

    /// Waits for a runtime status newer than litelet's last change to the pod, then
    /// dispatches on the work type the status had when the update was consumed.
    fn run_sync(
        &self,
        uid: &str,
        update: &UpdatePodOptions,
        work: WorkType,
        cancel: &Cancel,
    ) -> Result<Done, SyncError> {
        let syncer = &self.inner.syncer;
        if let (WorkType::Terminating, Some(running)) = (work, &update.running_pod) {
            self.acknowledge_terminating(uid);
            return syncer
                .sync_terminating_runtime_pod(cancel, running)
                .map(|()| Done::TerminatingRuntime);
        }
        let Some(pod) = update.pod.as_ref() else {
            return Err(SyncError::Other("update without a pod".into()));
        };
        let status = self.fresh_status(pod)?;
        match work {
            WorkType::Terminated => syncer
                .sync_terminated_pod(cancel, pod, &status)
                .map(|()| Done::Terminated),
            WorkType::Terminating => {
                let grace = update.kill.as_ref().and_then(|k| k.grace_override);
                let status_fn = self.acknowledge_terminating(uid);
                syncer
                    .sync_terminating_pod(cancel, pod, &status, grace, status_fn)
                    .map(|()| Done::Terminating)
            }
            WorkType::Sync => syncer
                .sync_pod(
                    cancel,
                    update.update_type,
                    pod,
                    update.mirror_pod.as_ref(),
                    &status,
                )
                .map(Done::Synced),
        }
    }

    fn fresh_status(&self, pod: &Pod) -> Result<PodRuntimeStatus, SyncError> {
        // Upstream waits for a status newer than the worker's last sync, which holds
        // every sync after another (a resize, a spec update) until the next relist.
        // What that protects is the worker's view of its own actions: the runtime
        // manager marks each pod it touches in the cache, and only then do we wait.
        let cached = self
            .inner
            .cache
            .get_newer_than(pod.uid(), None, self.inner.timings.status_wait)
            .ok_or_else(|| SyncError::Other("timed out waiting for a fresh pod status".into()));
        let failure = |err: String| {
            let message = format!("error determining status: {err}");
            self.inner
                .recorder
                .pod(pod, EventType::Warning, "FailedSync", &message);
            SyncError::Other(message)
        };
        match cached {
            Ok(cached) => match cached.status {
                Ok(status) => {
                    let mut status = (*status).clone();
                    status.name = pod.name().to_owned();
                    status.namespace = pod.namespace().to_owned();
                    Ok(status)
                }
                Err(err) => Err(failure(err.to_string())),
            },
            Err(SyncError::Other(err)) => Err(failure(err)),
            Err(err) => Err(err),
        }
    }

    /// Takes the pending update and decides whether it may run (upstream startPodSync).
    fn start_pod_sync(&self, uid: &str) -> Option<(UpdatePodOptions, WorkType, Cancel, Start)> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let status = state.statuses.get_mut(uid)?;
        let Some(pending) = status.pending.take() else {
            status.working = false;
            return None;
        };
        let work = status.work_type();
        let cancel = match &status.cancel {
            Some(c) if !c.is_cancelled() => c.clone(),
            _ => {
                let c = Cancel::new();
                status.cancel = Some(c.clone());
                c
            }
        };
        if status.is_started() || (pending.running_pod.is_some() && work == WorkType::Terminating) {
            status.merge_last_update(pending.clone());
            return Some((pending, work, cancel, Start::Run));
        }
        let Some(pod) = pending.pod.clone() else {
            status.merge_last_update(pending.clone());
            return Some((pending, work, cancel, Start::Never));
        };
        let (can_start, can_ever_start) = self.allow_pod_start(state, &pod);
        if !can_ever_start {
            Self::cleanup_unstarted_pod(state, uid);
            return Some((pending, work, cancel, Start::Never));
        }
        let status = state.statuses.get_mut(uid)?;
        if !can_start {
            status.pending = Some(pending.clone());
            status.working = false;
            return Some((pending, work, cancel, Start::NotYet));
        }
        status.started_at = Some(Instant::now());
        status.merge_last_update(pending.clone());
        Some((pending, work, cancel, Start::Run))
    }

    /// Static pods start one per full name, in arrival order (upstream allowPodStart).
    fn allow_pod_start(&self, state: &mut State, pod: &Pod) -> (bool, bool) {
        if !pod.is_static() {
            return (true, true);
        }
        let uid = pod.uid().to_owned();
        let Some(status) = state.statuses.get(&uid) else {
            return (false, false);
        };
        if status.is_termination_requested() {
            return (false, false);
        }
        let fullname = status.fullname.clone();
        if !Self::allow_static_pod_start(state, &fullname, &uid) {
            self.inner
                .queue
                .enqueue(&uid, jitter(self.inner.timings.backoff, 0.5));
            return (false, true);
        }
        (true, true)
    }

    fn allow_static_pod_start(state: &mut State, fullname: &str, uid: &str) -> bool {
        if let Some(started) = state.started_static.get(fullname) {
            return started == uid;
        }
        let mut waiting = state.waiting_static.remove(fullname).unwrap_or_default();
        while let Some(front) = waiting.front().cloned() {
            let live = state
                .statuses
                .get(&front)
                .is_some_and(|s| !s.is_termination_requested() && !s.is_terminated());
            if !live {
                waiting.pop_front();
                continue;
            }
            if front != uid {
                state.waiting_static.insert(fullname.to_owned(), waiting);
                return false;
            }
            waiting.pop_front();
            break;
        }
        if !waiting.is_empty() {
            state.waiting_static.insert(fullname.to_owned(), waiting);
        }
        state
            .started_static
            .insert(fullname.to_owned(), uid.to_owned());
        true
    }

    /// A pod that never started and never will: finished without any sync.
    fn cleanup_unstarted_pod(state: &mut State, uid: &str) {
        state.updates.remove(uid);
        let Some(status) = state.statuses.get_mut(uid) else {
            return;
        };
        status.finished = true;
        status.working = false;
        status.terminated_at = Some(Instant::now());
        let fullname = status.fullname.clone();
        Self::release_static(state, &fullname, uid);
    }

    /// Marks that the worker saw the termination; returns the last status function.
    fn acknowledge_terminating(&self, uid: &str) -> Option<StatusFn> {
        let mut state = self.lock();
        let status = state.statuses.get_mut(uid)?;
        if status.is_termination_requested() {
            status.started_terminating = true;
        }
        status.status_post_terminating.last().cloned()
    }

    /// SyncPod reached a terminal phase: start terminating at once.
    fn complete_sync(&self, uid: &str) {
        let mut state = self.lock();
        if let Some(status) = state.statuses.get_mut(uid) {
            if status.terminating_at.is_none() {
                status.terminating_at = Some(Instant::now());
            }
            status.started_terminating = true;
        }
        Self::requeue_last_update(&mut state, uid);
    }

    /// The containers stopped: release kill waiters, then clean up.
    fn complete_terminating(&self, uid: &str) {
        let mut state = self.lock();
        if let Some(status) = state.statuses.get_mut(uid) {
            status.terminated_at = Some(Instant::now());
            // Dropping the senders closes every waiter's channel.
            status.notify_post_terminating.clear();
            status.status_post_terminating.clear();
        }
        Self::requeue_last_update(&mut state, uid);
    }

    /// A runtime-only pod was stopped: it leaves no record.
    fn complete_terminating_runtime_pod(&self, uid: &str) {
        let mut state = self.lock();
        state.updates.remove(uid);
        if let Some(status) = state.statuses.remove(uid) {
            Self::release_static(&mut state, &status.fullname, uid);
        }
    }

    /// The pod is finished; its record stays until SyncKnownPods forgets it.
    fn complete_terminated(&self, uid: &str) {
        let mut state = self.lock();
        state.updates.remove(uid);
        let Some(status) = state.statuses.get_mut(uid) else {
            return;
        };
        status.finished = true;
        status.working = false;
        let fullname = status.fullname.clone();
        Self::release_static(&mut state, &fullname, uid);
    }

    /// Requeues the pod (upstream completeWork) and re-signals a pending update.
    fn complete_work(
        &self,
        uid: &str,
        phase_transition: bool,
        error: Option<&SyncError>,
        retry_in: Option<Duration>,
    ) {
        let t = &self.inner.timings;
        let delay = requeue_delay(t, phase_transition, error, retry_in, |d| jitter(d, 0.5));
        self.inner.queue.enqueue(uid, delay);
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(status) = state.statuses.get_mut(uid) else {
            return;
        };
        if status.pending.is_some() {
            if let Some(tx) = state.updates.get(uid) {
                let _ = tx.try_send(());
            }
        } else {
            status.working = false;
        }
    }
}

/// How long until the pod is synced again (pure; `jitter` spreads a base delay).
///
/// Upstream's shape: at once after a phase change, about a second when the network
/// is not ready, the back-off period after a failure, the resync period otherwise.
/// A back-off that ends sooner brings the sync forward, so a failed image pull is
/// retried when its back-off (10 s doubling to 300 s) ends, not at the next resync.
pub(super) fn requeue_delay(
    t: &super::WorkerTimings,
    phase_transition: bool,
    error: Option<&SyncError>,
    retry_in: Option<Duration>,
    jitter: impl Fn(Duration) -> Duration,
) -> Duration {
    let (base, hint) = match error {
        _ if phase_transition => return Duration::ZERO,
        None => (t.resync, retry_in),
        Some(SyncError::NetworkNotReady(_)) => (t.network_backoff, None),
        Some(SyncError::RetryAfter(_, after)) => (t.backoff, Some(*after)),
        Some(_) => (t.backoff, None),
    };
    let base = jitter(base);
    hint.map_or(base, |h| h.min(base))
}
