//! What a pod needs from the runtime right now: the pure decision at the start of every
//! pod sync (upstream `computePodActions`, sidecar mode).
//!
//! [`compute_pod_actions`] takes the API pod, the runtime's view of it
//! ([`PodRuntimeStatus`]) and the latest liveness/startup probe results, and returns a
//! [`PodActions`] value: whether to kill the pod and (re)create its sandbox, which init,
//! regular and ephemeral containers to start, which containers to kill first and why.
//! The pod worker thread calls it, logs the value (`Display`), and `runtime::sync`
//! carries it out over CRI. No I/O, clock, channel, global or feature gate: the same
//! inputs always give the same actions, and maps are `BTreeMap`s so output order is
//! deterministic.
//!
//! Decisions differing from upstream v1.29 on purpose (each has a test named after it):
//! - a container in the `created` state (the runtime created it but starting it failed)
//!   is started again under every restart policy and never counts as "succeeded";
//!   v1.29 left it stuck (created init containers, `restartPolicy: Never`) or treated it
//!   as exited with code 0;
//! - an ephemeral container stuck in `created` is retried (upstream never retried it);
//! - a running sidecar whose spec changed is restarted, as later upstream versions do;
//! - nothing starts in a pod that is killed without a new sandbox (upstream still
//!   started ephemeral containers there).
//!
//! In-place resize: for pods other than static pods, a change of resources alone is
//! not a definition change (the hash without resources is compared); each running
//! regular container and started sidecar goes through `resize_hook`, which asks
//! `runtime::resize::compute` (pure, upstream `computePodResizeAction`) whether to
//! update it in place (`containers_to_update`, decreases first) or restart it
//! (`update_pod_resources`). The pod passed in is the *allocated* pod: its spec
//! carries the resources admitted by `runtime::resize::ResizeManager`, not necessarily
//! the ones the API asks for. The resize types are `runtime::resize`'s, re-exported.

use std::collections::BTreeMap;
use std::fmt;

use crate::api::pod::{Container, Pod, RestartPolicy};
use crate::runtime::hash::{container_hash, container_hash_without_resources};
use crate::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState};
use crate::runtime::resize::compute::{container_resize, ContainerResize};
pub use crate::runtime::resize::compute::{ContainerToUpdate, ResizeResource, ResizeUpdates};
pub use crate::runtime::resize::values::ResourceValues;

/// The outcome of one liveness or startup probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// The latest probe results of the pod's containers, keyed by runtime container ID.
/// A container without an entry is treated as healthy (probe not run yet or not
/// defined), except that a sidecar with a startup or liveness probe waits for a result
/// before it counts as started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeResults {
    pub liveness: BTreeMap<String, ProbeResult>,
    pub startup: BTreeMap<String, ProbeResult>,
}

/// Why a container is stopped; the kill path picks the grace period from it (a probe's
/// own `terminationGracePeriodSeconds` applies to probe kills).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum KillReason {
    StartupProbe,
    LivenessProbe,
    FailedPostStartHook,
    Unknown,
    /// No particular reason (e.g. the spec changed).
    #[default]
    None,
}

impl KillReason {
    /// Upstream's reason string ("" for `None`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StartupProbe => "StartupProbe",
            Self::LivenessProbe => "LivenessProbe",
            Self::FailedPostStartHook => "FailedPostStartHook",
            Self::Unknown => "Unknown",
            Self::None => "",
        }
    }
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container to stop before anything is started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerToKill {
    /// The container name in the pod spec (regular, init or ephemeral).
    pub name: String,
    /// Human-readable cause, used in the `Killing` event.
    pub message: String,
    pub reason: KillReason,
}

/// Everything one sync must do for a pod (upstream `podActions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every running container of the pod and all its sandboxes.
    pub kill_pod: bool,
    /// Create a new sandbox (after the kill; old init container instances are purged).
    pub create_sandbox: bool,
    /// The current sandbox, if any ("" when none, or when the network mode changed).
    pub sandbox_id: String,
    /// Sandbox attempt number for the new or current sandbox.
    pub attempt: u32,
    /// Indexes into `spec.initContainers`, ascending.
    pub init_containers_to_start: Vec<usize>,
    /// Indexes into `spec.containers`, ascending.
    pub containers_to_start: Vec<usize>,
    /// Indexes into `spec.ephemeralContainers`, ascending.
    pub ephemeral_containers_to_start: Vec<usize>,
    /// Containers to stop first, by runtime container ID. Ignored when `kill_pod`.
    pub containers_to_kill: BTreeMap<String, ContainerToKill>,
    /// In-place resizes per resource, in the order to apply them: decreases first
    /// (latest found first), then increases (in spec order). Filled by `resize_hook`.
    pub containers_to_update: ResizeUpdates,
    /// Some container restarts for a resize, so the pod cgroup must be updated too.
    pub update_pod_resources: bool,
}

