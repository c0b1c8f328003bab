//! In-place pod resize (issue 8, target API 1.33+): the allocation of every admitted
//! pod, resize admission, the decision per container, the order of cgroup and CRI
//! writes, and what the status reports. Design note: `docs/resize.md`.
//!
//! - pure: [`allocation`] (allocated resources, the allocated pod), [`admission`]
//!   (Infeasible / Deferred / fits);
//! - state and I/O: [`checkpoint`] (the atomic allocation file under `--root-dir`),
//!   [`manager`] ([`ResizeManager`]: allocations, conditions, admission lock),
//!   [`sync`] (the kubelet's pod sync around the runtime sync).
//!
//! The per-container decisions, the write order and the status report the runtime's
//! sync needs are below, in `crate::runtime::resize` (values, compute, plan, apply,
//! report), so that the runtime never imports this module.
//!
//! Threads: the sync loop (pod additions, retries, housekeeping) and pod workers
//! (resize admission, actuation, status); see each file. No thread or channel of its
//! own.

pub mod admission;
pub mod allocation;
pub mod checkpoint;
pub mod manager;
pub mod sync;

pub use admission::{PendingReason, Verdict};
pub use allocation::PodAllocation;
pub use checkpoint::CheckpointError;
pub use manager::{Actuation, ResizeConfig, ResizeEvent, ResizeManager};
