//! The systemd cgroup driver's pure half (upstream `cgroup_manager_linux.go` with
//! runc's libcontainer `cgroups/systemd`): cgroup names as systemd slices, the unit
//! properties a pod or QoS slice gets, and the [`SystemdUnits`] seam the manager
//! drives (the D-Bus backend is [`bus::DbusUnits`]; tests use a fake).
//!
//! Names: the cgroup name `[kubepods, burstable, pod<uid>]` is the unit
//! `kubepods-burstable-pod<uid>.slice` (each `-` inside a part becomes `_`, since `-`
//! separates a slice from its parent), and lives at
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` on
//! cgroupfs. The root is `-.slice` at `/`.
//!
//! Properties follow libcontainer: `Description`, `Wants=<parent slice>`,
//! `DefaultDependencies=no`, CPU/memory/tasks accounting, then the resources:
//! `CPUShares` (v1) or `CPUWeight` (v2), `CPUQuotaPerSecUSec` (rounded up to whole
//! 10 ms, as systemd keeps a percentage) with `CPUQuotaPeriodUSec`, `MemoryLimit`
//! (v1) or `MemoryMax` (v2), `TasksMax`. systemd's values are approximations
//! (weights, rounded quota), so the manager also writes the exact files through
//! cgroupfs after systemd, as libcontainer does: the files end up as with the
//! cgroupfs driver.

pub mod bus;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::dbus::{DbusError, Value};

use super::convert::shares_to_weight;
use super::name::CgroupName;
use super::resources::{CgroupResources, Limit};
use super::{CgroupError, CgroupVersion};

/// The suffix of slice units.
pub const SLICE_SUFFIX: &str = ".slice";
/// The root slice.
pub const ROOT_SLICE: &str = "-.slice";
/// systemd's "infinity" for limits and quotas.
pub const INFINITY: u64 = u64::MAX;
/// systemd keeps a CPU quota as a percentage: whole 10 ms per second.
const QUOTA_STEP_US: u64 = 10_000;

/// One unit property: its name and value, as `a(sv)` carries it.
pub type Property = (&'static str, Value);

/// What systemd offers the manager. Start and stop wait for their job to finish
/// (bounded); the implementations serialise their calls, so the manager may call
/// from several threads at once.
pub trait SystemdUnits: Send + Sync + fmt::Debug {
    /// `StartTransientUnit(unit, "replace", properties)`, then waits for the job. A
    /// unit that already exists is not an error (its properties are set instead).
    fn start_slice(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError>;

    /// `SetUnitProperties(unit, runtime=true, properties)`.
    fn set_properties(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError>;

    /// `StopUnit(unit, "replace")`, then waits for the job. A unit systemd does not
    /// know is already stopped.
    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError>;
}

/// A failed systemd operation, naming the unit.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The D-Bus call failed (bus unreachable, or systemd answered with an error).
    #[error("systemd {step} {unit}: {source}")]
    Bus {
        step: &'static str,
        unit: String,
        source: DbusError,
    },
    /// The job ended with a result other than `done`.
    #[error("systemd job for {unit} ended with {result:?}")]
    JobFailed { unit: String, result: String },
    /// The job did not finish in time.
    #[error("systemd job for {unit} did not finish within {millis} ms")]
    JobTimeout { unit: String, millis: u64 },
}

fn invalid(name: &str, reason: &'static str) -> CgroupError {
    CgroupError::InvalidName {
        name: name.to_owned(),
        reason,
    }
}

/// A part as systemd spells it inside a slice name (`-` → `_`), refusing what a unit
/// name cannot hold.
fn escape_part(part: &str) -> Result<String, CgroupError> {
    let escaped = part.replace('-', "_");
    if escaped.is_empty()
        || !escaped
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':'))
    {
        return Err(invalid(part, "not a valid systemd slice name part"));
    }
    Ok(escaped)
}

/// The slice unit of a cgroup name: `[kubepods, burstable]` → `kubepods-burstable.slice`.
pub fn slice_unit(name: &CgroupName) -> Result<String, CgroupError> {
    if name.is_root() {
        return Ok(ROOT_SLICE.to_owned());
    }
    let parts: Vec<String> = name
        .parts()
        .iter()
        .map(|p| escape_part(p))
        .collect::<Result<_, _>>()?;
    Ok(format!("{}{SLICE_SUFFIX}", parts.join("-")))
}

/// Where a cgroup name's slice lives on cgroupfs, as a cgroup name:
/// `[kubepods, burstable]` → `/kubepods.slice/kubepods-burstable.slice`.
pub fn slice_path(name: &CgroupName) -> Result<CgroupName, CgroupError> {
    let mut path = CgroupName::root();
    let mut prefix = String::new();
    for part in name.parts() {
        let escaped = escape_part(part)?;
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(&escaped);
        path = path.child(&format!("{prefix}{SLICE_SUFFIX}"))?;
    }
    Ok(path)
}

/// The cgroup name a slice unit (or its path's last part) stands for:
/// `kubepods-burstable-pod1_2.slice` → `[kubepods, burstable, pod1-2]` (upstream
/// `ParseSystemdToCgroupName`).
pub fn parse_slice(unit: &str) -> Result<CgroupName, CgroupError> {
    let base = unit.rsplit('/').next().unwrap_or(unit);
    let Some(stem) = base.strip_suffix(SLICE_SUFFIX) else {
        return Err(invalid(unit, "not a slice unit"));
    };
    if stem == "-" || stem.is_empty() {
        return Ok(CgroupName::root());
    }
    let mut name = CgroupName::root();
    for part in stem.split('-') {
        name = name.child(&part.replace('_', "-"))?;
    }
    Ok(name)
}

/// The parent slice of a slice unit (`-.slice` for a top-level one).
pub fn parent_slice(name: &CgroupName) -> Result<String, CgroupError> {
    slice_unit(&name.parent().unwrap_or_default())
}

/// The properties a new slice gets besides its resources (libcontainer's `Apply`).
pub fn slice_properties(
    name: &CgroupName,
    description: &str,
) -> Result<Vec<Property>, CgroupError> {
    Ok(vec![
        ("Description", Value::str(description)),
        (
            "Wants",
            Value::array("s", vec![Value::str(parent_slice(name)?)]),
        ),
        ("DefaultDependencies", Value::Bool(false)),
        ("CPUAccounting", Value::Bool(true)),
        ("MemoryAccounting", Value::Bool(true)),
        ("TasksAccounting", Value::Bool(true)),
    ])
}

/// `CPUQuotaPerSecUSec` for a CFS quota and period: microseconds of CPU per second,
/// rounded up to whole 10 ms so that the exact quota written after it still fits
/// below the slice (libcontainer's `addCpuQuota`).
pub fn quota_per_sec_us(quota: Limit, period_us: u64) -> u64 {
    match quota {
        Limit::Unlimited => INFINITY,
        Limit::Value(q) => {
            let period = period_us.max(1);
            let per_sec = q.saturating_mul(1_000_000) / period;
            per_sec.div_ceil(QUOTA_STEP_US) * QUOTA_STEP_US
        }
    }
}

fn limit(l: Limit) -> u64 {
    l.value().unwrap_or(INFINITY)
}

/// The unit properties of the `Some` fields of `r` on cgroup `version`; `period_us` is
/// the CFS period used when `r` changes the quota alone.
pub fn resource_properties(
    r: &CgroupResources,
    version: CgroupVersion,
    period_us: u64,
) -> Vec<Property> {
    let mut out = Vec::new();
    if let Some(shares) = r.cpu_shares {
        out.push(match version {
            CgroupVersion::V1 => ("CPUShares", Value::U64(shares)),
            CgroupVersion::V2 => ("CPUWeight", Value::U64(shares_to_weight(shares))),
        });
    }
    if let Some(quota) = r.cpu_quota {
        let period = r.cpu_period.unwrap_or(period_us);
        out.push((
            "CPUQuotaPerSecUSec",
            Value::U64(quota_per_sec_us(quota, period)),
        ));
    }
    if let Some(period) = r.cpu_period {
        out.push(("CPUQuotaPeriodUSec", Value::U64(period)));
    }
    if let Some(memory) = r.memory_limit {
        out.push(match version {
            CgroupVersion::V1 => ("MemoryLimit", Value::U64(limit(memory))),
            CgroupVersion::V2 => ("MemoryMax", Value::U64(limit(memory))),
        });
    }
    if let Some(min) = r.memory_min {
        if version == CgroupVersion::V2 {
            out.push(("MemoryMin", Value::U64(min)));
        }
    }
    if let Some(pids) = r.pids_max {
        out.push(("TasksMax", Value::U64(limit(pids))));
    }
    out
}

/// The pod UID of a pod slice directory (`kubepods-burstable-pod<uid>.slice`), if it
/// is one.
pub fn pod_uid_of_slice(dir: &str, pod_prefix: &str) -> Option<String> {
    let name = parse_slice(dir).ok()?;
    let uid = name.base()?.strip_prefix(pod_prefix)?;
    (!uid.is_empty()).then(|| uid.to_owned())
}
