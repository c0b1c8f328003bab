//! The tests on the fakes (fake CRI, fake API server, private dbus-daemons) and the
//! pure ones, as one test binary so gRPC's C core links once. Some files also hold
//! a real-containerd test that runs as root and skips loudly otherwise.

#[path = "../support/mod.rs"]
mod support;

mod api_client;
mod api_source;
mod cli;
mod container_swap;
mod cri_fake;
mod csi_plugins;
mod dbus;
mod device_plugins;
mod events_sink;
mod field_audit;
mod generated_docs;
mod kubelet_e2e;
mod logind_dbus;
mod node;
mod node_shutdown;
mod pleg;
mod pod_hosts;
mod prober;
mod resize;
mod resize_node;
mod runtime_behaviours;
mod runtime_gc;
mod runtime_sync;
mod server;
mod service_env;
mod services_source;
mod static_source;
mod status_manager;
mod systemd_units;
mod upstream_names;
mod volumes_api;
