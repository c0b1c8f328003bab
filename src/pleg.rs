//! The pod lifecycle event generator (upstream generic and Evented PLEG): finds what
//! changed in the runtime, refreshes the pod status cache for pods that changed, and
//! tells the sync loop.
//!
//! Runs in the `pleg` thread. Output: [`PodLifecycleEvent`]s on a bounded channel
//! (dropped with an error log when the sync loop falls 1000 events behind, as upstream);
//! ContainerChanged events only refresh the cache. Health: a relist older than three
//! minutes (ten while events flow) makes [`PlegHealth::check`] fail, which gates the
//! sync loop and node Ready.
//!
//! Two ways to see changes. The relist lists every sandbox and container each
//! [`RELIST_PERIOD`] and diffs their states against the previous relist. Where the
//! runtime streams container events (CRI `GetContainerEvents`, read by
//! `cri::events` on the `cri-events` thread), each event makes the PLEG inspect
//! the pod it names and diff that one pod the same way, so an exit reaches the sync
//! loop in milliseconds; relisting then slows to a safety net every
//! [`stream::EVENTED_RELIST_PERIOD`], and comes back to every second as soon as the
//! stream fails, or while a pod's inspection has failed (no event may come to ask
//! again). A failed stream is reopened with a back-off, at most
//! [`stream::MAX_STREAM_RETRIES`] times in a row, each (re)opening followed by a
//! catch-up relist; then, or at once when the runtime answers UNIMPLEMENTED, the PLEG
//! relists every second for good (`stream.rs` decides all that). The feature gate
//! `EventedPLEG` (on in litelet, `config::gates::SWITCHED`) turns events off. The
//! view the diffs start from is one map that relists replace and events update, so a
//! change is reported once, whichever saw it first.
//!
//! Unlike upstream, a [`RelistNudge`] brings the next relist forward (at most one per
//! [`MIN_NUDGE_GAP`]) when litelet itself has just started or stopped containers: the
//! change then reaches the pod worker and the API in tens of milliseconds instead of
//! up to a relist period later, with or without events. A nudged relist leaves the
//! periodic ones where they were: were the period counted from it, every container
//! that exits soon after a start would wait out a whole period to be seen, where
//! upstream's fixed schedule sees it half a period later on average.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{at, bounded, never, select, Receiver, Sender, TrySendError};

use crate::cri::events::{self as cri_events, ContainerEvent, StreamItem};
use crate::cri::{CriError, RuntimeClient};
use crate::metrics::RelistCounts;
use crate::runtime::cache::PodStatusCache;
use crate::runtime::inspect;
use crate::runtime::model::{
    ContainerState, PodRuntimeStatus, RunningContainer, RunningPod, SandboxState,
};
use crate::runtime::state::PlegUnhealthy;

pub mod stream;

use stream::{Ending, EventStream};

/// How often the runtime is relisted.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// A relist older than this makes the PLEG unhealthy.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// The same while container events flow and relists are rare (upstream: 10 min).
pub const EVENTED_RELIST_THRESHOLD: Duration = Duration::from_secs(600);
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
    /// after `RELIST_THRESHOLD` since `started`); while container events flow, relists
    /// are rare and the limit is [`EVENTED_RELIST_THRESHOLD`].
    pub fn check(&self, now: Instant, started: Instant) -> Result<(), PlegUnhealthy> {
        let (last, live) = self.relist.at();
        let threshold = if live {
            EVENTED_RELIST_THRESHOLD
        } else {
            RELIST_THRESHOLD
        };
        let since = now.saturating_duration_since(last.unwrap_or(started));
        if since > threshold {
            return Err(PlegUnhealthy { since, threshold });
        }
        Ok(())
    }
}

impl crate::runtime::state::HealthCheck for PlegHealth {
    fn check(&self, now: Instant, started: Instant) -> Result<(), PlegUnhealthy> {
        PlegHealth::check(self, now, started)
    }
}

/// The runtime's pods as the PLEG last saw them, and when they were last relisted:
/// for readers that can live with a list up to a relist period old (housekeeping), so
/// one CRI listing per second is shared instead of repeated, and for [`PlegHealth`].
/// While container events flow, the pods are kept current between relists and count
/// as fresh whatever the relist's age. Cloning shares the same slot.
#[derive(Clone, Default)]
pub struct LastRelist {
    slot: Arc<Mutex<Slot>>,
}

