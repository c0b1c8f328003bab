//! The device checkpoint, `<root-dir>/device-plugins/allocations.json` (upstream's
//! `kubelet_internal_checkpoint`, in litelet's own JSON): which devices each
//! container holds with the plugin's `Allocate` answer, and the device IDs each
//! resource had. Read once at start (so a restarted litelet neither hands a held
//! device to another pod nor calls `Allocate` again for a running one), written
//! through `fsutil::write_atomic` after every change, by whichever thread made it.
//! A checkpoint that cannot be read or decoded is logged and the manager starts
//! with no allocations, as upstream's (a damaged file is kept beside it as
//! `allocations.json.corrupt` for the admin, and the next write replaces it).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{Assigned, DeviceState};
use crate::runtime::devices::DeviceRunOptions;

/// The file name under the state folder.
pub const FILE: &str = "allocations.json";
/// Appended to the name of a checkpoint that failed to decode, kept for the admin.
pub const CORRUPT_SUFFIX: &str = ".corrupt";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("read device checkpoint {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("decode device checkpoint {path}: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("write device checkpoint {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Checkpoint {
    #[serde(default)]
    entries: Vec<Entry>,
    #[serde(default)]
    registered_devices: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(rename = "podUID")]
    pod_uid: String,
    container_name: String,
    resource_name: String,
    #[serde(rename = "deviceIDs")]
    device_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    alloc_resp: Option<DeviceRunOptions>,
}

/// The checkpoint's bytes for `state`.
pub fn encode(state: &DeviceState) -> Vec<u8> {
    let entries = state
        .allocations()
        .iter()
        .flat_map(|((uid, container), resources)| {
            resources.iter().map(move |(resource, a)| Entry {
                pod_uid: uid.clone(),
                container_name: container.clone(),
                resource_name: resource.clone(),
                device_ids: a.ids.clone(),
                alloc_resp: a.options.clone(),
            })
        })
        .collect();
    let checkpoint = Checkpoint {
        entries,
        registered_devices: state.registered(),
    };
    // Plain data of strings and maps: serialising it cannot fail.
    serde_json::to_vec_pretty(&checkpoint).unwrap_or_default()
}

/// Writes `state` to `path` atomically (0600).
pub fn store(path: &Path, state: &DeviceState) -> Result<(), CheckpointError> {
    write(path, &encode(state))
}

/// Writes encoded checkpoint `bytes` to `path` atomically (0600).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    crate::fsutil::write_atomic(path, bytes, 0o600).map_err(|source| CheckpointError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Fills `state` from `path`; a missing file is an empty checkpoint. Resources are
/// restored with no devices (zero capacity until their plugin registers again).
pub fn load(
    path: &Path,
    state: &mut DeviceState,
    now: std::time::Instant,
) -> Result<(), CheckpointError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CheckpointError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let checkpoint: Checkpoint =
        serde_json::from_slice(&bytes).map_err(|source| CheckpointError::Decode {
            path: path.to_owned(),
            source,
        })?;
    for resource in checkpoint.registered_devices.keys() {
        state.restore_resource(resource, now);
    }
    for e in checkpoint.entries {
        state.restore_resource(&e.resource_name, now);
        state.restore_allocation(
            (e.pod_uid, e.container_name),
            e.resource_name,
            Assigned {
                ids: e.device_ids,
                options: e.alloc_resp,
            },
        );
    }
    Ok(())
}

/// The state in the checkpoint at `path`, or none when it cannot be used (upstream
/// logs and continues: device plugins keep working, though a container's devices
/// from before are forgotten). A file that does not decode is moved aside.
pub fn restore(path: &Path, now: std::time::Instant) -> DeviceState {
    let mut state = DeviceState::default();
    let Err(e) = load(path, &mut state, now) else {
        return state;
    };
    log::error!("device plugins: {e}; starting with no device allocations");
    if let CheckpointError::Decode { .. } = e {
        let mut aside = path.as_os_str().to_owned();
        aside.push(CORRUPT_SUFFIX);
        match std::fs::rename(path, &aside) {
            Ok(()) => log::warn!(
                "device plugins: the damaged checkpoint is kept as {}",
                Path::new(&aside).display()
            ),
            Err(e) => log::warn!("device plugins: keeping the damaged checkpoint aside: {e}"),
        }
    }
    DeviceState::default()
}
