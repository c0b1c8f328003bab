//! The tests against a real etcd + kube-apiserver (`KUBEBUILDER_ASSETS`) and a private
//! real containerd (root), as one test binary so gRPC's C core links once. The
//! control plane is shared by all of them (`support::control_plane`): node names and
//! namespaces are unique across the files, and cluster-wide objects carry per-test
//! names or take turns (`support::exclusive`).

#[path = "../support/mod.rs"]
mod support;

mod api_agreement;
mod autonomy;
mod credential_provider;
mod log_rotation;
mod private_registry;
mod real_apiserver;
mod real_device_plugins;
mod real_drop_in;
mod real_eviction;
mod real_install_settings;
mod real_node_api_scale;
mod real_prometheus_scrape;
mod real_runtime_class;
mod real_stats;
mod real_storage;
mod real_subpath;
mod unattended;
