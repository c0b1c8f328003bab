//! Test support shared by the integration tests: the fake CRI runtime, a private real
//! containerd, and small helpers. Each test binary includes this with `mod support;`
//! and uses what it needs.
#![allow(dead_code)]

pub mod cgroup_model;
pub mod containerd;
pub mod control_plane;
pub mod fake_api;
pub mod fake_cri;
pub mod https;
pub mod real_node;
pub mod registry;
pub mod tcp_proxy;

use std::time::{Duration, Instant};

/// Polls `check` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
