//! Resource usage of the node, its pods and containers (upstream `pkg/kubelet/stats`
//! and `server/stats`), read from the kernel rather than a daemon.
//!
//! - [`cgroup`]: cgroupfs readers, one per version, and their pure parsers (with
//!   [`cgroup::detail`], what cAdvisor reports besides usage);
//! - [`fs`]: statvfs and bounded directory usage; [`net`]: network interfaces of a
//!   network namespace, block device names and machine facts from `/proc` and `/sys`;
//! - [`claims`]: the persistent volume claims mounted for pods;
//! - [`collect`]: one round of sampling (CRI lists + cgroupfs + statvfs) → [`Sample`];
//! - [`sampler`]: the `stats` thread and the [`StatsStore`] it publishes to;
//! - [`summary`], [`resource_metrics`] and [`cadvisor`]: pure renderings for
//!   `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor` (the node server
//!   calls them).
//!
//! [`Sample`] is the seam for the eviction manager: it carries every signal upstream
//! evicts on (node memory working set and capacity, nodefs/imagefs bytes and inodes,
//! pod usage, pids). Layering: uses `cri`, `cgroups` and `runtime` labels; only the
//! server and the agent use this module.

pub mod cadvisor;
pub mod cgroup;
pub mod claims;
pub mod collect;
pub mod fs;
pub mod net;
pub mod resource_metrics;
pub mod sample;
pub mod sampler;
pub mod summary;

pub use collect::Collector;
pub use sample::Sample;
pub use sampler::{StatsStore, DEFAULT_PERIOD};

/// A failed usage read, naming the cgroup.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("stats: no cgroup {cgroup}")]
    NoCgroup { cgroup: String },
    #[error("stats: cgroup {cgroup}: {reason}")]
    Cgroup { cgroup: String, reason: String },
}
