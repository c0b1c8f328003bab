//! Setting up one volume of a pod, by type: the directory (and tmpfs) under the pod,
//! the files of configMap, secret, downwardAPI and projected volumes, the hostPath
//! check. Every step is idempotent: run again, it refreshes content atomically and
//! leaves existing mounts alone.
//!
//! When the API server cannot be reached (edge autonomy, `docs/autonomy.md`), the
//! object cache and token manager serve the node's copy (`poddata`; an event says
//! so, `notice.rs`) and the volume is written from it. Without a copy, a configMap,
//! secret or projected volume whose earlier set-up is still complete on this node
//! (its `..data` link resolves: litelet restarted while cut off) is reused as it is;
//! without that either (after a reboot, secrets and tokens are gone with their
//! tmpfs), the set-up fails with [`VolumeError::Unreachable`] (or
//! [`VolumeError::KeptTokenExpired`]) and the pod waits for the API server.
//!
//! Runs on the pod worker's thread inside `VolumeManager::setup_pod`.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use super::atomic::{self, FileProjection, Payload};
use super::cache::{ObjectKind, ObjectRef};
use super::csi::mounter::CsiVolume;
use super::csi::plan;
use super::error::{NoCopy, VolumeError};
use super::paths::{
    clean_file_path, volume_dir, PLUGIN_CONFIG_MAP, PLUGIN_DOWNWARD_API, PLUGIN_EMPTY_DIR,
    PLUGIN_PROJECTED, PLUGIN_SECRET,
};
use super::payload::{self, mode_bits, KeySource, DEFAULT_MODE};
use super::pv::{Claims, CsiSource, PvSource};
use super::token::TokenSpec;
use super::{hostpath, mount, VolumeManager};
use crate::api::pod::{
    ConfigMapVolumeSource, DownwardApiVolumeSource, EmptyDirVolumeSource, KeyToPath, Pod,
    ProjectedVolumeSource, SecretVolumeSource, Volume, VolumeProjection,
};

