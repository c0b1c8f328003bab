//! The kubelet's sync functions (upstream SyncPod, SyncTerminatingPod,
//! SyncTerminatingRuntimePod, SyncTerminatedPod): what the pod workers call on their
//! threads. Each generates the pod's API status, hands it to the status manager and
//! drives the runtime, cgroups, volumes, probes and mirror pods in upstream's order.
//! In-place resize takes part through `PodResize`, one call per step: admission before
//! anything else (everything after runs the allocated pod), the status's allocated
//! pod and conditions, the fresh runtime status after a resize, and forgetting a
//! terminated pod. Built once from a [`SyncerDeps`] struct literal.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::deps::{PodProbes, PodVolumes};
use super::mirror::{is_mirror_of, MirrorClient};
use super::sync_error::PodSyncError;
use crate::api::meta::Time;
use crate::api::pod::{Pod, PodStatus};
use crate::api::quantity::Quantity;
use crate::cgroups::manager::PodCgroupManager;
use crate::cgroups::qos::pod_qos;
use crate::events::{EventType, Recorder};
use crate::pod_workers::{Cancel, PodSyncer, StatusFn, SyncError, Synced, UpdateType};
use crate::runtime::env::EnvContext;
use crate::runtime::envvars::ServiceEnv;
use crate::runtime::manager::RuntimeManager;
use crate::runtime::model::{PodRuntimeStatus, RunningPod};
use crate::runtime::resize::PodResize;
use crate::runtime::result::WaitingReason;
use crate::runtime::state::RuntimeState;
use crate::runtime::sync::SyncInputs;
use crate::sources::services::ServiceStore;
use crate::status::generate::{generate_pod_status, Eviction, PodStatusInput};
use crate::status::manager::StatusManager;

/// Node facts the sync functions use.
#[derive(Clone, Debug, Default)]
pub struct NodeFacts {
    pub name: String,
    pub host_ips: Vec<String>,
    /// Container ID prefix in statuses, e.g. `containerd`.
    pub runtime_name: String,
    pub root_dir: PathBuf,
}

/// What [`KubeletSyncer`] is built from, given once to [`KubeletSyncer::new`]: a
/// struct literal, so every part is required at compile time; the parts a node may run
/// without are `Option`s (pod cgroups, mirror pods and services need what a node may
/// lack: working cgroups, an API server).
pub struct SyncerDeps {
    pub runtime: Arc<RuntimeManager>,
    pub status: StatusManager,
    pub volumes: Arc<dyn PodVolumes>,
    pub probes: Arc<dyn PodProbes>,
    pub runtime_state: RuntimeState,
    pub recorder: Recorder,
    pub node: NodeFacts,
    /// Resize's steps in each sync: admission, the allocated pod and conditions for
    /// the status, the fresh runtime status after a resize, forgetting a pod.
    pub resize: PodResize,
    /// The node's allocatable resources (as admission and the Node status count
    /// them), which the downward API gives containers without limits.
    pub allocatable: BTreeMap<String, Quantity>,
    pub cgroups: Option<Arc<PodCgroupManager>>,
    pub mirrors: Option<MirrorClient>,
    /// The cluster's services, filled by the `services` thread, for service variables;
    /// API pods' containers wait until it has listed once (`None`: standalone mode).
    pub services: Option<ServiceStore>,
}

/// Implements [`PodSyncer`] for the real kubelet.
pub struct KubeletSyncer {
    runtime: Arc<RuntimeManager>,
    status: StatusManager,
    cgroups: Option<Arc<PodCgroupManager>>,
    volumes: Arc<dyn PodVolumes>,
    probes: Arc<dyn PodProbes>,
    runtime_state: RuntimeState,
    recorder: Recorder,
    mirrors: Option<MirrorClient>,
    node: NodeFacts,
    /// The waiting reasons of each pod's last runtime sync (upstream reasonCache).
    reasons: Mutex<HashMap<String, BTreeMap<String, WaitingReason>>>,
    resize: PodResize,
    allocatable: BTreeMap<String, Quantity>,
    services: Option<ServiceStore>,
}

