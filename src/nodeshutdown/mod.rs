//! Graceful node shutdown (upstream `pkg/kubelet/nodeshutdown`): when systemd-logind
//! announces a shutdown or reboot, stop the pods in priority order within the
//! configured grace periods, report them and the node, and only then let the machine
//! go down.
//!
//! - [`config`]: `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
//!   `shutdownGracePeriodByPodPriority`, their validation and the priority groups (pure);
//! - [`plan`]: groups of pods, grace periods, the status of a pod killed for the
//!   shutdown, the admission and node messages (pure);
//! - [`state`]: the shared "shutting down" flag ([`ShutdownState`]): admission handler
//!   for the sync loop, health for the `node` thread;
//! - [`logind`]: the [`Logind`] seam, the inhibitor lock, the logind drop-in;
//! - [`dbus_logind`]: [`Logind`] over the system D-Bus (production);
//! - [`manager`]: the `node-shutdown` thread (the I/O shell).
//!
//! Layering: beside eviction, below the kubelet (`tests/tidy.rs`). Reads
//! `pod_workers` (kills), `status` (the statuses are out before the lock goes),
//! `admission` (the handler it implements), `node` (health); the desired pods come as
//! a closure over the kubelet's snapshot. Only `agent` and `config` import it.
//! Design note: `docs/node-shutdown.md`.

pub mod config;
pub mod dbus_logind;
pub mod logind;
pub mod manager;
pub mod plan;
pub mod state;

pub use config::{PriorityPeriod, ShutdownConfig};
pub use logind::{InhibitLock, Logind, LogindError};
pub use manager::ShutdownManager;
pub use state::ShutdownState;
