//! Garbage collection of dead containers, inactive sandboxes and pod log directories
//! (upstream `pkg/kubelet/kuberuntime/kuberuntime_gc.go`).
//!
//! The decisions are pure functions over what the runtime listed ([`containers_to_remove`],
//! [`sandboxes_to_remove`], [`log_dirs_to_remove`], [`container_log_file`]); the shell
//! ([`RuntimeManager::garbage_collect`]) lists through CRI, calls them and removes. The
//! three phases run one after the other and each runs even when an earlier one failed;
//! their errors are returned together. The sandbox phase lists containers again, so a
//! sandbox whose last container the container phase removed goes in the same round.
//!
//! Called from the GC thread (once a minute upstream); holds no state and no lock.
//!
//! Invariants:
//! - running containers and ready sandboxes, or sandboxes any container still points
//!   to, are never removed; neither is anything without litelet's pod UID label;
//! - files are only ever removed below `pod_logs_dir`: a container log path that
//!   resolves elsewhere is reported and left alone, and a pod log directory is only
//!   removed when its name has the `<namespace>_<name>_<uid>` shape;
//! - pods' content (dead containers, log directories) is removed only when all pod
//!   sources are ready; inactive sandboxes of removable pods go regardless, as upstream
//!   (an inactive sandbox holds nothing a pod worker could still need).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::actions::KillReason;
use super::kill::KillRequest;
use super::labels;
use super::logs::dir::LogDir;
use super::manager::RuntimeManager;
use super::model::ContainerState;
use crate::cri::{pb, CriError};

/// How many dead containers to keep (upstream GCPolicy; the kubelet's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    /// A dead container younger than this is kept (`--minimum-container-ttl-duration`).
    pub min_age: Duration,
    /// Dead instances kept per (pod, container name); negative means no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative means no limit.
    pub max_containers: i32,
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// A container as GC sees it (from CRI ListContainers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcContainer {
    pub id: String,
    /// The pod UID label; empty for containers litelet did not create.
    pub pod_uid: String,
    /// The container name from its metadata.
    pub name: String,
    pub sandbox_id: String,
    pub state: ContainerState,
    /// Unix nanoseconds.
    pub created_at: i64,
}

impl GcContainer {
    pub fn from_cri(container: &pb::Container) -> GcContainer {
        let state = match container.state.enum_value_or_default() {
            pb::ContainerState::CONTAINER_CREATED => ContainerState::Created,
            pb::ContainerState::CONTAINER_RUNNING => ContainerState::Running,
            pb::ContainerState::CONTAINER_EXITED => ContainerState::Exited,
            pb::ContainerState::CONTAINER_UNKNOWN => ContainerState::Unknown,
        };
        GcContainer {
            id: container.id.clone(),
            pod_uid: container
                .labels
                .get(labels::POD_UID)
                .cloned()
                .unwrap_or_default(),
            name: container
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            sandbox_id: container.pod_sandbox_id.clone(),
            state,
            created_at: container.created_at,
        }
    }
}

/// A sandbox as GC sees it (from CRI ListPodSandbox).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcSandbox {
    pub id: String,
    /// The pod UID label; empty for sandboxes litelet did not create.
    pub pod_uid: String,
    pub ready: bool,
    /// Unix nanoseconds.
    pub created_at: i64,
}

impl GcSandbox {
    pub fn from_cri(sandbox: &pb::PodSandbox) -> GcSandbox {
        GcSandbox {
            id: sandbox.id.clone(),
            pod_uid: sandbox
                .labels
                .get(labels::POD_UID)
                .cloned()
                .unwrap_or_default(),
            ready: sandbox.state.enum_value_or_default() == pb::PodSandboxState::SANDBOX_READY,
            created_at: sandbox.created_at,
        }
    }
}