/// The source of a volume, as litelet sets it up.
enum Source<'a> {
    EmptyDir(Option<&'a EmptyDirVolumeSource>),
    HostPath(&'a str, Option<&'a str>),
    ConfigMap(&'a ConfigMapVolumeSource),
    Secret(&'a SecretVolumeSource),
    DownwardApi(&'a DownwardApiVolumeSource),
    Projected(&'a ProjectedVolumeSource),
    /// persistentVolumeClaim: the claim's name and the pod's readOnly.
    Claim(&'a str, bool),
    /// Generic ephemeral: the claim `<pod>-<volume>`, owned by the pod.
    Ephemeral,
    /// Inline CSI ephemeral volume (`csi` in the pod spec).
    InlineCsi(&'a serde_json::Value),
    Unsupported(String),
}

fn classify(v: &Volume) -> Source<'_> {
    if let Some(s) = &v.empty_dir {
        return Source::EmptyDir(Some(s));
    }
    if let Some(s) = &v.host_path {
        return Source::HostPath(&s.path, s.type_.as_deref());
    }
    if let Some(s) = &v.config_map {
        return Source::ConfigMap(s);
    }
    if let Some(s) = &v.secret {
        return Source::Secret(s);
    }
    if let Some(s) = &v.downward_api {
        return Source::DownwardApi(s);
    }
    if let Some(s) = &v.projected {
        return Source::Projected(s);
    }
    if let Some(c) = &v.persistent_volume_claim {
        return Source::Claim(&c.claim_name, c.read_only.unwrap_or(false));
    }
    if v.extra.contains_key("ephemeral") {
        return Source::Ephemeral;
    }
    if let Some(csi) = v.extra.get("csi") {
        return Source::InlineCsi(csi);
    }
    match v.extra.keys().next() {
        Some(kind) => Source::Unsupported(kind.clone()),
        // No source at all: the API server defaults that to an emptyDir.
        None => Source::EmptyDir(None),
    }
}

const PLUGIN_NAME_HOST_PATH: &str = "kubernetes.io/host-path";
const PLUGIN_NAME_CSI: &str = "kubernetes.io/csi";

/// The plugin upstream names for a source in the pod spec (None: a claim, whose PV
/// decides, or a source litelet does not support).
fn inline_plugin(source: &Source<'_>) -> Option<&'static str> {
    Some(match source {
        Source::EmptyDir(_) => "kubernetes.io/empty-dir",
        Source::HostPath(..) => PLUGIN_NAME_HOST_PATH,
        Source::ConfigMap(_) => "kubernetes.io/configmap",
        Source::Secret(_) => "kubernetes.io/secret",
        Source::DownwardApi(_) => "kubernetes.io/downward-api",
        Source::Projected(_) => "kubernetes.io/projected",
        Source::InlineCsi(_) => PLUGIN_NAME_CSI,
        Source::Claim(..) | Source::Ephemeral | Source::Unsupported(_) => return None,
    })
}

/// Creates `dir` (mode `mode`, parents 0750) and tells whether it is new.
fn make_dir(dir: &Path, mode: u32) -> Result<bool, VolumeError> {
    if let Some(parent) = dir.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)
            .map_err(|e| VolumeError::io("create dir", parent, e))?;
    }
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {
            // Exact bits, whatever the umask.
            fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                .map_err(|e| VolumeError::io("chmod", dir, e))?;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(VolumeError::io("create dir", dir, e)),
    }
}

/// The mode of a `medium: Memory` emptyDir's root: world-writable and sticky.
const TMPFS_ROOT_MODE: u32 = 0o1777;

/// Gives a shared directory to the pod's fsGroup, with setgid so new files inherit it.
fn share_with_group(dir: &Path, fs_group: Option<u32>, mode: u32) -> Result<(), VolumeError> {
    let Some(gid) = fs_group else { return Ok(()) };
    nix::unistd::chown(dir, None, Some(nix::unistd::Gid::from_raw(gid)))
        .map_err(|e| VolumeError::io("chown", dir, std::io::Error::from_raw_os_error(e as i32)))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o2000))
        .map_err(|e| VolumeError::io("chmod", dir, e))
}

/// True when `err` says the API server could not be reached (not a refusal, not a
/// missing object).
pub(super) fn api_unreachable(err: &VolumeError) -> bool {
    match err {
        VolumeError::Fetch { source, .. } | VolumeError::Token { source, .. } => {
            super::cache::is_transient(source)
        }
        VolumeError::KeptTokenExpired { .. } => true,
        _ => false,
    }
}

fn service_account(pod: &Pod) -> &str {
    pod.spec
        .service_account_name
        .as_deref()
        .or_else(|| {
            pod.spec
                .extra
                .get("serviceAccount")
                .and_then(|v| v.as_str())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// The keys of a configMap or secret a volume (or projection) asks for.
struct Keys<'a> {
    kind: ObjectKind,
    object: &'a str,
    items: &'a [KeyToPath],
    optional: Option<bool>,
}

/// Where a volume's files go: `<root>/pods/<uid>/volumes/<plugin>/<name>`, on a
/// tmpfs when `memory`.
struct FilesDir<'a> {
    uid: &'a str,
    plugin: &'a str,
    name: &'a str,
    memory: bool,
}

/// Where the files of a volume of `plugin` go; all but a configMap's go on a tmpfs.
fn files_dir<'a>(uid: &'a str, plugin: &'a str, name: &'a str) -> FilesDir<'a> {
    FilesDir {
        uid,
        plugin,
        name,
        memory: plugin != PLUGIN_CONFIG_MAP,
    }
}

impl VolumeManager {
    /// Sets up one volume: its plugin as upstream names it (when known: a claim's
    /// comes from its PV) and the host path to mount.
    pub(super) fn setup_volume(
        &self,
        pod: &Pod,
        volume: &Volume,
        fs_group: Option<u32>,
    ) -> (Option<&'static str>, Result<PathBuf, VolumeError>) {
        let source = classify(volume);
        let claim = match source {
            Source::Claim(claim, read_only) => Some((claim.to_owned(), None, read_only)),
            Source::Ephemeral => Some((
                format!("{}-{}", pod.name(), volume.name),
                Some(pod.uid()),
                false,
            )),
            _ => None,
        };
        if let Some((claim, owner, read_only)) = claim {
            return match self.claim_volume(pod, &claim, owner, read_only, fs_group) {
                Ok((path, plugin)) => (Some(plugin), Ok(path)),
                Err(e) => (None, Err(e)),
            };
        }
        let plugin = inline_plugin(&source);
        (plugin, self.set_up_inline(pod, volume, source, fs_group))
    }

    /// Sets up a volume whose source is in the pod spec; returns the host path.
    fn set_up_inline(
        &self,
        pod: &Pod,
        volume: &Volume,
        source: Source<'_>,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, VolumeError> {
        let uid = pod.uid();
        let name = &volume.name;
        match source {
            Source::EmptyDir(src) => self.empty_dir(uid, name, src, fs_group),
            Source::HostPath(path, type_) => {
                let path = PathBuf::from(path);
                hostpath::check(&path, type_)?;
                Ok(path)
            }
            Source::ConfigMap(src) => {
                let keys = Keys {
                    kind: ObjectKind::ConfigMap,
                    object: src.name.as_deref().unwrap_or(""),
                    items: &src.items,
                    optional: src.optional,
                };
                let files = self.key_files(pod, &keys, mode_bits(src.default_mode, DEFAULT_MODE));
                self.write_fetched(&files_dir(uid, PLUGIN_CONFIG_MAP, name), files, fs_group)
            }
            Source::Secret(src) => {
                let keys = Keys {
                    kind: ObjectKind::Secret,
                    object: src.secret_name.as_deref().unwrap_or(""),
                    items: &src.items,
                    optional: src.optional,
                };
                let files = self.key_files(pod, &keys, mode_bits(src.default_mode, DEFAULT_MODE));
                self.write_fetched(&files_dir(uid, PLUGIN_SECRET, name), files, fs_group)
            }
            Source::DownwardApi(src) => {
                let mode = mode_bits(src.default_mode, DEFAULT_MODE);
                let files = payload::downward(pod, &src.items, mode, &self.node_facts())?;
                self.write_files(&files_dir(uid, PLUGIN_DOWNWARD_API, name), &files, fs_group)
            }
            Source::Projected(src) => {
                let files = self.projected_files(pod, src);
                self.write_fetched(&files_dir(uid, PLUGIN_PROJECTED, name), files, fs_group)
            }
            // Routed to `claim_volume` by `setup_volume`.
            Source::Claim(..) | Source::Ephemeral => Err(VolumeError::Unsupported {
                kind: "persistentVolumeClaim".to_owned(),
            }),
            Source::InlineCsi(raw) => self.inline_csi(pod, name, raw, fs_group),
            Source::Unsupported(kind) => Err(VolumeError::Unsupported { kind }),
        }
    }

    /// Writes the files of a volume fetched from the API server; when it could not be
    /// reached and there is no copy, an earlier complete set-up is used as it is.
    fn write_fetched(
        &self,
        to: &FilesDir<'_>,
        files: Result<Payload, VolumeError>,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, VolumeError> {
        let files = files
            .map(Some)
            .or_else(|e| self.earlier_setup(to.uid, to.plugin, to.name, e))?;
        match files {
            Some(files) => self.write_files(to, &files, fs_group),
            None => volume_dir(&self.root, to.uid, to.plugin, to.name),
        }
    }

    /// An inline CSI ephemeral volume (`csi` in the pod spec), set up by its driver.
    fn inline_csi(
        &self,
        pod: &Pod,
        name: &str,
        raw: &serde_json::Value,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, VolumeError> {
        let uid = pod.uid();
        let src: CsiSource =
            serde_json::from_value(raw.clone()).map_err(|source| VolumeError::DecodeJson {
                kind: "csi volume source",
                namespace: pod.namespace().to_owned(),
                name: name.to_owned(),
                source,
            })?;
        let vol = CsiVolume {
            driver: &src.driver,
            handle: plan::ephemeral_handle(uid, name),
            read_only: src.read_only.unwrap_or(false),
            fs_type: src.fs_type.as_deref().unwrap_or(""),
            mount_flags: &[],
            attributes: &src.volume_attributes,
            access_mode: None,
            ephemeral: true,
            dir: volume_dir(&self.root, uid, plan::PLUGIN_CSI, name)?,
            spec_name: name,
        };
        self.csi
            .set_up(pod, service_account(pod), fs_group, &vol)
            .map_err(VolumeError::from)
    }

    /// A volume backed by claim `claim` (owned by pod `owner` for generic ephemeral
    /// volumes): resolved to its PV, then set up by the PV's source.
    fn claim_volume(
        &self,
        pod: &Pod,
        claim: &str,
        owner: Option<&str>,
        read_only: bool,
        fs_group: Option<u32>,
    ) -> Result<(PathBuf, &'static str), VolumeError> {
        let Some(api) = &self.api else {
            return Err(VolumeError::NoApiServer {
                kind: "persistentVolumeClaim",
                name: claim.to_owned(),
            });
        };
        let claims = Claims {
            api,
            node: &self.node_name,
        };
        let resolved = claims.resolve(pod.namespace(), claim, owner)?;
        match &resolved.source {
            PvSource::HostPath { path, type_ } => {
                let path = PathBuf::from(path);
                hostpath::check(&path, type_.as_deref())?;
                Ok((path, PLUGIN_NAME_HOST_PATH))
            }
            PvSource::Local { path } => {
                let path = PathBuf::from(path);
                // A local volume is a disk or folder prepared by the admin: it must exist.
                hostpath::check(&path, Some("Directory"))?;
                Ok((path, "kubernetes.io/local-volume"))
            }
            PvSource::Csi(src) => {
                let vol = CsiVolume {
                    driver: &src.driver,
                    handle: src.volume_handle.clone(),
                    read_only: read_only || resolved.read_only,
                    fs_type: src.fs_type.as_deref().unwrap_or(""),
                    mount_flags: &resolved.mount_options,
                    attributes: &src.volume_attributes,
                    access_mode: resolved.access_modes.first().map(String::as_str),
                    ephemeral: false,
                    dir: volume_dir(&self.root, pod.uid(), plan::PLUGIN_CSI, &resolved.pv_name)?,
                    spec_name: &resolved.pv_name,
                };
                self.csi
                    .set_up(pod, service_account(pod), fs_group, &vol)
                    .map(|path| (path, PLUGIN_NAME_CSI))
                    .map_err(VolumeError::from)
            }
        }
    }

    /// After `err` reading a volume's content: `Ok(None)` keeps the volume's earlier,
    /// complete set-up when the API server was unreachable; otherwise the error.
    fn earlier_setup(
        &self,
        uid: &str,
        plugin: &str,
        name: &str,
        err: VolumeError,
    ) -> Result<Option<Payload>, VolumeError> {
        if !api_unreachable(&err) {
            return Err(err);
        }
        let dir = volume_dir(&self.root, uid, plugin, name)?;
        // `exists` follows the link: the timestamped data directory must be there.
        if dir.join(atomic::DATA_LINK).exists() {
            log::warn!("volume {name} of pod {uid}: {err}; keeping its earlier content");
            return Ok(None);
        }
        if matches!(err, VolumeError::KeptTokenExpired { .. }) {
            return Err(err);
        }
        Err(VolumeError::Unreachable {
            source: Box::new(err),
            copy: self.no_copy(),
        })
    }

    /// Why the node's copy could not stand in for the API server.
    pub(super) fn no_copy(&self) -> NoCopy {
        match self.store {
            Some(_) => NoCopy::Missing,
            None => NoCopy::Disabled,
        }
    }

    fn empty_dir(
        &self,
        uid: &str,
        name: &str,
        src: Option<&EmptyDirVolumeSource>,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, VolumeError> {
        let medium = src.and_then(|s| s.medium.as_deref()).unwrap_or("");
        let memory = match medium {
            "" => false,
            "Memory" => true,
            other => {
                return Err(VolumeError::Unsupported {
                    kind: format!("emptyDir medium {other}"),
                })
            }
        };
        let dir = volume_dir(&self.root, uid, PLUGIN_EMPTY_DIR, name)?;
        // Containers may run as any user: the scratch space is world-writable.
        let created = make_dir(&dir, 0o777)?;
        let mut fresh = created;
        let mut mode = 0o777;
        if memory && self.mounts {
            let size = src
                .and_then(|s| s.size_limit.as_ref())
                .and_then(|q| u64::try_from(q.value()).ok());
            // A tmpfs root is sticky like /tmp (the kernel's default, which upstream
            // keeps by passing no mode): users cannot remove each other's files.
            mode = TMPFS_ROOT_MODE;
            fresh = mount::mount_tmpfs(&dir, size, mode)?;
        } else if memory && created {
            log::warn!(
                "emptyDir {name} of pod {uid}: mounts disabled, medium Memory falls back to disk"
            );
        }
        if fresh {
            share_with_group(&dir, fs_group, mode)?;
        }
        Ok(dir)
    }

    /// Reads a configMap or secret for the pod and picks its files.
    fn key_files(&self, pod: &Pod, keys: &Keys<'_>, mode: u32) -> Result<Payload, VolumeError> {
        let object = ObjectRef {
            kind: keys.kind,
            namespace: pod.namespace(),
            name: keys.object,
            keep: true,
        };
        let found = self.objects.get(&object, pod.uid(), Instant::now())?;
        if let Some(data) = found.as_deref().filter(|d| d.kept) {
            self.notices
                .served(pod, &super::kept_object(&object, &data.resource_version));
        }
        payload::keys(&KeySource {
            kind: keys.kind.as_str(),
            namespace: pod.namespace(),
            name: keys.object,
            data: found.as_deref().map(|d| &d.files),
            items: keys.items,
            mode,
            optional: keys.optional.unwrap_or(false),
        })
    }

    fn projected_files(
        &self,
        pod: &Pod,
        src: &ProjectedVolumeSource,
    ) -> Result<Payload, VolumeError> {
        let mode = mode_bits(src.default_mode, DEFAULT_MODE);
        let mut files = Payload::new();
        for source in &src.sources {
            let more = self.projection(pod, source, mode)?;
            payload::merge(&mut files, more)?;
        }
        Ok(files)
    }

    fn projection(
        &self,
        pod: &Pod,
        source: &VolumeProjection,
        mode: u32,
    ) -> Result<Payload, VolumeError> {
        if let Some(t) = &source.service_account_token {
            let path = clean_file_path(&t.path)?;
            let token = self.tokens.token(
                &TokenSpec {
                    namespace: pod.namespace(),
                    service_account: service_account(pod),
                    pod_name: pod.name(),
                    pod_uid: pod.uid(),
                    audience: t.audience.as_deref(),
                    expiration_seconds: t.expiration_seconds,
                },
                SystemTime::now(),
            )?;
            if token.kept {
                let expires = crate::api::meta::Time::from_system_time(token.expires);
                let what = format!(
                    "token for service account {}/{} (expires {expires})",
                    pod.namespace(),
                    service_account(pod)
                );
                self.notices.served(pod, &what);
            }
            let file = FileProjection {
                data: token.value.into_bytes(),
                mode,
            };
            return Ok(Payload::from([(path, file)]));
        }
        if let Some(c) = &source.config_map {
            let name = c.name.as_deref().unwrap_or("");
            let keys = Keys {
                kind: ObjectKind::ConfigMap,
                object: name,
                items: &c.items,
                optional: c.optional,
            };
            return self.key_files(pod, &keys, mode);
        }
        if let Some(s) = &source.secret {
            let name = s.name.as_deref().unwrap_or("");
            let keys = Keys {
                kind: ObjectKind::Secret,
                object: name,
                items: &s.items,
                optional: s.optional,
            };
            return self.key_files(pod, &keys, mode);
        }
        if let Some(d) = &source.downward_api {
            return payload::downward(pod, &d.items, mode, &self.node_facts());
        }
        let kind = if source.cluster_trust_bundle.is_some() {
            "clusterTrustBundle".to_owned()
        } else {
            source
                .extra
                .keys()
                .next()
                .cloned()
                .unwrap_or_else(|| "empty".into())
        };
        Err(VolumeError::Unsupported {
            kind: format!("projected source {kind}"),
        })
    }

    /// Makes the volume directory (a tmpfs when `memory`) and writes `files` into it.
    fn write_files(
        &self,
        to: &FilesDir<'_>,
        files: &Payload,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, VolumeError> {
        let dir = volume_dir(&self.root, to.uid, to.plugin, to.name)?;
        make_dir(&dir, 0o755)?;
        if to.memory && self.mounts {
            mount::mount_tmpfs(&dir, None, 0o755)?;
        }
        atomic::write(&dir, files, fs_group)?;
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use crate::api::pod::{EmptyDirVolumeSource, Pod, PodSecurityContext, Volume};
    use crate::volumes::VolumeManager;

    #[test]
    fn files_of_every_source_but_a_config_map_go_on_a_tmpfs() {
        use crate::volumes::paths::{
            PLUGIN_CONFIG_MAP, PLUGIN_DOWNWARD_API, PLUGIN_PROJECTED, PLUGIN_SECRET,
        };
        let cases = [
            (PLUGIN_CONFIG_MAP, false),
            (PLUGIN_SECRET, true),
            (PLUGIN_DOWNWARD_API, true),
            (PLUGIN_PROJECTED, true),
        ];
        for (plugin, memory) in cases {
            let dir = super::files_dir("uid", plugin, "vol");
            assert_eq!((dir.plugin, dir.memory), (plugin, memory), "{plugin}");
        }
    }

    fn pod(medium: Option<&str>, fs_group: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("uid-empty".into());
        pod.spec.security_context = Some(PodSecurityContext {
            fs_group,
            ..Default::default()
        });
        pod.spec.volumes.push(Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: medium.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        });
        pod
    }

    /// `Volume::forces_read_only` (in api, so the runtime can ask without importing this
    /// module) says read-only exactly for the sources this module writes itself, and
    /// for claims and inline CSI volumes the pod spec marks readOnly.
    #[test]
    fn forced_read_only_matches_the_kubelet_written_sources() {
        use super::{classify, Source};
        use crate::api::pod::{
            ConfigMapVolumeSource, DownwardApiVolumeSource, HostPathVolumeSource,
            ProjectedVolumeSource, SecretVolumeSource,
        };
        let empty = || Some(EmptyDirVolumeSource::default());
        let host = || {
            Some(HostPathVolumeSource {
                path: "/x".into(),
                ..Default::default()
            })
        };
        let cm = || Some(ConfigMapVolumeSource::default());
        let claim = |read_only| Volume {
            persistent_volume_claim: Some(crate::api::pod::PersistentVolumeClaimVolumeSource {
                claim_name: "c".into(),
                read_only,
            }),
            ..Default::default()
        };
        let extra = |key: &str, value| {
            let mut v = Volume::default();
            v.extra.insert(key.into(), value);
            v
        };
        let volumes = [
            Volume::default(),
            Volume {
                empty_dir: empty(),
                ..Default::default()
            },
            Volume {
                host_path: host(),
                ..Default::default()
            },
            Volume {
                config_map: cm(),
                ..Default::default()
            },
            Volume {
                secret: Some(SecretVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                downward_api: Some(DownwardApiVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                projected: Some(ProjectedVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                empty_dir: empty(),
                config_map: cm(),
                ..Default::default()
            },
            Volume {
                host_path: host(),
                config_map: cm(),
                ..Default::default()
            },
            claim(Some(true)),
            claim(Some(false)),
            claim(None),
            extra("csi", serde_json::json!({"driver": "d", "readOnly": true})),
            extra("csi", serde_json::json!({"driver": "d"})),
            extra("ephemeral", serde_json::json!({"volumeClaimTemplate": {}})),
        ];
        for v in &volumes {
            let written = match classify(v) {
                Source::ConfigMap(_)
                | Source::Secret(_)
                | Source::DownwardApi(_)
                | Source::Projected(_) => true,
                Source::Claim(_, read_only) => read_only,
                Source::InlineCsi(csi) => csi["readOnly"] == true,
                _ => false,
            };
            assert_eq!(v.forces_read_only(), written, "{v:?}");
        }
        assert_eq!(volumes.iter().filter(|v| v.forces_read_only()).count(), 6);
    }

    /// Sets the pod's volumes up under a fresh root; returns (mode bits, gid).
    fn setup(manager: impl Fn(&std::path::Path) -> VolumeManager, pod: &Pod) -> (u32, u32) {
        let root = tempfile::tempdir().unwrap();
        let volumes = manager(root.path());
        let dirs = volumes.setup_pod(pod).unwrap();
        let meta = std::fs::metadata(&dirs["scratch"]).unwrap();
        let got = (meta.permissions().mode() & 0o7777, meta.gid());
        let _ = volumes.teardown_pod(pod.uid());
        got
    }

    /// Edge autonomy: with the API server unreachable, a configMap volume set up
    /// before (a litelet restart) is reused; one never set up (a new pod, or a
    /// secret's tmpfs lost in a reboot) fails with `Unreachable` and waits.
    #[test]
    fn an_earlier_setup_is_reused_while_the_api_server_is_unreachable() {
        use crate::api::client::{ApiClient, ClientConfig};
        use crate::api::pod::ConfigMapVolumeSource;
        use crate::volumes::atomic::{self, FileProjection, Payload};
        use crate::volumes::VolumeError;

        let root = tempfile::tempdir().unwrap();
        // Nothing listens on port 1: every request fails to connect.
        let mut config = ClientConfig::new("https://127.0.0.1:1");
        config.retry.max_retries = 0;
        config.connect_timeout = std::time::Duration::from_millis(200);
        let client = ApiClient::new(&config).unwrap();
        let volumes = VolumeManager::new(root.path(), Some(client), "n").without_mounts();
        let mut p = Pod::default();
        p.metadata.uid = Some("uid-cm".into());
        p.metadata.namespace = Some("default".into());
        p.spec.volumes.push(Volume {
            name: "cfg".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: Some("settings".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = volumes.setup_pod(&p).unwrap_err();
        assert!(
            err.to_string().contains("the API server is unreachable"),
            "{err}"
        );
        assert!(matches!(err, VolumeError::Pod { .. }));

        // As a litelet restart finds it: the volume's earlier content on disk.
        let dir = root
            .path()
            .join("pods/uid-cm/volumes/kubernetes.io~configmap/cfg");
        std::fs::create_dir_all(&dir).unwrap();
        let payload = Payload::from([(
            "greeting".to_owned(),
            FileProjection {
                data: b"hello".to_vec(),
                mode: 0o644,
            },
        )]);
        atomic::write(&dir, &payload, None).unwrap();
        let ready = volumes.setup_pod(&p).unwrap();
        assert_eq!(ready["cfg"], dir);
        assert_eq!(std::fs::read(dir.join("greeting")).unwrap(), b"hello");
    }

    #[test]
    fn empty_dir_on_disk_is_world_writable_and_shared_with_the_fs_group() {
        let disk = |root: &std::path::Path| VolumeManager::new(root, None, "n").without_mounts();
        let plain = setup(disk, &pod(None, None));
        let grouped = setup(disk, &pod(None, Some(4321)));
        assert_eq!(plain.0, 0o777);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(grouped, (0o2777, 4321), "fsGroup: group and setgid");
        }
    }

    #[test]
    fn empty_dir_in_memory_is_a_sticky_world_writable_tmpfs_shared_with_the_fs_group() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP: mounting tmpfs needs root");
            return;
        }
        let mounting = |root: &std::path::Path| VolumeManager::new(root, None, "n");
        assert_eq!(setup(mounting, &pod(Some("Memory"), None)).0, 0o1777);
        assert_eq!(
            setup(mounting, &pod(Some("Memory"), Some(4321))),
            (0o3777, 4321),
            "fsGroup: group and setgid, sticky kept"
        );
    }
}
