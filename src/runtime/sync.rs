//! SyncPod over CRI (upstream kuberuntime SyncPod): computes the pod's actions and
//! carries them out in upstream's order — kill what must go, create the sandbox,
//! start ephemeral, init, resize in place (`runtime::resize::apply`), then regular
//! containers — each start guarded by the crash-loop back-off and followed by the
//! postStart hook.
//!
//! Runs on the pod's worker thread. Every step lands in the returned [`SyncOutcome`]
//! so a failure is never lost; the worker turns it into waiting reasons and a requeue.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use protobuf::MessageField;

use super::actions::{compute_pod_actions, KillReason, PodActions, ProbeResults};
use super::cancel::Cancel;
use super::container::{container_config, sub_path_requests, ContainerContext};
use super::dns;
use super::env::{ConfigSource, EnvContext};
use super::hash::stable_key;
use super::hooks::HookCall;
use super::hosts::{ensure_hosts_file, HostsInputs};
use super::kill::KillRequest;
use super::manager::RuntimeManager;
use super::model::{ContainerState, PodRuntimeStatus};
use super::nonroot;
use super::result::{Failure, SyncAction, SyncOutcome};
use super::sandbox::{pod_log_dir, sandbox_config, SandboxContext};
use super::subpath;
use crate::api::pod::{Container, Pod};
use crate::backoff::{format_delay, time_from_unix_nanos};
use crate::cgroups::PodCgroupManager;
use crate::cri::pb;
use crate::events::EventType;
use crate::runtime::resize::RESIZE_ERROR;
use crate::runtime::result::{
    CRASH_LOOP_BACK_OFF, CREATE_CONTAINER_CONFIG_ERROR, CREATE_CONTAINER_ERROR,
    POST_START_HOOK_ERROR, RUN_CONTAINER_ERROR,
};

/// The waiting reason when the sandbox cannot be created.
pub const CREATE_POD_SANDBOX_ERROR: &str = "CreatePodSandboxError";
/// The longest a postStart hook may run before it counts as failed.
const POST_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Per-sync inputs prepared by the caller (pod worker).
pub struct SyncInputs<'a> {
    /// The pod's cgroup (`/kubepods/.../pod<uid>`), or "" to let the runtime choose.
    pub cgroup_parent: String,
    /// Host paths of the pod's volumes by name.
    pub volumes: &'a BTreeMap<String, PathBuf>,
    pub env: &'a EnvContext,
    pub config_source: &'a dyn ConfigSource,
    /// Reads the pod's imagePullSecrets when a pull needs credentials (`None`:
    /// standalone, only the node's Docker config counts).
    pub pull_secrets: Option<&'a dyn crate::images::manager::PullSecretSource>,
    /// The pod cgroup manager, for in-place resize; `None` when litelet does
    /// not manage pod cgroups (containers are then resized alone).
    pub cgroups: Option<&'a PodCgroupManager>,
    /// The pod worker's token: checked between steps (before and after each image
    /// pull, between containers) and handed to pulls, hooks and kills.
    pub cancel: Cancel,
}

/// Which list of the spec a container to start comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Init,
    Regular,
    Ephemeral,
}

/// What every container start of one sync shares: the sandbox it goes into, its
/// config, the environment (with the sandbox's IPs) and the caller's inputs.
struct StartContext<'a> {
    sandbox_id: &'a str,
    config: &'a pb::PodSandboxConfig,
    env: &'a EnvContext,
    inputs: &'a SyncInputs<'a>,
}

/// The sandbox containers start in: its ID, its config and the pod's IPs.
struct ReadySandbox {
    id: String,
    config: pb::PodSandboxConfig,
    pod_ips: Vec<String>,
}

/// What a container start prepares before its config: the image, the restart count,
/// an ephemeral container's target and the host files it mounts.
struct ContainerFiles {
    image_ref: String,
    restart_count: i32,
    target_id: Option<String>,
    termination_log: PathBuf,
    hosts_file: Option<PathBuf>,
}

