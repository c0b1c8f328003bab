//! The eviction manager's decisions for one round (upstream `synchronize` up to the
//! ranking), as pure functions over the thresholds, the observations and "now":
//!
//! 1. which thresholds are met, ignoring grace periods ([`thresholds_met`]); a
//!    threshold met earlier stays met until its minimum reclaim is also available;
//! 2. when each was first seen met (soft thresholds wait out their grace period);
//! 3. the node conditions they drive, each kept true until it has not been seen for
//!    the pressure transition period (and always while it is seen, even with a zero
//!    period: upstream's strict `< period` then never reports the condition);
//! 4. the thresholds to act on now (grace period over), most urgent first: memory,
//!    then the others in configuration order (upstream byEvictionPriority).
//!
//! [`State`] is what carries over between rounds; [`State::step`] is the whole round.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::node::config::Threshold as Value;

use super::config::{Condition, Signal, Threshold};
use super::signals::{Observation, Observations};

/// The amount a threshold value stands for against `capacity`.
pub fn amount(value: &Value, capacity: i64) -> i64 {
    match value {
        Value::Quantity(q) => q.value(),
        Value::Percentage(p) => (capacity as f64 * p) as i64,
    }
}

/// The level below which `t` counts as met: its value, plus the minimum reclaim once
/// it has been met (`enforce_min_reclaim`).
pub fn level(t: &Threshold, obs: &Observation, enforce_min_reclaim: bool) -> i64 {
    let base = amount(&t.value, obs.capacity);
    let extra = match (&t.min_reclaim, enforce_min_reclaim) {
        (Some(r), true) => amount(r, obs.capacity),
        _ => 0,
    };
    base.saturating_add(extra)
}

/// Indexes of `thresholds` (restricted to `which`) that `obs` meets.
pub fn thresholds_met(
    thresholds: &[Threshold],
    which: impl Iterator<Item = usize>,
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> BTreeSet<usize> {
    which
        .filter(|&i| {
            let Some(t) = thresholds.get(i) else {
                return false;
            };
            obs.get(&t.signal)
                .is_some_and(|o| o.available < level(t, o, enforce_min_reclaim))
        })
        .collect()
}

/// What carries over from one round to the next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Threshold index → when it was first seen met (grace periods count from here).
    pub first_observed: BTreeMap<usize, SystemTime>,
    /// Condition → when a threshold driving it was last seen met.
    pub condition_last_observed: BTreeMap<Condition, SystemTime>,
    /// Thresholds acted on last round (met with grace over), not yet reclaimed.
    pub met: BTreeSet<usize>,
}

/// The outcome of a round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Round {
    /// The node conditions to report now.
    pub conditions: BTreeSet<Condition>,
    /// Thresholds to act on, most urgent first.
    pub act_on: Vec<usize>,
}

impl State {
    /// One round: updates the state and says what to report and act on.
    pub fn step(
        &mut self,
        thresholds: &[Threshold],
        obs: &Observations,
        transition: Duration,
        now: SystemTime,
    ) -> Round {
        let mut met = thresholds_met(thresholds, 0..thresholds.len(), obs, false);
        met.extend(thresholds_met(
            thresholds,
            self.met.iter().copied(),
            obs,
            true,
        ));
        self.first_observed.retain(|i, _| met.contains(i));
        for &i in &met {
            self.first_observed.entry(i).or_insert(now);
        }
        for &i in &met {
            self.condition_last_observed
                .insert(thresholds[i].signal.condition(), now);
        }
        // Seen this round, or within the transition period. (Upstream keeps only the
        // latter, so a zero period never reports a condition at all.)
        self.condition_last_observed.retain(|_, seen| {
            *seen == now
                || now
                    .duration_since(*seen)
                    .map_or(true, |since| since < transition)
        });
        let conditions = self.condition_last_observed.keys().copied().collect();
        let mut act_on: Vec<usize> = self
            .first_observed
            .iter()
            .filter(|(i, first)| {
                let grace = thresholds[**i].grace_period;
                now.duration_since(**first).unwrap_or(Duration::ZERO) >= grace
            })
            .map(|(i, _)| *i)
            .collect();
        self.met = act_on.iter().copied().collect();
        // Memory first (a stable sort keeps configuration order otherwise).
        act_on.sort_by_key(|&i| {
            !matches!(
                thresholds[i].signal,
                Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable
            )
        });
        Round { conditions, act_on }
    }
}
