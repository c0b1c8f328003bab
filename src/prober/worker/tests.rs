//! Per-probe decisions: timing, thresholds and startup gating.

use super::*;
use crate::api::pod::ProbeHandler;

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::{Failure as F, Success as S};
use Verdict::{Failure as Fail, Success as Ok};

fn timing(success: u32, failure: u32) -> Timing {
    Timing {
        initial_delay: Duration::ZERO,
        period: Duration::from_secs(10),
        timeout: Duration::from_secs(1),
        success_threshold: success,
        failure_threshold: failure,
    }
}

struct Case {
    name: &'static str,
    kind: ProbeKind,
    success: u32,
    failure: u32,
    /// Each attempt and what it publishes (None: below the threshold).
    steps: &'static [(Verdict, Option<ProbeResult>)],
    phase: Phase,
}

fn check(case: &Case) {
    let mut state = ProbeState::new(case.kind, timing(case.success, case.failure));
    for (i, (verdict, want)) in case.steps.iter().enumerate() {
        assert_eq!(state.record(*verdict), *want, "{}: step {i}", case.name);
    }
    assert_eq!(state.phase, case.phase, "{}: final phase", case.name);
}

#[test]
fn thresholds() {
    let cases = [
        Case {
            name: "readiness: one success publishes at once",
            kind: Readiness,
            success: 1,
            failure: 3,
            steps: &[(Ok, Some(S)), (Ok, Some(S))],
            phase: Phase::Probing,
        },
        Case {
            name: "readiness: failures publish at the third in a row",
            kind: Readiness,
            success: 1,
            failure: 3,
            steps: &[(Fail, None), (Fail, None), (Fail, Some(F)), (Fail, Some(F))],
            phase: Phase::Probing,
        },
        Case {
            name: "readiness: a success in between restarts the failure count",
            kind: Readiness,
            success: 1,
            failure: 2,
            steps: &[(Fail, None), (Ok, Some(S)), (Fail, None), (Fail, Some(F))],
            phase: Phase::Probing,
        },
        Case {
            name: "readiness: successThreshold 3 needs three in a row",
            kind: Readiness,
            success: 3,
            failure: 1,
            steps: &[
                (Ok, None),
                (Ok, None),
                (Fail, Some(F)),
                (Ok, None),
                (Ok, None),
                (Ok, Some(S)),
            ],
            phase: Phase::Probing,
        },
        Case {
            name: "liveness: failure at the threshold puts the worker on hold",
            kind: Liveness,
            success: 1,
            failure: 2,
            steps: &[(Ok, Some(S)), (Fail, None), (Fail, Some(F))],
            phase: Phase::OnHold,
        },
        Case {
            name: "startup: success ends the worker",
            kind: Startup,
            success: 1,
            failure: 3,
            steps: &[(Fail, None), (Fail, None), (Ok, Some(S))],
            phase: Phase::Done,
        },
        Case {
            name: "startup: failure at the threshold puts the worker on hold",
            kind: Startup,
            success: 1,
            failure: 1,
            steps: &[(Fail, Some(F))],
            phase: Phase::OnHold,
        },
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn timing_defaults_and_minimums() {
    let probe = Probe {
        handler: ProbeHandler::default(),
        ..Default::default()
    };
    assert_eq!(Timing::of(&probe, Readiness), timing(1, 3));
    let odd = Probe {
        initial_delay_seconds: Some(-5),
        period_seconds: Some(0),
        timeout_seconds: Some(-1),
        success_threshold: Some(4),
        failure_threshold: Some(0),
        ..Default::default()
    };
    let want = Timing {
        initial_delay: Duration::ZERO,
        period: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        success_threshold: 4,
        failure_threshold: 1,
    };
    assert_eq!(Timing::of(&odd, Readiness), want);
    // Liveness and startup need exactly one success whatever the spec says.
    assert_eq!(Timing::of(&odd, Liveness).success_threshold, 1);
    assert_eq!(Timing::of(&odd, Startup).success_threshold, 1);
}

#[test]
fn startup_gates_the_others() {
    // (kind, phase, started) → gate
    let table = [
        (Startup, Phase::Probing, false, Gate::Run),
        (Startup, Phase::Probing, true, Gate::Stop),
        (Liveness, Phase::Probing, false, Gate::Wait),
        (Liveness, Phase::Probing, true, Gate::Run),
        (Readiness, Phase::Probing, false, Gate::Wait),
        (Readiness, Phase::Probing, true, Gate::Run),
        (Liveness, Phase::OnHold, true, Gate::Stop),
        (Startup, Phase::Done, true, Gate::Stop),
    ];
    for (kind, phase, started, want) in table {
        let mut state = ProbeState::new(kind, timing(1, 3));
        state.phase = phase;
        assert_eq!(
            state.gate(started),
            want,
            "{kind:?} {phase:?} started={started}"
        );
    }
}

#[test]
fn due_times() {
    let now = Instant::now();
    let s = Duration::from_secs;
    let t = Timing {
        initial_delay: s(15),
        ..timing(1, 3)
    };
    // (running for, spread) → due after now
    let table = [
        (s(0), s(0), s(15)),
        (s(5), s(0), s(10)),
        (s(15), s(0), s(0)),
        (s(60), s(3), s(3)),
        // The spread never shortens the initial delay.
        (s(5), s(3), s(10)),
    ];
    for (running_for, spread, want) in table {
        assert_eq!(
            first_due(now, running_for, &t, spread),
            now + want,
            "running for {running_for:?}, spread {spread:?}"
        );
    }
    // The next attempt keeps the period from the previous start, or runs at once when
    // the previous attempt ran longer than a period.
    assert_eq!(next_due(now, now + s(1), s(10)), now + s(10));
    assert_eq!(next_due(now, now + s(12), s(10)), now + s(12));
}

#[test]
fn spread_only_for_adopted_containers_right_after_start() {
    let s = Duration::from_secs;
    assert_eq!(
        spread(7, s(10), s(30), s(60)),
        Duration::ZERO,
        "litelet up for a while"
    );
    assert_eq!(
        spread(7, s(10), s(1), s(2)),
        Duration::ZERO,
        "container just started"
    );
    let spreads: Vec<Duration> = (0..50)
        .map(|seed| spread(seed, s(10), s(1), s(60)))
        .collect();
    assert!(spreads.iter().all(|d| *d < s(10)));
    let distinct: std::collections::BTreeSet<_> = spreads.iter().collect();
    assert!(distinct.len() > 10, "seeds spread out: {distinct:?}");
}

#[test]
fn verdicts_of_attempts() {
    assert_eq!(Verdict::of(&Attempt::Success(String::new())), Some(Ok));
    assert_eq!(Verdict::of(&Attempt::Warning("redirect".into())), Some(Ok));
    assert_eq!(Verdict::of(&Attempt::Failure("no".into())), Some(Fail));
    assert_eq!(Verdict::of(&Attempt::Unknown("runtime down".into())), None);
}
