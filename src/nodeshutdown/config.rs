//! The graceful node shutdown settings (`shutdownGracePeriod`,
//! `shutdownGracePeriodCriticalPods`, `shutdownGracePeriodByPodPriority`), their
//! validation as upstream's, and the priority groups they mean. Pure.
//!
//! Both forms become one table of groups sorted by priority, lowest first (upstream
//! migrateConfig): `shutdownGracePeriod: P` with `shutdownGracePeriodCriticalPods: C`
//! is the table `{priority 0: P − C seconds, priority 2000000000: C seconds}`; a zero
//! `shutdownGracePeriod` and an empty table turn the feature off.

use std::time::Duration;

use crate::cgroups::qos::SYSTEM_CRITICAL_PRIORITY;

/// One row of `shutdownGracePeriodByPodPriority`: pods of this priority and up (to
/// the next row) get this many seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityPeriod {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

/// A shutdown configuration upstream refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShutdownConfigError {
    #[error(
        "shutdownGracePeriodCriticalPods ({critical:?}) must be <= shutdownGracePeriod ({total:?})"
    )]
    CriticalExceedsTotal { critical: Duration, total: Duration },
    #[error(
        "cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod (or shutdownGracePeriodCriticalPods)"
    )]
    Both,
    #[error(
        "shutdownGracePeriodByPodPriority: priority {priority} has a negative shutdownGracePeriodSeconds ({seconds})"
    )]
    NegativePeriod { priority: i32, seconds: i64 },
}

/// The settings as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownConfig {
    pub grace_period: Duration,
    pub grace_period_critical_pods: Duration,
    pub by_pod_priority: Vec<PriorityPeriod>,
}

impl ShutdownConfig {
    /// Upstream's validation: critical ≤ total, the table excludes the other two, no
    /// negative period in the table.
    pub fn validate(&self) -> Result<(), ShutdownConfigError> {
        if self.grace_period_critical_pods > self.grace_period {
            return Err(ShutdownConfigError::CriticalExceedsTotal {
                critical: self.grace_period_critical_pods,
                total: self.grace_period,
            });
        }
        let durations_set =
            !self.grace_period.is_zero() || !self.grace_period_critical_pods.is_zero();
        if durations_set && !self.by_pod_priority.is_empty() {
            return Err(ShutdownConfigError::Both);
        }
        if let Some(bad) = self
            .by_pod_priority
            .iter()
            .find(|p| p.shutdown_grace_period_seconds < 0)
        {
            return Err(ShutdownConfigError::NegativePeriod {
                priority: bad.priority,
                seconds: bad.shutdown_grace_period_seconds,
            });
        }
        Ok(())
    }

    /// The priority groups, lowest priority first; empty when the feature is off.
    pub fn groups(&self) -> Vec<PriorityPeriod> {
        let mut groups = if self.by_pod_priority.is_empty() {
            migrate(self.grace_period, self.grace_period_critical_pods)
        } else {
            self.by_pod_priority.clone()
        };
        groups.sort_by_key(|g| g.priority);
        groups
    }

    /// Whether litelet takes part in the node's shutdown.
    pub fn enabled(&self) -> bool {
        !self.groups().is_empty()
    }

    /// The whole time asked of logind: the sum of the groups' periods.
    pub fn period_requested(&self) -> Duration {
        period_of(&self.groups())
    }
}

/// The sum of the groups' periods.
pub fn period_of(groups: &[PriorityPeriod]) -> Duration {
    let seconds: i64 = groups
        .iter()
        .map(|g| g.shutdown_grace_period_seconds.max(0))
        .fold(0i64, i64::saturating_add);
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// The two durations as a table (upstream migrateConfig; whole seconds, rounded down).
fn migrate(total: Duration, critical: Duration) -> Vec<PriorityPeriod> {
    if total.is_zero() || critical > total {
        return Vec::new();
    }
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let regular = total - critical;
    vec![
        PriorityPeriod {
            priority: 0,
            shutdown_grace_period_seconds: secs(regular),
        },
        PriorityPeriod {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: secs(critical),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(total: u64, critical: u64) -> ShutdownConfig {
        ShutdownConfig {
            grace_period: Duration::from_secs(total),
            grace_period_critical_pods: Duration::from_secs(critical),
            by_pod_priority: Vec::new(),
        }
    }

    fn row(priority: i32, seconds: i64) -> PriorityPeriod {
        PriorityPeriod {
            priority,
            shutdown_grace_period_seconds: seconds,
        }
    }

    #[test]
    fn the_two_durations_become_a_regular_and_a_critical_group() {
        let c = config(30, 10);
        assert_eq!(c.groups(), [row(0, 20), row(SYSTEM_CRITICAL_PRIORITY, 10)]);
        assert_eq!(c.period_requested(), Duration::from_secs(30));
        assert!(c.enabled());
        // All of it to regular pods when critical pods get nothing.
        assert_eq!(
            config(30, 0).groups(),
            [row(0, 30), row(SYSTEM_CRITICAL_PRIORITY, 0)]
        );
        // Sub-second parts are dropped, as upstream's integer seconds.
        let fractional = ShutdownConfig {
            grace_period: Duration::from_millis(10_900),
            grace_period_critical_pods: Duration::from_millis(3_500),
            by_pod_priority: Vec::new(),
        };
        assert_eq!(
            fractional.groups(),
            [row(0, 7), row(SYSTEM_CRITICAL_PRIORITY, 3)]
        );
    }

    #[test]
    fn zero_or_nothing_is_off() {
        assert!(!ShutdownConfig::default().enabled());
        assert!(!config(0, 0).enabled());
        assert_eq!(ShutdownConfig::default().period_requested(), Duration::ZERO);
    }

    #[test]
    fn the_table_is_sorted_by_priority_and_summed() {
        let c = ShutdownConfig {
            by_pod_priority: vec![row(100000, 120), row(0, 60), row(10000, 180)],
            ..Default::default()
        };
        assert_eq!(c.groups(), [row(0, 60), row(10000, 180), row(100000, 120)]);
        assert_eq!(c.period_requested(), Duration::from_secs(360));
    }

    #[test]
    fn validation_follows_upstream() {
        assert!(config(30, 10).validate().is_ok());
        assert!(config(30, 30).validate().is_ok());
        let err = config(10, 30).validate().unwrap_err().to_string();
        assert!(err.contains("must be <= shutdownGracePeriod"), "{err}");
        let both = ShutdownConfig {
            by_pod_priority: vec![row(0, 10)],
            ..config(30, 0)
        };
        assert!(both
            .validate()
            .unwrap_err()
            .to_string()
            .contains("cannot specify both"));
        let negative = ShutdownConfig {
            by_pod_priority: vec![row(0, -1)],
            ..Default::default()
        };
        assert!(negative
            .validate()
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }
}