#[derive(Default)]
struct Slot {
    /// When the last relist started, and the pods as of then plus later events.
    pods: Option<(Instant, RelistedPods)>,
    /// Events keep `pods` current.
    live: bool,
}

/// The pods of one relist by UID, shared without copying.
pub type RelistedPods = Arc<HashMap<String, RunningPod>>;

impl LastRelist {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes a relist that started `at`.
    pub(crate) fn publish(&self, at: Instant, pods: RelistedPods) {
        self.lock().pods = Some((at, pods));
    }

    /// Publishes pods changed by events since the last relist (whose time stays).
    fn update(&self, pods: RelistedPods) {
        let mut slot = self.lock();
        if let Some((_, held)) = slot.pods.as_mut() {
            *held = pods;
        }
    }

    /// Says whether events keep the pods current.
    pub(crate) fn set_live(&self, live: bool) {
        self.lock().live = live;
    }

    /// When the last relist started, and whether events flow.
    fn at(&self) -> (Option<Instant>, bool) {
        let slot = self.lock();
        (slot.pods.as_ref().map(|(at, _)| *at), slot.live)
    }

    /// The pods as last seen if events keep them current or the last relist started
    /// at most `max_age` before `now`.
    pub fn fresh(&self, now: Instant, max_age: Duration) -> Option<RelistedPods> {
        let slot = self.lock();
        let (at, pods) = slot.pods.as_ref()?;
        (slot.live || now.saturating_duration_since(*at) <= max_age).then(|| Arc::clone(pods))
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

/// The PLEG's state, owned by the `pleg` thread.
pub struct Pleg {
    runtime: RuntimeClient,
    cache: PodStatusCache,
    events: Sender<PodLifecycleEvent>,
    /// The pods as of the previous relist and the events since (shared with
    /// [`LastRelist`] readers).
    previous: RelistedPods,
    last_relist: LastRelist,
    /// Pods whose status inspection failed last time: retried on the next relist.
    reinspect: HashSet<String>,
    nudge_tx: Sender<()>,
    nudges: Receiver<()>,
    period: Duration,
    /// Whether to read the runtime's container events at all.
    evented: bool,
    /// The wait before reopening a failed event stream the first time.
    retry_wait: Duration,
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
            evented: true,
            retry_wait: stream::FIRST_RETRY_WAIT,
        }
    }

    /// Relists every `period` instead of [`RELIST_PERIOD`] (tests use a long one).
    pub fn with_period(mut self, period: Duration) -> Pleg {
        self.period = period;
        self
    }

    /// Waits `wait` (doubling) before reopening a failed event stream instead of
    /// [`stream::FIRST_RETRY_WAIT`] (tests use a short one).
    pub fn with_stream_retry_wait(mut self, wait: Duration) -> Pleg {
        self.retry_wait = wait;
        self
    }

