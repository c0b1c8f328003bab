//! Liveness, readiness and startup probes (upstream `pkg/kubelet/prober`); what they
//! share with lifecycle hooks (attempt outcome, HTTP GET) is below in `crate::probe`.
//!
//! Threads: one `probe-timer` thread owns every probe's state (a min-heap of due
//! attempts) and hands attempts to a small pool of `probe-N` threads that grows while
//! attempts wait for a thread, up to [`ProberConfig::max_threads`], and shrinks when
//! idle; the first gRPC probe also starts one grpcio completion-queue thread. Callers
//! (sync loop, pod workers) talk to the timer thread through a [`ProbeManager`]
//! handle; result changes flow back as [`ProbeUpdate`]s on one channel, and the latest
//! results are readable at any time through the handle (one small lock, never held
//! across I/O).
//!
//! Files: `manager.rs` (the handle and the timer loop), `pool.rs` (attempt threads),
//! `worker.rs` (pure per-probe decisions: timing, thresholds, startup gating),
//! `results.rs` (the shared results cache), `metrics.rs` (`/metrics/probes` counters), `action.rs` (turns a probe spec into an
//! action and runs it), and one file per kind: `exec.rs`, `tcp.rs`, `grpc.rs` (with
//! the generated `grpc_health` code); HTTP GET is `crate::probe::http`, shared with hooks. `docs/prober.md` explains the
//! design and its measured footprint.

mod action;
mod exec;
mod grpc;
pub mod grpc_health;
mod manager;
pub mod metrics;
mod pool;
mod results;
mod tcp;
#[cfg(test)]
pub(crate) mod testing;
pub mod worker;

use std::time::Duration;

pub use crate::probe::{Attempt, MAX_OUTPUT};
pub use manager::{ProbeManager, ProberStats};
pub use metrics::ProbeMetrics;
pub use results::ProbeUpdate;

/// The user agent of probe requests (upstream sends `kube-probe/<major>.<minor>`).
pub const PROBE_USER_AGENT: &str = "kube-probe/litelet";

/// Which of a container's three probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Readiness,
        ProbeKind::Liveness,
    ];

    /// As upstream names it in events: "Liveness", "Readiness", "Startup".
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe of this kind, if it has one.
    pub fn of(self, container: &crate::api::pod::Container) -> Option<&crate::api::pod::Probe> {
        match self {
            ProbeKind::Liveness => container.liveness_probe.as_ref(),
            ProbeKind::Readiness => container.readiness_probe.as_ref(),
            ProbeKind::Startup => container.startup_probe.as_ref(),
        }
    }
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tunables of the prober threads.
#[derive(Clone, Debug)]
pub struct ProberConfig {
    /// The most attempt threads alive at once; more due attempts wait their turn.
    pub max_threads: usize,
    /// How long attempts wait for a busy pool before another thread is started.
    pub grow_after: Duration,
    /// Stack size of the timer and attempt threads.
    pub stack_size: usize,
    /// An attempt thread idle this long is retired (one is always kept).
    pub idle_timeout: Duration,
}

impl Default for ProberConfig {
    fn default() -> Self {
        ProberConfig {
            max_threads: 32,
            grow_after: Duration::from_millis(100),
            stack_size: 256 * 1024,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Failures of the prober itself (probe failures are results, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    #[error("spawn prober thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
}
