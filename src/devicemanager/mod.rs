//! Device plugins (upstream `pkg/kubelet/cm/devicemanager`, API v1beta1): the
//! registration server plugins announce themselves to, one endpoint thread per
//! plugin streaming its devices (`ListAndWatch`), the device state that node
//! status and admission read, and the allocation of devices to containers
//! (`Allocate`, checkpointed under `<root-dir>/device-plugins/`).
//!
//! Threads: `dp-register` (the grpcio server's completion queue thread runs the
//! `Register` handler, which only records the plugin and spawns) and one `dp-<n>`
//! thread per registered plugin that iterates its `ListAndWatch` stream. Pod
//! worker threads call `Allocate`/`PreStartContainer` through
//! `run_options` ([`DeviceManager::container_options`]); the sync loop only reads state
//! ([`DeviceManager::admit`]), never calls a plugin.

generated_proto!(generated, "deviceplugin");

/// Device plugin v1beta1 messages.
pub use generated::api as pb;
/// Device plugin v1beta1 service stubs (`Registration`, `DevicePlugin`).
pub use generated::api_grpc as grpc;

pub mod checkpoint;
pub mod manager;
pub mod state;

pub use manager::{
    private_folder, serve_unix, DeviceError, DeviceManager, RegistrationServer, UnixServeError,
    DEFAULT_DIR, KUBELET_SOCKET, SOCKET_MODE,
};
pub use state::DeviceInfo;
