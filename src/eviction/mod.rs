//! Node-pressure eviction (upstream `pkg/kubelet/eviction`):
//! watch memory, disk and PID signals from the `stats` thread's samples, report the
//! MemoryPressure/DiskPressure/PIDPressure node conditions, refuse new pods under
//! pressure, reclaim dead containers and unused images, and evict pods one at a time.
//!
//! - [`config`]: thresholds from `--eviction-*` flags and config fields (pure);
//! - [`signals`]: observations and per-pod usage from a [`crate::stats::Sample`] (pure);
//! - [`decide`]: thresholds met, grace periods, minimum reclaim, condition transition
//!   period — one round as [`decide::State::step`] (pure);
//! - [`rank`]: eviction order and message (pure);
//! - [`local_storage`]: emptyDir sizeLimit and ephemeral-storage limits (pure);
//! - [`admit`]: admission under pressure and the shared [`Pressure`];
//! - [`manager`]: the `eviction` thread (the I/O shell).
//!
//! Layering: beside resize, below the kubelet (`tests/tidy.rs`). Reads `stats`, `node`
//! (threshold syntax, the health closure), `pod_workers` (kills), `runtime` (GC),
//! `admission` (the `PodAdmitHandler` it implements); the desired pods come as a
//! closure over the kubelet's snapshot. Only `agent` imports this module.

pub mod admit;
pub mod config;
pub mod decide;
pub mod local_storage;
pub mod manager;
pub mod rank;
pub mod signals;

pub use admit::Pressure;
pub use config::{EvictionConfig, EvictionConfigError, EvictionFlags};
pub use manager::EvictionManager;

#[cfg(test)]
mod tests;