/// A garbage collection step that failed; the others still ran.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("gc: listing containers: {source}")]
    ListContainers { source: CriError },
    #[error("gc: listing pod sandboxes: {source}")]
    ListSandboxes { source: CriError },
    #[error("gc: killing container {id} ({name}) in unknown state before removal: {message}")]
    KillContainer {
        id: String,
        name: String,
        message: String,
    },
    #[error("gc: reading status of container {id} ({name}): {source}")]
    ContainerStatus {
        id: String,
        name: String,
        source: CriError,
    },
    #[error("gc: removing container {id} ({name}): {source}")]
    RemoveContainer {
        id: String,
        name: String,
        source: CriError,
    },
    #[error("gc: log path {path:?} of container {id} is not inside its pod's directory below {root}, left alone")]
    LogPathOutside {
        id: String,
        path: String,
        root: PathBuf,
    },
    #[error("gc: removing log file {path} of container {id}: {source}")]
    RemoveLogFile {
        id: String,
        path: PathBuf,
        source: io::Error,
    },
    #[error("gc: stopping pod sandbox {id} before removal: {source}")]
    StopSandbox { id: String, source: CriError },
    #[error("gc: removing pod sandbox {id}: {source}")]
    RemoveSandbox { id: String, source: CriError },
    #[error("gc: reading pod log root {path}: {source}")]
    ReadLogRoot { path: PathBuf, source: io::Error },
    #[error("gc: removing pod log directory {path}: {source}")]
    RemoveLogDir { path: PathBuf, source: io::Error },
}

fn nanos(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// Newest first; the ID breaks ties so the order never depends on listing order.
fn newest_first(a: &&GcContainer, b: &&GcContainer) -> std::cmp::Ordering {
    b.created_at
        .cmp(&a.created_at)
        .then_with(|| a.id.cmp(&b.id))
}

/// Moves everything past the first `keep` entries of a newest-first list into `out`,
/// oldest first.
fn remove_beyond<'a>(unit: &mut Vec<&'a GcContainer>, keep: usize, out: &mut Vec<&'a GcContainer>) {
    if unit.len() > keep {
        out.extend(unit.drain(keep..).rev());
    }
}

/// The dead containers to remove, in removal order (upstream evictContainers).
///
/// Dead = not running and created at least `min_age` before `now`; grouped by (pod
/// UID, container name). With all sources ready, every dead container of a removable
/// pod goes. Then each group keeps its newest `max_per_pod_container`; then, when more
/// than `max_containers` remain on the node, each group keeps max(1, max / groups) and
/// the oldest of the rest go until `max_containers` remain.
pub fn containers_to_remove<'a>(
    containers: &'a [GcContainer],
    policy: &GcPolicy,
    all_sources_ready: bool,
    removable: &dyn Fn(&str) -> bool,
    now: SystemTime,
) -> Vec<&'a GcContainer> {
    let cutoff =
        nanos(now).saturating_sub(i64::try_from(policy.min_age.as_nanos()).unwrap_or(i64::MAX));
    let mut units: BTreeMap<(&str, &str), Vec<&GcContainer>> = BTreeMap::new();
    for c in containers {
        if c.pod_uid.is_empty() || c.state == ContainerState::Running || c.created_at > cutoff {
            continue;
        }
        units.entry((&c.pod_uid, &c.name)).or_default().push(c);
    }
    for unit in units.values_mut() {
        unit.sort_by(newest_first);
    }

    let mut out = Vec::new();
    if all_sources_ready {
        units.retain(|(uid, _), unit| {
            if removable(uid) {
                remove_beyond(unit, 0, &mut out);
                false
            } else {
                true
            }
        });
    }
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        for unit in units.values_mut() {
            remove_beyond(unit, keep, &mut out);
        }
        units.retain(|_, unit| !unit.is_empty());
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let total = |units: &BTreeMap<_, Vec<_>>| units.values().map(Vec::len).sum::<usize>();
        if total(&units) > max {
            let per_unit = (max / units.len().max(1)).max(1);
            for unit in units.values_mut() {
                remove_beyond(unit, per_unit, &mut out);
            }
            let count = total(&units);
            if count > max {
                let mut flat: Vec<&GcContainer> = units.into_values().flatten().collect();
                flat.sort_by(newest_first);
                remove_beyond(&mut flat, max, &mut out);
            }
        }
    }
    out
}

