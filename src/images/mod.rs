//! The node's images (upstream `pkg/kubelet/images`): what makes a container's image
//! present before the runtime manager creates the container, and what removes images
//! no container needs.
//!
//! - `manager.rs`: [`manager::ImageManager`], pull policy, registry credentials,
//!   per-image pull back-off and events; its failures name the container's waiting
//!   reason ([`manager::EnsureError`]).
//! - `pull_limit.rs`: how many pulls run at once.
//! - `pull_records/`: which credentials pulled each image, so a pod uses an image
//!   already present only with credentials that could pull it.
//! - `gc.rs`: image garbage collection (disk usage thresholds, maximum age), run from
//!   the GC thread and by eviction to reclaim disk.
//!
//! A layer below `runtime`: the runtime manager holds the image manager and passes in
//! what it needs of a pod's sync (the cancellation, as a closure); nothing here
//! knows the runtime manager.

pub mod gc;
pub mod manager;
pub mod pull_limit;
pub mod pull_records;
