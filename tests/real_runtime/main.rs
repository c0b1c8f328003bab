//! The tests against a private real containerd and the kernel's cgroups (root;
//! skipped loudly outside CI), as one test binary so gRPC's C core links once.

#[path = "../support/mod.rs"]
mod support;

mod cgroups_real;
mod cri_containerd;
mod node_allocatable;
mod prober_containerd;
mod server_containerd;
mod stats_containerd;
mod termination_messages;
mod volumes_containerd;