impl KubeletSyncer {
    pub fn new(deps: SyncerDeps) -> KubeletSyncer {
        KubeletSyncer {
            runtime: deps.runtime,
            status: deps.status,
            cgroups: deps.cgroups,
            volumes: deps.volumes,
            probes: deps.probes,
            runtime_state: deps.runtime_state,
            recorder: deps.recorder,
            mirrors: deps.mirrors,
            node: deps.node,
            reasons: Mutex::new(HashMap::new()),
            resize: deps.resize,
            allocatable: deps.allocatable,
            services: deps.services,
        }
    }

    /// The service variables of `pod` (upstream getServiceEnvVarMap + serviceHasSynced).
    fn service_env(&self, pod: &Pod) -> ServiceEnv {
        match &self.services {
            Some(store) => {
                let (synced, services) = store.visible_to(pod.namespace());
                ServiceEnv::for_pod(pod, synced, &services)
            }
            None => ServiceEnv::None,
        }
    }

    fn reasons_of(&self, uid: &str) -> BTreeMap<String, WaitingReason> {
        self.reasons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Keeps the last sync's waiting reasons of a pod; true when they changed.
    fn set_reasons(&self, uid: &str, reasons: BTreeMap<String, WaitingReason>) -> bool {
        let mut all = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        if reasons.is_empty() {
            all.remove(uid).is_some()
        } else {
            all.insert(uid.to_owned(), reasons.clone()).as_ref() != Some(&reasons)
        }
    }

    /// The pod's API status as of `runtime` (upstream generateAPIPodStatus).
    fn api_status(
        &self,
        pod: &Arc<Pod>,
        runtime: &PodRuntimeStatus,
        terminal: bool,
        terminating: bool,
    ) -> PodStatus {
        let previous = self.status.get_pod_status(pod.uid());
        let now = Time::now();
        // Statuses report the allocated resources and the resize conditions.
        let (allocated, resize_conditions) = self.resize.for_status(pod, !terminal && !terminating);
        let pod = &allocated;
        let mut input = PodStatusInput::new(pod, runtime, &self.node.runtime_name, now);
        input.previous = previous.as_ref();
        input.probes = self.probes.status_results(pod.uid());
        input.sync_errors = self.reasons_of(pod.uid());
        input.pod_is_terminal = terminal;
        input.terminating = terminating;
        input.host_ips = self.node.host_ips.clone();
        input.qos_class = Some(pod_qos(pod).into());
        input.eviction = active_deadline_exceeded(pod, previous.as_ref(), now);
        input.resize_conditions = resize_conditions;
        generate_pod_status(&input)
    }

    /// The pod cgroup, made if missing; `counted_anew`: the pod's CPU request changed
    /// the Burstable QoS cgroup's sum (a new pod, a resize, the first sync after a
    /// restart).
    fn ensure_pod_cgroup(
        &self,
        pod: &Pod,
        runtime: &PodRuntimeStatus,
        api: &PodStatus,
        counted_anew: bool,
    ) -> Result<String, PodSyncError> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(String::new());
        };
        let first_sync = !api
            .container_statuses
            .iter()
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        let exists = cgroups.exists(pod.uid());
        if !exists || counted_anew {
            // As upstream: the QoS cgroup holds the new pod's share before the pod
            // cgroup is made below it. A resized request is written here too, before
            // the runtime applies it, rather than at the minute's update.
            update_qos_cgroups(cgroups, pod.uid());
        }
        if !exists && !first_sync {
            // Containers run outside a pod cgroup (e.g. cgroups were set up after a
            // restart): they must be restarted inside one.
            let killed = self
                .runtime
                .kill_pod(Some(pod), &runtime.to_running_pod(), None);
            if !killed.is_ok() {
                log::warn!(
                    "pod {}: killing containers outside a pod cgroup: {killed}",
                    pod.full_name()
                );
            }
        }
        let created = cgroups
            .ensure_pod(pod)
            .and_then(|_| cgroups.pod_cgroup_name(pod));
        created.map_err(|err| {
            let err = PodSyncError::PodCgroup(err);
            self.recorder.pod(
                pod,
                EventType::Warning,
                "FailedToCreatePodContainer",
                err.to_string(),
            );
            err
        })
    }

    fn sync_mirror_pod(&self, pod: &Pod, mirror: Option<&Pod>) {
        let Some(mirrors) = &self.mirrors else {
            return;
        };
        if !pod.is_static() {
            return;
        }
        let mut have_mirror = mirror.is_some();
        if let Some(mirror) = mirror {
            if mirror.deletion_requested() || !is_mirror_of(mirror, pod) {
                match mirrors.delete(mirror.namespace(), mirror.name(), Some(mirror.uid())) {
                    Ok(()) => have_mirror = false,
                    Err(err) => {
                        log::warn!("pod {}: deleting stale mirror pod: {err}", pod.full_name())
                    }
                }
            }
        }
        if !have_mirror {
            if let Err(err) = mirrors.create(pod) {
                log::warn!("pod {}: creating mirror pod: {err}", pod.full_name());
            }
        }
    }

    fn make_pod_dirs(&self, pod: &Pod) -> Result<(), PodSyncError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = self.node.root_dir.join("pods").join(pod.uid());
        for dir in [base.join("volumes"), base.join("plugins")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(&dir)
                .map_err(|err| {
                    let err = PodSyncError::PodDirs(err);
                    self.recorder.pod(
                        pod,
                        EventType::Warning,
                        "FailedToMakePodDataDirectories",
                        err.to_string(),
                    );
                    err
                })?;
        }
        Ok(())
    }
}

