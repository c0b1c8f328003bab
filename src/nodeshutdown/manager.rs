//! The `node-shutdown` thread (upstream nodeshutdown_manager_linux.go), started only
//! when a grace period is configured. It follows logind's delay-inhibitor protocol:
//!
//! 1. connect; read `InhibitDelayMaxUSec`; when it is shorter than the period asked
//!    for, write litelet's logind drop-in, make logind reload, read it again (and give
//!    up on this connection when it is still too short);
//! 2. take a delay lock on shutdown and subscribe to `PrepareForShutdown`;
//! 3. on `PrepareForShutdown(true)`: refuse new pods and report the node NotReady
//!    ([`ShutdownState`]), kill the active pods group by group, lowest priority first,
//!    each group within its period and each pod with the shorter of its own grace
//!    period and the group's, through the pod workers' `kill_pod_now` (preStop hooks
//!    and the status edit run as for any kill: Failed, `Terminated`, a
//!    `DisruptionTarget` condition); wait until the API server has those statuses;
//!    only then release the lock;
//! 4. on `PrepareForShutdown(false)` (the shutdown was cancelled): admit pods again and
//!    take the lock again.
//!
//! A lost connection (or a failed start) is retried with a doubling delay, 1 s to
//! 1 min; upstream retries every second but gives up for good when the first start
//! fails. The pods of a group are killed in parallel, one short-lived `shutdown-kill`
//! thread each; a group whose period runs out is left to finish in the background
//! while the next group starts, as upstream.
//!
//! Channels: selects on `shutdown` between logind waits (at most [`POLL`]). Never
//! runs on the sync loop; holds no lock across I/O.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use crate::api::meta::Time;
use crate::api::pod::{Pod, PodStatus};
use crate::events::{EventType, Recorder};
use crate::pod_workers::{PodWorkers, StatusFn};
use crate::status::manager::StatusManager;

use super::config::{period_of, PriorityPeriod};
use super::logind::{Connect, InhibitLock, Logind, LogindError};
use super::plan::{group_by_priority, pod_grace_seconds, shutdown_status, Group};
use super::state::ShutdownState;

/// How long one wait for a logind event lasts before shutdown is checked again.
pub const POLL: Duration = Duration::from_millis(500);
/// First delay before connecting again; doubles up to [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// Time given to the status writes when the groups' periods are used up already.
const MIN_STATUS_FLUSH: Duration = Duration::from_secs(2);
/// Upstream's node event reason.
pub const EVENT_REASON: &str = "NodeShutdown";

/// The desired pods now (the sync loop's snapshot; a closure because the kubelet
/// sits above this module).
pub type PodsFn = Box<dyn Fn() -> Arc<Vec<Arc<Pod>>> + Send>;

/// Everything the `node-shutdown` thread works with.
pub struct ShutdownManager {
    /// The priority groups, lowest first (`ShutdownConfig::groups`).
    pub groups: Vec<PriorityPeriod>,
    pub connect: Connect,
    pub pods: PodsFn,
    pub workers: PodWorkers,
    pub status: StatusManager,
    pub state: ShutdownState,
    pub recorder: Recorder,
    pub node_name: String,
}

/// Why a connection to logind ended.
enum Ended {
    Shutdown,
    Lost(LogindError),
}

impl ShutdownManager {
    /// Starts the `node-shutdown` thread.
    pub fn spawn(self, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
        crate::process::spawn_essential("node-shutdown", 256 * 1024, move || self.run(shutdown))
    }

    /// The whole time asked of logind.
    fn period_requested(&self) -> Duration {
        period_of(&self.groups)
    }

    fn run(mut self, shutdown: Receiver<()>) {
        log::info!(
            "node shutdown: taking part in the node's shutdown, {:?} in groups {:?}",
            self.period_requested(),
            self.groups
        );
        let mut delay = RETRY_INITIAL;
        loop {
            let error = match (self.connect)().and_then(|logind| self.start(logind)) {
                Ok((logind, lock)) => {
                    delay = RETRY_INITIAL;
                    match self.watch(logind, lock, &shutdown) {
                        Ended::Shutdown => return,
                        Ended::Lost(e) => e,
                    }
                }
                Err(e) => e,
            };
            if self.state.is_shutting_down() {
                // The machine is going down: the bus goes with it.
                log::info!("node shutdown: logind connection ended during the shutdown: {error}");
            } else {
                log::warn!(
                    "node shutdown: not watching for node shutdown, retrying in {delay:?}: {error}"
                );
            }
            if shutdown.recv_timeout(delay) != Err(crossbeam_channel::RecvTimeoutError::Timeout) {
                return;
            }
            delay = (delay * 2).min(RETRY_MAX);
        }
    }