impl fmt::Display for PodActions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kill_pod={} create_sandbox={} sandbox_id={:?} attempt={} \
             update_pod_resources={} init_to_start={:?} to_start={:?} \
             ephemeral_to_start={:?}",
            self.kill_pod,
            self.create_sandbox,
            self.sandbox_id,
            self.attempt,
            self.update_pod_resources,
            self.init_containers_to_start,
            self.containers_to_start,
            self.ephemeral_containers_to_start,
        )?;
        for (resource, list) in &self.containers_to_update {
            let indexes: Vec<usize> = list.iter().map(|u| u.index).collect();
            write!(f, " update_{resource:?}={indexes:?}")?;
        }
        f.write_str(" to_kill={")?;
        for (i, (id, k)) in self.containers_to_kill.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(
                f,
                "{sep}{id}: {} reason={:?} {:?}",
                k.name,
                k.reason.as_str(),
                k.message
            )?;
        }
        f.write_str("}")
    }
}

/// Result of the sandbox check (upstream `PodSandboxChanged`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxCheck {
    /// The pod needs a new sandbox.
    pub changed: bool,
    /// Attempt number for the new sandbox, or of the current one when unchanged.
    pub attempt: u32,
    /// The newest sandbox's ID; "" when there is none or its network mode is wrong.
    pub sandbox_id: String,
}

/// Whether the pod's sandbox must be (re)created. It must when there is none, when more
/// than one is ready, when the newest is not ready, when its network mode (host or pod)
/// differs from the spec, or when a pod-network sandbox has no IP.
pub fn pod_sandbox_changed(pod: &Pod, status: &PodRuntimeStatus) -> SandboxCheck {
    let Some(newest) = status.sandboxes.first() else {
        return SandboxCheck {
            changed: true,
            attempt: 0,
            sandbox_id: String::new(),
        };
    };
    let recreate = |sandbox_id: &str| SandboxCheck {
        changed: true,
        attempt: newest.attempt.saturating_add(1),
        sandbox_id: sandbox_id.to_owned(),
    };
    let ready = status
        .sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    if ready > 1 || newest.state != SandboxState::Ready {
        return recreate(&newest.id);
    }
    let host_network = pod.spec.host_network.unwrap_or(false);
    if newest.host_network != host_network {
        // The old sandbox is not reported as "changed": a different network mode is a
        // different pod as far as events go (upstream passes no ID either).
        return recreate("");
    }
    if !host_network && newest.ip.is_empty() {
        return recreate(&newest.id);
    }
    SandboxCheck {
        changed: false,
        attempt: newest.attempt,
        sandbox_id: newest.id.clone(),
    }
}

/// Whether a regular container that is not running should be started (again): never
/// once deletion was requested; always when it has no instance, is in an unknown state
/// or is only `created` (it never ran, so starting it is not a restart); otherwise as
/// the restart policy says for its exit code.
pub fn should_container_be_restarted(
    container: &Container,
    pod: &Pod,
    status: &PodRuntimeStatus,
) -> bool {
    if pod.deletion_requested() {
        return false;
    }
    let Some(st) = status.newest(&container.name) else {
        return true;
    };
    match st.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match Policy::of(pod) {
            Policy::Never => false,
            Policy::OnFailure => st.exit_code != 0,
            Policy::Always => true,
        },
    }
}

