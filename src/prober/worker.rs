//! The decisions of one probe worker (one probe kind of one container instance),
//! as pure functions of their inputs, time included (upstream `worker.go` `doProbe`).
//!
//! Used by the `probe-timer` thread. Rules:
//! - timing: defaults period 10 s, timeout 1 s, thresholds 1 (success) and 3
//!   (failure); every value at least 1; liveness and startup need one success;
//! - the first attempt is due `initialDelaySeconds` after the container started (now,
//!   if that has passed); later ones a period after the previous one started, or at
//!   once when it ran longer than a period;
//! - a result is published when the same verdict repeats `successThreshold` or
//!   `failureThreshold` times in a row; below the threshold the old result stays;
//! - a published liveness or startup failure puts the worker on hold: the container
//!   is about to be restarted, and its next instance gets new workers;
//! - startup gates the others: until the container has started (no startup probe, or
//!   its startup result is Success) liveness and readiness wait, and once it has
//!   started the startup worker is done.

use std::time::{Duration, Instant};

use crate::api::pod::Probe;
use crate::runtime::actions::ProbeResult;

use super::{Attempt, ProbeKind};

/// A probe's timing and thresholds with defaults and minimums applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(value.unwrap_or(default).max(1) as u64)
}

impl Timing {
    pub fn of(probe: &Probe, kind: ProbeKind) -> Timing {
        let success = match kind {
            ProbeKind::Readiness => probe.success_threshold.unwrap_or(1).max(1) as u32,
            // The API allows nothing else for these two.
            ProbeKind::Liveness | ProbeKind::Startup => 1,
        };
        Timing {
            initial_delay: Duration::from_secs(
                probe.initial_delay_seconds.unwrap_or(0).max(0) as u64
            ),
            period: seconds(probe.period_seconds, 10),
            timeout: seconds(probe.timeout_seconds, 1),
            success_threshold: success,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// How an attempt counts towards the thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Success,
    Failure,
}

impl Verdict {
    /// Warnings count as successes; Unknown attempts do not count at all.
    pub fn of(attempt: &Attempt) -> Option<Verdict> {
        match attempt {
            Attempt::Success(_) | Attempt::Warning(_) => Some(Verdict::Success),
            Attempt::Failure(_) => Some(Verdict::Failure),
            Attempt::Unknown(_) => None,
        }
    }

    fn result(self) -> ProbeResult {
        match self {
            Verdict::Success => ProbeResult::Success,
            Verdict::Failure => ProbeResult::Failure,
        }
    }
}

/// Where a worker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Attempts run when due (subject to the startup gate).
    Probing,
    /// Liveness or startup failed: no more attempts against this container instance.
    OnHold,
    /// Startup succeeded: nothing more to check.
    Done,
}

/// What to do with a due attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Run,
    /// Not yet (the container has not started): look again a period later.
    Wait,
    /// Never again for this container instance.
    Stop,
}

/// Threshold state of one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeState {
    pub kind: ProbeKind,
    pub timing: Timing,
    pub phase: Phase,
    last: Option<Verdict>,
    run: u32,
}

impl ProbeState {
    pub fn new(kind: ProbeKind, timing: Timing) -> ProbeState {
        ProbeState {
            kind,
            timing,
            phase: Phase::Probing,
            last: None,
            run: 0,
        }
    }

    /// Counts one attempt; returns the result to publish once its run reaches the
    /// threshold (and again on every further attempt of the same verdict).
    pub fn record(&mut self, verdict: Verdict) -> Option<ProbeResult> {
        if self.last == Some(verdict) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(verdict);
            self.run = 1;
        }
        let threshold = match verdict {
            Verdict::Success => self.timing.success_threshold,
            Verdict::Failure => self.timing.failure_threshold,
        };
        if self.run < threshold {
            return None;
        }
        match (verdict, self.kind) {
            (Verdict::Failure, ProbeKind::Liveness | ProbeKind::Startup) => {
                self.phase = Phase::OnHold;
                self.run = 0;
            }
            (Verdict::Success, ProbeKind::Startup) => self.phase = Phase::Done,
            _ => {}
        }
        Some(verdict.result())
    }

    /// Whether a due attempt runs; `started` is true when the container has no startup
    /// probe or its startup result is Success.
    pub fn gate(&self, started: bool) -> Gate {
        if self.phase != Phase::Probing {
            return Gate::Stop;
        }
        match (self.kind, started) {
            (ProbeKind::Startup, true) => Gate::Stop,
            (ProbeKind::Startup, false) => Gate::Run,
            (_, true) => Gate::Run,
            (_, false) => Gate::Wait,
        }
    }
}

/// When the first attempt is due for a container that has been running `running_for`.
/// `spread` (see [`spread`]) delays probes of containers found already running right
/// after litelet started, so a restart does not fire every probe at once.
pub fn first_due(
    now: Instant,
    running_for: Duration,
    timing: &Timing,
    spread: Duration,
) -> Instant {
    match timing.initial_delay.checked_sub(running_for) {
        Some(left) if !left.is_zero() => now + left,
        _ => now + spread,
    }
}

/// When the attempt after one that started at `started` is due, seen at `now`.
pub fn next_due(started: Instant, now: Instant, period: Duration) -> Instant {
    (started + period).max(now)
}

/// The start-up spread of a worker: a stable fraction (from `seed`) of its period,
/// applied only when litelet started less than a period ago and the container was
/// already running for a period or more (adopted, not just started by us).
pub fn spread(
    seed: u64,
    period: Duration,
    since_start: Duration,
    running_for: Duration,
) -> Duration {
    if since_start >= period || running_for < period {
        return Duration::ZERO;
    }
    // A cheap mix of the seed (splitmix64's finaliser) into [0, 1000).
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    period * (x % 1000) as u32 / 1000
}

#[cfg(test)]
mod tests;
