//! Node-side CSI volume operations (upstream `csi_attacher.go` MountDevice /
//! UnmountDevice and `csi_mounter.go` SetUp / TearDown), run by pod worker
//! threads from `VolumeManager::setup_pod` and `teardown_pod`.
//!
//! Set-up: the driver must be registered; its `CSIDriver` object decides the rest
//! ([`DriverPolicy`]). attachRequired: the volume joins the node's volumes in use
//! ([`VolumesInUse`]) and, unless already mounted, waits until the node status lists
//! it; then the VolumeAttachment must say attached (its metadata becomes the publish
//! context). STAGE_UNSTAGE: NodeStageVolume on the
//! global staging path. Then `vol_data.json` is written (before NodePublishVolume,
//! so a crash in between still leaves a record to tear down from) and
//! NodePublishVolume on `<volume dir>/mount`, skipped when already mounted unless
//! the driver requires republishing. Tear-down reads `vol_data.json` (so it works
//! after a litelet restart), NodeUnpublishVolume, and NodeUnstageVolume once no
//! other pod's volume on the node uses the same staged volume. A failure leaves the
//! record in place; the caller retries at its next pass.

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::client::{CsiClient, NodeCapability, VOLUME_TIMEOUT};
use super::plan::{self, DriverPolicy, PodInfo, VolData, PLUGIN_CSI, VOL_DATA};
use super::{pb, CsiError, Drivers};
use crate::api::pod::Pod;
use crate::api::storage::{CsiDriver, VolumeAttachment};
use crate::api::{paths, ApiClient, ApiError};
use crate::fsutil;
use crate::volumes::in_use::VolumesInUse;
use crate::volumes::mount::{self, MountError};
use crate::volumes::ownership::{self, OwnershipError};

/// A CSI step that failed.
#[derive(Debug, thiserror::Error)]
pub enum CsiMountError {
    /// No registration socket announced the driver (yet).
    #[error("CSI driver {0} is not registered on this node: waiting for it")]
    NotRegistered(String),
    /// The driver's call failed (deadline included).
    #[error("CSI driver {driver}: {source}")]
    Call { driver: String, source: CsiError },
    /// Reading the CSIDriver object or the VolumeAttachment failed.
    #[error("get {what}: {source}")]
    Api { what: String, source: Box<ApiError> },
    /// attachRequired and the node status does not list the volume in
    /// `volumesInUse` yet (upstream's wait in `VerifyControllerAttachedVolume`).
    #[error("volume {name} has not been added to the list of VolumesInUse in the node's volume status yet: waiting")]
    NotReportedInUse { name: String },
    /// attachRequired and the VolumeAttachment is missing or not attached yet.
    #[error(
        "volume {handle} is not attached to this node yet (VolumeAttachment {attachment}): waiting"
    )]
    NotAttached { handle: String, attachment: String },
    /// The driver's CSIDriver object does not list the volume's lifecycle mode
    /// (upstream's message).
    #[error(transparent)]
    LifecycleMode(#[from] plan::UnsupportedMode),
    /// The record beside a mount point cannot be read or written.
    #[error("{step} {path}: {source}")]
    RecordIo {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The record beside a mount point cannot be encoded or decoded.
    #[error("{step} {path}: {source}")]
    RecordJson {
        step: &'static str,
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A directory step (create, list) failed.
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Checking or undoing mounts failed, or the driver left a mount behind.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The volume's tree could not be given to the pod's fsGroup.
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
}

/// One CSI volume of a pod, as set up.
pub struct CsiVolume<'a> {
    pub driver: &'a str,
    /// The driver's volume id (for an inline volume: made from pod UID and name).
    pub handle: String,
    pub read_only: bool,
    pub fs_type: &'a str,
    /// Mount flags (a PV's `mountOptions`).
    pub mount_flags: &'a [String],
    pub attributes: &'a std::collections::BTreeMap<String, String>,
    /// The PV's first access mode (None for inline volumes).
    pub access_mode: Option<&'a str>,
    pub ephemeral: bool,
    /// The volume's folder: `<root>/pods/<uid>/volumes/kubernetes.io~csi/<spec name>`.
    pub dir: PathBuf,
    /// The spec name (PV name, or the pod's volume name for inline volumes).
    pub spec_name: &'a str,
}

/// Talks to registered drivers for pod volumes.
pub struct Mounter {
    pub root: PathBuf,
    pub node: String,
    pub drivers: Drivers,
    pub api: Option<ApiClient>,
    /// Attachable volumes in use, published in the node's `volumesInUse`.
    pub in_use: VolumesInUse,
}

fn call_err(driver: &str) -> impl Fn(CsiError) -> CsiMountError + '_ {
    move |source| CsiMountError::Call {
        driver: driver.to_owned(),
        source,
    }
}

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> CsiMountError + 'a {
    move |source| CsiMountError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