    /// Step 1 and 2 on a fresh connection.
    fn start(
        &self,
        mut logind: Box<dyn Logind>,
    ) -> Result<(Box<dyn Logind>, InhibitLock), LogindError> {
        let lock = take_part(logind.as_mut(), self.period_requested())?;
        Ok((logind, lock))
    }

    /// Steps 3 and 4 until the connection ends or litelet stops.
    fn watch(
        &self,
        mut logind: Box<dyn Logind>,
        lock: InhibitLock,
        shutdown: &Receiver<()>,
    ) -> Ended {
        let mut lock = Some(lock);
        loop {
            if !matches!(shutdown.try_recv(), Err(TryRecvError::Empty)) {
                return Ended::Shutdown;
            }
            let shutting_down = match logind.next_event(POLL) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                Err(e) => return Ended::Lost(e),
            };
            if shutting_down {
                self.recorder.node(
                    &self.node_name,
                    EventType::Normal,
                    EVENT_REASON,
                    "Shutdown manager detected shutdown event",
                );
                self.process_shutdown();
                // Only now may logind go on: the pods are down, their statuses out.
                if let Some(lock) = lock.take() {
                    lock.release();
                    log::info!("node shutdown: inhibitor lock released; the node may shut down");
                }
            } else {
                log::info!("node shutdown: the shutdown was cancelled");
                self.recorder.node(
                    &self.node_name,
                    EventType::Normal,
                    EVENT_REASON,
                    "Shutdown manager detected shutdown cancellation",
                );
                self.state.set(false);
                match logind.inhibit_shutdown() {
                    Ok(new) => lock = Some(new),
                    Err(e) => return Ended::Lost(e),
                }
            }
        }
    }

    /// The pods the shutdown kills: desired, known to the pod workers and not yet
    /// terminated (terminating ones too: their grace period may shrink).
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        (self.pods)()
            .iter()
            .filter(|p| {
                self.workers.active_pod(p.uid()).is_some()
                    && !self.workers.is_pod_known_terminated(p.uid())
            })
            .cloned()
            .collect()
    }

    /// Step 3 up to the release.
    fn process_shutdown(&self) {
        let started = Instant::now();
        log::info!("node shutdown: the node is shutting down; refusing new pods");
        self.state.set(true);
        let groups = group_by_priority(&self.groups, &self.active_pods());
        let mut killed: Vec<String> = Vec::new();
        for group in groups.iter().filter(|g| !g.pods.is_empty()) {
            killed.extend(group.pods.iter().map(|p| p.uid().to_owned()));
            self.kill_group(group);
        }
        let deadline = (started + self.period_requested()).max(Instant::now() + MIN_STATUS_FLUSH);
        let unsent = self.status.wait_sent(&killed, deadline);
        if unsent.is_empty() {
            log::info!(
                "node shutdown: {} pods stopped and reported in {:?}",
                killed.len(),
                started.elapsed()
            );
        } else {
            log::warn!(
                "node shutdown: the API server lacks the final status of {} pods: {unsent:?}",
                unsent.len()
            );
        }
    }

    /// Kills the group's pods in parallel and waits for them, at most the group's period.
    fn kill_group(&self, group: &Group) {
        let period = Duration::from_secs(
            u64::try_from(group.period.shutdown_grace_period_seconds).unwrap_or(0),
        );
        log::info!(
            "node shutdown: stopping {} pods of priority {} and up within {period:?}",
            group.pods.len(),
            group.period.priority
        );
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<()>();
        let mut started = 0;
        for pod in &group.pods {
            let grace = pod_grace_seconds(pod, &group.period);
            let (workers, pod, done) = (self.workers.clone(), pod.clone(), done_tx.clone());
            let edit: StatusFn =
                Arc::new(|status: &mut PodStatus| shutdown_status(status, Time::now()));
            let spawned = std::thread::Builder::new()
                .name("shutdown-kill".into())
                .stack_size(256 * 1024)
                .spawn(move || {
                    log::info!(
                        "node shutdown: killing pod {}/{} ({}) with grace period {grace}s",
                        pod.namespace(),
                        pod.name(),
                        pod.uid()
                    );
                    if let Err(e) = workers.kill_pod_now(&pod, false, Some(grace), Some(edit)) {
                        log::warn!(
                            "node shutdown: pod {}/{} did not stop: {e}",
                            pod.namespace(),
                            pod.name()
                        );
                    }
                    let _ = done.send(());
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => log::error!("node shutdown: cannot start a kill thread: {e}"),
            }
        }
        drop(done_tx);
        let deadline = Instant::now() + period;
        for _ in 0..started {
            let left = deadline.saturating_duration_since(Instant::now());
            if done_rx.recv_timeout(left).is_err() {
                log::warn!(
                    "node shutdown: pods of priority {} still stopping after {period:?}; \
                     going on with the next group",
                    group.period.priority
                );
                return;
            }
        }
    }
}

