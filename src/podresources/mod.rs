//! The kubelet's PodResources API v1 (upstream `pkg/kubelet/apis/podresources`,
//! `k8s.io/kubelet/pkg/apis/podresources/v1`): a gRPC server on
//! `<root-dir>/pod-resources/kubelet.sock` telling monitoring agents which devices
//! each container of the active pods holds (`List`, `Get`) and which the node can
//! hand out (`GetAllocatableResources`). litelet has no CPU, memory or DRA manager,
//! so CPU ids, memory and dynamic resources are always empty.
//!
//! `response.rs` builds the answers (pure over two seams: [`PodSource`] for the
//! pods, [`DeviceSource`] for the devices); `server.rs` serves them behind
//! upstream's rate limit. Threads: none of its own — the server runs on the device
//! plugin side's grpcio environment (`dp-0`), whose completion queue runs the
//! handlers (a lock and a copy each, no I/O).

generated_proto!(generated, "podresources");

/// PodResources v1 messages.
pub use generated::api as pb;
/// PodResources v1 service stubs (`PodResourcesLister`).
pub use generated::api_grpc as grpc;

pub mod rate_limit;
pub mod response;
pub mod server;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::pod::Pod;
use crate::devicemanager::{DeviceInfo, DeviceManager};

pub use server::{PodResourcesError, PodResourcesServer, SOCKET_DIR, SOCKET_NAME};

/// The pods the API reports, as the kubelet knows them.
pub trait PodSource: Send + Sync {
    /// Every desired pod (the pod manager's).
    fn pods(&self) -> Vec<Arc<Pod>>;
    /// Whether `pod` is active (upstream GetActivePods: not terminated, and not in
    /// a terminal phase unless its termination is still under way); `List` reports
    /// only those.
    fn is_active(&self, pod: &Pod) -> bool;
    /// The desired pod `namespace/name`, whatever its phase.
    fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
}

/// The devices the API reports, per resource name.
pub trait DeviceSource: Send + Sync {
    /// What one container holds.
    fn container_devices(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> BTreeMap<String, Vec<DeviceInfo>>;
    /// Every healthy device.
    fn allocatable_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>>;
}

impl DeviceSource for DeviceManager {
    fn container_devices(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> BTreeMap<String, Vec<DeviceInfo>> {
        DeviceManager::container_devices(self, pod_uid, container)
    }

    fn allocatable_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>> {
        self.healthy_devices()
    }
}

/// No device manager (it failed to start): no devices to report.
pub struct NoDevices;

impl DeviceSource for NoDevices {
    fn container_devices(&self, _: &str, _: &str) -> BTreeMap<String, Vec<DeviceInfo>> {
        BTreeMap::new()
    }

    fn allocatable_devices(&self) -> BTreeMap<String, Vec<DeviceInfo>> {
        BTreeMap::new()
    }
}
