//! In-place pod resize (issue 8, target API 1.33+): the allocation of every admitted
//! pod, resize admission, the decision per container, the order of cgroup and CRI
//! writes, and what the status reports. Design note: `docs/resize.md`.
//!
//! - pure: [`allocation`] (allocated resources, the allocated pod), [`admission`]
//!   (Infeasible / Deferred / fits), [`values`] (cgroup-unit values and conversions),
//!   [`compute`] (per container: update in place, restart, or nothing; the body of
//!   `runtime::actions`' resize seam), [`plan`] (the ordered writes), [`report`]
//!   (`allocatedResources` and `resources` in container statuses);
//! - state and I/O: [`checkpoint`] (the atomic allocation file under `--root-dir`),
//!   [`manager`] ([`ResizeManager`]: allocations, conditions, admission lock),
//!   [`apply`] (SyncPod step 9 over `PodCgroupManager` and CRI), [`sync`] (the
//!   kubelet's pod sync around the runtime sync).
//!
//! Threads: the sync loop (pod additions, retries, housekeeping) and pod workers
//! (resize admission, actuation, status); see each file. No thread or channel of its
//! own.

pub mod admission;
pub mod allocation;
pub mod apply;
pub mod checkpoint;
pub mod compute;
pub mod manager;
pub mod plan;
pub mod report;
pub mod sync;
pub mod values;

pub use admission::{PendingReason, Verdict};
pub use allocation::PodAllocation;
pub use checkpoint::CheckpointError;
pub use manager::{Actuation, ResizeConfig, ResizeEvent, ResizeManager};