    /// Relists only, without asking for the runtime's container events.
    pub fn without_events(mut self) -> Pleg {
        self.evented = false;
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

    /// Starts the `pleg` thread (and the `cri-events` reader): it relists at once,
    /// then every period and when nudged, and applies container events as they come,
    /// until `shutdown` disconnects.
    pub fn spawn(self, shutdown: Receiver<()>) -> std::io::Result<JoinHandle<()>> {
        crate::process::spawn_essential("pleg", 256 * 1024, move || self.run(shutdown))
    }

    /// Starts a reader of the container event stream (it ends with an `Ended`
    /// item); false when no thread could be started.
    fn start_reader(&self, items: &Sender<StreamItem>, shutdown: &Receiver<()>) -> bool {
        let reader =
            cri_events::spawn_reader(self.runtime.clone(), items.clone(), shutdown.clone());
        if let Err(err) = &reader {
            log::error!("pleg: cannot start the container event reader: {err}; relisting only");
        }
        reader.is_ok()
    }

    fn run(mut self, shutdown: Receiver<()>) {
        let nudges = self.nudges.clone();
        let (items_tx, items) = bounded(EVENT_CHANNEL_CAPACITY);
        let mut stream = self.open_stream(EventStream::opened, &items_tx, &shutdown);
        self.relist();
        // The last relist of any kind (nudges keep their gap from it), and the last one
        // not nudged (the period counts from it).
        let mut last = Instant::now();
        let mut last_scheduled = last;
        // When a nudged relist is due (none pending: None).
        let mut nudged: Option<Instant> = None;
        loop {
            let due = nudged.map(at).unwrap_or_else(never);
            let next = at(self.next_relist(&stream, last_scheduled));
            let reopen = stream.retry_at().map(at).unwrap_or_else(never);
            // Whether this relist is a scheduled one (or a catch-up): not nudged.
            let scheduled = select! {
                recv(shutdown) -> _ => return,
                recv(nudges) -> _ => {
                    nudged.get_or_insert(last + MIN_NUDGE_GAP);
                    continue;
                }
                recv(items) -> item => {
                    // Never disconnected: this thread holds a sender.
                    let Ok(item) = item else { continue };
                    let Some(outcome) = self.apply_stream(item, &items) else {
                        continue;
                    };
                    let ending;
                    (stream, ending) = self.stream_ended(stream, &outcome);
                    if ending == Ending::Unsupported {
                        continue; // there never was a stream to miss anything
                    }
                    // The stream is over: relist now to catch up on what it missed.
                    true
                }
                recv(reopen) -> _ => {
                    let down = stream.clone();
                    stream = self.open_stream(|now| down.reopened(now), &items_tx, &shutdown);
                    continue;
                }
                recv(next) -> _ => true,
                recv(due) -> _ => false,
            };
            let started = Instant::now();
            self.relist();
            last = Instant::now();
            // A nudged relist keeps the schedule, unless it ran into the next slot.
            if scheduled || self.next_relist(&stream, last_scheduled) <= last {
                last_scheduled = last;
            }
            nudged = None;
            stream = self.went_live(stream, started);
        }
    }

    /// When the next relist is due. A pod whose inspection failed is retried at the
    /// normal period even while events flow: no later event may come to ask again.
    fn next_relist(&self, stream: &EventStream, last: Instant) -> Instant {
        let next = stream.next_relist(last, self.period);
        if self.reinspect.is_empty() {
            next
        } else {
            next.min(last + self.period)
        }
    }

    /// Starts a stream reader if events are wanted: the state `opened` gives, or
    /// [`EventStream::Off`].
    fn open_stream(
        &self,
        opened: impl FnOnce(Instant) -> EventStream,
        items: &Sender<StreamItem>,
        shutdown: &Receiver<()>,
    ) -> EventStream {
        if self.evented && self.start_reader(items, shutdown) {
            opened(Instant::now())
        } else {
            EventStream::Off
        }
    }

    /// After a relist that started at `started`: the stream may now count as live.
    fn went_live(&self, stream: EventStream, started: Instant) -> EventStream {
        let was_live = stream.is_live();
        let stream = stream.after_relist(started);
        if stream.is_live() && !was_live {
            log::info!(
                "pleg: container events flow; relisting every {:?} as a safety net",
                stream::EVENTED_RELIST_PERIOD.max(self.period)
            );
            crate::metrics::evented_pleg_connected();
            self.last_relist.set_live(true);
        }
        stream
    }

    /// Logs and counts how the stream ended, and returns what comes next; the view is
    /// no longer kept current by events.
    fn stream_ended(
        &self,
        stream: EventStream,
        outcome: &Result<(), CriError>,
    ) -> (EventStream, Ending) {
        self.last_relist.set_live(false);
        crate::metrics::evented_pleg_connection_failed();
        let (next, ending) = stream.ended(outcome, Instant::now(), self.retry_wait);
        let why = match outcome {
            Err(err) => err.to_string(),
            Ok(()) => "the runtime closed it".to_owned(),
        };
        let period = self.period;
        match ending {
            Ending::Unsupported => log::info!(
                "pleg: the runtime has no container event stream ({why}); relisting every {period:?}"
            ),
            Ending::Retrying { failures } => log::warn!(
                "pleg: container event stream failed ({why}); relisting every {period:?}, \
                 reopening it in {:?} (attempt {failures} of {})",
                stream::backoff(failures, self.retry_wait),
                stream::MAX_STREAM_RETRIES
            ),
            Ending::GaveUp => log::error!(
                "pleg: container event stream failed ({why}) {} times in a row; giving up on \
                 container events and relisting every {period:?} from now on",
                stream::MAX_STREAM_RETRIES
            ),
        }
        (next, ending)
    }

    /// Applies `first` and whatever else the reader has queued. Returns how the
    /// stream ended if that was among them.
    fn apply_stream(
        &mut self,
        first: StreamItem,
        more: &Receiver<StreamItem>,
    ) -> Option<Result<(), CriError>> {
        let mut batch = Vec::new();
        let mut ended = None;
        for item in std::iter::once(first).chain(more.try_iter()) {
            match item {
                StreamItem::Event(event) => {
                    crate::metrics::evented_pleg_event(event.age(SystemTime::now()));
                    batch.push(event);
                }
                StreamItem::Ended(outcome) => {
                    ended = Some(outcome);
                    break;
                }
            }
        }
        if !batch.is_empty() {
            self.apply_events(&batch);
        }
        ended
    }

    /// Container events: each pod they name is inspected once and diffed against
    /// the view, as a relist would for that pod. An event naming no pod the PLEG can
    /// place makes a full relist.
    pub fn apply_events(&mut self, batch: &[ContainerEvent]) {
        let (pods, unplaced) = pods_of_events(batch, &self.previous);
        if unplaced {
            log::debug!("pleg: an event names no known pod; relisting");
            self.relist();
        }
        let started = Instant::now();
        let mut to_send = Vec::new();
        let count = pods.len();
        for (uid, name, namespace) in pods {
            to_send.extend(self.refresh_pod(&uid, &name, &namespace));
        }
        self.last_relist.update(Arc::clone(&self.previous));
        if log::log_enabled!(log::Level::Debug) {
            let oldest = batch.iter().map(|e| e.age(SystemTime::now())).max();
            log::debug!(
                "pleg: {} container events, oldest {oldest:?} old: {count} pods inspected in {:?}, {} lifecycle events",
                batch.len(),
                started.elapsed(),
                to_send.len()
            );
        }
        self.send(to_send);
    }

    /// Inspects one pod, stores its status and view, and returns the events of the
    /// difference (ContainerChanged left out).
    fn refresh_pod(&mut self, uid: &str, name: &str, namespace: &str) -> Vec<PodLifecycleEvent> {
        let started = Instant::now();
        let status = inspect::pod_status(&self.runtime, uid, name, namespace);
        let new = match &status {
            Ok(status) => pod_view(status),
            Err(err) => {
                log::warn!("pleg: cannot inspect pod {namespace}/{name} ({uid}): {err}");
                self.reinspect.insert(uid.to_owned());
                self.cache.set(uid, status, started);
                return Vec::new();
            }
        };
        self.reinspect.remove(uid);
        let events = compute_events(uid, self.previous.get(uid), new.as_ref());
        self.cache.set(uid, status, started);
        let view = Arc::make_mut(&mut self.previous);
        match new {
            Some(pod) => view.insert(uid.to_owned(), pod),
            None => view.remove(uid),
        };
        events
            .into_iter()
            .filter(|e| e.kind != PodLifecycleEventType::ContainerChanged)
            .collect()
    }

    fn send(&self, events: Vec<PodLifecycleEvent>) {
        for event in events {
            if let Err(TrySendError::Full(event)) = self.events.try_send(event) {
                log::error!("pleg: event channel is full, dropping {event:?}");
            }
        }
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
        self.send(to_send);
        self.reinspect = inspect_again;
        crate::metrics::relisted(started.elapsed(), relist_counts(current.values()));
        self.last_relist.publish(started, Arc::clone(&current));
        self.previous = current;
    }
}

/// The pods a batch of events names, each once in order of first mention, as
/// (uid, name, namespace); and whether some event named no pod: neither its sandbox
/// metadata nor the view knows the container.
fn pods_of_events(
    batch: &[ContainerEvent],
    view: &HashMap<String, RunningPod>,
) -> (Vec<(String, String, String)>, bool) {
    let mut pods: Vec<(String, String, String)> = Vec::new();
    let mut unplaced = false;
    for event in batch {
        let named = match &event.pod {
            Some(p) => Some((p.uid.clone(), p.name.clone(), p.namespace.clone())),
            None => view
                .values()
                .find(|pod| {
                    pod.containers
                        .iter()
                        .chain(&pod.sandboxes)
                        .any(|c| c.id == event.container_id)
                })
                .map(|pod| (pod.uid.clone(), pod.name.clone(), pod.namespace.clone())),
        };
        match named {
            Some(pod) if !pods.iter().any(|p| p.0 == pod.0) => pods.push(pod),
            Some(_) => {}
            None => unplaced = true,
        }
    }
    (pods, unplaced)
}

/// A pod's status in the shape a relist lists it (sandboxes READY → running,
/// otherwise exited); `None` when the runtime has nothing of it.
fn pod_view(status: &PodRuntimeStatus) -> Option<RunningPod> {
    let pod = RunningPod {
        uid: status.uid.clone(),
        name: status.name.clone(),
        namespace: status.namespace.clone(),
        containers: status
            .containers
            .iter()
            .map(|c| RunningContainer {
                id: c.id.clone(),
                name: c.name.clone(),
                state: c.state,
            })
            .collect(),
        sandboxes: status
            .sandboxes
            .iter()
            .map(|s| RunningContainer {
                id: s.id.clone(),
                name: String::new(),
                state: match s.state {
                    SandboxState::Ready => ContainerState::Running,
                    SandboxState::NotReady | SandboxState::Unknown => ContainerState::Exited,
                },
            })
            .collect(),
    };
    (!pod.is_empty()).then_some(pod)
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

    fn event(id: &str, pod: Option<&str>) -> ContainerEvent {
        ContainerEvent {
            container_id: id.into(),
            kind: cri_events::ContainerEventKind::Stopped,
            created_at: 0,
            pod: pod.map(|uid| cri_events::EventPod {
                uid: uid.into(),
                name: format!("name-{uid}"),
                namespace: "ns".into(),
            }),
        }
    }

    #[test]
    fn events_name_their_pods_once_from_the_sandbox_or_the_view() {
        let mut known = pod(&[("c-known", ContainerState::Running)]);
        known.uid = "u-known".into();
        known.name = "known".into();
        let view = HashMap::from([("u-known".to_owned(), known)]);
        let batch = [
            event("c1", Some("u1")),
            event("c2", Some("u1")),
            event("c-known", None),
            event("c3", Some("u2")),
        ];
        let (pods, unplaced) = pods_of_events(&batch, &view);
        let uids: Vec<&str> = pods.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(uids, ["u1", "u-known", "u2"]);
        assert_eq!(pods[1].1, "known");
        assert!(!unplaced);
        let (pods, unplaced) = pods_of_events(&[event("c-stranger", None)], &view);
        assert!(pods.is_empty());
        assert!(unplaced, "an event nobody can place asks for a relist");
    }

    #[test]
    fn a_pod_status_becomes_the_view_a_relist_would_list() {
        use crate::runtime::model::{ContainerStatus, SandboxStatus};
        let status = PodRuntimeStatus {
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
            sandboxes: vec![
                SandboxStatus {
                    id: "s2".into(),
                    state: SandboxState::Ready,
                    ..Default::default()
                },
                SandboxStatus {
                    id: "s1".into(),
                    state: SandboxState::NotReady,
                    ..Default::default()
                },
            ],
            containers: vec![ContainerStatus {
                id: "c".into(),
                name: "main".into(),
                state: ContainerState::Exited,
                ..Default::default()
            }],
            ..Default::default()
        };
        let view = pod_view(&status).expect("something exists");
        let states: Vec<(&str, ContainerState)> = view
            .sandboxes
            .iter()
            .chain(&view.containers)
            .map(|c| (c.id.as_str(), c.state))
            .collect();
        assert_eq!(
            states,
            [
                ("s2", ContainerState::Running),
                ("s1", ContainerState::Exited),
                ("c", ContainerState::Exited)
            ]
        );
        assert_eq!(view.containers[0].name, "main");
        let gone = PodRuntimeStatus {
            uid: "u".into(),
            ..Default::default()
        };
        assert_eq!(pod_view(&gone), None);
    }

    #[test]
    fn while_events_flow_the_pods_stay_fresh_and_old_relists_healthy() {
        let shared = LastRelist::default();
        let health = PlegHealth {
            relist: shared.clone(),
        };
        let t0 = Instant::now();
        shared.publish(t0, RelistedPods::default());
        let later = t0 + Duration::from_secs(400);
        assert!(shared.fresh(later, Duration::from_secs(2)).is_none());
        assert!(health.check(later, t0).is_err());
        shared.set_live(true);
        assert!(shared.fresh(later, Duration::from_secs(2)).is_some());
        assert!(health.check(later, t0).is_ok());
        assert!(health
            .check(t0 + EVENTED_RELIST_THRESHOLD + Duration::from_secs(1), t0)
            .is_err());
        // Events changed a pod: readers see it, the relist's time stays.
        let mut changed = HashMap::new();
        changed.insert("u".to_owned(), pod(&[("a", ContainerState::Running)]));
        shared.update(Arc::new(changed));
        assert!(shared
            .fresh(later, Duration::ZERO)
            .unwrap()
            .contains_key("u"));
        assert_eq!(shared.at(), (Some(t0), true));
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