/// Writes the QoS cgroups' CPU shares; a failure is logged and never fails the sync of
/// `uid` (the periodic update on the `gc` thread tries again).
fn update_qos_cgroups(cgroups: &PodCgroupManager, uid: &str) {
    if let Err(err) = cgroups.update_qos_cgroups() {
        log::warn!("pod {uid}: updating the QoS cgroups' CPU shares: {err}");
    }
}

/// The pod's activeDeadlineSeconds when it has run that long since its start time
/// (`start`, the kubelet's own record, else the API's), the one deadline check of the
/// sync loop and the pod syncer.
pub(super) fn past_active_deadline(pod: &Pod, start: Option<Time>, now: Time) -> Option<i64> {
    let deadline = pod.spec.active_deadline_seconds?;
    let start = start.or(pod.status.start_time)?;
    (now.unix_seconds() - start.unix_seconds() >= deadline).then_some(deadline)
}

/// The active-deadline eviction (upstream activeDeadlineHandler): the pod ran longer
/// than spec.activeDeadlineSeconds since its start time.
fn active_deadline_exceeded(
    pod: &Pod,
    previous: Option<&PodStatus>,
    now: Time,
) -> Option<Eviction> {
    let deadline = past_active_deadline(pod, previous.and_then(|s| s.start_time), now)?;
    Some(Eviction {
        reason: "DeadlineExceeded".into(),
        message: format!(
            "Pod was active on the node longer than the specified deadline of {deadline} seconds"
        ),
    })
}

