//! The pod lifecycle event generator (upstream generic PLEG): relists the runtime
//! every second, diffs each container's state against the previous relist, refreshes
//! the pod status cache for pods that changed, and tells the sync loop.
//!
//! Runs in the `pleg` thread. Output: [`PodLifecycleEvent`]s on a bounded channel
//! (dropped with an error log when the sync loop falls 1000 events behind, as upstream);
//! ContainerChanged events only refresh the cache. Health: a relist older than three
//! minutes makes [`PlegHealth::check`] fail, which gates the sync loop and node Ready.
//!
//! Unlike upstream, a [`RelistNudge`] brings the next relist forward (at most one per
//! [`MIN_NUDGE_GAP`]) when litelet itself has just started or stopped containers: the
//! change then reaches the pod worker and the API in tens of milliseconds instead of
//! up to a relist period later. Changes litelet did not make (a container exiting on
//! its own) are still found by the periodic relist.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{at, bounded, never, select, tick, Receiver, Sender, TrySendError};

use crate::cri::RuntimeClient;
use crate::metrics::RelistCounts;
use crate::runtime::cache::PodStatusCache;
use crate::runtime::inspect;
use crate::runtime::model::{ContainerState, RunningPod};
use crate::runtime::state::PlegUnhealthy;

/// How often the runtime is relisted.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// A relist older than this makes the PLEG unhealthy.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Capacity of the event channel.
pub const EVENT_CHANNEL_CAPACITY: usize = 1000;
/// Nudged relists come at most this often (a burst of pod starts costs a few extra
/// list calls, not one per pod).
pub const MIN_NUDGE_GAP: Duration = Duration::from_millis(100);

/// Asks the PLEG for an early relist; cheap, never blocks, and nudges that arrive
/// before the relist happens fold into one.
#[derive(Clone, Debug)]
pub struct RelistNudge(Sender<()>);

impl RelistNudge {
    pub fn nudge(&self) {
        let _ = self.0.try_send(());
    }
}

/// What happened to a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodLifecycleEventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    /// The state changed in a way that needs no action (e.g. to created or unknown).
    ContainerChanged,
}

/// One change the sync loop may act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub uid: String,
    pub kind: PodLifecycleEventType,
    /// The container (or sandbox) the event is about.
    pub container_id: String,
}

/// The PLEG's state as the node's Ready condition and `/healthz` read it: the age of
/// the last successful relist.
#[derive(Clone, Default)]
pub struct PlegHealth {
    relist: LastRelist,
}

impl PlegHealth {
    /// Fails with a message when the last relist is too old (or none happened yet
    /// after `RELIST_THRESHOLD` since `started`).
    pub fn check(&self, now: Instant, started: Instant) -> Result<(), PlegUnhealthy> {
        let last = self.relist.at();
        let since = now.saturating_duration_since(last.unwrap_or(started));
        if since > RELIST_THRESHOLD {
            return Err(PlegUnhealthy {
                since,
                threshold: RELIST_THRESHOLD,
            });
        }
        Ok(())
    }
}

impl crate::runtime::state::HealthCheck for PlegHealth {
    fn check(&self, now: Instant, started: Instant) -> Result<(), PlegUnhealthy> {
        PlegHealth::check(self, now, started)
    }
}

/// The runtime's pods as the last successful relist saw them, and when: for readers
/// that can live with a list up to a relist period old (housekeeping), so one CRI
/// listing per second is shared instead of repeated, and for [`PlegHealth`]. Cloning
/// shares the same slot.
#[derive(Clone, Default)]
pub struct LastRelist {
    slot: Arc<Mutex<Option<(Instant, RelistedPods)>>>,
}

/// The pods of one relist by UID, shared without copying.
pub type RelistedPods = Arc<HashMap<String, RunningPod>>;

impl LastRelist {
    pub(crate) fn publish(&self, at: Instant, pods: RelistedPods) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, pods));
    }

    /// When the last relist started.
    fn at(&self) -> Option<Instant> {
        let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().map(|(at, _)| *at)
    }

    /// The pods of the last relist if it started at most `max_age` before `now`.
    pub fn fresh(&self, now: Instant, max_age: Duration) -> Option<RelistedPods> {
        let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        let (at, pods) = slot.as_ref()?;
        (now.saturating_duration_since(*at) <= max_age).then(|| Arc::clone(pods))
    }
}

/// The PLEG's state of a container, sandboxes included (created counts as unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

fn pleg_state(state: ContainerState) -> PlegState {
    match state {
        ContainerState::Running => PlegState::Running,
        ContainerState::Exited => PlegState::Exited,
        ContainerState::Created | ContainerState::Unknown => PlegState::Unknown,
    }
}

fn states(pod: Option<&RunningPod>) -> HashMap<&str, PlegState> {
    pod.map(|p| {
        p.containers
            .iter()
            .chain(p.sandboxes.iter())
            .map(|c| (c.id.as_str(), pleg_state(c.state)))
            .collect()
    })
    .unwrap_or_default()
}

