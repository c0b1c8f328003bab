//! `VolumeError`: every way setting up or tearing down a pod's volumes can fail.
//!
//! Each variant names the step and carries the object (configMap/secret name, path,
//! service account); the name of the volume is added by [`VolumeError::Volume`] and a
//! pod's failures are gathered in [`VolumeError::Pod`]. Values only; no thread owns
//! anything here.

use std::path::PathBuf;

use crate::api::pod::Pod;
use crate::api::ApiError;
use crate::events::{EventType, Recorder};

/// Event reason for a volume that cannot be set up (upstream `FailedMount`).
pub const FAILED_MOUNT: &str = "FailedMount";
/// Event reason for a volume that cannot be torn down (upstream `FailedUnMount`).
pub const FAILED_UNMOUNT: &str = "FailedUnMount";

/// A volume step that failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A pod UID or volume name that is not a single path segment.
    #[error("invalid {what} {name:?}: must be one path segment without '/' or NUL")]
    InvalidName { what: &'static str, name: String },
    /// A file path inside a volume (items, downwardAPI, token) that is not allowed.
    #[error("invalid file path {path:?}: {why}")]
    InvalidPath { path: String, why: &'static str },
    /// A volume source litelet does not implement.
    #[error("volume type {kind} is not supported by litelet")]
    Unsupported { kind: String },
    /// Two projected sources write the same file.
    #[error("projected sources conflict on file {path:?}")]
    Conflict { path: String },
    /// A configMap, secret or token is needed but there is no API server.
    #[error("{kind} {name:?} cannot be read: litelet runs without an API server")]
    NoApiServer { kind: &'static str, name: String },
    /// The object does not exist and the reference is not optional.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The object exists but lacks a key that `items` names.
    #[error("{kind} {namespace}/{name} has no key {key:?}")]
    MissingKey {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    /// The API server refused to show the object to this node.
    #[error("{kind} {namespace}/{name} is forbidden for this node: {message}")]
    Forbidden {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// Any other failure reading the object.
    #[error("get {kind} {namespace}/{name}: {source}")]
    Fetch {
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<ApiError>,
    },
    /// The object's data could not be decoded.
    #[error("decode {kind} {namespace}/{name}: {message}")]
    Decode {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// A volume source kept as raw JSON in the pod (an inline `csi` source) could
    /// not be decoded.
    #[error("decode {kind} {namespace}/{name}: {source}")]
    DecodeJson {
        kind: &'static str,
        namespace: String,
        name: String,
        source: serde_json::Error,
    },
    /// The TokenRequest failed (and no unexpired token is cached).
    #[error("request token for service account {namespace}/{service_account}: {source}")]
    Token {
        namespace: String,
        service_account: String,
        source: Box<ApiError>,
    },
    /// The TokenRequest answer holds no usable token.
    #[error("token for service account {namespace}/{service_account}: {message}")]
    TokenAnswer {
        namespace: String,
        service_account: String,
        message: String,
    },
    /// A downwardAPI item cannot be computed.
    #[error("downward API file {path:?}: {source}")]
    DownwardApi {
        path: String,
        source: DownwardApiError,
    },
    /// A hostPath that is not of the declared type.
    #[error("hostPath type check failed: {path} is not a {expected} ({found})")]
    HostPathType {
        path: PathBuf,
        expected: String,
        found: String,
    },
    /// A file system step on a path.
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A mount, unmount or mountinfo step failed, or a mount is still in place.
    #[error(transparent)]
    Mount(#[from] super::mount::MountError),
    /// A volume's tree could not be given to the pod's fsGroup.
    #[error(transparent)]
    Ownership(#[from] super::ownership::OwnershipError),
    /// The API server could not be reached for an object or token, and neither an
    /// earlier set-up of the volume nor the node's copy can stand in (after a
    /// reboot, secrets and tokens are gone with their tmpfs).
    #[error("{source}; the API server is unreachable and {copy}: waiting for it")]
    Unreachable {
        source: Box<VolumeError>,
        copy: NoCopy,
    },
    /// The API server could not be reached and the node's copy of the pod's token
    /// is past the expiry the API server enforces: the pod waits for a fresh one.
    #[error(
        "the node's copy of the token for service account {namespace}/{service_account} \
         expired at {expired} and the API server would refuse it; the API server is \
         unreachable: waiting for it"
    )]
    KeptTokenExpired {
        namespace: String,
        service_account: String,
        expired: String,
    },
    /// A persistentVolumeClaim (or generic ephemeral) volume is not usable yet:
    /// the claim is unbound, its PV names another claim, or it cannot be read.
    #[error(transparent)]
    Claim(#[from] super::pv::ResolveError),
    /// A CSI driver step failed (not registered, not attached, a call failed).
    #[error(transparent)]
    Csi(#[from] super::csi::mounter::CsiMountError),
    /// The pod's subPath bind mounts could not all be unmounted and removed.
    #[error(transparent)]
    SubPaths(#[from] crate::runtime::subpath::SubPathError),
    /// One volume of a pod failed.
    #[error("volume {volume:?}: {source}")]
    Volume {
        volume: String,
        source: Box<VolumeError>,
    },
    /// Every volume that failed for a pod (each a [`VolumeError::Volume`]).
    #[error("pod {pod}: {}", join(failures))]
    Pod {
        /// `namespace/name` (or the UID for tear-down).
        pod: String,
        failures: Vec<VolumeError>,
    },
}

/// Why the node has no copy to stand in for the API server (edge autonomy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoCopy {
    /// `--checkpoint-secrets=false`: nothing of the pods' data is kept.
    Disabled,
    /// The store is on but holds no copy of this object or token.
    Missing,
}

impl std::fmt::Display for NoCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoCopy::Disabled => {
                "this node keeps no copy of pod secrets, configMaps or tokens \
                 (--checkpoint-secrets=false)"
            }
            NoCopy::Missing => "this node keeps no copy of it",
        })
    }
}

/// Why a downwardAPI volume item cannot be computed.
#[derive(Debug, thiserror::Error)]
pub enum DownwardApiError {
    /// A `fieldRef` other than the pod's metadata (as upstream for volumes).
    #[error("unsupported fieldRef path {0:?} in a volume")]
    UnsupportedField(String),
    /// The `resourceFieldRef` names no container of the pod.
    #[error("no container named {0:?}")]
    NoContainer(String),
    /// The container resource cannot be read in the asked unit.
    #[error(transparent)]
    Resource(#[from] crate::runtime::env::EnvError),
    /// The item has neither a `fieldRef` nor a `resourceFieldRef`.
    #[error("neither fieldRef nor resourceFieldRef")]
    NoSource,
}

fn join(failures: &[VolumeError]) -> String {
    failures
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

impl VolumeError {
    pub(crate) fn io(step: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        VolumeError::Io {
            step,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn in_volume(self, volume: &str) -> Self {
        VolumeError::Volume {
            volume: volume.to_owned(),
            source: Box::new(self),
        }
    }

    /// Names of the volumes that failed (upstream's "unmounted volumes=[...]").
    pub fn failed_volumes(&self) -> Vec<&str> {
        match self {
            VolumeError::Volume { volume, .. } => vec![volume.as_str()],
            VolumeError::Pod { failures, .. } => {
                failures.iter().flat_map(|f| f.failed_volumes()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// One message per failed volume, for one FailedMount event each.
    pub fn messages(&self) -> Vec<String> {
        match self {
            VolumeError::Pod { failures, .. } => failures.iter().map(|f| f.to_string()).collect(),
            other => vec![other.to_string()],
        }
    }
}

/// Records one Warning `FailedMount` event per failed volume of `pod` (the pod then
/// waits in ContainerCreating until a later set-up succeeds).
pub fn record_failed_mount(recorder: &Recorder, pod: &Pod, err: &VolumeError) {
    for message in err.messages() {
        recorder.pod(
            pod,
            EventType::Warning,
            FAILED_MOUNT,
            format!("MountVolume.SetUp failed for {message}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_volume_and_object() {
        let err = VolumeError::Pod {
            pod: "default/web".into(),
            failures: vec![
                VolumeError::NotFound {
                    kind: "configmap",
                    namespace: "default".into(),
                    name: "settings".into(),
                }
                .in_volume("config"),
                VolumeError::Unsupported {
                    kind: "persistentVolumeClaim".into(),
                }
                .in_volume("data"),
            ],
        };
        assert_eq!(
            err.to_string(),
            "pod default/web: volume \"config\": configmap default/settings not found; \
             volume \"data\": volume type persistentVolumeClaim is not supported by litelet"
        );
        assert_eq!(err.failed_volumes(), ["config", "data"]);
        assert_eq!(err.messages().len(), 2);

        let (tx, rx) = crossbeam_channel::unbounded();
        record_failed_mount(&Recorder::new(tx), &Pod::default(), &err);
        let events: Vec<_> = rx.try_iter().collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].reason, FAILED_MOUNT);
        assert_eq!(
            events[0].message,
            "MountVolume.SetUp failed for volume \"config\": configmap default/settings not found"
        );
    }
}
