//! The runtime manager: the one object pod workers use to act on the runtime.
//!
//! Holds the CRI clients, the image manager, the crash-loop back-off table, the hook
//! runner and the node settings a sync needs. Shared by all pod worker threads behind
//! an `Arc`; its only mutable state is the back-off table, locked briefly and never
//! across a CRI call.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use super::cancel::Cancel;
use super::dns::DnsSettings;
use super::hooks::HookRunner;
use super::inspect;
use super::kill::Killer;
use super::model::{PodRuntimeStatus, RunningPod};
use super::result::SyncOutcome;
use crate::api::pod::Pod;
use crate::backoff::Backoff;
use crate::cri::{pb, CriError, ImageClient, RuntimeClient};
use crate::events::Recorder;
use crate::images::manager::ImageManager;

/// Node-level settings of the runtime manager.
#[derive(Clone, Debug)]
pub struct RuntimeSettings {
    /// `--root-dir`: pod directories (termination logs, volumes) live under `pods/`.
    pub root_dir: PathBuf,
    /// Root of the pod log directories (`/var/log/pods` by default).
    pub pod_logs_dir: PathBuf,
    pub dns: DnsSettings,
    /// The machine's memory in bytes (Burstable oom_score_adj).
    pub memory_capacity: i64,
    /// Enforce CPU limits with a CFS quota. Always true when litelet runs: there is no
    /// `--cpu-cfs-quota` flag (nor `cpuCFSQuota` in the config file), since in-place
    /// resize compares CPU limits as CFS quotas; tests may turn it off.
    pub enforce_cpu_limits: bool,
    /// The kernel enforces AppArmor ([`super::profiles::apparmor_enabled_on_host`]).
    pub apparmor_enabled: bool,
    /// The node's hosts file, copied into host-network pods' `/etc/hosts`.
    pub node_hosts_file: PathBuf,
    /// Swap for containers (`memorySwap.swapBehavior` and the host's facts).
    pub swap: super::swap::SwapSettings,
    /// `seccompDefault`: RuntimeDefault seccomp for sandboxes and containers whose
    /// security contexts set no profile (upstream's default: false).
    pub seccomp_default: bool,
}

/// The runtime's readiness as its Status call reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeConditions {
    pub runtime_ready: bool,
    pub network_ready: bool,
    /// "Type=false reason:... message:..." for every condition that is not true.
    pub problems: Vec<String>,
    /// What the runtime says it supports, for admission.
    pub features: RuntimeFeatures,
}

/// The runtime's handlers and features as its Status reports them (CRI
/// `runtime_handlers`, `features`); all empty/false from a runtime that predates them
/// (containerd 1.6), which is what "not supported" means upstream too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeFeatures {
    pub handlers: Vec<HandlerFeatures>,
    /// `features.supplemental_groups_policy`: `supplementalGroupsPolicy: Strict` works.
    pub supplemental_groups_policy: bool,
}

/// One runtime handler ("" is the default one) and what it supports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerFeatures {
    pub name: String,
    pub user_namespaces: bool,
    pub recursive_read_only_mounts: bool,
}

impl RuntimeFeatures {
    /// From a Status answer.
    pub fn from_status(response: &pb::StatusResponse) -> RuntimeFeatures {
        RuntimeFeatures {
            handlers: response
                .runtime_handlers
                .iter()
                .map(|h| HandlerFeatures {
                    name: h.name.clone(),
                    user_namespaces: h.features.as_ref().is_some_and(|f| f.user_namespaces),
                    recursive_read_only_mounts: h
                        .features
                        .as_ref()
                        .is_some_and(|f| f.recursive_read_only_mounts),
                })
                .collect(),
            supplemental_groups_policy: response
                .features
                .as_ref()
                .is_some_and(|f| f.supplemental_groups_policy),
        }
    }

    /// Whether any handler can run pods in their own user namespace.
    pub fn user_namespaces(&self) -> bool {
        self.handlers.iter().any(|h| h.user_namespaces)
    }
}