/// The events between two relists of one pod (pure; upstream generateEvents per container).
pub fn compute_events(
    uid: &str,
    old: Option<&RunningPod>,
    new: Option<&RunningPod>,
) -> Vec<PodLifecycleEvent> {
    let before = states(old);
    let after = states(new);
    let mut ids: Vec<&str> = before.keys().chain(after.keys()).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut events = Vec::new();
    for id in ids {
        let was = before.get(id).copied().unwrap_or(PlegState::NonExistent);
        let now = after.get(id).copied().unwrap_or(PlegState::NonExistent);
        if was == now {
            continue;
        }
        let event = |kind| PodLifecycleEvent {
            uid: uid.to_owned(),
            kind,
            container_id: id.to_owned(),
        };
        match now {
            PlegState::Running => events.push(event(PodLifecycleEventType::ContainerStarted)),
            PlegState::Exited => events.push(event(PodLifecycleEventType::ContainerDied)),
            PlegState::Unknown => events.push(event(PodLifecycleEventType::ContainerChanged)),
            PlegState::NonExistent => {
                if was != PlegState::Exited {
                    events.push(event(PodLifecycleEventType::ContainerDied));
                }
                events.push(event(PodLifecycleEventType::ContainerRemoved));
            }
        }
    }
    events
}

/// The relisting state, owned by the `pleg` thread.
pub struct Pleg {
    runtime: RuntimeClient,
    cache: PodStatusCache,
    events: Sender<PodLifecycleEvent>,
    /// The pods as of the previous relist (shared with [`LastRelist`] readers).
    previous: RelistedPods,
    last_relist: LastRelist,
    /// Pods whose status inspection failed last time: retried on the next relist.
    reinspect: HashSet<String>,
    nudge_tx: Sender<()>,
    nudges: Receiver<()>,
    period: Duration,
}

impl Pleg {
    pub fn new(
        runtime: RuntimeClient,
        cache: PodStatusCache,
        events: Sender<PodLifecycleEvent>,
    ) -> Pleg {
        let (nudge_tx, nudges) = bounded(1);
        Pleg {
            runtime,
            cache,
            events,
            previous: Arc::default(),
            last_relist: LastRelist::default(),
            reinspect: HashSet::new(),
            nudge_tx,
            nudges,
            period: RELIST_PERIOD,
        }
    }

    /// Relists every `period` instead of [`RELIST_PERIOD`] (tests use a long one).
    pub fn with_period(mut self, period: Duration) -> Pleg {
        self.period = period;
        self
    }

    /// A handle that brings the next relist forward.
    pub fn nudger(&self) -> RelistNudge {
        RelistNudge(self.nudge_tx.clone())
    }

    /// A handle to read the last relist's pods from other threads.
    pub fn last_relist(&self) -> LastRelist {
        self.last_relist.clone()
    }

    /// A handle to read the PLEG's health from other threads.
    pub fn health(&self) -> PlegHealth {
        PlegHealth {
            relist: self.last_relist.clone(),
        }
    }

    /// Starts the `pleg` thread; it relists at once, then every period and when nudged,
    /// until `shutdown` disconnects.
    pub fn spawn(mut self, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
        crate::process::spawn_essential("pleg", 256 * 1024, move || {
            let ticker = tick(self.period);
            let nudges = self.nudges.clone();
            self.relist();
            let mut last = Instant::now();
            // When a nudged relist is due (none pending: None).
            let mut nudged: Option<Instant> = None;
            loop {
                let due = nudged.map(at).unwrap_or_else(never);
                select! {
                    recv(shutdown) -> _ => return,
                    recv(nudges) -> _ => {
                        nudged.get_or_insert(last + MIN_NUDGE_GAP);
                        continue;
                    }
                    recv(ticker) -> _ => {}
                    recv(due) -> _ => {}
                }
                self.relist();
                last = Instant::now();
                nudged = None;
            }
        })
    }

    /// One relist: list, diff, refresh the cache, send events.
    pub fn relist(&mut self) {
        let started = Instant::now();
        let pods = match inspect::running_pods(&self.runtime, true) {
            Ok(pods) => pods,
            Err(err) => {
                log::error!("pleg: relist failed: {err}");
                return;
            }
        };
        let current: RelistedPods =
            Arc::new(pods.into_iter().map(|p| (p.uid.clone(), p)).collect());

        let mut uids: Vec<&String> = self.previous.keys().chain(current.keys()).collect();
        uids.sort_unstable();
        uids.dedup();
        let mut to_send = Vec::new();
        let mut inspect_again = HashSet::new();
        for uid in uids {
            let old = self.previous.get(uid);
            let new = current.get(uid);
            let events = compute_events(uid, old, new);
            if !events.is_empty() || self.reinspect.contains(uid) {
                let pod = new.or(old);
                let (name, namespace) = pod
                    .map(|p| (p.name.as_str(), p.namespace.as_str()))
                    .unwrap_or(("", ""));
                let status = inspect::pod_status(&self.runtime, uid, name, namespace);
                if let Err(err) = &status {
                    log::warn!("pleg: cannot inspect pod {namespace}/{name} ({uid}): {err}");
                    inspect_again.insert(uid.clone());
                }
                self.cache.set(uid, status, started);
            }
            to_send.extend(
                events
                    .into_iter()
                    .filter(|e| e.kind != PodLifecycleEventType::ContainerChanged),
            );
        }
        self.cache.update_time(started);
        for event in to_send {
            if let Err(TrySendError::Full(event)) = self.events.try_send(event) {
                log::error!("pleg: event channel is full, dropping {event:?}");
            }
        }
        self.reinspect = inspect_again;
        crate::metrics::relisted(started.elapsed(), relist_counts(current.values()));
        self.last_relist.publish(started, Arc::clone(&current));
        self.previous = current;
    }
}

