//! Whether the runtime and the pod network are usable (upstream runtimeState and
//! updateRuntimeUp).
//!
//! The `runtime-up` thread asks CRI Status every 5 s and records the answer; the sync
//! loop reads [`RuntimeState::runtime_errors`] before each iteration (no work while it
//! is not empty), pod syncs read [`RuntimeState::network_error`], and the node status
//! turns both into the Ready condition.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, tick, Receiver};

use crate::cri::CriError;
use crate::runtime::manager::{RuntimeConditions, RuntimeFeatures, RuntimeManager};

/// How often the runtime is asked for its status.
pub const RUNTIME_UP_PERIOD: Duration = Duration::from_secs(5);
/// The runtime counts as down when its last good status is older than this.
pub const MAX_WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Inner {
    last_ok: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    /// From the last good Status answer.
    features: RuntimeFeatures,
}

/// The PLEG has not relisted for longer than its threshold (upstream's
/// `GenericPLEG.Healthy`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pleg is not healthy: pleg was last seen active {since:?} ago; threshold is {threshold:?}")]
pub struct PlegUnhealthy {
    /// Since the last relist (or since start-up when none happened yet).
    pub since: Duration,
    pub threshold: Duration,
}

/// A health check that gates pod work besides the runtime's own status: the PLEG's
/// (`pleg::PlegHealth`). A trait so that this module, below the PLEG, does not import it.
pub trait HealthCheck: Send + Sync {
    /// Fails when unhealthy at `now`; `started` is when litelet started.
    fn check(&self, now: Instant, started: Instant) -> Result<(), PlegUnhealthy>;
}

/// Shared by the runtime-up thread (writer), the sync loop, pod workers and the node.
#[derive(Clone)]
pub struct RuntimeState {
    inner: Arc<Mutex<Inner>>,
    pleg: Arc<dyn HealthCheck>,
    started: Instant,
}

impl RuntimeState {
    pub fn new(pleg: impl HealthCheck + 'static) -> RuntimeState {
        RuntimeState {
            inner: Arc::new(Mutex::new(Inner {
                last_ok: None,
                runtime_error: None,
                network_error: Some("network state unknown".into()),
                features: RuntimeFeatures::default(),
            })),
            pleg: Arc::new(pleg),
            started: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one Status answer (upstream updateRuntimeUp).
    pub fn record(&self, answer: Result<RuntimeConditions, CriError>, now: Instant) {
        let mut inner = self.lock();
        let conditions = match answer {
            Ok(c) => c,
            Err(err) => {
                log::warn!("container runtime status check failed: {err}");
                return;
            }
        };
        inner.features = conditions.features.clone();
        inner.network_error = (!conditions.network_ready).then(|| {
            let detail = conditions
                .problems
                .iter()
                .find(|p| p.starts_with("NetworkReady"))
                .cloned()
                .unwrap_or_default();
            format!("container runtime network not ready: {detail}")
        });
        if !conditions.runtime_ready {
            let detail = conditions
                .problems
                .iter()
                .find(|p| p.starts_with("RuntimeReady"))
                .cloned()
                .unwrap_or_default();
            inner.runtime_error = Some(format!("container runtime not ready: {detail}"));
            return;
        }
        inner.runtime_error = None;
        inner.last_ok = Some(now);
    }

    /// Everything that stops pod work: runtime not checked yet or down, runtime not
    /// ready, PLEG unhealthy.
    pub fn runtime_errors(&self, now: Instant) -> Vec<String> {
        let inner = self.lock();
        let mut errors = Vec::new();
        match inner.last_ok {
            None => {
                errors.push("container runtime status check may not have completed yet".to_owned())
            }
            Some(at) if now.saturating_duration_since(at) >= MAX_WAIT_FOR_RUNTIME => {
                errors.push("container runtime is down".to_owned())
            }
            _ => {}
        }
        if let Err(err) = self.pleg.check(now, self.started) {
            errors.push(format!("PLEG is not healthy: {err}"));
        }
        errors.extend(inner.runtime_error.clone());
        errors
    }

    /// The runtime's handlers and features as last reported (admission reads them).
    pub fn features(&self) -> RuntimeFeatures {
        self.lock().features.clone()
    }

    /// Why pods that need the pod network cannot start now.
    pub fn network_error(&self) -> Option<String> {
        self.lock().network_error.clone()
    }

    /// Starts the `runtime-up` thread.
    pub fn spawn_updater(
        &self,
        manager: Arc<RuntimeManager>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<JoinHandle<()>> {
        let state = self.clone();
        crate::process::spawn_essential("runtime-up", 256 * 1024, move || {
            let ticker = tick(RUNTIME_UP_PERIOD);
            loop {
                state.record(manager.runtime_conditions(), Instant::now());
                select! {
                    recv(shutdown) -> _ => return,
                    recv(ticker) -> _ => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::PlegHealth;

    fn conditions(runtime: bool, network: bool) -> RuntimeConditions {
        RuntimeConditions {
            runtime_ready: runtime,
            network_ready: network,
            problems: [
                (!runtime).then(|| "RuntimeReady=false reason:x message:y".to_owned()),
                (!network).then(|| {
                    "NetworkReady=false reason:NetworkPluginNotReady message:cni".to_owned()
                }),
            ]
            .into_iter()
            .flatten()
            .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn runtime_gate() {
        let state = RuntimeState::new(PlegHealth::default());
        let now = Instant::now();
        assert_eq!(
            state.runtime_errors(now),
            ["container runtime status check may not have completed yet"]
        );
        assert_eq!(
            state.network_error().as_deref(),
            Some("network state unknown")
        );

        state.record(Ok(conditions(true, false)), now);
        assert!(state.runtime_errors(now).is_empty());
        assert!(state
            .network_error()
            .unwrap()
            .contains("NetworkPluginNotReady"));

        state.record(Ok(conditions(false, true)), now + Duration::from_secs(1));
        assert!(state.runtime_errors(now)[0].starts_with("container runtime not ready"));
        assert!(state.network_error().is_none());

        state.record(Ok(conditions(true, true)), now);
        assert!(state
            .runtime_errors(now + MAX_WAIT_FOR_RUNTIME)
            .contains(&"container runtime is down".to_owned()));
        let unavailable = CriError::Unavailable {
            op: "Status",
            message: "unavailable".into(),
        };
        state.record(Err(unavailable), now + MAX_WAIT_FOR_RUNTIME);
        assert!(
            !state.runtime_errors(now + MAX_WAIT_FOR_RUNTIME).is_empty(),
            "a failed check does not refresh"
        );
    }
}