static TERMINATION_LOG_SEQ: AtomicU64 = AtomicU64::new(0);

/// Creates the host file mounted at the container's termination message path:
/// `<root>/pods/<uid>/containers/<name>/<unique hex>`, world-writable so any user in
/// the container can write its message.
fn create_termination_log(root: &Path, pod: &Pod, name: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = root
        .join("pods")
        .join(pod.uid())
        .join("containers")
        .join(name);
    std::fs::create_dir_all(&dir)?;
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seq = TERMINATION_LOG_SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{:x}{:04x}", nanos, seq & 0xffff));
    let mut file = std::fs::File::create(&path)?;
    file.flush()?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
    Ok(path)
}

impl RuntimeManager {
    /// Brings the runtime in line with `pod` (upstream SyncPod).
    pub fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        probes: &ProbeResults,
        inputs: &SyncInputs<'_>,
    ) -> SyncOutcome {
        let outcome = self.sync_pod_steps(pod, status, probes, inputs);
        self.report_change(pod.uid(), &outcome);
        outcome
    }

    fn sync_pod_steps(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        probes: &ProbeResults,
        inputs: &SyncInputs<'_>,
    ) -> SyncOutcome {
        let actions = compute_pod_actions(pod, status, probes);
        log::debug!(
            "pod {}/{} ({}): {actions}",
            pod.namespace(),
            pod.name(),
            pod.uid()
        );
        let mut outcome = SyncOutcome::default();

        if actions.create_sandbox && !actions.sandbox_id.is_empty() {
            self.recorder.pod(
                pod,
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
        }
        let cancel = &inputs.cancel;
        if !self.kill_what_must_go(pod, status, &actions, &mut outcome, cancel)
            || cancel.is_cancelled()
        {
            return outcome;
        }
        self.prune_init_containers(pod, status);
        let Some(sandbox) = self.ensure_sandbox(pod, status, &actions, inputs, &mut outcome) else {
            return outcome;
        };
        if cancel.is_cancelled() {
            return outcome;
        }
        let env = EnvContext {
            pod_ips: sandbox.pod_ips,
            ..inputs.env.clone()
        };
        let ctx = StartContext {
            sandbox_id: &sandbox.id,
            config: &sandbox.config,
            env: &env,
            inputs,
        };
        self.start_containers(pod, status, &actions, &ctx, &mut outcome);
        outcome
    }

    /// The sandbox config, and a new sandbox when the actions ask for one (upstream
    /// step 4). `None` when the sync must stop here (a failure is in `outcome`) or there
    /// is no sandbox to start containers in.
    fn ensure_sandbox(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        actions: &PodActions,
        inputs: &SyncInputs<'_>,
        outcome: &mut SyncOutcome,
    ) -> Option<ReadySandbox> {
        // A host-network pod's IPs are the node's: the runtime reports none for it
        // (upstream copies the API status's podIPs in, kubernetes#24576).
        let host_network = pod.spec.host_network.unwrap_or(false);
        let mut pod_ips = if host_network {
            inputs.env.host_ips.clone()
        } else {
            status.ips.clone()
        };
        // hostUsers: false: the pod's own ID range (kept across syncs and restarts).
        let userns = match self.pod_user_namespace(pod) {
            Ok(userns) => userns,
            Err(failure) => {
                self.sandbox_failed(pod, outcome, failure);
                return None;
            }
        };
        let sandbox_ctx = SandboxContext {
            pod_logs_dir: self.settings.pod_logs_dir.clone(),
            cgroup_parent: inputs.cgroup_parent.clone(),
            dns: self.settings.dns.clone(),
            seccomp_root: self.settings.root_dir.join("seccomp"),
            seccomp_default: self.settings.seccomp_default,
            userns,
        };
        let config = match sandbox_config(pod, actions.attempt, &sandbox_ctx) {
            Ok(config) => config,
            Err(err) => {
                let message = format!("Failed to generate sandbox config for pod: {err}");
                let failure = Failure::new(CREATE_POD_SANDBOX_ERROR, message);
                self.sandbox_failed(pod, outcome, failure);
                return None;
            }
        };
        let mut sandbox_id = actions.sandbox_id.clone();
        if actions.create_sandbox {
            self.report_missing_cluster_dns(pod);
            let id = match self.run_sandbox(pod, &config) {
                Ok(id) => id,
                // A pod on its way out needs no new sandbox: not an error, and (as
                // upstream) no FailedCreatePodSandBox event either.
                Err(_) if pod.deletion_requested() => return None,
                Err(failure) => {
                    self.sandbox_failed(pod, outcome, failure);
                    return None;
                }
            };
            match self.new_sandbox_ips(pod, &id) {
                Ok(ips) => {
                    outcome.ok(SyncAction::CreatePodSandbox, pod.full_name());
                    sandbox_id = id;
                    if !host_network {
                        pod_ips = ips;
                    }
                }
                Err(failure) => {
                    outcome.fail(SyncAction::CreatePodSandbox, pod.full_name(), failure);
                    return None;
                }
            }
        }
        (!sandbox_id.is_empty()).then_some(ReadySandbox {
            id: sandbox_id,
            config,
            pod_ips,
        })
    }

    /// Ephemeral containers, init containers, the in-place resize, then regular
    /// containers; a cancel or a failed regular init container stops them.
    fn start_containers(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        actions: &PodActions,
        ctx: &StartContext<'_>,
        outcome: &mut SyncOutcome,
    ) {
        let cancel = &ctx.inputs.cancel;
        // False when the sync must stop here: the start failed or the sync was
        // cancelled (the step is then left out: it did not fail).
        let start = |kind: Kind, container: &Container, outcome: &mut SyncOutcome| {
            if cancel.is_cancelled() {
                return false;
            }
            let result = self.start_with_backoff(pod, status, kind, container, ctx);
            match result {
                Ok(()) => {
                    outcome.ok(SyncAction::StartContainer, &container.name);
                    true
                }
                Err(_) if cancel.is_cancelled() => false,
                Err(failure) => {
                    outcome.fail(SyncAction::StartContainer, &container.name, failure);
                    false
                }
            }
        };

        for &index in &actions.ephemeral_containers_to_start {
            if let Some(ephemeral) = pod.spec.ephemeral_containers.get(index) {
                start(Kind::Ephemeral, &ephemeral.container, outcome);
            }
            if cancel.is_cancelled() {
                return;
            }
        }
        for &index in &actions.init_containers_to_start {
            let Some(container) = pod.spec.init_containers.get(index) else {
                continue;
            };
            // A failed regular init container ends this sync; a sidecar does not.
            if !start(Kind::Init, container, outcome) && !container.is_sidecar() {
                return;
            }
        }
        if cancel.is_cancelled() {
            return;
        }
        self.resize_in_place(pod, actions, ctx.inputs, outcome);
        for &index in &actions.containers_to_start {
            if let Some(container) = pod.spec.containers.get(index) {
                start(Kind::Regular, container, outcome);
            }
        }
    }

    /// Step 9 (upstream doPodResizeAction): resize in place, after init and before
    /// regular containers start, so they start under the new pod limits. The result
    /// goes into the outcome, never only into a log (upstream lost it: its sync
    /// result was passed by value).
    fn resize_in_place(
        &self,
        pod: &Pod,
        actions: &PodActions,
        inputs: &SyncInputs<'_>,
        outcome: &mut SyncOutcome,
    ) {
        match crate::runtime::resize::apply::resize_pod(
            &self.runtime,
            inputs.cgroups,
            pod,
            &actions.containers_to_update,
            &self.settings.swap,
        ) {
            Ok(steps) if steps.is_empty() => {}
            Ok(_) => outcome.ok(SyncAction::ResizeContainers, pod.full_name()),
            Err(err) => {
                let failure = Failure::new(RESIZE_ERROR, err.to_string());
                outcome.fail(SyncAction::ResizeContainers, pod.full_name(), failure);
            }
        }
    }

    /// Step 2: kill the whole pod or the listed containers. False when the sync must
    /// stop here (a kill failed).
    fn kill_what_must_go(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        actions: &PodActions,
        outcome: &mut SyncOutcome,
        cancel: &Cancel,
    ) -> bool {
        let pod_ip = status.ips.first().map(String::as_str).unwrap_or("");
        if actions.kill_pod {
            // The whole pod goes: containers_to_kill is moot (upstream ignores it too).
            let killed =
                self.killer(cancel)
                    .kill_pod(Some(pod), pod_ip, &status.to_running_pod(), None);
            let ok = killed.is_ok();
            outcome.extend(killed);
            if !ok {
                return false;
            }
            if actions.create_sandbox {
                self.purge_init_containers(pod, status);
            }
            return true;
        }
        for (id, kill) in &actions.containers_to_kill {
            let request = KillRequest {
                container_id: id,
                name: &kill.name,
                message: &kill.message,
                reason: kill.reason,
                grace_override: None,
            };
            match self
                .killer(cancel)
                .kill_container(Some(pod), pod_ip, &request, None)
            {
                Ok(()) => outcome.ok(SyncAction::KillContainer, &kill.name),
                Err(failure) => {
                    outcome.fail(SyncAction::KillContainer, &kill.name, failure);
                    return false;
                }
            }
        }
        true
    }

    fn remove_container(&self, id: &str) {
        let removed = self.runtime.remove_container(&pb::RemoveContainerRequest {
            container_id: id.to_owned(),
            ..Default::default()
        });
        if let Err(err) = removed {
            log::warn!("removing container {id}: {err}");
        }
    }

    /// Before a new sandbox: every instance of every init container goes, so init
    /// runs again from the start.
    fn purge_init_containers(&self, pod: &Pod, status: &PodRuntimeStatus) {
        for init in &pod.spec.init_containers {
            for instance in status.instances(&init.name) {
                self.remove_container(&instance.id);
            }
        }
    }

    /// Keeps only the newest dead instance of each init container.
    fn prune_init_containers(&self, pod: &Pod, status: &PodRuntimeStatus) {
        for init in &pod.spec.init_containers {
            let dead = status
                .instances(&init.name)
                .filter(|c| matches!(c.state, ContainerState::Exited | ContainerState::Unknown));
            for instance in dead.skip(1) {
                self.remove_container(&instance.id);
            }
        }
    }

    /// The pod's sandbox could not be made: a FailedCreatePodSandBox event and the
    /// sync step's failure.
    fn sandbox_failed(&self, pod: &Pod, outcome: &mut SyncOutcome, failure: Failure) {
        self.recorder.pod(
            pod,
            EventType::Warning,
            "FailedCreatePodSandBox",
            &failure.message,
        );
        outcome.fail(SyncAction::CreatePodSandbox, pod.full_name(), failure);
    }

    /// A ClusterFirst pod on a node without `--cluster-dns` gets the host's resolver:
    /// logged once per process, and a `MissingClusterDNS` event per new sandbox
    /// (rather than a warning on every sync of every pod).
    fn report_missing_cluster_dns(&self, pod: &Pod) {
        if !dns::falls_back_to_host(pod, &self.settings.dns) {
            return;
        }
        if !self.missing_dns_logged.swap(true, Ordering::Relaxed) {
            log::warn!(
                "no --cluster-dns: pods with dnsPolicy ClusterFirst get the host's resolver"
            );
        }
        self.recorder.pod(
            pod,
            EventType::Warning,
            dns::MISSING_CLUSTER_DNS,
            dns::missing_cluster_dns_message(pod),
        );
    }

    /// Creates the log directory and the sandbox; returns its ID. The caller records
    /// the FailedCreatePodSandBox event, unless the pod is being deleted.
    fn run_sandbox(&self, pod: &Pod, config: &pb::PodSandboxConfig) -> Result<String, Failure> {
        let log_dir = pod_log_dir(&self.settings.pod_logs_dir, pod);
        if let Err(err) = std::fs::create_dir_all(&log_dir) {
            let message = format!(
                "Failed to create pod log directory {}: {err}",
                log_dir.display()
            );
            return Err(Failure::new(CREATE_POD_SANDBOX_ERROR, message));
        }
        // The pod's RuntimeClass picks the runtime handler (upstream createPodSandbox).
        let handler = self
            .runtime_classes
            .handler(
                pod.spec.runtime_class_name.as_deref(),
                std::time::Instant::now(),
            )
            .map_err(|err| {
                Failure::new(
                    CREATE_POD_SANDBOX_ERROR,
                    format!("Failed to create pod sandbox: {err}"),
                )
            })?;
        if pod.spec.host_users == Some(false) {
            self.handler_supports_user_namespaces(&handler)?;
        }
        if !handler.is_empty() {
            log::debug!(
                "pod {} ({}): runtime handler {handler:?}",
                pod.full_name(),
                pod.uid()
            );
        }
        let created = self.runtime.run_pod_sandbox(&pb::RunPodSandboxRequest {
            config: MessageField::some(config.clone()),
            runtime_handler: handler,
            ..Default::default()
        });
        match created {
            Ok(response) => Ok(response.pod_sandbox_id),
            Err(err) => Err(Failure::new(
                CREATE_POD_SANDBOX_ERROR,
                format!("Failed to create pod sandbox: {err}"),
            )),
        }
    }

    /// The user namespace of a `hostUsers: false` pod (None for the others).
    fn pod_user_namespace(&self, pod: &Pod) -> Result<Option<pb::UserNamespace>, Failure> {
        if pod.spec.host_users != Some(false) {
            return Ok(None);
        }
        self.userns.mappings(pod.uid()).map(Some).map_err(|err| {
            Failure::new(
                CREATE_POD_SANDBOX_ERROR,
                format!("Failed to create pod sandbox: user namespace: {err}"),
            )
        })
    }

    /// Asks the runtime (CRI Status, as upstream's runtime handler list) whether
    /// `handler` can create user namespaces; a pod that wants one never runs without.
    fn handler_supports_user_namespaces(&self, handler: &str) -> Result<(), Failure> {
        let status = self
            .runtime
            .status(&pb::StatusRequest::default())
            .map_err(|err| {
                Failure::new(
                    CREATE_POD_SANDBOX_ERROR,
                    format!("Failed to create pod sandbox: runtime status: {err}"),
                )
            })?;
        let features = super::manager::RuntimeFeatures::from_status(&status);
        let supported = features
            .handlers
            .iter()
            .any(|h| h.name == handler && h.user_namespaces);
        if supported {
            return Ok(());
        }
        Err(Failure::new(
            CREATE_POD_SANDBOX_ERROR,
            format!(
                "Failed to create pod sandbox: {}",
                crate::userns::NO_RUNTIME_SUPPORT
            ),
        ))
    }

    /// The IPs of the sandbox just created (upstream reads its status right away).
    fn new_sandbox_ips(&self, pod: &Pod, id: &str) -> Result<Vec<String>, Failure> {
        let status = self
            .runtime
            .pod_sandbox_status(&pb::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_owned(),
                ..Default::default()
            });
        match status.map(|s| s.status.into_option()) {
            Ok(Some(status)) => {
                let sandbox = super::inspect::sandbox_from_cri(&status);
                let mut ips: Vec<String> = Some(sandbox.ip)
                    .into_iter()
                    .filter(|ip| !ip.is_empty())
                    .collect();
                ips.extend(sandbox.additional_ips);
                Ok(ips)
            }
            Ok(None) => Err(Failure::new(
                CREATE_POD_SANDBOX_ERROR,
                "pod sandbox status is nil",
            )),
            Err(err) => {
                let message = format!("Unable to get pod sandbox status: {err}");
                self.recorder
                    .pod(pod, EventType::Warning, "FailedStatusPodSandBox", &message);
                Err(Failure::new(CREATE_POD_SANDBOX_ERROR, message))
            }
        }
    }

    /// Crash-loop back-off, then start (upstream doBackOff + startContainer).
    fn start_with_backoff(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        kind: Kind,
        container: &Container,
        ctx: &StartContext<'_>,
    ) -> Result<(), Failure> {
        let last_exit = status
            .instances(&container.name)
            .find(|c| c.state == ContainerState::Exited);
        if let Some(exited) = last_exit {
            let key = stable_key(pod, container);
            let finished = time_from_unix_nanos(exited.finished_at);
            let now = SystemTime::now();
            let mut backoff = self.backoff();
            if backoff.is_in_backoff_since(&key, finished, now) {
                let delay = format_delay(backoff.get(&key));
                drop(backoff);
                // Upstream names the pod as format.Pod does: name_namespace(uid).
                let pod_desc = format!("{}({})", pod.full_name(), pod.uid());
                self.recorder.container(
                    pod,
                    &container.name,
                    EventType::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {pod_desc}",
                        container.name
                    ),
                );
                return Err(Failure::new(
                    CRASH_LOOP_BACK_OFF,
                    format!(
                        "back-off {delay} restarting failed container={} pod={pod_desc}",
                        container.name
                    ),
                ));
            }
            backoff.next(&key, finished, now);
        }
        self.start_container(pod, status, kind, container, ctx)
    }

    /// `runAsNonRoot` against the image's user; a refusal is the container's
    /// CreateContainerConfigError (upstream checks it in generateContainerConfig).
    fn verify_non_root(
        &self,
        pod: &Pod,
        container: &Container,
        image_ref: &str,
    ) -> Result<(), Failure> {
        let image = if nonroot::needs_image_user(pod, container) {
            self.image_manager.image_user(image_ref).map_err(|err| {
                Failure::new(
                    CREATE_CONTAINER_CONFIG_ERROR,
                    format!("cannot read the user of image {image_ref:?}: {err}"),
                )
            })?
        } else {
            Default::default()
        };
        nonroot::verify_run_as_non_root(pod, container, &image).map_err(|err| {
            self.container_failed(
                pod,
                container,
                CREATE_CONTAINER_CONFIG_ERROR,
                err.to_string(),
            )
        })
    }

    /// One container start (upstream startContainer): pull and check its image, write
    /// the files it mounts, make its config, create and start it, run its postStart.
    fn start_container(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        kind: Kind,
        container: &Container,
        ctx: &StartContext<'_>,
    ) -> Result<(), Failure> {
        let files = self.container_files(pod, status, kind, container, ctx)?;
        let config = self.cri_container_config(pod, kind, container, ctx, &files)?;
        let id = self.create_and_start(pod, container, ctx, config)?;
        self.run_post_start(pod, container, &id, ctx.env, &ctx.inputs.cancel)
    }

    /// The image, the user check and the host files a container start needs.
    fn container_files(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        kind: Kind,
        container: &Container,
        ctx: &StartContext<'_>,
    ) -> Result<ContainerFiles, Failure> {
        let inputs = ctx.inputs;
        let image_ref = self.image_manager.ensure_image(
            pod,
            container,
            ctx.config,
            inputs.pull_secrets,
            &|| inputs.cancel.is_cancelled(),
        )?;
        self.verify_non_root(pod, container, &image_ref)?;
        let restart_count = status
            .newest(&container.name)
            .map(|c| c.restart_count + 1)
            .unwrap_or(0);
        let target_id = match kind {
            Kind::Ephemeral => self.ephemeral_target(pod, status, &container.name)?,
            _ => None,
        };
        let termination_log = create_termination_log(&self.settings.root_dir, pod, &container.name)
            .map_err(|err| {
                Failure::new(
                    CREATE_CONTAINER_CONFIG_ERROR,
                    format!("cannot create termination log file: {err}"),
                )
            })?;
        let hosts_inputs = HostsInputs {
            root_dir: &self.settings.root_dir,
            node_hosts_file: &self.settings.node_hosts_file,
            cluster_domain: &self.settings.dns.cluster_domain,
        };
        let hosts_file = ensure_hosts_file(&hosts_inputs, pod, container, &ctx.env.pod_ips)
            .map_err(|err| Failure::new(CREATE_CONTAINER_CONFIG_ERROR, err.to_string()))?;
        Ok(ContainerFiles {
            image_ref,
            restart_count,
            target_id,
            termination_log,
            hosts_file,
        })
    }

    /// The CRI config of a container, with its subPath mounts made and its device
    /// plugins' devices added. A failure records a `Failed` event.
    fn cri_container_config(
        &self,
        pod: &Pod,
        kind: Kind,
        container: &Container,
        ctx: &StartContext<'_>,
        files: &ContainerFiles,
    ) -> Result<pb::ContainerConfig, Failure> {
        let no_sub_paths = BTreeMap::new();
        let mut container_ctx = ContainerContext {
            pod,
            container,
            restart_count: files.restart_count,
            image_ref: &files.image_ref,
            env: ctx.env,
            config_source: ctx.inputs.config_source,
            volumes: ctx.inputs.volumes,
            sub_paths: &no_sub_paths,
            termination_log: Some(&files.termination_log),
            hosts_file: files.hosts_file.as_deref(),
            memory_capacity: self.settings.memory_capacity,
            enforce_cpu_limits: self.settings.enforce_cpu_limits,
            target_container_id: files.target_id.as_deref(),
            seccomp_root: &self.settings.root_dir.join("seccomp"),
            seccomp_default: self.settings.seccomp_default,
            apparmor_enabled: self.settings.apparmor_enabled,
            swap: &self.settings.swap,
            // Every container joins the sandbox's user namespace.
            userns: ctx
                .config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|s| s.namespace_options.as_ref())
                .and_then(|n| n.userns_options.as_ref()),
        };
        let config_error =
            |err: String| self.container_failed(pod, container, CREATE_CONTAINER_CONFIG_ERROR, err);
        // The subPath bind mounts, made from descriptors just before the container is
        // created (`subpath.rs`); the config then names those mounts.
        let requests =
            sub_path_requests(&container_ctx).map_err(|err| config_error(err.to_string()))?;
        let sub_paths = subpath::prepare_container(
            &self.settings.root_dir,
            pod.uid(),
            &container.name,
            &requests,
        )
        .map_err(|err| config_error(err.to_string()))?;
        container_ctx.sub_paths = &sub_paths;
        let mut config =
            container_config(&container_ctx).map_err(|err| config_error(err.to_string()))?;
        // Device plugins' devices (allocated on the first start, then from the
        // checkpoint); ephemeral containers request no resources.
        if let (Some(devices), false) = (&self.devices, matches!(kind, Kind::Ephemeral)) {
            let options = devices
                .run_options(pod, container)
                .map_err(|err| config_error(err.to_string()))?;
            super::devices::apply(&mut config, &options);
        }
        Ok(config)
    }

    /// Creates the container in the sandbox and starts it, with the `Created` and
    /// `Started` events; returns its ID.
    fn create_and_start(
        &self,
        pod: &Pod,
        container: &Container,
        ctx: &StartContext<'_>,
        config: pb::ContainerConfig,
    ) -> Result<String, Failure> {
        let created = self.runtime.create_container(&pb::CreateContainerRequest {
            pod_sandbox_id: ctx.sandbox_id.to_owned(),
            config: MessageField::some(config),
            sandbox_config: MessageField::some(ctx.config.clone()),
            ..Default::default()
        });
        let id = match created {
            Ok(response) => response.container_id,
            Err(err) => {
                let message = err.to_string();
                return Err(self.container_failed(pod, container, CREATE_CONTAINER_ERROR, message));
            }
        };
        self.recorder.container(
            pod,
            &container.name,
            EventType::Normal,
            "Created",
            format!("Created container {}", container.name),
        );
        if let Err(err) = self.runtime.start_container(&pb::StartContainerRequest {
            container_id: id.clone(),
            ..Default::default()
        }) {
            let message = err.to_string();
            return Err(self.container_failed(pod, container, RUN_CONTAINER_ERROR, message));
        }
        self.recorder.container(
            pod,
            &container.name,
            EventType::Normal,
            "Started",
            format!("Started container {}", container.name),
        );
        Ok(id)
    }

    /// A container step failed: a `Failed` event saying so, and the failure.
    fn container_failed(
        &self,
        pod: &Pod,
        container: &Container,
        reason: &'static str,
        message: String,
    ) -> Failure {
        self.recorder.container(
            pod,
            &container.name,
            EventType::Warning,
            "Failed",
            format!("Error: {message}"),
        );
        Failure::new(reason, message)
    }

    /// An ephemeral container joins its target's process namespace.
    fn ephemeral_target(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        name: &str,
    ) -> Result<Option<String>, Failure> {
        let target = pod
            .spec
            .ephemeral_containers
            .iter()
            .find(|e| e.container.name == name)
            .and_then(|e| e.target_container_name.clone());
        let Some(target) = target.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let running = status
            .instances(&target)
            .find(|c| c.state == ContainerState::Running)
            .map(|c| c.id.clone());
        running.map(Some).ok_or_else(|| {
            Failure::new(
                CREATE_CONTAINER_CONFIG_ERROR,
                format!("target container {target:?} is not running"),
            )
        })
    }

    fn run_post_start(
        &self,
        pod: &Pod,
        container: &Container,
        id: &str,
        env: &EnvContext,
        cancel: &Cancel,
    ) -> Result<(), Failure> {
        let Some(handler) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        else {
            return Ok(());
        };
        let pod_ip = env.pod_ips.first().map(String::as_str).unwrap_or("");
        let call = HookCall {
            pod,
            pod_ip,
            container,
            container_id: id,
            handler,
        };
        let Err(err) = self.hooks.run(&call, POST_START_TIMEOUT, cancel) else {
            return Ok(());
        };
        let message = format!("PostStartHook failed: {err}");
        log::warn!(
            "pod {} ({}): container {}: {message}",
            pod.full_name(),
            pod.uid(),
            container.name
        );
        // As upstream, the event carries no hook output or error: hooks can print
        // secrets, and events are readable by anyone who can read the namespace.
        self.recorder.container(
            pod,
            &container.name,
            EventType::Warning,
            "FailedPostStartHook",
            "PostStartHook failed",
        );
        let request = KillRequest {
            container_id: id,
            name: &container.name,
            message: "FailedPostStartHook",
            reason: KillReason::FailedPostStartHook,
            grace_override: None,
        };
        if let Err(kill) = self
            .killer(cancel)
            .kill_container(Some(pod), pod_ip, &request, None)
        {
            log::warn!(
                "pod {}: killing {} after its postStart hook failed: {}",
                pod.full_name(),
                container.name,
                kill.message
            );
        }
        Err(Failure::new(POST_START_HOOK_ERROR, message))
    }
}
