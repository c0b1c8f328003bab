//! Whether the node is shutting down, shared: the `node-shutdown` thread sets it, the
//! sync loop's admission reads it ([`ShutdownState`] is a `PodAdmitHandler`) and so
//! does the `node` thread's health closure (Ready false, "node is shutting down").
//! Setting it also wakes the `node` thread, so the NotReady status goes out at once
//! rather than at the next `nodeStatusUpdateFrequency` tick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::admission::{PodAdmitHandler, Rejection};
use crate::api::pod::Pod;
use crate::node::inputs::HealthFn;

use super::plan::{NOT_ADMITTED_MESSAGE, NOT_ADMITTED_REASON};

/// The shared flag (cheap to clone).
#[derive(Clone)]
pub struct ShutdownState {
    shutting_down: Arc<AtomicBool>,
    /// Wakes the `node` thread (capacity 1: one pending wake-up is enough).
    node_wake: Sender<()>,
    node_wake_rx: Receiver<()>,
}

impl Default for ShutdownState {
    fn default() -> Self {
        let (node_wake, node_wake_rx) = crossbeam_channel::bounded(1);
        ShutdownState {
            shutting_down: Arc::new(AtomicBool::new(false)),
            node_wake,
            node_wake_rx,
        }
    }
}

impl ShutdownState {
    pub fn new() -> ShutdownState {
        ShutdownState::default()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Sets the flag and wakes the `node` thread when it changed.
    pub fn set(&self, shutting_down: bool) {
        if self.shutting_down.swap(shutting_down, Ordering::SeqCst) != shutting_down {
            let _ = self.node_wake.try_send(());
        }
    }

    /// The wake-ups for the `node` thread (`NodeInputs::sync_now`).
    pub fn node_wake(&self) -> Receiver<()> {
        self.node_wake_rx.clone()
    }

    /// Wraps the `node` thread's health function so Ready turns false while the node
    /// shuts down.
    pub fn wrap_health(&self, mut inner: HealthFn) -> HealthFn {
        let me = self.clone();
        Box::new(move || {
            let mut h = inner();
            h.shutting_down = me.is_shutting_down();
            h
        })
    }
}

impl PodAdmitHandler for ShutdownState {
    /// Every pod is refused while the node shuts down (upstream's Admit).
    fn admit(&self, _pod: &Pod) -> Result<(), Rejection> {
        if !self.is_shutting_down() {
            return Ok(());
        }
        Err(Rejection {
            reason: NOT_ADMITTED_REASON.to_owned(),
            message: NOT_ADMITTED_MESSAGE.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::status::Health;

    #[test]
    fn admission_refuses_while_shutting_down_and_admits_after_a_cancel() {
        let state = ShutdownState::new();
        let pod = Pod::default();
        assert!(state.admit(&pod).is_ok());
        state.set(true);
        let r = state.admit(&pod).unwrap_err();
        assert_eq!(r.reason, "NodeShutdown");
        assert_eq!(r.message, "Pod was rejected as the node is shutting down.");
        state.set(false);
        assert!(state.admit(&pod).is_ok());
    }

    #[test]
    fn health_reports_the_shutdown_and_the_node_thread_is_woken_once_per_change() {
        let state = ShutdownState::new();
        let wake = state.node_wake();
        let mut health = state.wrap_health(Box::new(Health::default));
        assert!(!health().shutting_down);
        state.set(true);
        state.set(true);
        assert!(health().shutting_down);
        assert!(wake.try_recv().is_ok());
        assert!(wake.try_recv().is_err(), "one wake-up per change");
        state.set(false);
        assert!(!health().shutting_down);
        assert!(wake.try_recv().is_ok());
    }
}
