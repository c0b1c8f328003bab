//! Pod cgroups (upstream `pkg/kubelet/cm`): the QoS hierarchy, one cgroup per pod, the
//! CPU/memory conversions that fill them, and reading them back for in-place resize.
//!
//! Shape (youki's libcgroups, firecracker's injectable roots):
//! - pure decisions: [`allocatable`] (node allocatable enforcement: what `kubepods`
//!   and the reserved cgroups get), [`convert`] (milli-CPU → shares/weight/quota, a pod's cgroup
//!   config), [`pod_resources`] (effective pod requests/limits), [`qos`] (QoS class,
//!   oom_score_adj, QoS cgroup shares), [`name`] (validated cgroup names);
//! - I/O: [`fs`] (the only place that writes or reads a cgroup file), [`detect`]
//!   (v1/hybrid/v2 from an injected mountinfo text and mount root), [`v1`] and [`v2`]
//!   (the [`Cgroupfs`] trait over each layout), [`manager`] ([`PodCgroupManager`], the
//!   pod cgroups under `--cgroup-root`, with the cgroupfs or the systemd driver),
//!   [`systemd`] (slice names, unit properties, the D-Bus units backend).
//!
//! Callers: pod worker threads (create before the sandbox, remove after termination,
//! resize writes, the QoS cgroups' CPU shares as pods come and go) and the `gc` thread
//! (orphan listing and removal, the periodic QoS update, the `kubepods` node
//! allocatable limits until they hold); start-up writes those limits first. Nothing
//! here holds state between calls besides the detected mount layout and the active
//! Burstable pods' CPU requests (behind a lock never held across I/O), so every method
//! takes `&self` and the manager is shared between threads as is. No channels.
//!
//! Invariants: every path under a mount root is built from a validated [`CgroupName`]
//! and joined with [`fs::join_safely`]; no file is ever created on cgroupfs (a missing
//! interface file is an error, as on the kernel's cgroupfs); `/sys/fs/cgroup` and
//! `/proc/self/mountinfo` appear only in [`DEFAULT_MOUNT_ROOT`] / [`MOUNTINFO_PATH`],
//! used by [`PodCgroupManager::from_system`].
//!
//! Every create, update and destroy of the manager is timed and handed to the
//! process's operation observer when one is installed ([`observe_operations`]): the
//! metrics registry's `kubelet_cgroup_manager_duration_seconds` (this layer knows no
//! metrics).

pub mod allocatable;
pub mod convert;
pub mod detect;
pub mod fs;
pub mod manager;
pub mod name;
pub mod observe;
pub mod pod_resources;
pub mod qos;
pub mod resources;
pub mod systemd;
pub mod v1;
pub mod v2;

#[cfg(test)]
pub(crate) mod testfs;

use std::fmt;
use std::path::PathBuf;

pub use detect::{CgroupMode, DetectError};
pub use fs::FsError;
pub use manager::{Driver, ManagerConfig, PodCgroupManager};
pub use name::CgroupName;
use observe::Timed;
pub use observe::{observe_operations, Operation};
pub use qos::QosClass;
pub use resources::{CgroupResources, Limit};

/// Where the cgroup filesystems are mounted on a normal host.
pub const DEFAULT_MOUNT_ROOT: &str = "/sys/fs/cgroup";
/// The mount table of litelet's own mount namespace.
pub const MOUNTINFO_PATH: &str = "/proc/self/mountinfo";

/// Which cgroup interface the files follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// One hierarchy per controller (`cpu.shares`, `memory.limit_in_bytes`, ...).
    V1,
    /// The single unified hierarchy (`cpu.weight`, `cpu.max`, `memory.max`, ...).
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// A failed cgroup operation of this module, with the cgroup, file or value involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Reading, writing, creating or removing something on cgroupfs failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The mount table does not describe a usable cgroup layout.
    #[error(transparent)]
    Detect(#[from] DetectError),
    /// A cgroup name (or one of its parts, e.g. a pod UID) is not a safe path part.
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// A v1 controller the operation needs has no hierarchy under the mount root.
    #[error("cgroup v1 controller {controller} is not mounted under {root}")]
    ControllerMissing {
        controller: &'static str,
        root: PathBuf,
    },
    /// The setting exists only in the other cgroup version.
    #[error("{setting} = {value} cannot be set on cgroup {version}")]
    Unsupported {
        setting: &'static str,
        value: String,
        version: CgroupVersion,
    },
    /// The configured CFS period is outside what the kernel accepts.
    #[error("cpu cfs quota period {value}us is outside 1000..=1000000")]
    InvalidPeriod { value: u64 },
    /// A system-/kube-reserved cgroup to enforce does not exist (litelet never makes it).
    #[error("cgroup {name} does not exist: create it (e.g. a systemd slice of the daemons) or drop the enforcement")]
    ReservedCgroupMissing { name: String },
    /// No pod cgroup exists for this UID under any QoS cgroup.
    #[error("no pod cgroup for pod uid {uid}")]
    PodNotFound { uid: String },
    /// systemd refused or failed an operation (systemd driver). Boxed: it carries a
    /// D-Bus error, and every other cgroup error stays small.
    #[error(transparent)]
    Systemd(Box<systemd::SystemdError>),
    /// The mount table could not be read.
    #[error("cannot read mount table {path}: {source}")]
    Mountinfo {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<systemd::SystemdError> for CgroupError {
    fn from(e: systemd::SystemdError) -> Self {
        CgroupError::Systemd(Box::new(e))
    }
}

/// One cgroup filesystem layout (v1 or v2): the small set of operations litelet needs.
///
/// Names are relative to the mount root(s) (`/kubepods/burstable/pod<uid>`). All
/// operations are synchronous file-system calls; implementations hold no mutable state.
pub trait Cgroupfs: Send + Sync + fmt::Debug {
    /// The interface version of the files.
    fn version(&self) -> CgroupVersion;

    /// Whether the cgroup's `pids.max` can be written (v1: the pids hierarchy is
    /// mounted; v2: the controller is enabled for it).
    fn has_pids(&self, name: &CgroupName) -> bool;

    /// Creates the cgroup (and missing ancestors) wherever litelet manages it.
    /// Creating an existing cgroup is not an error.
    fn create(&self, name: &CgroupName) -> Result<(), CgroupError>;

    /// Whether the cgroup exists everywhere litelet manages it.
    fn exists(&self, name: &CgroupName) -> bool;

    /// Writes the settings that are `Some`; `None` leaves a setting as it is. Children
    /// are not touched; see the implementations for the write order and its reasons.
    fn apply(&self, name: &CgroupName, resources: &CgroupResources) -> Result<(), CgroupError>;

    /// Reads the current settings back from the kernel's files.
    fn read(&self, name: &CgroupName) -> Result<CgroupResources, CgroupError>;

    /// Current memory usage in bytes, including page cache (as the kernel accounts it).
    fn memory_usage(&self, name: &CgroupName) -> Result<u64, CgroupError>;

    /// Process IDs in the cgroup and its descendants.
    fn processes(&self, name: &CgroupName) -> Result<Vec<i32>, CgroupError>;

    /// Names of the direct child cgroups, sorted, from every hierarchy litelet can see.
    fn children(&self, name: &CgroupName) -> Result<Vec<String>, CgroupError>;

    /// Removes the cgroup and its (empty) descendants, deepest first, everywhere it
    /// exists. A cgroup that is already gone is not an error.
    fn remove(&self, name: &CgroupName) -> Result<(), CgroupError>;
}