/// The sandboxes to remove, oldest first (upstream evictSandboxes).
///
/// A sandbox is active when it is ready or some listed container (of any state, ours
/// or not) belongs to it; active sandboxes stay. A removable pod loses every inactive
/// sandbox; any other pod keeps its newest sandbox whatever its state.
pub fn sandboxes_to_remove<'a>(
    sandboxes: &'a [GcSandbox],
    containers: &[GcContainer],
    removable: &dyn Fn(&str) -> bool,
) -> Vec<&'a GcSandbox> {
    let referenced: HashSet<&str> = containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    let mut pods: BTreeMap<&str, Vec<&GcSandbox>> = BTreeMap::new();
    for s in sandboxes.iter().filter(|s| !s.pod_uid.is_empty()) {
        pods.entry(&s.pod_uid).or_default().push(s);
    }
    let mut out = Vec::new();
    for (uid, mut list) in pods {
        list.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        let skip = if removable(uid) { 0 } else { 1 };
        out.extend(
            list.into_iter()
                .skip(skip)
                .rev()
                .filter(|s| !s.ready && !referenced.contains(s.id.as_str())),
        );
    }
    out
}

/// The pod UID in a pod log directory name `<namespace>_<name>_<uid>`; None for any
/// other name (nothing of another shape is ever removed).
pub fn pod_uid_of_log_dir(name: &str) -> Option<&str> {
    let parts: Vec<&str> = name.split('_').collect();
    match parts.as_slice() {
        [ns, pod, uid] if !ns.is_empty() && !pod.is_empty() && !uid.is_empty() => Some(uid),
        _ => None,
    }
}

/// The pod log directories (names below `pod_logs_dir`) to remove: those of removable
/// pods, and only when all sources are ready (upstream evictPodLogsDirectories).
pub fn log_dirs_to_remove<'a>(
    names: &'a [String],
    all_sources_ready: bool,
    removable: &dyn Fn(&str) -> bool,
) -> Vec<&'a str> {
    if !all_sources_ready {
        return Vec::new();
    }
    names
        .iter()
        .filter(|n| pod_uid_of_log_dir(n).is_some_and(removable))
        .map(String::as_str)
        .collect()
}

/// A pod's log directory `<root>/<namespace>_<name>_<uid>`; None when the parts are
/// empty or would not make one plain directory name.
pub fn pod_log_dir_of(root: &Path, namespace: &str, name: &str, uid: &str) -> Option<PathBuf> {
    let plain = |s: &str| !s.is_empty() && !s.contains(['/', '\0']);
    (plain(namespace) && plain(name) && plain(uid))
        .then(|| root.join(format!("{namespace}_{name}_{uid}")))
}

/// Where a container's log file is: the runtime's `log_path` when absolute (containerd
/// reports it joined with the sandbox's log directory), else joined onto the pod's log
/// directory. None when it is empty or does not lie strictly inside `pod_log_dir`
/// (checked lexically: no `..`, no `.`).
pub fn container_log_file(pod_log_dir: &Path, log_path: &str) -> Option<PathBuf> {
    if log_path.is_empty() {
        return None;
    }
    let path = Path::new(log_path);
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        pod_log_dir.join(path)
    };
    let below = full.strip_prefix(pod_log_dir).ok()?;
    let mut parts = below.components().peekable();
    parts.peek()?;
    parts
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(full)
}

/// The names of one container instance's log files in `dir`: the file `name` and its
/// rotated copies (`<name>.<suffix>` next to it).
fn log_files(dir: &LogDir, name: &str) -> Vec<String> {
    let prefix = format!("{name}.");
    let mut files = vec![name.to_owned()];
    if let Ok(names) = dir.names() {
        files.extend(names.into_iter().filter(|n| n.starts_with(&prefix)));
    }
    files
}

