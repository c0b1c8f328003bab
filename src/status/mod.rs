//! Pod status: what the kubelet reports in `pods/<name>/status` (upstream
//! `pkg/kubelet/status` plus the status half of `kubelet_pods.go`).
//!
//! This half is pure: every function takes its inputs as arguments (the pod, the
//! runtime's view of it, the previous status, probe results, the last sync's errors and
//! `now`) and returns a value. No clock, no channel, no I/O. Pod workers call
//! [`generate_pod_status`] after each sync; the status manager (`manager.rs`, `sync.rs`)
//! caches the result, compares it with [`is_status_equal_by_kubelet`] after
//! [`normalize_status`], and before each PATCH folds it into the API copy with
//! [`merge_pod_status`].
//!
//! Files, one concern each:
//! - `containers.rs`: API container statuses from the runtime model.
//! - `phase.rs`: the pod phase from the container statuses.
//! - `conditions.rs`: kubelet-owned pod conditions, ownership, transition times.
//! - `input.rs`: that input struct (with the probe results and an eviction), read
//!   by `generate.rs` and `containers.rs`.
//! - `generate.rs`: the whole status of one pod, from one input struct.
//! - `normalize.rs`: canonical form (message caps, sort orders) and equality.
//! - `merge.rs`: the kubelet's status laid over the API copy before a PATCH.
//! - `terminate.rs`: the final status written once a pod's containers are gone.
//! - `transition.rs`: which container state changes a new status may make.
//!
//! The I/O half (the status manager):
//! - `cache.rs`: the versioned per-pod status cache (pure, `now` passed in).
//! - `manager.rs`: [`StatusManager`], the handle every thread calls.
//! - `shared.rs`: what the handles and the `status` thread share (the cache's
//!   mutex, the hooks, the timing).
//! - `sync.rs`: the `status` thread that GETs, merges, PATCHes and deletes.
//!
//! Invariant: nothing in this module reads a clock, a file, a channel or the network.
//! Exceptions: `manager.rs` (reads the clock, signals a channel) and `sync.rs`
//! (the network), the thin shell around the rest.

pub mod cache;
pub mod conditions;
pub mod containers;
pub mod generate;
pub mod input;
pub mod manager;
pub mod merge;
pub mod normalize;
pub mod phase;
mod shared;
mod sync;
pub mod terminate;
pub mod transition;

pub use conditions::{is_owned_by_kubelet, is_shared_with_kubelet};
pub use containers::ProbeResults;
pub use generate::{generate_pod_status, Eviction, PodStatusInput};
pub use manager::{PodHooks, StatusManager};
pub use merge::merge_pod_status;
pub use normalize::{is_status_equal_by_kubelet, normalize_status};
pub use phase::pod_phase;
pub use terminate::terminated_status;
pub use transition::{check_container_state_transition, TransitionError};

pub use crate::api::pod::is_terminal_phase;
use crate::api::pod::PodStatus;

/// True when the status' phase is terminal.
pub fn has_terminal_phase(status: &PodStatus) -> bool {
    is_terminal_phase(status.phase.as_ref())
}
