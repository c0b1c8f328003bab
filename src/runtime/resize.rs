//! In-place pod resize, all of it (target API 1.33+; upstream spreads it over
//! `pkg/kubelet/allocation`, `kuberuntime`'s `computePodResizeAction` and
//! `doPodResizeAction`, and status generation). Design note: `docs/resize.md`.
//!
//! One entry point per step it takes part in:
//!
//! | step (thread)                               | entry point                              |
//! |---------------------------------------------|------------------------------------------|
//! | pod additions (sync loop)                   | [`ResizeManager::admission_batch`]       |
//! | Deferred retries (sync loop, sync tick)     | [`ResizeManager::take_retries`]          |
//! | housekeeping (sync loop)                    | [`ResizeManager::retain`]                |
//! | resize admission (pod worker, before sync)  | [`PodResize::admit`]                     |
//! | status generation (pod worker)              | [`PodResize::for_status`], [`report`]    |
//! | computePodActions (pod worker)              | [`compute::container_resize`]            |
//! | SyncPod step 9 (pod worker)                 | [`apply::resize_pod`]                    |
//! | after the runtime sync (pod worker)         | [`PodResize::after_runtime_sync`]        |
//! | a terminated pod (pod worker)               | [`PodResize::forget`]                    |
//!
//! Files: pure — [`allocation`] (allocated resources, the allocated pod), [`admission`]
//! (Infeasible / Deferred / fits), [`values`] (cgroup-unit values), [`compute`] (per
//! container: in place, restart or nothing), [`plan`] (the ordered writes), [`report`]
//! (`allocatedResources` and `resources`); state and I/O — [`checkpoint`] (the atomic
//! allocation file under `--root-dir`), [`manager`] ([`ResizeManager`]: allocations,
//! conditions, the admission lock), [`apply`] (step 9 over `PodCgroupManager` and
//! CRI), [`pod_sync`] ([`PodResize`]).
//!
//! It lives in the runtime because the runtime's sync (steps 4 and 9) and status
//! generation call it. The one thing it needs from above, whether a pod fits on the
//! node beside the others, is pod admission's and comes in through [`NodeFit`].
//! Nothing here imports `runtime::actions` or `runtime::sync`; they import this.
//!
//! Threads: the sync loop and pod workers; no thread or channel of its own.

pub mod admission;
pub mod allocation;
pub mod apply;
pub mod checkpoint;
pub mod compute;
pub mod manager;
pub mod plan;
pub mod pod_sync;
pub mod report;
pub mod values;

pub use admission::{NodeFit, PendingReason, Verdict};
pub use allocation::PodAllocation;
pub use checkpoint::CheckpointError;
pub use manager::{Actuation, AdmissionBatch, ResizeConfig, ResizeEvent, ResizeManager};
pub use pod_sync::PodResize;

/// The waiting-reason-style name of a failed resize step in a `SyncOutcome`.
pub const RESIZE_ERROR: &str = "ResizeError";