/// Whether, with symlinks resolved, `file`'s directory is inside `pod_dir` and
/// `pod_dir` inside `root`; None when one of them does not exist (nothing to remove).
fn really_below(root: &Path, pod_dir: &Path, file: &Path) -> Option<bool> {
    let root = std::fs::canonicalize(root).ok()?;
    let pod_dir = std::fs::canonicalize(pod_dir).ok()?;
    let parent = std::fs::canonicalize(file.parent()?).ok()?;
    Some(pod_dir.starts_with(&root) && pod_dir != root && parent.starts_with(&pod_dir))
}

impl RuntimeManager {
    /// One round of container, sandbox and log garbage collection (upstream
    /// GarbageCollect). `removable(uid)` says whether a pod's content may go (upstream
    /// ShouldPodContentBeRemoved: deleted, or terminated and not to be restarted).
    pub fn garbage_collect(
        &self,
        policy: &GcPolicy,
        all_sources_ready: bool,
        removable: &dyn Fn(&str) -> bool,
        now: SystemTime,
    ) -> Vec<GcError> {
        let mut errors = Vec::new();
        match self.list_gc_containers() {
            Ok(containers) => {
                for c in
                    containers_to_remove(&containers, policy, all_sources_ready, removable, now)
                {
                    if let Err(err) = self.remove_dead_container(c, &mut errors) {
                        errors.push(err);
                    }
                }
            }
            Err(err) => errors.push(err),
        }
        if let Err(err) = self.collect_sandboxes(removable, &mut errors) {
            errors.push(err);
        }
        if let Err(err) = self.collect_log_dirs(all_sources_ready, removable, &mut errors) {
            errors.push(err);
        }
        for err in &errors {
            log::warn!("{err}");
        }
        errors
    }

    fn list_gc_containers(&self) -> Result<Vec<GcContainer>, GcError> {
        let listed = self
            .runtime
            .list_containers(&pb::ListContainersRequest::default())
            .map_err(|source| GcError::ListContainers { source })?;
        Ok(listed
            .containers
            .iter()
            .map(GcContainer::from_cri)
            .collect())
    }

    /// Kills an `unknown` container first, removes its log files, then the container.
    /// Log file problems are reported but do not keep the container: a stray log file
    /// goes with its pod's log directory later, a container that never goes would not.
    fn remove_dead_container(
        &self,
        c: &GcContainer,
        errors: &mut Vec<GcError>,
    ) -> Result<(), GcError> {
        if c.state == ContainerState::Unknown {
            let request = KillRequest {
                container_id: &c.id,
                name: &c.name,
                message: "Container is in unknown state, try killing it before removal",
                reason: KillReason::Unknown,
                grace_override: None,
            };
            // GC's kills run to the end: no pod worker can cancel them.
            self.killer(&super::cancel::Cancel::new())
                .kill_container(None, "", &request, None)
                .map_err(|f| GcError::KillContainer {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    message: f.message,
                })?;
        }
        let status = self.runtime.container_status(&pb::ContainerStatusRequest {
            container_id: c.id.clone(),
            ..Default::default()
        });
        let status = match status {
            Ok(response) => response.status.into_option(),
            Err(err) if err.is_not_found() => return Ok(()),
            Err(source) => {
                return Err(GcError::ContainerStatus {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    source,
                })
            }
        };
        if let Some(status) = status {
            self.remove_container_logs(&c.id, &status, errors);
        }
        log::info!(
            "gc: removing dead container {} ({}) of pod {}",
            c.id,
            c.name,
            c.pod_uid
        );
        match self.runtime.remove_container(&pb::RemoveContainerRequest {
            container_id: c.id.clone(),
            ..Default::default()
        }) {
            Ok(_) => Ok(()),
            Err(err) if err.is_not_found() => Ok(()),
            Err(source) => Err(GcError::RemoveContainer {
                id: c.id.clone(),
                name: c.name.clone(),
                source,
            }),
        }
    }

