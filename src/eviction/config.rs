//! Eviction thresholds as configured (upstream `eviction.ParseThresholdConfig`):
//! `--eviction-hard`, `--eviction-soft` + `--eviction-soft-grace-period`,
//! `--eviction-minimum-reclaim`, `--eviction-pressure-transition-period` and
//! `--eviction-max-pod-grace-period`, and the same KubeletConfiguration fields.
//!
//! Pure: the flag texts are parsed on the main thread before any thread starts. The
//! `signal<value` syntax and its checks are `node::config`'s (the node status uses the
//! hard thresholds for allocatable); this file adds the `signal=value` lists and puts
//! everything together into [`EvictionConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use crate::node::config::{parse_eviction_hard, Threshold as Value};

/// A resource signal the eviction manager watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

/// The node condition a signal drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    /// The NodeConditionType.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

impl Signal {
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.as_str() == name)
    }

    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                Condition::MemoryPressure
            }
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// The resource named in eviction messages (upstream signalToResource).
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
            _ => "ephemeral-storage",
        }
    }
}

/// One threshold: hard when `grace_period` is zero and it came from `--eviction-hard`.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    /// Met when the available amount drops below this.
    pub value: Value,
    /// How long a soft threshold must be met before pods are evicted (0 for hard).
    pub grace_period: Duration,
    /// Once met, the threshold stays met until this much more than `value` is available.
    pub min_reclaim: Option<Value>,
    pub hard: bool,
}

/// A wrong eviction flag or config value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvictionConfigError {
    #[error("{flag}: {item:?}: {reason}")]
    Item {
        flag: &'static str,
        item: String,
        reason: String,
    },
    #[error("{flag}: {source}")]
    Threshold {
        flag: &'static str,
        #[source]
        source: crate::node::ConfigError,
    },
    #[error("eviction-soft: no grace period for soft eviction threshold {0:?} (set --eviction-soft-grace-period)")]
    NoGracePeriod(String),
}

/// What the eviction manager runs with.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionConfig {
    pub thresholds: Vec<Threshold>,
    /// How long a pressure condition stays true after its last sighting.
    pub pressure_transition_period: Duration,
    /// Cap on a pod's grace period in a soft eviction; 0 keeps the pod's own.
    pub max_pod_grace_period_seconds: i64,
}

/// Upstream's `--eviction-pressure-transition-period` default.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);

/// The flag texts, as the command line and config file give them.
#[derive(Clone, Debug)]
pub struct EvictionFlags<'a> {
    /// `None`: upstream's defaults.
    pub hard: Option<&'a str>,
    pub soft: Option<&'a str>,
    pub soft_grace_period: Option<&'a str>,
    pub minimum_reclaim: Option<&'a str>,
    pub pressure_transition_period: Duration,
    pub max_pod_grace_period_seconds: i64,
    pub duration: DurationParser,
}

fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn signal_of(flag: &'static str, item: &str, name: &str) -> Result<Signal, EvictionConfigError> {
    Signal::parse(name).ok_or_else(|| EvictionConfigError::Item {
        flag,
        item: item.to_owned(),
        reason: format!("unknown signal {name:?}"),
    })
}

/// A Go-style duration parser (the caller's: `config::parse_duration`, passed in so
/// this module does not import the flag layer above it).
pub type DurationParser = fn(&str) -> Result<Duration, String>;

/// Parses a `signal=value,...` flag with `value` parsed by `parse`.
fn signal_pairs<T, E: std::fmt::Display>(
    flag: &'static str,
    text: &str,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<BTreeMap<Signal, T>, EvictionConfigError> {
    let mut out = BTreeMap::new();
    for item in items(text) {
        let bad = |reason: String| EvictionConfigError::Item {
            flag,
            item: item.to_owned(),
            reason,
        };
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected signal=value".into()))?;
        let signal = signal_of(flag, item, name)?;
        out.insert(signal, parse(value).map_err(|e| bad(e.to_string()))?);
    }
    Ok(out)
}

/// Parses `--eviction-soft-grace-period` (`memory.available=1m30s,...`).
pub fn parse_grace_periods(
    text: &str,
    duration: DurationParser,
) -> Result<BTreeMap<Signal, Duration>, EvictionConfigError> {
    signal_pairs("eviction-soft-grace-period", text, duration)
}

/// Parses `--eviction-minimum-reclaim` (`memory.available=0Mi,nodefs.available=500Mi`).
pub fn parse_minimum_reclaim(text: &str) -> Result<BTreeMap<Signal, Value>, EvictionConfigError> {
    signal_pairs(
        "eviction-minimum-reclaim",
        text,
        crate::node::config::parse_threshold_value,
    )
}

fn thresholds(flag: &'static str, text: &str) -> Result<Vec<(Signal, Value)>, EvictionConfigError> {
    let parsed = parse_eviction_hard(text)
        .map_err(|source| EvictionConfigError::Threshold { flag, source })?;
    parsed
        .into_iter()
        .map(|(name, v)| Ok((signal_of(flag, &name, &name)?, v)))
        .collect()
}

impl EvictionConfig {
    /// Puts the flags together, as upstream: hard thresholds (the defaults when the flag
    /// is absent), soft ones each with its grace period, minimum reclaim on both.
    pub fn from_flags(flags: &EvictionFlags<'_>) -> Result<EvictionConfig, EvictionConfigError> {
        let hard = match flags.hard {
            Some(text) => thresholds("eviction-hard", text)?,
            None => crate::node::config::default_eviction_hard()
                .into_iter()
                .filter_map(|(name, v)| Some((Signal::parse(&name)?, v)))
                .collect(),
        };
        let soft = match flags.soft {
            Some(text) => thresholds("eviction-soft", text)?,
            None => Vec::new(),
        };
        let grace = match flags.soft_grace_period {
            Some(text) => parse_grace_periods(text, flags.duration)?,
            None => BTreeMap::new(),
        };
        let reclaim = match flags.minimum_reclaim {
            Some(text) => parse_minimum_reclaim(text)?,
            None => BTreeMap::new(),
        };
        let mut out = Vec::new();
        for (signal, value) in hard {
            out.push(Threshold {
                signal,
                value,
                grace_period: Duration::ZERO,
                min_reclaim: reclaim.get(&signal).cloned(),
                hard: true,
            });
        }
        for (signal, value) in soft {
            let grace_period = *grace
                .get(&signal)
                .ok_or_else(|| EvictionConfigError::NoGracePeriod(signal.as_str().to_owned()))?;
            out.push(Threshold {
                signal,
                value,
                grace_period,
                min_reclaim: reclaim.get(&signal).cloned(),
                hard: false,
            });
        }
        Ok(EvictionConfig {
            thresholds: out,
            pressure_transition_period: flags.pressure_transition_period,
            max_pod_grace_period_seconds: flags.max_pod_grace_period_seconds,
        })
    }
}

/// A clap/config-file check of `--eviction-minimum-reclaim` that keeps the text.
pub fn check_minimum_reclaim(text: &str) -> Result<String, EvictionConfigError> {
    parse_minimum_reclaim(text).map(|_| text.to_owned())
}