/// Computes what the pod needs (upstream `computePodActions`, sidecar mode).
pub fn compute_pod_actions(
    pod: &Pod,
    status: &PodRuntimeStatus,
    probes: &ProbeResults,
) -> PodActions {
    let sandbox = pod_sandbox_changed(pod, status);
    let mut plan = Planner {
        pod,
        status,
        probes,
        policy: Policy::of(pod),
        actions: PodActions {
            kill_pod: sandbox.changed,
            create_sandbox: sandbox.changed,
            sandbox_id: sandbox.sandbox_id,
            attempt: sandbox.attempt,
            ..PodActions::default()
        },
    };
    if sandbox.changed {
        plan.new_sandbox();
        return plan.actions;
    }
    plan.ephemeral_containers();
    if plan.init_containers() && !plan.actions.kill_pod {
        plan.regular_containers();
    }
    if plan.actions.kill_pod {
        // The pod is finished and its sandbox goes away: nothing may start in it.
        // (Upstream still tried ephemeral containers here, failing every sync.)
        plan.actions.ephemeral_containers_to_start.clear();
    }
    plan.actions
}

/// Whether litelet resizes this pod in place: every pod but static pods, whose
/// resources only change with their manifest (and so their UID).
fn resizable(pod: &Pod) -> bool {
    !pod.is_static()
}

/// What the resize seam decided for one running container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResizeDecision {
    /// Keep the container running (resized in place, or nothing to do).
    Keep,
    /// The resize needs a restart; the hook has already queued the kill (the caller
    /// queues the start).
    Restart,
}

/// The in-place resize seam, called for every running regular container and started
/// sidecar that is kept otherwise (upstream `computePodResizeAction`): it may add the
/// container to `actions.containers_to_update` and return `Keep`, or queue its kill,
/// set `actions.update_pod_resources` and return `Restart` (the caller queues the
/// start).
fn resize_hook(
    pod: &Pod,
    container: &Container,
    target: (usize, bool),
    status: &ContainerStatus,
    actions: &mut PodActions,
) -> ResizeDecision {
    if !resizable(pod) {
        return ResizeDecision::Keep;
    }
    match container_resize(container, target, status, &mut actions.containers_to_update) {
        ContainerResize::Keep => ResizeDecision::Keep,
        ContainerResize::Restart { message } => {
            let kill = ContainerToKill {
                name: container.name.clone(),
                message,
                reason: KillReason::None,
            };
            actions.containers_to_kill.insert(status.id.clone(), kill);
            actions.update_pod_resources = true;
            ResizeDecision::Restart
        }
    }
}

/// True when a running container was created from another spec. For a resizable pod
/// resources are left out: `resize_hook` handles their changes in place.
fn spec_changed(pod: &Pod, container: &Container, st: &ContainerStatus) -> bool {
    if resizable(pod) {
        container_hash_without_resources(container) != st.hash_without_resources
    } else {
        container_hash(container) != st.hash
    }
}

/// The pod's restart policy; unset or unknown values mean Always (the API default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Always,
    OnFailure,
    Never,
}

impl Policy {
    fn of(pod: &Pod) -> Self {
        match pod.spec.restart_policy {
            Some(RestartPolicy::Never) => Self::Never,
            Some(RestartPolicy::OnFailure) => Self::OnFailure,
            _ => Self::Always,
        }
    }
}

/// Exited with code 0. A `created` or `unknown` instance never counts: it did not run
/// to completion (upstream v1.29 looked only at the exit code, which is 0 for both).
fn container_succeeded(container: &Container, status: &PodRuntimeStatus) -> bool {
    status
        .newest(&container.name)
        .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

/// How far a running sidecar has got.
enum Startup {
    /// Its startup probe has not passed yet.
    Waiting,
    /// Its startup probe failed; its kill is queued.
    Failed,
    /// No startup probe, or it passed.
    Started,
}

const UNKNOWN_STATE: &str = "is in \"unknown\" state, try killing it before restart";

/// The inputs and the actions being built.
struct Planner<'a> {
    pod: &'a Pod,
    status: &'a PodRuntimeStatus,
    probes: &'a ProbeResults,
    policy: Policy,
    actions: PodActions,
}