impl PodSyncer for KubeletSyncer {
    fn sync_pod(
        &self,
        cancel: &Cancel,
        _update_type: UpdateType,
        pod: &Arc<Pod>,
        mirror: Option<&Arc<Pod>>,
        runtime: &PodRuntimeStatus,
    ) -> Result<Synced, SyncError> {
        // Resize admission first; everything below runs the allocated pod.
        let allocated = self
            .resize
            .admit(pod, runtime)
            .map_err(PodSyncError::from)?;
        let pod = &allocated;
        let api = self.api_status(pod, runtime, false, false);
        let phase_terminal = crate::status::is_terminal_phase(api.phase.as_ref());
        let host_network = pod.spec.host_network.unwrap_or(false);
        let pod_ips: Vec<String> = if host_network {
            self.node.host_ips.clone()
        } else {
            api.pod_ips.iter().map(|ip| ip.ip.clone()).collect()
        };
        self.status.set_pod_status(pod, api.clone());
        if phase_terminal {
            return Ok(Synced::from(true));
        }
        // Active, at its allocated resources: the QoS cgroups' next write counts it.
        let counted_anew = self
            .cgroups
            .as_ref()
            .is_some_and(|cgroups| cgroups.note_active_pod(pod));
        if let (Some(problem), false) = (self.runtime_state.network_error(), host_network) {
            let message = format!("network is not ready: {problem}");
            self.recorder
                .pod(pod, EventType::Warning, "NetworkNotReady", &message);
            return Err(PodSyncError::NetworkNotReady(problem).into());
        }
        let cgroup_parent = self.ensure_pod_cgroup(pod, runtime, &api, counted_anew)?;
        self.sync_mirror_pod(pod, mirror.map(|m| &**m));
        self.make_pod_dirs(pod)?;
        let volumes = self.volumes.setup(pod).map_err(|err| {
            self.recorder
                .pod(pod, EventType::Warning, "FailedMount", err.to_string());
            PodSyncError::from(err)
        })?;
        let probe_ip = pod_ips.first().cloned().unwrap_or_else(|| {
            if host_network {
                "127.0.0.1".into()
            } else {
                String::new()
            }
        });
        let env = EnvContext {
            node_name: self.node.name.clone(),
            host_ips: self.node.host_ips.clone(),
            pod_ips,
            node_allocatable: self.allocatable.clone(),
            services: self.service_env(pod),
        };
        let pull_secrets = super::pull_secrets::VolumePullSecrets(self.volumes.as_ref());
        let config_source = self.volumes.config_source(pod);
        let inputs = SyncInputs {
            cgroup_parent,
            volumes: &volumes,
            env: &env,
            config_source: config_source.as_ref(),
            pull_secrets: Some(&pull_secrets),
            cgroups: self.cgroups.as_deref(),
            cancel: cancel.clone(),
        };
        let probes = self.probes.action_results(pod.uid());
        let outcome = self.runtime.sync_pod(pod, runtime, &probes, &inputs);
        if cancel.is_cancelled() {
            // A cancelled sync's half-done steps are no waiting reasons; the update
            // that cancelled it runs next.
            return Err(SyncError::Canceled);
        }
        let reasons_changed = self.set_reasons(pod.uid(), outcome.container_errors());
        // Report the new resources now, not at the next periodic sync.
        let fresh = self.resize.after_runtime_sync(pod, &outcome, || {
            self.runtime
                .pod_status(pod.uid(), pod.name(), pod.namespace())
        });
        let reported = fresh.is_some();
        if let Some(fresh) = fresh {
            let api = self.api_status(pod, &fresh, false, false);
            self.status.set_pod_status(pod, api);
        }
        if reasons_changed && !reported {
            // Report this sync's waiting reasons now (ErrImagePull right after the
            // failed pull, ImagePullBackOff once waiting), not one sync later.
            let api = self.api_status(pod, runtime, false, false);
            self.status.set_pod_status(pod, api);
        }
        self.probes.update_pod(pod, runtime, &probe_ip);
        let retry_in = outcome.retry_in();
        if outcome.is_ok() || outcome.only_backoff() {
            Ok(Synced {
                terminal: false,
                retry_in,
            })
        } else {
            Err(PodSyncError::Runtime { outcome, retry_in }.into())
        }
    }

