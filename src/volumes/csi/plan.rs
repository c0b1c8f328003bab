//! The pure half of CSI mounting (upstream `csi_mounter.go`, `csi_attacher.go`,
//! `csi_util.go`): upstream's paths, the `vol_data.json` record, the access-mode
//! mapping, the volume context a driver receives, and what a `CSIDriver` object
//! asks for. No I/O; tested as tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::storage::{CsiDriver, CsiDriverSpec};

use super::pb::volume_capability::access_mode::Mode;

/// The plugin folder of CSI volumes under a pod (`kubernetes.io~csi`).
pub const PLUGIN_CSI: &str = "kubernetes.io~csi";
/// The record beside a pod's CSI mount point.
pub const VOL_DATA: &str = "vol_data.json";

/// Lowercase hex sha256 of `s`.
pub fn sha256_hex(s: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`.
pub fn staging_path(root: &Path, driver: &str, volume_handle: &str) -> PathBuf {
    root.join("plugins/kubernetes.io/csi")
        .join(driver)
        .join(sha256_hex(volume_handle))
        .join("globalmount")
}

/// `<volume dir>/mount`, where the driver publishes the volume for the pod.
pub fn target_path(volume_dir: &Path) -> PathBuf {
    volume_dir.join("mount")
}

/// The VolumeAttachment an attacher creates for this volume on this node
/// (upstream `getAttachmentName`).
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    format!(
        "csi-{}",
        sha256_hex(&format!("{volume_handle}{driver}{node}"))
    )
}

/// The unique name of a CSI volume in the node's `volumesInUse` and
/// `volumesAttached` (upstream: plugin name `kubernetes.io/csi`, then
/// `GetVolumeName`'s `<driver>^<handle>`).
pub fn unique_volume_name(driver: &str, volume_handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{volume_handle}")
}

/// Upstream's `vol_data.json`: enough to tear the volume down after a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolData {
    #[serde(rename = "attachmentID", default)]
    pub attachment_id: String,
    pub driver_name: String,
    pub node_name: String,
    #[serde(rename = "specVolID")]
    pub spec_vol_id: String,
    pub volume_handle: String,
    /// `Persistent` or `Ephemeral`.
    pub volume_lifecycle_mode: String,
}

impl VolData {
    pub fn ephemeral(&self) -> bool {
        self.volume_lifecycle_mode == "Ephemeral"
    }
}

/// The volume id of an inline ephemeral volume (upstream `makeVolumeHandle`:
/// `csi-` + sha256 of pod UID and volume name).
pub fn ephemeral_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume}")))
}

/// Maps a PV access mode to CSI as upstream does: with SINGLE_NODE_MULTI_WRITER
/// advertised, ReadWriteOnce becomes SINGLE_NODE_MULTI_WRITER and
/// ReadWriteOncePod SINGLE_NODE_SINGLE_WRITER; without, both are SINGLE_NODE_WRITER.
pub fn access_mode(pv_mode: Option<&str>, multi_writer: bool) -> Mode {
    match (pv_mode.unwrap_or("ReadWriteOnce"), multi_writer) {
        ("ReadOnlyMany", _) => Mode::MULTI_NODE_READER_ONLY,
        ("ReadWriteMany", _) => Mode::MULTI_NODE_MULTI_WRITER,
        ("ReadWriteOncePod", true) => Mode::SINGLE_NODE_SINGLE_WRITER,
        ("ReadWriteOnce", true) => Mode::SINGLE_NODE_MULTI_WRITER,
        _ => Mode::SINGLE_NODE_WRITER,
    }
}

/// What a `CSIDriver` object says (its defaults when there is none, as upstream:
/// attach required, no pod info, fsGroupPolicy ReadWriteOnceWithFSType).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverPolicy {
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    pub fs_group_policy: String,
    pub requires_republish: bool,
    /// Audiences of `tokenRequests` (not served by litelet: see the design note).
    pub token_audiences: Vec<String>,
    /// `volumeLifecycleModes` (the API server defaults it to `Persistent`); `None`
    /// when the driver has no CSIDriver object.
    pub lifecycle_modes: Option<Vec<String>>,
}

impl DriverPolicy {
    /// From a `CSIDriver` object, or `None` for a driver that has none.
    pub fn from_object(obj: Option<&CsiDriver>) -> DriverPolicy {
        let default = CsiDriverSpec::default();
        let spec = obj.map_or(&default, |o| &o.spec);
        DriverPolicy {
            attach_required: spec.attach_required.unwrap_or(true),
            pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
            fs_group_policy: spec
                .fs_group_policy
                .clone()
                .unwrap_or_else(|| "ReadWriteOnceWithFSType".to_owned()),
            requires_republish: spec.requires_republish.unwrap_or(false),
            token_audiences: spec
                .token_requests
                .iter()
                .map(|t| t.audience.clone())
                .collect(),
            lifecycle_modes: obj.map(|_| {
                if spec.volume_lifecycle_modes.is_empty() {
                    vec!["Persistent".to_owned()]
                } else {
                    spec.volume_lifecycle_modes.clone()
                }
            }),
        }
    }

    /// May the driver serve a volume in this mode (upstream csi_plugin.go
    /// `supportsVolumeLifecycleMode`)? An inline (`Ephemeral`) volume needs a CSIDriver
    /// object listing the mode; a persistent one is fine without an object.
    pub fn check_lifecycle_mode(
        &self,
        driver: &str,
        ephemeral: bool,
    ) -> Result<(), UnsupportedMode> {
        let mode = if ephemeral { "Ephemeral" } else { "Persistent" };
        match &self.lifecycle_modes {
            None if !ephemeral => Ok(()),
            Some(modes) if modes.iter().any(|m| m == mode) => Ok(()),
            supported => Err(UnsupportedMode {
                mode,
                driver: driver.to_owned(),
                supported: supported.clone(),
            }),
        }
    }

    /// Should the kubelet give the volume to the pod's fsGroup (upstream
    /// `supportsFSGroup`)?
    pub fn applies_fs_group(
        &self,
        fs_type: &str,
        access_mode: Option<&str>,
        ephemeral: bool,
    ) -> bool {
        match self.fs_group_policy.as_str() {
            "File" => true,
            "None" => false,
            // ReadWriteOnceWithFSType: only with an fsType, and for a PV only RWO.
            _ => !fs_type.is_empty() && (ephemeral || access_mode == Some("ReadWriteOnce")),
        }
    }
}

/// A volume lifecycle mode the driver's CSIDriver object does not list (upstream's
/// message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("volume mode {mode:?} not supported by driver {driver} ({})", supported_text(.supported))]
pub struct UnsupportedMode {
    pub mode: &'static str,
    pub driver: String,
    /// The modes listed; `None`: the driver has no CSIDriver object.
    pub supported: Option<Vec<String>>,
}

fn supported_text(supported: &Option<Vec<String>>) -> String {
    match supported {
        None => "no CSIDriver object".to_owned(),
        Some(modes) => format!("only supports {modes:?}"),
    }
}

/// The pod facts a driver with `podInfoOnMount` receives.
pub struct PodInfo<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
    pub service_account: &'a str,
}

/// The volume context of NodePublishVolume: the volume's attributes, plus the pod's
/// facts with `podInfoOnMount`, plus `csi.storage.k8s.io/ephemeral`.
pub fn volume_context(
    attributes: &BTreeMap<String, String>,
    pod: Option<&PodInfo<'_>>,
    ephemeral: bool,
) -> BTreeMap<String, String> {
    let mut ctx = attributes.clone();
    if let Some(p) = pod {
        let prefix = "csi.storage.k8s.io/";
        for (k, v) in [
            ("pod.name", p.name),
            ("pod.namespace", p.namespace),
            ("pod.uid", p.uid),
            ("serviceAccount.name", p.service_account),
            ("ephemeral", if ephemeral { "true" } else { "false" }),
        ] {
            ctx.insert(format!("{prefix}{k}"), v.to_owned());
        }
    }
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn paths_are_upstreams() {
        let root = Path::new("/var/lib/kubelet");
        assert_eq!(
            staging_path(root, "hostpath.csi.k8s.io", "abc"),
            Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad/globalmount")
        );
        assert_eq!(
            target_path(Path::new("/r/pods/u/volumes/kubernetes.io~csi/pv1")),
            Path::new("/r/pods/u/volumes/kubernetes.io~csi/pv1/mount")
        );
        assert_eq!(
            attachment_name("h", "d", "n"),
            format!("csi-{}", sha256_hex("hdn"))
        );
        assert!(ephemeral_handle("uid", "vol").starts_with("csi-"));
        assert_ne!(
            ephemeral_handle("uid", "vol"),
            ephemeral_handle("uid2", "vol")
        );
    }

    #[test]
    fn access_modes_map_as_upstream() {
        let cases = [
            (Some("ReadWriteOnce"), true, Mode::SINGLE_NODE_MULTI_WRITER),
            (Some("ReadWriteOnce"), false, Mode::SINGLE_NODE_WRITER),
            (
                Some("ReadWriteOncePod"),
                true,
                Mode::SINGLE_NODE_SINGLE_WRITER,
            ),
            (Some("ReadWriteOncePod"), false, Mode::SINGLE_NODE_WRITER),
            (Some("ReadOnlyMany"), true, Mode::MULTI_NODE_READER_ONLY),
            (Some("ReadWriteMany"), false, Mode::MULTI_NODE_MULTI_WRITER),
            (None, true, Mode::SINGLE_NODE_MULTI_WRITER),
        ];
        for (pv, multi, want) in cases {
            assert_eq!(access_mode(pv, multi), want, "{pv:?} multi={multi}");
        }
    }

    fn driver(v: Value) -> CsiDriver {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn csi_driver_objects_and_their_defaults() {
        let none = DriverPolicy::from_object(None);
        assert!(none.attach_required && !none.pod_info_on_mount && !none.requires_republish);
        let obj = driver(
            json!({"spec": {"attachRequired": false, "podInfoOnMount": true,
            "fsGroupPolicy": "File", "requiresRepublish": true,
            "tokenRequests": [{"audience": "vault"}]}}),
        );
        let p = DriverPolicy::from_object(Some(&obj));
        assert!(!p.attach_required && p.pod_info_on_mount && p.requires_republish);
        assert_eq!(p.token_audiences, ["vault"]);
        assert!(p.applies_fs_group("", Some("ReadWriteMany"), false));
        assert!(!none.applies_fs_group("", Some("ReadWriteOnce"), false));
        assert!(none.applies_fs_group("ext4", Some("ReadWriteOnce"), false));
        assert!(!none.applies_fs_group("ext4", Some("ReadWriteMany"), false));
        let off =
            DriverPolicy::from_object(Some(&driver(json!({"spec": {"fsGroupPolicy": "None"}}))));
        assert!(!off.applies_fs_group("ext4", Some("ReadWriteOnce"), true));
    }

    #[test]
    fn inline_volumes_need_a_csi_driver_listing_the_ephemeral_mode() {
        let check = |obj: Option<Value>, ephemeral: bool| {
            let obj = obj.map(driver);
            DriverPolicy::from_object(obj.as_ref())
                .check_lifecycle_mode("d.example", ephemeral)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            check(None, true).unwrap_err(),
            r#"volume mode "Ephemeral" not supported by driver d.example (no CSIDriver object)"#
        );
        assert!(check(None, false).is_ok(), "persistent needs no object");
        let default = json!({"spec": {}});
        assert_eq!(
            check(Some(default.clone()), true).unwrap_err(),
            r#"volume mode "Ephemeral" not supported by driver d.example (only supports ["Persistent"])"#
        );
        assert!(check(Some(default), false).is_ok());
        let both = json!({"spec": {"volumeLifecycleModes": ["Persistent", "Ephemeral"]}});
        assert!(check(Some(both.clone()), true).is_ok());
        assert!(check(Some(both), false).is_ok());
        let inline_only = json!({"spec": {"volumeLifecycleModes": ["Ephemeral"]}});
        assert_eq!(
            check(Some(inline_only), false).unwrap_err(),
            r#"volume mode "Persistent" not supported by driver d.example (only supports ["Ephemeral"])"#
        );
    }

    #[test]
    fn pod_info_goes_into_the_volume_context_only_when_asked() {
        let attrs = BTreeMap::from([("size".to_owned(), "1Gi".to_owned())]);
        assert_eq!(volume_context(&attrs, None, true), attrs);
        let pod = PodInfo {
            name: "p",
            namespace: "ns",
            uid: "u",
            service_account: "sa",
        };
        let ctx = volume_context(&attrs, Some(&pod), true);
        assert_eq!(ctx["csi.storage.k8s.io/ephemeral"], "true");
        assert_eq!(ctx["csi.storage.k8s.io/pod.uid"], "u");
        assert_eq!(ctx["csi.storage.k8s.io/serviceAccount.name"], "sa");
        assert_eq!(ctx["size"], "1Gi");
    }
}
