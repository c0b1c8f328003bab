//! CSI node plugins (upstream `pkg/volume/csi` and the CSI half of
//! `pkg/kubelet/pluginmanager`): the generated CSI and plugin-registration wire
//! types, a blocking client for each ([`client`]), the set of registered drivers
//! ([`Drivers`]), the plugin watcher thread that fills it ([`watcher`]) and the
//! node-side volume operations ([`mounter`]: stage, publish, unpublish, unstage).
//!
//! Threads: the `plugins` watcher thread registers drivers; pod worker threads
//! (through `VolumeManager::setup_pod`/`teardown_pod`) mount and unmount. Every
//! driver call carries a deadline, so a stuck driver fails one pod's volume, never
//! a thread forever. The sync loop never calls in here.

generated_proto!(generated_csi, "csi");

generated_proto!(generated_registration, "pluginregistration");

pub mod client;
pub mod drivers;
pub mod mounter;
pub mod plan;
pub mod publish;
pub mod registration;
pub mod watcher;

pub use client::{CsiClient, CsiError, RegistrationClient};
pub use drivers::{Driver, Drivers};
/// CSI v1 messages (package `csi.v1`).
pub use generated_csi::csi as pb;
/// CSI v1 service stubs (Identity, Controller, Node, ...).
pub use generated_csi::csi_grpc as grpc;
/// Plugin registration v1 messages.
pub use generated_registration::api as reg_pb;
/// Plugin registration v1 service stubs (`Registration`).
pub use generated_registration::api_grpc as reg_grpc;