/// The pods and containers of one relist, counted for the metrics.
fn relist_counts<'a>(pods: impl Iterator<Item = &'a RunningPod>) -> RelistCounts {
    let mut counts = RelistCounts::default();
    for pod in pods {
        if pod
            .sandboxes
            .iter()
            .any(|s| s.state == ContainerState::Running)
        {
            counts.running_pods += 1;
        }
        for c in &pod.containers {
            *match c.state {
                ContainerState::Running => &mut counts.running,
                ContainerState::Exited => &mut counts.exited,
                ContainerState::Created => &mut counts.created,
                ContainerState::Unknown => &mut counts.unknown,
            } += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::model::RunningContainer;

    fn pod(containers: &[(&str, ContainerState)]) -> RunningPod {
        RunningPod {
            uid: "u".into(),
            containers: containers
                .iter()
                .map(|(id, state)| RunningContainer {
                    id: id.to_string(),
                    name: id.to_string(),
                    state: *state,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn relist_counts_pods_with_a_running_sandbox_and_containers_by_state() {
        use ContainerState::*;
        let mut up = pod(&[("a", Running), ("b", Exited), ("c", Exited)]);
        up.sandboxes = pod(&[("s1", Running)]).containers;
        let mut down = pod(&[("d", Created), ("e", Unknown)]);
        down.sandboxes = pod(&[("s2", Exited)]).containers;
        let counts = relist_counts([&up, &down].into_iter());
        assert_eq!(
            counts,
            RelistCounts {
                running_pods: 1,
                running: 1,
                exited: 2,
                created: 1,
                unknown: 1,
            }
        );
    }

    fn kinds(events: &[PodLifecycleEvent]) -> Vec<(&str, PodLifecycleEventType)> {
        events
            .iter()
            .map(|e| (e.container_id.as_str(), e.kind))
            .collect()
    }

    #[test]
    fn state_transitions_become_events() {
        use ContainerState::*;
        use PodLifecycleEventType::*;
        type Case = (
            &'static str,
            Option<RunningPod>,
            Option<RunningPod>,
            Vec<(&'static str, PodLifecycleEventType)>,
        );
        let cases: Vec<Case> = vec![
            (
                "new running container",
                None,
                Some(pod(&[("a", Running)])),
                vec![("a", ContainerStarted)],
            ),
            (
                "running to exited",
                Some(pod(&[("a", Running)])),
                Some(pod(&[("a", Exited)])),
                vec![("a", ContainerDied)],
            ),
            (
                "exited then removed",
                Some(pod(&[("a", Exited)])),
                Some(pod(&[])),
                vec![("a", ContainerRemoved)],
            ),
            (
                "running vanishes: died and removed",
                Some(pod(&[("a", Running)])),
                None,
                vec![("a", ContainerDied), ("a", ContainerRemoved)],
            ),
            (
                "created is unknown",
                None,
                Some(pod(&[("a", Created)])),
                vec![("a", ContainerChanged)],
            ),
            (
                "no change",
                Some(pod(&[("a", Running)])),
                Some(pod(&[("a", Running)])),
                vec![],
            ),
        ];
        for (name, old, new, want) in cases {
            let got = compute_events("u", old.as_ref(), new.as_ref());
            assert_eq!(kinds(&got), want, "{name}");
        }
    }

    #[test]
    fn sandboxes_count_as_containers() {
        let mut with_sandbox = pod(&[]);
        with_sandbox.sandboxes.push(RunningContainer {
            id: "s".into(),
            name: String::new(),
            state: ContainerState::Exited,
        });
        let got = compute_events("u", None, Some(&with_sandbox));
        assert_eq!(
            kinds(&got),
            vec![("s", PodLifecycleEventType::ContainerDied)]
        );
    }

    #[test]
    fn health_turns_bad_after_the_threshold() {
        let health = PlegHealth::default();
        let start = Instant::now();
        assert!(health.check(start, start).is_ok());
        assert!(health
            .check(start + RELIST_THRESHOLD + Duration::from_secs(1), start)
            .is_err());
        health
            .relist
            .publish(start + RELIST_THRESHOLD, RelistedPods::default());
        assert!(health
            .check(start + RELIST_THRESHOLD + Duration::from_secs(1), start)
            .is_ok());
    }
}