impl Planner<'_> {
    fn kill(&mut self, st: &ContainerStatus, reason: KillReason, message: String) {
        let entry = ContainerToKill {
            name: st.name.clone(),
            message,
            reason,
        };
        self.actions.containers_to_kill.insert(st.id.clone(), entry);
    }

    /// The sandbox must be (re)created. `kill_pod` and `create_sandbox` are set.
    fn new_sandbox(&mut self) {
        let (pod, status) = (self.pod, self.status);
        // A pod that must not restart and has already run something is finished: kill
        // it, do not bring it back. (With no sandbox at all it is new: create it.)
        if self.policy == Policy::Never
            && !status.sandboxes.is_empty()
            && !status.containers.is_empty()
        {
            self.actions.create_sandbox = false;
            return;
        }
        let to_start: Vec<usize> = pod
            .spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(self.policy == Policy::OnFailure && container_succeeded(c, status)))
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() {
            // Every container is done. If one exists, the pod got past initialisation
            // before: nothing to bring back.
            let created = pod.spec.containers.iter().any(|c| {
                status
                    .newest(&c.name)
                    .is_some_and(|s| s.state != ContainerState::Unknown)
            });
            if created {
                self.actions.create_sandbox = false;
                return;
            }
        }
        if !pod.spec.init_containers.is_empty() {
            // A new sandbox initialises from scratch; regular containers wait for a
            // later sync (as upstream: it is how initialisation is ordered).
            self.actions.init_containers_to_start = vec![0];
            return;
        }
        self.actions.containers_to_start = to_start;
    }

    /// Ephemeral containers: started once, never restarted. One that never got past
    /// `created` is retried (upstream left it there for good).
    fn ephemeral_containers(&mut self) {
        for (i, e) in self.pod.spec.ephemeral_containers.iter().enumerate() {
            let st = self.status.newest(&e.container.name);
            if st.is_none_or(|s| s.state == ContainerState::Created) {
                self.actions.ephemeral_containers_to_start.push(i);
            }
        }
    }

    /// Init and sidecar containers (sidecar mode). Returns whether the pod has
    /// finished initialising, i.e. regular containers may be looked at.
    ///
    /// Walks the init containers from last to first: the newest one with an instance
    /// tells how far initialisation got (older instances may have been removed). Before
    /// it, finished regular init containers are never re-run; sidecars are kept running.
    fn init_containers(&mut self) -> bool {
        let (pod, status) = (self.pod, self.status);
        let inits = &pod.spec.init_containers;
        let Some(last) = inits.len().checked_sub(1) else {
            return true;
        };
        // A regular container that exists proves initialisation finished once, even if
        // the init containers' instances are gone. An exited one proves nothing: after a
        // reboot everything is exited and the new sandbox is not initialised.
        let mut initialized = pod.spec.containers.iter().any(|c| {
            status.newest(&c.name).is_some_and(|s| {
                matches!(s.state, ContainerState::Created | ContainerState::Running)
            })
        });
        let mut reached = initialized; // everything before index i has run
        let restart_on_failure = self.policy != Policy::Never;
        let mut start = Vec::new();
        for (i, c) in inits.iter().enumerate().rev() {
            let sidecar = c.is_sidecar();
            let Some(st) = status.newest(&c.name) else {
                if reached && sidecar {
                    start.push(i);
                }
                continue;
            };
            if reached && !sidecar {
                continue;
            }
            match st.state {
                // Created but not started: the start failed. Start it again (upstream
                // v1.29 waited here forever).
                ContainerState::Created => start.push(i),
                ContainerState::Running if !sidecar => {} // wait for it to finish
                // A sidecar that has started unblocks the next init container, or
                // completes initialisation when it is the last one.
                ContainerState::Running => match self.sidecar_startup(c, st) {
                    Startup::Waiting => {}
                    Startup::Failed => start.push(i),
                    Startup::Started => {
                        if i == last {
                            initialized = true;
                        } else if !reached {
                            start.push(i + 1);
                        }
                        if self.sidecar_needs_restart(c, st)
                            || resize_hook(pod, c, (i, true), st, &mut self.actions)
                                == ResizeDecision::Restart
                        {
                            start.push(i);
                        }
                    }
                },
                ContainerState::Exited if sidecar => start.push(i),
                ContainerState::Exited if st.exit_code != 0 => {
                    if !restart_on_failure {
                        self.fail_pod();
                        return false;
                    }
                    start.push(i);
                }
                ContainerState::Exited if i == last => initialized = true,
                ContainerState::Exited => start.push(i + 1),
                ContainerState::Unknown => {
                    if !sidecar && !restart_on_failure {
                        self.fail_pod();
                        return false;
                    }
                    self.kill(
                        st,
                        KillReason::Unknown,
                        format!("Init container {UNKNOWN_STATE}"),
                    );
                    start.push(i);
                }
            }
            reached = true;
        }
        if !reached {
            start.push(0);
        }
        start.sort_unstable();
        start.dedup();
        self.actions.init_containers_to_start = start;
        initialized
    }

    /// Whether a running sidecar counts as started: it has no startup probe, or the
    /// probe succeeded. A failed startup probe queues its kill and `Failed`.
    fn sidecar_startup(&mut self, c: &Container, st: &ContainerStatus) -> Startup {
        if c.startup_probe.is_none() {
            return Startup::Started;
        }
        match self.probes.startup.get(&st.id) {
            Some(ProbeResult::Success) => Startup::Started,
            Some(ProbeResult::Failure) => {
                let message = format!("Init container {} failed startup probe", c.name);
                self.kill(st, KillReason::StartupProbe, message);
                Startup::Failed
            }
            // Not probed yet, or no verdict: wait.
            None | Some(ProbeResult::Unknown) => Startup::Waiting,
        }
    }

    /// Whether a started sidecar must be restarted (its kill is queued): its spec
    /// changed, or its liveness probe failed.
    fn sidecar_needs_restart(&mut self, c: &Container, st: &ContainerStatus) -> bool {
        if spec_changed(self.pod, c, st) {
            // Later upstream versions restart a sidecar whose spec (image) changed;
            // v1.29 left it running the old spec.
            let message = format!("Init container {} definition changed", c.name);
            self.kill(st, KillReason::None, message);
            return true;
        }
        if c.liveness_probe.is_some()
            && self.probes.liveness.get(&st.id) == Some(&ProbeResult::Failure)
        {
            let message = format!("Init container {} failed liveness probe", c.name);
            self.kill(st, KillReason::LivenessProbe, message);
            return true;
        }
        false
    }

    /// A regular init container failed and the pod must not restart: the pod is done.
    fn fail_pod(&mut self) {
        self.actions.kill_pod = true;
        self.actions.init_containers_to_start.clear();
    }

    /// Regular containers, once the pod is initialised.
    fn regular_containers(&mut self) {
        let (pod, status) = (self.pod, self.status);
        let restart_on_failure = self.policy != Policy::Never;
        let mut kept = 0;
        for (idx, c) in pod.spec.containers.iter().enumerate() {
            let st = status.newest(&c.name);
            let Some(st) = st.filter(|s| s.state == ContainerState::Running) else {
                if should_container_be_restarted(c, pod, status) {
                    self.actions.containers_to_start.push(idx);
                    if let Some(st) = st.filter(|s| s.state == ContainerState::Unknown) {
                        // It may still run: stop it so two never run at once.
                        self.kill(
                            st,
                            KillReason::Unknown,
                            format!("Container {UNKNOWN_STATE}"),
                        );
                    }
                }
                continue;
            };
            let (mut message, reason, restart) = if spec_changed(pod, c, st) {
                // The user changed the spec: restart whatever the policy (as upstream).
                let message = format!("Container {} definition changed", c.name);
                (message, KillReason::None, true)
            } else if self.probes.liveness.get(&st.id) == Some(&ProbeResult::Failure) {
                let message = format!("Container {} failed liveness probe", c.name);
                (message, KillReason::LivenessProbe, restart_on_failure)
            } else if self.probes.startup.get(&st.id) == Some(&ProbeResult::Failure) {
                let message = format!("Container {} failed startup probe", c.name);
                (message, KillReason::StartupProbe, restart_on_failure)
            } else {
                match resize_hook(pod, c, (idx, false), st, &mut self.actions) {
                    ResizeDecision::Keep => kept += 1,
                    // Its kill is queued; it starts again with the new resources.
                    ResizeDecision::Restart => self.actions.containers_to_start.push(idx),
                }
                continue;
            };
            if restart {
                message.push_str(", will be restarted");
                self.actions.containers_to_start.push(idx);
            }
            self.kill(st, reason, message);
        }
        if kept == 0 && self.actions.containers_to_start.is_empty() {
            // Nothing runs and nothing will: the pod is finished. Sidecars must not keep
            // it alive.
            self.actions.kill_pod = true;
            self.actions.init_containers_to_start.clear();
        }
    }
}

#[cfg(test)]
mod tests;