    fn remove_container_logs(
        &self,
        id: &str,
        status: &pb::ContainerStatus,
        errors: &mut Vec<GcError>,
    ) {
        if status.log_path.is_empty() {
            return;
        }
        let root = &self.settings.pod_logs_dir;
        let label = |key: &str| status.labels.get(key).map(String::as_str).unwrap_or("");
        let pod_dir = pod_log_dir_of(
            root,
            label(labels::POD_NAMESPACE),
            label(labels::POD_NAME),
            label(labels::POD_UID),
        );
        let outside = || GcError::LogPathOutside {
            id: id.to_owned(),
            path: status.log_path.clone(),
            root: root.clone(),
        };
        let Some((pod_dir, file)) =
            pod_dir.and_then(|d| container_log_file(&d, &status.log_path).map(|f| (d, f)))
        else {
            errors.push(outside());
            return;
        };
        match really_below(root, &pod_dir, &file) {
            Some(true) => {}
            Some(false) => {
                errors.push(outside());
                return;
            }
            // Its directory is gone: nothing to remove.
            None => return,
        }
        // Through the folder's descriptor, opened with no symlink below the root: the
        // pod may own its log folder and swap it for a link after the check above.
        let (dir, name) = match LogDir::of_below(root, &file) {
            Ok((dir, name)) => (dir, name.to_string_lossy().into_owned()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return,
            Err(source) => {
                errors.push(GcError::RemoveLogFile {
                    id: id.to_owned(),
                    path: file,
                    source,
                });
                return;
            }
        };
        for name in log_files(&dir, &name) {
            if let Err(source) = dir.remove(&name) {
                errors.push(GcError::RemoveLogFile {
                    id: id.to_owned(),
                    path: dir.join(&name),
                    source,
                });
            }
        }
    }

    /// Lists sandboxes and (again) containers, then stops and removes the chosen ones.
    fn collect_sandboxes(
        &self,
        removable: &dyn Fn(&str) -> bool,
        errors: &mut Vec<GcError>,
    ) -> Result<(), GcError> {
        let containers = self.list_gc_containers()?;
        let sandboxes: Vec<GcSandbox> = self
            .runtime
            .list_pod_sandbox(&pb::ListPodSandboxRequest::default())
            .map_err(|source| GcError::ListSandboxes { source })?
            .items
            .iter()
            .map(GcSandbox::from_cri)
            .collect();
        for s in sandboxes_to_remove(&sandboxes, &containers, removable) {
            log::info!("gc: removing pod sandbox {} of pod {}", s.id, s.pod_uid);
            let stopped = self.runtime.stop_pod_sandbox(&pb::StopPodSandboxRequest {
                pod_sandbox_id: s.id.clone(),
                ..Default::default()
            });
            match stopped {
                Ok(_) => {}
                Err(err) if err.is_not_found() => {}
                Err(source) => {
                    errors.push(GcError::StopSandbox {
                        id: s.id.clone(),
                        source,
                    });
                    continue;
                }
            }
            let removed = self
                .runtime
                .remove_pod_sandbox(&pb::RemovePodSandboxRequest {
                    pod_sandbox_id: s.id.clone(),
                    ..Default::default()
                });
            match removed {
                Ok(_) => {}
                Err(err) if err.is_not_found() => {}
                Err(source) => errors.push(GcError::RemoveSandbox {
                    id: s.id.clone(),
                    source,
                }),
            }
        }
        Ok(())
    }

    /// Removes the log directories of removable pods (only real directories, never
    /// what a symlink points to).
    fn collect_log_dirs(
        &self,
        all_sources_ready: bool,
        removable: &dyn Fn(&str) -> bool,
        errors: &mut Vec<GcError>,
    ) -> Result<(), GcError> {
        if !all_sources_ready {
            return Ok(());
        }
        let root = &self.settings.pod_logs_dir;
        let entries = match std::fs::read_dir(root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(GcError::ReadLogRoot {
                    path: root.clone(),
                    source,
                })
            }
        };
        let names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        for name in log_dirs_to_remove(&names, all_sources_ready, removable) {
            let path = root.join(name);
            log::info!("gc: removing pod log directory {}", path.display());
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => errors.push(GcError::RemoveLogDir { path, source }),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