impl Mounter {
    fn client(&self, driver: &str) -> Result<CsiClient, CsiMountError> {
        let found = self
            .drivers
            .get(driver)
            .ok_or_else(|| CsiMountError::NotRegistered(driver.to_owned()))?;
        Ok(CsiClient::new(&found.endpoint, VOLUME_TIMEOUT))
    }

    /// The driver's CSIDriver object, `None` when it has none (or standalone).
    fn csi_driver(&self, driver: &str) -> Result<Option<CsiDriver>, CsiMountError> {
        let Some(api) = &self.api else {
            return Ok(None);
        };
        match api.get::<CsiDriver>(&paths::csi_driver(driver)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(CsiMountError::Api {
                what: format!("CSIDriver {driver}"),
                source: Box::new(e),
            }),
        }
    }

    /// VolumeAttachment `name`, `None` while there is none. The Node authorizer only
    /// shows a node the attachments made for it, so one not created yet is refused
    /// (403, "no relationship found"), not missing: both mean "not attached yet".
    fn attachment(&self, name: &str) -> Result<Option<VolumeAttachment>, CsiMountError> {
        let Some(api) = &self.api else {
            return Ok(None);
        };
        match api.get::<VolumeAttachment>(&paths::volume_attachment(name)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() || e.is_forbidden() => Ok(None),
            Err(e) => Err(CsiMountError::Api {
                what: format!("VolumeAttachment {name}"),
                source: Box::new(e),
            }),
        }
    }

    /// Sets `vol` up for `pod`; returns the path to give the containers.
    pub fn set_up(
        &self,
        pod: &Pod,
        service_account: &str,
        fs_group: Option<u32>,
        vol: &CsiVolume<'_>,
    ) -> Result<PathBuf, CsiMountError> {
        let object = self.csi_driver(vol.driver)?;
        let policy = DriverPolicy::from_object(object.as_ref());
        // Before the driver is even asked: a mode it does not serve never works.
        policy
            .check_lifecycle_mode(vol.driver, vol.ephemeral)
            .map_err(CsiMountError::LifecycleMode)?;
        let target = plan::target_path(&vol.dir);
        let mounted = mount::is_mount_point(&target)?;
        let attachable = policy.attach_required && !vol.ephemeral;
        if attachable {
            // In use from now until tear-down, so that the volume is never detached
            // under the pod, driver registered or not; the first mount waits until
            // the node status lists it.
            let name = plan::unique_volume_name(vol.driver, &vol.handle);
            self.in_use.add(&name, pod.uid());
            if !mounted && !self.in_use.is_reported(&name) {
                return Err(CsiMountError::NotReportedInUse { name });
            }
        }
        let client = self.client(vol.driver)?;
        let caps = client.node_capabilities().map_err(call_err(vol.driver))?;
        let mode = plan::access_mode(
            vol.access_mode,
            caps.contains(&NodeCapability::SingleNodeMultiWriter),
        );
        let capability = capability(mode, vol.fs_type, vol.mount_flags);

        let mut publish_context = HashMap::new();
        let mut attachment_id = String::new();
        if attachable {
            attachment_id = plan::attachment_name(&vol.handle, vol.driver, &self.node);
            let status = self.attachment(&attachment_id)?.map(|va| va.status);
            match status {
                Some(status) if status.attached => {
                    publish_context.extend(status.attachment_metadata);
                }
                _ => {
                    return Err(CsiMountError::NotAttached {
                        handle: vol.handle.clone(),
                        attachment: attachment_id,
                    })
                }
            }
        }

        let staging = (caps.contains(&NodeCapability::StageUnstage) && !vol.ephemeral)
            .then(|| plan::staging_path(&self.root, vol.driver, &vol.handle));
        if let Some(staging) = &staging {
            fs::create_dir_all(staging).map_err(io_err("create dir", staging))?;
            let req = pb::NodeStageVolumeRequest {
                volume_id: vol.handle.clone(),
                publish_context: publish_context.clone(),
                staging_target_path: staging.display().to_string(),
                volume_capability: Some(capability.clone()).into(),
                volume_context: vol.attributes.clone().into_iter().collect(),
                ..Default::default()
            };
            client.stage(&req).map_err(call_err(vol.driver))?;
        }

        fs::create_dir_all(&vol.dir).map_err(io_err("create dir", &vol.dir))?;
        let record = VolData {
            attachment_id,
            driver_name: vol.driver.to_owned(),
            node_name: self.node.clone(),
            spec_vol_id: vol.spec_name.to_owned(),
            volume_handle: vol.handle.clone(),
            volume_lifecycle_mode: if vol.ephemeral {
                "Ephemeral"
            } else {
                "Persistent"
            }
            .into(),
        };
        write_record(&vol.dir, &record)?;

        if !mounted || policy.requires_republish {
            let info = PodInfo {
                name: pod.name(),
                namespace: pod.namespace(),
                uid: pod.uid(),
                service_account,
            };
            let context = plan::volume_context(
                vol.attributes,
                policy.pod_info_on_mount.then_some(&info),
                vol.ephemeral,
            );
            let req = pb::NodePublishVolumeRequest {
                volume_id: vol.handle.clone(),
                publish_context,
                staging_target_path: staging
                    .as_ref()
                    .map(|s| s.display().to_string())
                    .unwrap_or_default(),
                target_path: target.display().to_string(),
                volume_capability: Some(capability).into(),
                readonly: vol.read_only,
                volume_context: context.into_iter().collect(),
                ..Default::default()
            };
            client.publish(&req).map_err(call_err(vol.driver))?;
        }
        if !mounted
            && !vol.read_only
            && policy.applies_fs_group(vol.fs_type, vol.access_mode, vol.ephemeral)
        {
            if let Some(gid) = fs_group {
                ownership::set_volume_ownership(&target, gid, ownership::ChangePolicy::of(pod))?;
            }
        }
        Ok(target)
    }

