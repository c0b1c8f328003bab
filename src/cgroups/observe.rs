//! Timing of the cgroup manager's operations for `kubelet_cgroup_manager_duration_seconds`:
//! every create, update and destroy is timed (a `Timed` guard, until dropped) and handed to
//! the process's observer when one is installed ([`observe_operations`]; the agent
//! installs the metrics registry's, since this layer knows no metrics).

/// What the cgroup manager did, as upstream's `operation_type` label names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Destroy,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Destroy => "destroy",
        }
    }
}

static OBSERVER: std::sync::OnceLock<fn(&'static str, std::time::Duration)> =
    std::sync::OnceLock::new();

/// Installs the process's operation observer (the first call wins); it gets each
/// operation's [`Operation::as_str`] and how long it took.
pub fn observe_operations(observer: fn(&'static str, std::time::Duration)) {
    let _ = OBSERVER.set(observer);
}

/// Times one operation until dropped, then hands it to the observer.
pub(super) struct Timed {
    operation: Operation,
    started: std::time::Instant,
}

impl Timed {
    pub(super) fn new(operation: Operation) -> Timed {
        Timed {
            operation,
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if let Some(observer) = OBSERVER.get() {
            observer(self.operation.as_str(), self.started.elapsed());
        }
    }
}
