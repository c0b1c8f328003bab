//! What the kubelet's sync functions need from the volume and probe managers, as
//! small traits so the sync paths run (and are tested) with or without them.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::admission::NodeView;
use crate::api::pod::Pod;
use crate::api::quantity::Quantity;
use crate::credentialprovider::PullSecret;
use crate::prober::ProbeManager;
use crate::runtime::actions;
use crate::runtime::env::{ConfigSource, NoConfigSource};
use crate::runtime::model::PodRuntimeStatus;
use crate::runtime::resize::admission::{DoesNotFit, NodeFit};
use crate::status::containers as status_containers;

/// The volume manager's own error, kept whole (`source()` reaches it) behind the
/// seam: `volumes` sits above `kubelet`, so the seam cannot name its type.
pub type VolumeCause = Arc<dyn std::error::Error + Send + Sync>;

/// Why a [`PodVolumes`] call failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PodVolumesError {
    /// A volume of the pod could not be set up (the FailedMount event's message).
    #[error("Unable to attach or mount volumes: {0}")]
    Setup(#[source] VolumeCause),
    /// The pod's volumes could not all be unmounted and removed.
    #[error("unmounting volumes of pod {uid}: {source}")]
    Teardown { uid: String, source: VolumeCause },
    /// An image pull secret could not be read.
    #[error("reading pull secret {name:?}: {source}")]
    PullSecret { name: String, source: VolumeCause },
    /// There is no API server to read secrets from (standalone mode).
    #[error("secret {name:?} cannot be read: litelet runs without an API server")]
    NoApiServer { name: String },
}

/// Sets up and tears down a pod's volumes.
pub trait PodVolumes: Send + Sync {
    /// Prepares every volume; returns host paths by volume name.
    fn setup(&self, pod: &Pod) -> Result<BTreeMap<String, PathBuf>, PodVolumesError>;
    /// Unmounts and removes the pod's volumes.
    fn teardown(&self, uid: &str) -> Result<(), PodVolumesError>;
    /// Where configMap and secret references in `pod`'s env are read from.
    fn config_source<'a>(&'a self, pod: &'a Pod) -> Box<dyn ConfigSource + 'a>;
    /// Image pull secret `name` of `pod`, or `None` when it does not exist.
    fn pull_secret(&self, pod: &Pod, name: &str) -> Result<Option<PullSecret>, PodVolumesError> {
        let _ = pod;
        Err(PodVolumesError::NoApiServer {
            name: name.to_owned(),
        })
    }
}

/// Runs probes for pods and reports their results.
pub trait PodProbes: Send + Sync {
    /// Starts or refreshes probe workers for the pod's running containers; `pod_ip`
    /// is where HTTP/TCP/gRPC probes connect by default.
    fn update_pod(&self, pod: &Arc<Pod>, status: &PodRuntimeStatus, pod_ip: &str);
    /// Stops liveness and startup probes (termination has begun).
    fn stop_liveness_and_startup(&self, pod: &Pod);
    /// Stops every probe of the pod.
    fn remove_pod(&self, pod: &Pod);
    /// Stops the probes of every pod not in `keep` (housekeeping).
    fn cleanup_pods(&self, keep: &HashSet<String>);
    /// Liveness and startup results, for compute_pod_actions.
    fn action_results(&self, uid: &str) -> actions::ProbeResults;
    /// Readiness and startup results, for status generation.
    fn status_results(&self, uid: &str) -> status_containers::ProbeResults;
}

/// No volume support: pods without volumes run; a mount of a volume fails clearly.
pub struct NoVolumes;

impl PodVolumes for NoVolumes {
    fn setup(&self, _: &Pod) -> Result<BTreeMap<String, PathBuf>, PodVolumesError> {
        Ok(BTreeMap::new())
    }
    fn teardown(&self, _: &str) -> Result<(), PodVolumesError> {
        Ok(())
    }
    fn config_source<'a>(&'a self, _: &'a Pod) -> Box<dyn ConfigSource + 'a> {
        Box::new(NoConfigSource)
    }
}

/// No probes: every container counts as healthy, started and ready.
pub struct NoProbes;

impl PodProbes for NoProbes {
    fn update_pod(&self, _: &Arc<Pod>, _: &PodRuntimeStatus, _: &str) {}
    fn stop_liveness_and_startup(&self, _: &Pod) {}
    fn remove_pod(&self, _: &Pod) {}
    fn cleanup_pods(&self, _: &HashSet<String>) {}
    fn action_results(&self, _: &str) -> actions::ProbeResults {
        actions::ProbeResults::default()
    }
    fn status_results(&self, _: &str) -> status_containers::ProbeResults {
        status_containers::ProbeResults::default()
    }
}

impl PodProbes for ProbeManager {
    fn update_pod(&self, pod: &Arc<Pod>, status: &PodRuntimeStatus, pod_ip: &str) {
        ProbeManager::update_pod(self, pod, status, pod_ip);
    }
    fn stop_liveness_and_startup(&self, pod: &Pod) {
        ProbeManager::stop_liveness_and_startup(self, pod);
    }
    fn remove_pod(&self, pod: &Pod) {
        ProbeManager::remove_pod(self, pod);
    }
    fn cleanup_pods(&self, keep: &HashSet<String>) {
        ProbeManager::cleanup_pods(self, keep);
    }
    fn action_results(&self, uid: &str) -> actions::ProbeResults {
        self.probe_results(uid)
    }
    fn status_results(&self, uid: &str) -> status_containers::ProbeResults {
        ProbeManager::status_results(self, uid)
    }
}

pub use crate::admission::PodAdmitHandler;

/// Resize admission's view of the node: its allocatable resources and pod
/// admission's resource predicate (`runtime::resize` sits below `admission`).
impl NodeFit for NodeView {
    fn allocatable(&self) -> &BTreeMap<String, Quantity> {
        &self.allocatable
    }

    fn fits(&self, pod: &Pod, others: &[&Pod]) -> Result<(), DoesNotFit> {
        crate::admission::fits(pod, others, self).map_err(|rejection| DoesNotFit {
            message: rejection.message,
        })
    }
}