    /// Tears down the CSI volume in `dir` (a folder under `kubernetes.io~csi`):
    /// unpublish, unstage when no other pod uses the staged volume. A folder with
    /// no record (set-up failed before it) is left for the caller to remove.
    pub fn tear_down(&self, dir: &Path) -> Result<(), CsiMountError> {
        let Some(record) = read_record(dir)? else {
            return Ok(());
        };
        let client = self.client(&record.driver_name)?;
        let target = plan::target_path(dir);
        client
            .unpublish(&record.volume_handle, &target.display().to_string())
            .map_err(call_err(&record.driver_name))?;
        // The driver must have unmounted it; refuse to go on over a live mount.
        mount::ensure_nothing_mounted(dir)?;
        if record.ephemeral() {
            return Ok(());
        }
        let staging = plan::staging_path(&self.root, &record.driver_name, &record.volume_handle);
        if !staging.exists() || self.staged_volume_in_use(dir, &record)? {
            return Ok(());
        }
        let caps = client
            .node_capabilities()
            .map_err(call_err(&record.driver_name))?;
        if caps.contains(&NodeCapability::StageUnstage) {
            client
                .unstage(&record.volume_handle, &staging.display().to_string())
                .map_err(call_err(&record.driver_name))?;
        }
        mount::ensure_nothing_mounted(&staging)?;
        let _ = fs::remove_dir(&staging);
        if let Some(parent) = staging.parent() {
            let _ = fs::remove_dir(parent);
        }
        Ok(())
    }

