//! The outcome of one SyncPod or KillPod (upstream PodSyncResult): one entry per step,
//! each with the waiting reason it failed with.
//!
//! Returned by value to the pod worker, which hands the per-container failures to
//! status generation (as waiting reasons) and decides the requeue delay. Nothing is
//! lost on the way: a step's failure stays in the outcome until the caller reads it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::images::manager::{EnsureError, IMAGE_PULL_BACK_OFF};

/// Waiting reasons a sync can leave on a container (the sync step's error name);
/// those of the image come from `images::manager`.
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
pub const PRE_START_HOOK_ERROR: &str = "PreStartHookError";
pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";
pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";

/// Why the last sync could not start a container (upstream's reason cache entry):
/// `reason` is the short error name (see the constants above; status generation turns it into the
/// container's Waiting state), `message` the detail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitingReason {
    pub reason: String,
    pub message: String,
}

impl WaitingReason {
    pub fn new(reason: &str, message: &str) -> Self {
        Self {
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// The kind of step (upstream SyncAction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncAction {
    StartContainer,
    KillContainer,
    CreatePodSandbox,
    ConfigPodSandbox,
    KillPodSandbox,
    ResizeContainers,
}

/// Why a step failed: a waiting reason (e.g. "ErrImagePull") and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
    /// When a back-off decides the next attempt: how long until it may be made.
    pub retry_in: Option<Duration>,
}

impl Failure {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
            retry_in: None,
        }
    }

    /// The same failure, whose step may be tried again in `delay`.
    pub fn retry_in(self, delay: Duration) -> Failure {
        Failure {
            retry_in: Some(delay),
            ..self
        }
    }
}

impl From<EnsureError> for Failure {
    fn from(err: EnsureError) -> Failure {
        Failure {
            reason: err.reason(),
            retry_in: err.retry_in(),
            message: err.to_string(),
        }
    }
}

/// One step and how it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepResult {
    pub action: SyncAction,
    /// The container name, the pod's full name or a sandbox ID.
    pub target: String,
    pub failure: Option<Failure>,
}

/// All steps of one sync, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    pub steps: Vec<StepResult>,
}

impl SyncOutcome {
    pub fn ok(&mut self, action: SyncAction, target: impl Into<String>) {
        self.steps.push(StepResult {
            action,
            target: target.into(),
            failure: None,
        });
    }

    pub fn fail(&mut self, action: SyncAction, target: impl Into<String>, failure: Failure) {
        self.steps.push(StepResult {
            action,
            target: target.into(),
            failure: Some(failure),
        });
    }

    /// Adds another outcome's steps (e.g. a kill inside a sync).
    pub fn extend(&mut self, other: SyncOutcome) {
        self.steps.extend(other.steps);
    }

    pub fn failures(&self) -> impl Iterator<Item = (&StepResult, &Failure)> {
        self.steps
            .iter()
            .filter_map(|s| s.failure.as_ref().map(|f| (s, f)))
    }

    /// True when a step tried to change the runtime's view of the pod (start, kill,
    /// sandbox, resize), whether or not it succeeded: a status read before the step
    /// may no longer be true.
    pub fn touched_runtime(&self) -> bool {
        self.steps.iter().any(|s| {
            matches!(
                s.action,
                SyncAction::StartContainer
                    | SyncAction::KillContainer
                    | SyncAction::CreatePodSandbox
                    | SyncAction::KillPodSandbox
                    | SyncAction::ResizeContainers
            )
        })
    }

    pub fn is_ok(&self) -> bool {
        self.failures().next().is_none()
    }

    /// True when every failure is a back-off wait: the kubelet treats that as success
    /// and lets the back-off timer drive the next attempt.
    pub fn only_backoff(&self) -> bool {
        self.failures()
            .all(|(_, f)| f.reason == CRASH_LOOP_BACK_OFF || f.reason == IMAGE_PULL_BACK_OFF)
    }

    /// The earliest moment a failed step may be tried again, when every failure comes
    /// from a back-off that knows it (image pulls); None otherwise, or with no failure.
    pub fn retry_in(&self) -> Option<Duration> {
        let mut earliest: Option<Duration> = None;
        for (_, f) in self.failures() {
            let d = f.retry_in?;
            earliest = Some(earliest.map_or(d, |e| e.min(d)));
        }
        earliest
    }

    /// Start failures by container name, as status generation wants them.
    pub fn container_errors(&self) -> BTreeMap<String, WaitingReason> {
        self.failures()
            .filter(|(s, _)| s.action == SyncAction::StartContainer)
            .map(|(s, f)| (s.target.clone(), WaitingReason::new(f.reason, &f.message)))
            .collect()
    }
}

impl fmt::Display for SyncOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (step, failure) in self.failures() {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(
                f,
                "failed to {:?} for {:?} with {}: {:?}",
                step.action, step.target, failure.reason, failure.message
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_only_outcomes_count_as_success_and_keep_their_reasons() {
        let mut outcome = SyncOutcome::default();
        outcome.ok(SyncAction::CreatePodSandbox, "web_default");
        outcome.fail(
            SyncAction::StartContainer,
            "app",
            Failure::new(
                CRASH_LOOP_BACK_OFF,
                "back-off 10s restarting failed container",
            ),
        );
        assert!(!outcome.is_ok());
        assert!(outcome.only_backoff());
        let errors = outcome.container_errors();
        assert_eq!(errors["app"].reason, CRASH_LOOP_BACK_OFF);

        outcome.fail(
            SyncAction::StartContainer,
            "side",
            Failure::new("RunContainerError", "exec format error"),
        );
        assert!(!outcome.only_backoff());
        assert!(outcome.to_string().contains("RunContainerError"));
    }
}
