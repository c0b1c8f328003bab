//! The fake runtime's container event stream (CRI `GetContainerEvents`), off by
//! default as in containerd 1.6: the call then fails with UNIMPLEMENTED.
//!
//! Once a test turns it on ([`super::FakeCri::serve_events`]), every state change the
//! rules in `state.rs` make (sandbox run, stop and removal; container create, start,
//! exit and removal) goes to each open stream as containerd 1.7 sends it: the
//! container (or sandbox) ID, the event type, the time, the sandbox's status and the
//! statuses of the sandbox's containers. A timer thread applies timed exits while
//! events are on, since no call may come to apply them lazily.
//! [`super::FakeCri::break_event_streams`] ends every open stream with UNAVAILABLE,
//! as a runtime restart does.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{unbounded, Receiver, Sender};
use litelet::cri::pb;

use super::state::FakeState;

pub use pb::ContainerEventType as EventType;

/// The open streams and whether the runtime has the stream at all.
#[derive(Default)]
pub struct EventHub {
    pub(super) enabled: bool,
    subscribers: Vec<Sender<pb::ContainerEventResponse>>,
    /// Events sent so far, for assertions.
    pub sent: usize,
    /// Streams opened so far (GetContainerEvents calls that were answered).
    pub opened: usize,
    /// GetContainerEvents calls refused with UNIMPLEMENTED (events off).
    pub refused: usize,
}

impl EventHub {
    /// A new stream's receiving end.
    pub(super) fn subscribe(&mut self) -> Receiver<pb::ContainerEventResponse> {
        let (tx, rx) = unbounded();
        self.subscribers.push(tx);
        self.opened += 1;
        rx
    }

    /// Ends every open stream.
    pub(super) fn disconnect_all(&mut self) {
        self.subscribers.clear();
    }

    fn broadcast(&mut self, event: pb::ContainerEventResponse) {
        self.subscribers.retain(|s| s.send(event.clone()).is_ok());
        self.sent += 1;
    }

    fn wanted(&self) -> bool {
        self.enabled && !self.subscribers.is_empty()
    }
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

impl FakeState {
    /// Sends an event about `id` (a container, or a sandbox when it is one) in
    /// `sandbox_id`, with the sandbox's state as it is now.
    pub(super) fn emit(&mut self, id: &str, sandbox_id: &str, kind: EventType) {
        if !self.events.wanted() {
            return;
        }
        let sandbox = self
            .pod_sandbox_status(sandbox_id)
            .ok()
            .and_then(|r| r.status.into_option());
        let statuses = self
            .containers
            .iter()
            .filter(|(_, c)| c.sandbox_id == sandbox_id)
            .filter_map(|(cid, _)| self.container_status(cid).ok()?.status.into_option())
            .collect();
        let event = pb::ContainerEventResponse {
            container_id: id.to_owned(),
            container_event_type: kind.into(),
            created_at: now_nanos(),
            pod_sandbox_status: sandbox.into(),
            containers_statuses: statuses,
            ..Default::default()
        };
        self.events.broadcast(event);
    }
}

/// Applies timed exits every 10 ms while the state lives and events are on.
pub(super) fn spawn_exit_timer(state: Weak<Mutex<FakeState>>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(10));
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut state = lock(&state);
        if !state.events.enabled {
            return;
        }
        state.apply_timed_exits();
    });
}

fn lock(state: &Arc<Mutex<FakeState>>) -> std::sync::MutexGuard<'_, FakeState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}