    /// True when another pod's CSI volume record (other than `dir`'s) names the same
    /// driver and volume handle.
    fn staged_volume_in_use(&self, dir: &Path, record: &VolData) -> Result<bool, CsiMountError> {
        let pods = self.root.join("pods");
        for pod in read_names(&pods)? {
            let plugin = pods.join(pod).join("volumes").join(PLUGIN_CSI);
            for vol in read_names(&plugin)? {
                let other = plugin.join(vol);
                if other == dir {
                    continue;
                }
                if let Ok(Some(r)) = read_record(&other) {
                    if r.driver_name == record.driver_name
                        && r.volume_handle == record.volume_handle
                    {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

fn capability(
    mode: pb::volume_capability::access_mode::Mode,
    fs_type: &str,
    mount_flags: &[String],
) -> pb::VolumeCapability {
    use pb::volume_capability::{AccessMode, Access_type, MountVolume};
    pb::VolumeCapability {
        access_mode: Some(AccessMode {
            mode: mode.into(),
            ..Default::default()
        })
        .into(),
        access_type: Some(Access_type::Mount(MountVolume {
            fs_type: fs_type.to_owned(),
            mount_flags: mount_flags.to_vec(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn read_names(dir: &Path) -> Result<Vec<String>, CsiMountError> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err("read dir", dir)(e)),
    }
}

/// Writes `vol_data.json` durably (`fsutil::write_atomic`: temp file, fsync,
/// rename, directory fsync), mode 0600 whatever the umask: it names the driver's
/// volume handle, which no other user needs.
fn write_record(dir: &Path, record: &VolData) -> Result<(), CsiMountError> {
    let path = dir.join(VOL_DATA);
    let bytes = serde_json::to_vec(record).map_err(|source| CsiMountError::RecordJson {
        step: "encode",
        path: path.clone(),
        source,
    })?;
    fsutil::write_atomic(&path, &bytes, 0o600).map_err(|source| CsiMountError::RecordIo {
        step: "write",
        path,
        source,
    })
}

/// Every readable CSI volume record under `<root>/pods`, with its pod UID (for the
/// in-use set at start-up; unreadable ones are skipped: their tear-down reports them).
pub fn records(root: &Path) -> Vec<(String, VolData)> {
    let pods = root.join("pods");
    let mut out = Vec::new();
    for pod in read_names(&pods).unwrap_or_default() {
        let plugin = pods.join(&pod).join("volumes").join(PLUGIN_CSI);
        for vol in read_names(&plugin).unwrap_or_default() {
            if let Ok(Some(record)) = read_record(&plugin.join(vol)) {
                out.push((pod.clone(), record));
            }
        }
    }
    out
}

/// The record in `dir`, `None` if there is none.
pub fn read_record(dir: &Path) -> Result<Option<VolData>, CsiMountError> {
    let path = dir.join(VOL_DATA);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CsiMountError::RecordIo {
                step: "read",
                path,
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| CsiMountError::RecordJson {
            step: "decode",
            path,
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn vol_data_is_private_whatever_the_umask_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        // A leftover temp file from a crash, world-readable: not reused.
        fs::write(dir.path().join(format!(".{VOL_DATA}.tmp")), b"{}").unwrap();
        let record = VolData {
            attachment_id: String::new(),
            driver_name: "hostpath.csi.k8s.io".into(),
            node_name: "node-1".into(),
            spec_vol_id: "pv-1".into(),
            volume_handle: "vol-1".into(),
            volume_lifecycle_mode: "Persistent".into(),
        };
        write_record(dir.path(), &record).unwrap();
        let mode = fs::metadata(dir.path().join(VOL_DATA))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_record(dir.path()).unwrap(), Some(record));
    }

    /// An attachable volume is in use from its first set-up, and its first mount
    /// waits until the node status lists it (then for the driver and attachment).
    #[test]
    fn attachable_volume_is_in_use_at_once_and_mount_waits_for_the_report() {
        let root = tempfile::tempdir().unwrap();
        let mounter = Mounter {
            root: root.path().to_path_buf(),
            node: "node-1".into(),
            drivers: Drivers::default(),
            api: None,
            in_use: VolumesInUse::default(),
        };
        let mut pod = Pod::default();
        pod.metadata.uid = Some("uid-1".into());
        let attributes = std::collections::BTreeMap::new();
        let vol = CsiVolume {
            driver: "d.csi",
            handle: "vol-1".into(),
            read_only: false,
            fs_type: "",
            mount_flags: &[],
            attributes: &attributes,
            access_mode: Some("ReadWriteOnce"),
            ephemeral: false,
            dir: root
                .path()
                .join("pods/uid-1/volumes")
                .join(PLUGIN_CSI)
                .join("pv-1"),
            spec_name: "pv-1",
        };
        let name = "kubernetes.io/csi/d.csi^vol-1";
        let err = mounter.set_up(&pod, "default", None, &vol).unwrap_err();
        assert!(
            matches!(&err, CsiMountError::NotReportedInUse { name: n } if n == name),
            "{err}"
        );
        assert_eq!(mounter.in_use.names(), [name]);
        mounter.in_use.mark_reported(&[name.to_owned()]);
        let err = mounter.set_up(&pod, "default", None, &vol).unwrap_err();
        assert!(
            matches!(&err, CsiMountError::NotRegistered(_)),
            "past the report, on to the driver: {err}"
        );

        // An inline volume is never attached: not in use.
        let inline = CsiVolume {
            handle: "inline".into(),
            ephemeral: true,
            access_mode: None,
            ..vol
        };
        let _ = mounter.set_up(&pod, "default", None, &inline);
        assert_eq!(mounter.in_use.names(), [name]);
    }
}