/// What a sync or kill did to one pod in the runtime, for [`RuntimeManager::on_runtime_change`].
#[derive(Clone, Copy, Debug)]
pub struct RuntimeChange<'a> {
    pub uid: &'a str,
}

/// The hook [`RuntimeManager::on_runtime_change`] installs.
type ChangeHook = Box<dyn Fn(RuntimeChange<'_>) + Send + Sync>;

/// Acts on the runtime for pod workers, the PLEG and housekeeping.
pub struct RuntimeManager {
    pub runtime: RuntimeClient,
    pub images: ImageClient,
    pub(super) image_manager: ImageManager,
    pub(super) hooks: Arc<dyn HookRunner>,
    pub(super) recorder: Recorder,
    pub(super) crash_backoff: Mutex<Backoff>,
    pub(super) settings: RuntimeSettings,
    /// Called after a sync or kill touched a pod in the runtime (the PLEG's nudge and
    /// the status cache's staleness mark).
    changed: Option<ChangeHook>,
    /// The missing `--cluster-dns` has been logged (once per process; each pod gets
    /// its own `MissingClusterDNS` event).
    pub(super) missing_dns_logged: std::sync::atomic::AtomicBool,
    /// RuntimeClass → runtime handler for new sandboxes (none resolve standalone).
    pub(super) runtime_classes: crate::runtime_class::RuntimeClasses,
    /// ID ranges of `hostUsers: false` pods.
    pub(super) userns: crate::userns::UsernsManager,
    /// Device plugins' allocations for containers (`src/devicemanager/`); `None`: no
    /// container gets devices.
    pub(super) devices: Option<Arc<dyn super::devices::ContainerDevices>>,
}

impl RuntimeManager {
    pub fn new(
        runtime: RuntimeClient,
        images: ImageClient,
        hooks: Arc<dyn HookRunner>,
        recorder: Recorder,
        settings: RuntimeSettings,
    ) -> RuntimeManager {
        let userns = crate::userns::UsernsManager::new(
            settings.root_dir.join("pods"),
            Ok(Default::default()),
        );
        RuntimeManager {
            userns,
            image_manager: ImageManager::new(images.clone(), recorder.clone()),
            runtime,
            images,
            hooks,
            recorder,
            crash_backoff: Mutex::new(Backoff::default()),
            settings,
            changed: None,
            missing_dns_logged: Default::default(),
            runtime_classes: crate::runtime_class::RuntimeClasses::new(None),
            devices: None,
        }
    }

    /// Gives `hostUsers: false` pods their IDs from `range` (the node's `kubelet`
    /// sub-IDs), or none when the range is unusable.
    pub fn with_user_namespace_range(
        mut self,
        range: Result<crate::userns::IdRange, crate::userns::UsernsError>,
    ) -> Self {
        self.userns = crate::userns::UsernsManager::new(self.settings.root_dir.join("pods"), range);
        self
    }

    /// Resolves pods' `runtimeClassName` through `classes` (with an API server).
    pub fn with_runtime_classes(mut self, classes: crate::runtime_class::RuntimeClasses) -> Self {
        self.runtime_classes = classes;
        self
    }

    /// Pulls with `credentials` (node Docker config, pull records, verification policy).
    pub fn with_credentials(
        mut self,
        credentials: crate::images::manager::CredentialSettings,
    ) -> Self {
        self.image_manager.set_credentials(credentials);
        self
    }

    /// Runs at most as many image pulls at once as `concurrency` allows.
    pub fn with_pull_concurrency(
        mut self,
        concurrency: crate::images::pull_limit::PullConcurrency,
    ) -> Self {
        self.image_manager.set_pull_concurrency(concurrency);
        self
    }

    /// Asks `devices` for each container's device plugin allocations before creating it.
    pub fn with_devices(mut self, devices: Arc<dyn super::devices::ContainerDevices>) -> Self {
        self.devices = Some(devices);
        self
    }

    /// Calls `hook` whenever a sync or kill tried to change a pod in the runtime.
    pub fn on_runtime_change(
        mut self,
        hook: impl Fn(RuntimeChange<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.changed = Some(Box::new(hook));
        self
    }

    /// Runs the change hook when `outcome` touched pod `uid` in the runtime; called
    /// once every step of the sync or kill is done.
    pub(super) fn report_change(&self, uid: &str, outcome: &SyncOutcome) {
        if let (Some(hook), true) = (&self.changed, outcome.touched_runtime()) {
            hook(RuntimeChange { uid });
        }
    }

    pub fn settings(&self) -> &RuntimeSettings {
        &self.settings
    }

    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    pub(super) fn backoff(&self) -> MutexGuard<'_, Backoff> {
        self.crash_backoff.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn killer<'a>(&'a self, cancel: &'a Cancel) -> Killer<'a> {
        Killer {
            runtime: &self.runtime,
            hooks: self.hooks.as_ref(),
            recorder: &self.recorder,
            cancel,
        }
    }

    /// Everything the runtime has for one pod (upstream GetPodStatus).
    pub fn pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodRuntimeStatus, CriError> {
        inspect::pod_status(&self.runtime, uid, name, namespace)
    }

    /// The pods the runtime runs for litelet (upstream GetPods).
    pub fn running_pods(&self, all: bool) -> Result<Vec<RunningPod>, CriError> {
        inspect::running_pods(&self.runtime, all)
    }

    /// Stops a pod's containers and sandboxes (upstream KillPod) to the end. `pod`
    /// is None for pods litelet only knows from the runtime.
    pub fn kill_pod(
        &self,
        pod: Option<&Pod>,
        running: &RunningPod,
        grace_override: Option<i64>,
    ) -> SyncOutcome {
        self.kill_pod_cancellable(pod, running, grace_override, &Cancel::new())
    }

    /// [`RuntimeManager::kill_pod`] for a pod worker: hooks, sidecar waits and
    /// StopContainer end when `cancel` fires, and no sandbox is stopped after it.
    pub fn kill_pod_cancellable(
        &self,
        pod: Option<&Pod>,
        running: &RunningPod,
        grace_override: Option<i64>,
        cancel: &Cancel,
    ) -> SyncOutcome {
        let outcome = self
            .killer(cancel)
            .kill_pod(pod, "", running, grace_override);
        self.report_change(&running.uid, &outcome);
        outcome
    }

    /// The runtime's conditions; an error when the runtime cannot be asked.
    pub fn runtime_conditions(&self) -> Result<RuntimeConditions, CriError> {
        let response = self.runtime.status(&pb::StatusRequest::default())?;
        let conditions = response
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut out = conditions_from(&conditions);
        out.features = RuntimeFeatures::from_status(&response);
        Ok(out)
    }
}

/// Reads RuntimeReady and NetworkReady; a missing condition counts as not ready.
pub fn conditions_from(conditions: &[pb::RuntimeCondition]) -> RuntimeConditions {
    let find = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
    let mut out = RuntimeConditions {
        runtime_ready: find("RuntimeReady").is_some_and(|c| c.status),
        network_ready: find("NetworkReady").is_some_and(|c| c.status),
        problems: Vec::new(),
        features: RuntimeFeatures::default(),
    };
    for kind in ["RuntimeReady", "NetworkReady"] {
        match find(kind) {
            Some(c) if c.status => {}
            Some(c) => out.problems.push(format!(
                "{kind}=false reason:{} message:{}",
                c.reason, c.message
            )),
            None => out.problems.push(format!("{kind} condition is missing")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_false_conditions_are_problems() {
        let conditions = [
            pb::RuntimeCondition {
                type_: "RuntimeReady".into(),
                status: true,
                ..Default::default()
            },
            pb::RuntimeCondition {
                type_: "NetworkReady".into(),
                status: false,
                reason: "NetworkPluginNotReady".into(),
                message: "cni config uninitialized".into(),
                ..Default::default()
            },
        ];
        let got = conditions_from(&conditions);
        assert!(got.runtime_ready && !got.network_ready);
        assert_eq!(
            got.problems,
            ["NetworkReady=false reason:NetworkPluginNotReady message:cni config uninitialized"]
        );
        let none = conditions_from(&[]);
        assert!(!none.runtime_ready);
        assert_eq!(none.problems.len(), 2);
    }
}
