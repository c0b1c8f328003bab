//! The runtime manager (upstream kuberuntime): decides what a pod needs from the
//! runtime and carries it out over CRI.
//!
//! `model` is the runtime's view of a pod. Decisions are pure functions over it and the
//! API pod; the modules that talk to CRI are thin shells around them.

pub mod actions;
pub mod cache;
pub mod cancel;
pub mod container;
pub mod devices;
pub mod dns;
pub mod env;
pub mod envvars;
pub mod gc;
pub mod hash;
pub mod hooks;
pub mod hosts;
pub mod inspect;
pub mod kill;
pub mod labels;
pub mod logs;
pub mod manager;
pub mod model;
pub mod nonroot;
pub mod profiles;
pub mod resize;
pub mod result;
pub mod sandbox;
pub mod state;
pub mod subpath;
pub mod swap;
pub mod sync;
pub mod termination;
