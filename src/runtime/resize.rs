//! The pure decisions and the thin shell of an in-place resize that the runtime's pod
//! sync needs (design note: `docs/resize.md`): [`values`] (cgroup-unit values and
//! conversions), [`compute`] (per container: update in place, restart, or nothing; the
//! body of `runtime::actions`' resize seam), [`plan`] (the ordered writes), [`apply`]
//! (SyncPod step 9 over `PodCgroupManager` and CRI) and [`report`]
//! (`allocatedResources` and `resources` in container statuses).
//!
//! They live inside the runtime, not in the top-level `resize` module, because the
//! runtime's sync calls them and that module (allocations, admission, conditions) sits
//! above the runtime: the layers stay one-way.

pub mod apply;
pub mod compute;
pub mod plan;
pub mod report;
pub mod values;

/// The waiting-reason-style name of a failed resize step in a `SyncOutcome`.
pub const RESIZE_ERROR: &str = "ResizeError";
