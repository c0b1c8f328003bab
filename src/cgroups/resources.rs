//! The settings litelet writes to (and reads back from) a pod or QoS cgroup, in
//! version-neutral units: cgroup v1 shares, CFS microseconds, bytes, a process count.
//! The v2 backend converts shares to `cpu.weight` on the way in and back on the way out.
//!
//! Pure data; no I/O. `None` in a field means "leave as is" when applying and "not
//! available" when reading.

use std::fmt;

/// A bound that can also be "no bound" (v1 `-1`, v2 `max`).
///
/// Ordered so that every value is below `Unlimited`, which lets resize code compare a
/// current and a desired limit directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// At most this many units.
    Value(u64),
    /// No bound.
    Unlimited,
}

impl Limit {
    /// The bound, or `None` when unlimited.
    pub fn value(self) -> Option<u64> {
        match self {
            Limit::Value(v) => Some(v),
            Limit::Unlimited => None,
        }
    }
}

/// No bound: what a cgroup has before anything is written.
impl Default for Limit {
    fn default() -> Self {
        Limit::Unlimited
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Value(v) => write!(f, "{v}"),
            Limit::Unlimited => f.write_str("max"),
        }
    }
}

/// Resource settings of one cgroup (upstream `ResourceConfig`, the parts litelet uses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupResources {
    /// Relative CPU weight in v1 shares (2..=262144); v2 writes the matching `cpu.weight`.
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds per period.
    pub cpu_quota: Option<Limit>,
    /// CFS period in microseconds.
    pub cpu_period: Option<u64>,
    /// Hard memory limit in bytes (the kernel rounds it down to whole pages).
    pub memory_limit: Option<Limit>,
    /// Protected memory in bytes (v2 `memory.min`, memory QoS); not available on v1.
    pub memory_min: Option<u64>,
    /// Maximum number of tasks.
    pub pids_max: Option<Limit>,
}

impl CgroupResources {
    /// True when nothing would be written.
    pub fn is_empty(&self) -> bool {
        *self == CgroupResources::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_below_unlimited() {
        assert!(Limit::Value(u64::MAX) < Limit::Unlimited);
        assert!(Limit::Value(1) < Limit::Value(2));
        assert_eq!(Limit::Value(7).value(), Some(7));
        assert_eq!(Limit::Unlimited.value(), None);
        assert_eq!(Limit::Unlimited.to_string(), "max");
        assert!(CgroupResources::default().is_empty());
    }
}