    fn sync_terminating_pod(
        &self,
        cancel: &Cancel,
        pod: &Arc<Pod>,
        runtime: &PodRuntimeStatus,
        grace: Option<i64>,
        status_fn: Option<StatusFn>,
    ) -> Result<(), SyncError> {
        let mut api = self.api_status(pod, runtime, false, true);
        if let Some(edit) = &status_fn {
            edit(&mut api);
        }
        self.status.set_pod_status(pod, api);
        self.probes.stop_liveness_and_startup(pod);
        let killed =
            self.runtime
                .kill_pod_cancellable(Some(pod), &runtime.to_running_pod(), grace, cancel);
        if cancel.is_cancelled() {
            // A shorter grace period (or a kill) replaced this one; it runs next.
            return Err(SyncError::Canceled);
        }
        if !killed.is_ok() {
            let err = PodSyncError::Kill(killed);
            self.recorder
                .pod(pod, EventType::Warning, "FailedToKillPod", err.to_string());
            return Err(err.into());
        }
        self.probes.remove_pod(pod);
        // Trust, but verify: ask the runtime directly, not the cache.
        let fresh = self
            .runtime
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .map_err(PodSyncError::StatusAfterKill)?;
        let still: Vec<String> = fresh
            .containers
            .iter()
            .filter(|c| c.state == crate::runtime::model::ContainerState::Running)
            .map(|c| c.id.clone())
            .collect();
        if !still.is_empty() {
            return Err(PodSyncError::StillRunning(still).into());
        }
        let mut api = self.api_status(pod, &fresh, true, true);
        if let Some(edit) = &status_fn {
            edit(&mut api);
        }
        self.status.set_pod_status(pod, api);
        Ok(())
    }

    fn sync_terminating_runtime_pod(
        &self,
        cancel: &Cancel,
        running: &RunningPod,
    ) -> Result<(), SyncError> {
        let killed = self
            .runtime
            .kill_pod_cancellable(None, running, Some(1), cancel);
        if cancel.is_cancelled() {
            return Err(SyncError::Canceled);
        }
        if killed.is_ok() {
            Ok(())
        } else {
            log::warn!(
                "orphaned pod {}/{} ({}): {killed}",
                running.namespace,
                running.name,
                running.uid
            );
            Err(PodSyncError::KillOrphan(killed).into())
        }
    }

    fn sync_terminated_pod(
        &self,
        _cancel: &Cancel,
        pod: &Arc<Pod>,
        runtime: &PodRuntimeStatus,
    ) -> Result<(), SyncError> {
        let api = self.api_status(pod, runtime, true, true);
        self.status.set_pod_status(pod, api);
        if let Some(cgroups) = &self.cgroups {
            // Terminated pods are not active (upstream filterOutInactivePods).
            cgroups.forget_active_pod(pod.uid());
        }
        self.volumes
            .teardown(pod.uid())
            .map_err(PodSyncError::from)?;
        if let Some(cgroups) = &self.cgroups {
            let removed = cgroups.remove_pod(pod.uid());
            // As upstream after removing pod cgroups: its share goes back.
            update_qos_cgroups(cgroups, pod.uid());
            removed.map_err(PodSyncError::RemovePodCgroup)?;
        }
        self.set_reasons(pod.uid(), BTreeMap::new());
        self.resize.forget(pod);
        self.status.terminate_pod(pod);
        Ok(())
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    /// spec.activeDeadlineSeconds: counted from the pod's start time, then the pod is
    /// failed with upstream's reason and message (the field audit names this test).
    #[test]
    fn active_deadline_seconds_fails_the_pod_once_it_ran_that_long() {
        let mut pod = Pod::default();
        pod.spec.active_deadline_seconds = Some(30);
        let start = Time::from_unix_seconds(1_000);
        pod.status.start_time = Some(start);
        assert!(active_deadline_exceeded(&pod, None, Time::from_unix_seconds(1_029)).is_none());
        let evicted = active_deadline_exceeded(&pod, None, Time::from_unix_seconds(1_030))
            .expect("deadline reached");
        assert_eq!(evicted.reason, "DeadlineExceeded");
        assert_eq!(
            evicted.message,
            "Pod was active on the node longer than the specified deadline of 30 seconds"
        );
        pod.spec.active_deadline_seconds = None;
        assert!(active_deadline_exceeded(&pod, None, Time::from_unix_seconds(9_999)).is_none());
    }
}