/// Step 1 and 2: make logind wait at least `wanted` for delay locks (the drop-in and a
/// reload when it waits less), take the lock, subscribe.
fn take_part(logind: &mut dyn Logind, wanted: Duration) -> Result<InhibitLock, LogindError> {
    let current = logind.inhibit_delay_max()?;
    if wanted > current {
        log::info!(
            "node shutdown: logind InhibitDelayMaxSec is {current:?}, raising it to {wanted:?}"
        );
        logind.override_inhibit_delay(wanted)?;
        // logind applies a SIGHUP asynchronously: look a few times.
        let mut now = logind.inhibit_delay_max()?;
        for _ in 0..10 {
            if now >= wanted {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            now = logind.inhibit_delay_max()?;
        }
        if now < wanted {
            return Err(LogindError::DelayTooShort {
                current: now,
                wanted,
            });
        }
    }
    let lock = logind.inhibit_shutdown()?;
    logind.subscribe()?;
    log::info!("node shutdown: holding a delay inhibitor lock on shutdown");
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// logind with a delay; `reloads` says whether the drop-in takes effect.
    struct Fake {
        delay: Duration,
        reloads: bool,
        calls: Vec<String>,
    }

    impl Logind for Fake {
        fn inhibit_delay_max(&mut self) -> Result<Duration, LogindError> {
            self.calls.push("delay".into());
            Ok(self.delay)
        }
        fn override_inhibit_delay(&mut self, delay: Duration) -> Result<(), LogindError> {
            self.calls.push(format!("override {}", delay.as_secs()));
            if self.reloads {
                self.delay = delay;
            }
            Ok(())
        }
        fn inhibit_shutdown(&mut self) -> Result<InhibitLock, LogindError> {
            self.calls.push("inhibit".into());
            let (_read, write) = nix::unistd::pipe().map_err(|e| LogindError::Reply {
                call: "pipe",
                message: e.to_string(),
            })?;
            Ok(InhibitLock::new(write))
        }
        fn subscribe(&mut self) -> Result<(), LogindError> {
            self.calls.push("subscribe".into());
            Ok(())
        }
        fn next_event(&mut self, _: Duration) -> Result<Option<bool>, LogindError> {
            Ok(None)
        }
    }

    fn fake(delay: u64, reloads: bool) -> Fake {
        Fake {
            delay: Duration::from_secs(delay),
            reloads,
            calls: Vec::new(),
        }
    }

    #[test]
    fn a_long_enough_delay_is_left_alone() {
        let mut logind = fake(30, true);
        assert!(take_part(&mut logind, Duration::from_secs(30)).is_ok());
        assert_eq!(logind.calls, ["delay", "inhibit", "subscribe"]);
    }

    #[test]
    fn a_short_delay_is_raised_and_read_again_before_the_lock() {
        let mut logind = fake(5, true);
        assert!(take_part(&mut logind, Duration::from_secs(30)).is_ok());
        assert_eq!(
            logind.calls,
            ["delay", "override 30", "delay", "inhibit", "subscribe"]
        );
    }

    #[test]
    fn a_delay_that_stays_short_takes_no_lock() {
        let mut logind = fake(5, false);
        let err = take_part(&mut logind, Duration::from_secs(30)).unwrap_err();
        assert!(
            matches!(err, LogindError::DelayTooShort { current, wanted }
                if current == Duration::from_secs(5) && wanted == Duration::from_secs(30)),
            "{err}"
        );
        assert!(
            !logind.calls.iter().any(|c| c == "inhibit"),
            "{:?}",
            logind.calls
        );
    }
}
