//! What the `node` thread asks the rest of litelet before each status computation
//! ([`NodeInputs`]: machine facts, health, runtime version, as closures so tests
//! hand in fixed values), and the production wiring ([`NodeInputs::from_host`]): the
//! machine reader, the shared `RuntimeState` that the `runtime-up` thread keeps from
//! CRI Status (PLEG health included), and CRI Version.
//!
//! The closures run on the `node` thread only; the Version call has the CRI client's
//! deadline.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::cri::RuntimeClient;
use crate::node::machine::{MachineError, MachineInfo, MachineReader};
use crate::node::status::{Health, RuntimeImage};
use crate::runtime::state::RuntimeState;

/// Reads the machine (facts and the problems met).
pub type MachineFn = Box<dyn FnMut() -> (MachineInfo, Vec<MachineError>) + Send>;
/// Reports the runtime, network and PLEG health and the pressure signals.
pub type HealthFn = Box<dyn FnMut() -> Health + Send>;
/// `<runtime name>://<version>`, or `None` while the runtime cannot be asked.
pub type VersionFn = Box<dyn FnMut() -> Option<String> + Send>;
/// The images on the node, or `None` while the runtime cannot be asked.
pub type ImagesFn = Box<dyn FnMut() -> Option<Vec<RuntimeImage>> + Send>;

/// Capacity and allocatable of each device-plugin resource (`src/devicemanager/`).
pub type DevicesFn = Box<dyn FnMut() -> BTreeMap<String, (i64, i64)> + Send>;

/// The attachable volumes the volume manager uses (upstream `GetVolumesInUse` and
/// `MarkVolumesAsReportedInUse`): `status.volumesInUse` is set from it, and it is
/// told what the API server holds after each status write (or check).
pub trait VolumesInUseSource: Send {
    /// Unique names of the attachable volumes pods need or have mounted, sorted.
    fn volumes_in_use(&self) -> Vec<String>;
    /// The node's `volumesInUse` as the API server now has it.
    fn mark_reported_in_use(&self, names: &[String]);
    /// Receives a message when the set changes (status is computed at once).
    fn changes(&self) -> crossbeam_channel::Receiver<()>;
}

/// The `node` thread's view of the rest of litelet.
pub struct NodeInputs {
    pub machine: MachineFn,
    pub health: HealthFn,
    pub runtime_version: VersionFn,
    /// `None`: `status.images` is never set.
    pub images: Option<ImagesFn>,
    /// Asks for a status computation now (the node shutdown's NotReady); `None`: only
    /// the update period.
    pub sync_now: Option<crossbeam_channel::Receiver<()>>,
    /// Device plugins' resources; `None`: no device manager.
    pub devices: Option<DevicesFn>,
    /// Wakes the status computation when a plugin's devices change, so capacity and
    /// allocatable are published at once rather than at the next period.
    pub devices_changed: Option<crossbeam_channel::Receiver<()>>,
    /// The volume manager's attachable volumes; `None`: `volumesInUse` stays empty.
    pub volumes: Option<Box<dyn VolumesInUseSource>>,
}

/// `status.images` from CRI ListImages.
pub fn images_from(images: crate::cri::ImageClient) -> ImagesFn {
    Box::new(move || match images.list_images(&Default::default()) {
        Ok(list) => Some(
            list.images
                .iter()
                .map(|i| RuntimeImage {
                    repo_digests: i.repo_digests.clone(),
                    repo_tags: i.repo_tags.clone(),
                    size_bytes: i.size,
                })
                .collect(),
        ),
        Err(e) => {
            log::debug!("node: images: {e}");
            None
        }
    })
}

impl NodeInputs {
    /// Production inputs: the machine from `reader`; runtime, PLEG and network health
    /// from `state`; the version from CRI Version (the last good answer is kept while
    /// the runtime is away). No pressure is reported until an eviction manager exists.
    pub fn from_host(reader: MachineReader, state: RuntimeState, runtime: RuntimeClient) -> Self {
        let health = move || {
            let now = Instant::now();
            Health {
                runtime_errors: state.runtime_errors(now),
                network_errors: state.network_error().into_iter().collect(),
                ..Health::default()
            }
        };
        let mut last_version: Option<String> = None;
        let version = move || {
            match runtime.check_version() {
                Ok(v) => last_version = Some(format!("{}://{}", v.runtime_name, v.runtime_version)),
                Err(e) => log::debug!("node: runtime version: {e}"),
            }
            last_version.clone()
        };
        NodeInputs {
            machine: Box::new(move || reader.read()),
            health: Box::new(health),
            runtime_version: Box::new(version),
            images: None,
            sync_now: None,
            devices: None,
            devices_changed: None,
            volumes: None,
        }
    }
}
