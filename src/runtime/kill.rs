//! Stopping containers and pods (upstream killContainer / killPodWithSyncResult).
//!
//! Grace periods: the pod's deletion grace period, else its spec's (or, for a probe
//! kill, the probe's own), else 2 s; an override wins; a preStop hook spends part of it;
//! StopContainer gets at least 2 s (1 s with an explicit override). A pod's containers stop in parallel (one
//! scoped thread each), sidecars after the main containers and in reverse spec order;
//! then every sandbox is stopped. NotFound from the runtime counts as stopped, so a
//! kill can be repeated safely. A preStop httpGet hook without a host goes to the
//! pod's IP, read from the runtime when the caller has none; a failed hook is a
//! Warning event and the container is stopped all the same.
//!
//! Cancellation: the kill carries its pod worker's [`Cancel`] token. The preStop
//! hook, the wait for a sidecar's turn and StopContainer all end when it fires (a
//! second DELETE with a shorter grace period cancels the running kill; the worker
//! then kills again with the shorter period), and no sandbox is stopped after it.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::actions::KillReason;
use super::cancel::Cancel;
use super::hooks::{HookCall, HookError, HookRunner};
use super::inspect;
use super::labels::{ContainerInfo, LabelError};
use super::model::{ContainerState, RunningPod};
use super::result::{Failure, SyncAction, SyncOutcome};
use crate::api::pod::{Container, LifecycleHandler, Pod};
use crate::cri::{pb, CriError, RuntimeClient};
use crate::events::{EventType, Recorder};

/// The smallest grace period StopContainer gets.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;
/// The waiting reason of a failed kill.
pub const KILL_CONTAINER_ERROR: &str = "KillContainerError";
/// The reason of a failed sandbox stop.
pub const KILL_POD_SANDBOX_ERROR: &str = "KillPodSandboxError";
/// The reason of a kill step given up because the kill was cancelled.
pub const KILL_CANCELLED: &str = "KillCancelled";

/// The grace period before any preStop hook runs (upstream setTerminationGracePeriod
/// plus the override).
pub fn grace_period(
    pod: &Pod,
    container: &Container,
    reason: KillReason,
    override_seconds: Option<i64>,
) -> i64 {
    if let Some(seconds) = override_seconds {
        return seconds;
    }
    if let Some(seconds) = pod.metadata.deletion_grace_period_seconds {
        return seconds;
    }
    let Some(spec) = pod.spec.termination_grace_period_seconds else {
        return MINIMUM_GRACE_PERIOD_SECONDS;
    };
    let probe = match reason {
        KillReason::LivenessProbe => container.liveness_probe.as_ref(),
        KillReason::StartupProbe => container.startup_probe.as_ref(),
        _ => None,
    };
    probe
        .and_then(|p| p.termination_grace_period_seconds)
        .unwrap_or(spec)
}

/// True when `handler` is an httpGet without a host and no pod IP is known: the hook
/// must learn the pod's IP from the runtime.
pub fn needs_pod_ip(handler: &LifecycleHandler, known: &str) -> bool {
    known.is_empty()
        && handler
            .http_get
            .as_ref()
            .is_some_and(|h| h.host.as_deref().is_none_or(str::is_empty))
}

/// Finds a container spec of any kind by name.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .containers
        .iter()
        .chain(pod.spec.init_containers.iter())
        .chain(pod.spec.ephemeral_containers.iter().map(|e| &e.container))
        .find(|c| c.name == name)
}

/// The order in which a pod's containers may stop: sidecars wait for every main
/// container still running, and for the sidecar after them in spec order.
pub struct TerminationOrdering {
    waits_for: BTreeMap<String, Vec<String>>,
    done: Mutex<HashSet<String>>,
    changed: Condvar,
}

impl TerminationOrdering {
    /// Builds the ordering for the containers of `running` (others count as stopped).
    pub fn new(pod: &Pod, running: &[String]) -> TerminationOrdering {
        let is_running = |name: &str| running.iter().any(|r| r == name);
        let mains: Vec<String> = pod
            .spec
            .containers
            .iter()
            .map(|c| c.name.clone())
            .filter(|n| is_running(n))
            .collect();
        let sidecars: Vec<&Container> = pod
            .spec
            .init_containers
            .iter()
            .filter(|c| c.is_sidecar())
            .collect();
        let mut waits_for = BTreeMap::new();
        for (i, sidecar) in sidecars.iter().enumerate() {
            let mut deps = mains.clone();
            if let Some(next) = sidecars.get(i + 1) {
                if is_running(&next.name) {
                    deps.push(next.name.clone());
                }
            }
            waits_for.insert(sidecar.name.clone(), deps);
        }
        TerminationOrdering {
            waits_for,
            done: Mutex::new(HashSet::new()),
            changed: Condvar::new(),
        }
    }

    /// Waits until everything `name` must outlive has stopped, or `timeout` passes,
    /// or `cancel` fires (looked at every [`crate::cri::CANCEL_POLL`]).
    pub fn wait_for_turn(&self, name: &str, timeout: Duration, cancel: &Cancel) {
        let Some(deps) = self.waits_for.get(name) else {
            return;
        };
        let deadline = Instant::now() + timeout;
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while !deps.iter().all(|d| done.contains(d)) {
            let now = Instant::now();
            if now >= deadline || cancel.is_cancelled() {
                return;
            }
            let step = (deadline - now).min(crate::cri::CANCEL_POLL);
            done = self
                .changed
                .wait_timeout(done, step)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Marks `name` as stopped.
    pub fn terminated(&self, name: &str) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned());
        self.changed.notify_all();
    }
}

/// Why the spec of a container to kill cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KillError {
    /// ContainerStatus failed (other than NotFound, which means nothing to stop).
    #[error(transparent)]
    Status(#[from] CriError),
    /// The labels litelet wrote at create time do not restore the spec.
    #[error("container {id}: {source}")]
    Labels { id: String, source: LabelError },
}

/// Stops containers and pods through CRI.
pub struct Killer<'a> {
    pub runtime: &'a RuntimeClient,
    pub hooks: &'a dyn HookRunner,
    pub recorder: &'a Recorder,
    /// The pod worker's token: a cancelled kill stops waiting and stops no more.
    pub cancel: &'a Cancel,
}

/// One container to stop.
pub struct KillRequest<'a> {
    pub container_id: &'a str,
    pub name: &'a str,
    pub message: &'a str,
    pub reason: KillReason,
    pub grace_override: Option<i64>,
}

impl Killer<'_> {
    /// The pod and container spec for a kill: from `pod` when it names the container,
    /// else restored from what litelet wrote on the container at create time. None when
    /// the runtime no longer has the container: there is nothing left to stop.
    fn specs(
        &self,
        pod: Option<&Pod>,
        container_id: &str,
        name: &str,
    ) -> Result<Option<(Pod, Container)>, KillError> {
        if let Some(pod) = pod {
            if let Some(container) = find_container(pod, name) {
                return Ok(Some((pod.clone(), container.clone())));
            }
        }
        let status = match self.runtime.container_status(&pb::ContainerStatusRequest {
            container_id: container_id.to_owned(),
            ..Default::default()
        }) {
            Ok(response) => response.status.unwrap_or_default(),
            Err(err) if err.is_not_found() => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let info = ContainerInfo::from_labels_and_annotations(&status.labels, &status.annotations)
            .map_err(|source| KillError::Labels {
                id: container_id.to_owned(),
                source,
            })?;
        Ok(Some(info.restore_pod_and_container()))
    }

    /// The pod IP for a preStop hook: the caller's, else, for an httpGet hook without a
    /// host, the IP of the pod's ready sandbox as the runtime reports it now (upstream's
    /// handler runner asks GetPodStatus the same way). Kills from termination, from
    /// runtime-only pods and from GC know no IP; the sandbox is still up while its
    /// containers stop.
    fn hook_pod_ip(&self, pod: &Pod, known: &str, handler: &LifecycleHandler) -> String {
        if !needs_pod_ip(handler, known) {
            return known.to_owned();
        }
        match inspect::pod_status(self.runtime, pod.uid(), pod.name(), pod.namespace()) {
            Ok(status) => status.ips.into_iter().next().unwrap_or_default(),
            Err(err) => {
                // The hook then fails with "no IP", is reported, and the kill goes on.
                log::warn!(
                    "pod {} ({}): cannot read the pod IP for a preStop hook: {err}",
                    pod.full_name(),
                    pod.uid()
                );
                String::new()
            }
        }
    }

    /// Stops one container: preStop hook within the grace period, then StopContainer.
    pub fn kill_container(
        &self,
        pod: Option<&Pod>,
        pod_ip: &str,
        request: &KillRequest<'_>,
        ordering: Option<&TerminationOrdering>,
    ) -> Result<(), Failure> {
        // Gone already (removed since the listing the kill works from): as a
        // StopContainer answering NotFound, the kill has nothing left to do.
        let Some((pod, container)) = self
            .specs(pod, request.container_id, request.name)
            .map_err(|err| Failure::new(KILL_CONTAINER_ERROR, err.to_string()))?
        else {
            return Ok(());
        };
        let mut grace = grace_period(&pod, &container, request.reason, request.grace_override);
        let message = if request.message.is_empty() {
            format!("Stopping container {}", request.name)
        } else {
            request.message.to_owned()
        };
        self.recorder
            .container(&pod, request.name, EventType::Normal, "Killing", message);

        let pre_stop = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref());
        if let (Some(handler), true) = (pre_stop, grace > 0) {
            let started = Instant::now();
            let budget = Duration::from_secs(grace as u64);
            let pod_ip = self.hook_pod_ip(&pod, pod_ip, handler);
            let hook = HookCall {
                pod: &pod,
                pod_ip: &pod_ip,
                container: &container,
                container_id: request.container_id,
                handler,
            };
            match self.hooks.run(&hook, budget, self.cancel) {
                // A cancelled hook did not fail: the kill was cancelled (see below).
                Ok(()) | Err(HookError::Cancelled) => {}
                Err(err) => {
                    log::warn!(
                        "pod {} ({}): container {}: PreStopHook failed: {err}",
                        pod.full_name(),
                        pod.uid(),
                        request.name
                    );
                    // As upstream, no hook output in the event (it may hold secrets).
                    self.recorder.container(
                        &pod,
                        request.name,
                        EventType::Warning,
                        "FailedPreStopHook",
                        "PreStopHook failed",
                    );
                }
            }
            grace -= started.elapsed().as_secs() as i64;
        }
        if let (Some(ordering), true) = (ordering, grace > 0) {
            let started = Instant::now();
            ordering.wait_for_turn(request.name, Duration::from_secs(grace as u64), self.cancel);
            grace -= started.elapsed().as_secs() as i64;
        }
        if self.cancel.is_cancelled() {
            // A shorter grace period (or shutdown of the sync) replaced this kill: the
            // stop with the old period must not be sent; the worker kills again.
            if let Some(ordering) = ordering {
                ordering.terminated(request.name);
            }
            return Err(Failure::new(
                KILL_CANCELLED,
                format!("stopping container {:?}: kill cancelled", request.name),
            ));
        }
        // The 2 s floor protects the pod's own grace; an explicit override (eviction,
        // a runtime-only pod's 1 s) is honoured as given.
        let grace = if request.grace_override.is_some() {
            grace.max(1)
        } else {
            grace.max(MINIMUM_GRACE_PERIOD_SECONDS)
        };
        let stop = pb::StopContainerRequest {
            container_id: request.container_id.to_owned(),
            timeout: grace,
            ..Default::default()
        };
        let stopped = self
            .runtime
            .stop_container_cancellable(&stop, &|| self.cancel.is_cancelled());
        if let Some(ordering) = ordering {
            ordering.terminated(request.name);
        }
        match stopped {
            Ok(_) => Ok(()),
            Err(err) if err.is_not_found() => Ok(()),
            Err(CriError::Cancelled { .. }) => Err(Failure::new(
                KILL_CANCELLED,
                format!("stopping container {:?}: kill cancelled", request.name),
            )),
            Err(err) => Err(Failure::new(
                KILL_CONTAINER_ERROR,
                format!("failed to stop container {:?}: {err}", request.name),
            )),
        }
    }

    /// Stops every running container of `running` in parallel (respecting sidecar
    /// order), then every sandbox. `pod` is None when litelet no longer knows the pod.
    pub fn kill_pod(
        &self,
        pod: Option<&Pod>,
        pod_ip: &str,
        running: &RunningPod,
        grace_override: Option<i64>,
    ) -> SyncOutcome {
        let mut outcome = SyncOutcome::default();
        let live: Vec<_> = running
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .collect();
        let names: Vec<String> = live.iter().map(|c| c.name.clone()).collect();
        let ordering = pod.map(|p| TerminationOrdering::new(p, &names));
        let results: Vec<(String, Result<(), Failure>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = live
                .iter()
                .map(|c| {
                    let ordering = ordering.as_ref();
                    let handle = std::thread::Builder::new()
                        .name("kill".into())
                        .stack_size(256 * 1024)
                        .spawn_scoped(scope, move || {
                            let request = KillRequest {
                                container_id: &c.id,
                                name: &c.name,
                                message: "",
                                reason: KillReason::Unknown,
                                grace_override,
                            };
                            self.kill_container(pod, pod_ip, &request, ordering)
                        });
                    (c.name.clone(), handle)
                })
                .collect();
            handles
                .into_iter()
                .map(|(name, handle)| {
                    let result = match handle {
                        Ok(h) => h.join().unwrap_or_else(|_| {
                            Err(Failure::new(KILL_CONTAINER_ERROR, "kill thread panicked"))
                        }),
                        Err(err) => Err(Failure::new(
                            KILL_CONTAINER_ERROR,
                            format!("cannot spawn kill thread: {err}"),
                        )),
                    };
                    (name, result)
                })
                .collect()
        });
        for (name, result) in results {
            match result {
                Ok(()) => outcome.ok(SyncAction::KillContainer, name),
                Err(failure) => outcome.fail(SyncAction::KillContainer, name, failure),
            }
        }
        if self.cancel.is_cancelled() {
            // The worker kills again (with the shorter grace period that cancelled
            // this kill); the sandboxes go then, after their containers.
            return outcome;
        }
        for sandbox in running.sandbox_ids() {
            let stopped = self.runtime.stop_pod_sandbox(&pb::StopPodSandboxRequest {
                pod_sandbox_id: sandbox.to_owned(),
                ..Default::default()
            });
            match stopped {
                Ok(_) => outcome.ok(SyncAction::KillPodSandbox, sandbox),
                Err(err) if err.is_not_found() => outcome.ok(SyncAction::KillPodSandbox, sandbox),
                Err(err) => outcome.fail(
                    SyncAction::KillPodSandbox,
                    sandbox,
                    Failure::new(KILL_POD_SANDBOX_ERROR, err.to_string()),
                ),
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{Probe, RestartPolicy};

    fn pod(deletion: Option<i64>, spec: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.deletion_grace_period_seconds = deletion;
        pod.spec.termination_grace_period_seconds = spec;
        pod
    }

    #[test]
    fn grace_period_rules() {
        let plain = Container::default();
        let probed = Container {
            liveness_probe: Some(Probe {
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            (
                "deletion grace wins over spec",
                pod(Some(7), Some(30)),
                &plain,
                KillReason::None,
                None,
                7,
            ),
            (
                "spec grace",
                pod(None, Some(30)),
                &plain,
                KillReason::None,
                None,
                30,
            ),
            (
                "nothing set: minimum",
                pod(None, None),
                &plain,
                KillReason::None,
                None,
                2,
            ),
            (
                "probe grace for probe kills",
                pod(None, Some(30)),
                &probed,
                KillReason::LivenessProbe,
                None,
                5,
            ),
            (
                "probe grace not for other kills",
                pod(None, Some(30)),
                &probed,
                KillReason::None,
                None,
                30,
            ),
            (
                "override wins",
                pod(Some(7), Some(30)),
                &plain,
                KillReason::None,
                Some(1),
                1,
            ),
        ];
        for (name, pod, container, reason, override_seconds, want) in cases {
            assert_eq!(
                grace_period(&pod, container, reason, override_seconds),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn only_http_hooks_without_a_host_need_the_pod_ip() {
        use crate::api::pod::{ExecAction, HttpGetAction};
        let http = |host: Option<&str>| LifecycleHandler {
            http_get: Some(HttpGetAction {
                host: host.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        };
        let exec = LifecycleHandler {
            exec: Some(ExecAction {
                command: vec!["true".into()],
            }),
            ..Default::default()
        };
        assert!(needs_pod_ip(&http(None), ""));
        assert!(needs_pod_ip(&http(Some("")), ""));
        assert!(!needs_pod_ip(&http(None), "10.0.0.7"), "already known");
        assert!(!needs_pod_ip(&http(Some("10.1.2.3")), ""), "host given");
        assert!(!needs_pod_ip(&exec, ""));
    }

    #[test]
    fn sidecars_stop_after_mains_in_reverse_order() {
        let mut p = Pod::default();
        p.spec.containers.push(Container {
            name: "main".into(),
            ..Default::default()
        });
        for name in ["first", "second"] {
            p.spec.init_containers.push(Container {
                name: name.into(),
                restart_policy: Some(RestartPolicy::Always),
                ..Default::default()
            });
        }
        let running: Vec<String> = ["main", "first", "second"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ordering = TerminationOrdering::new(&p, &running);
        let log = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for name in ["first", "second", "main"] {
                let (ordering, log) = (&ordering, &log);
                scope.spawn(move || {
                    ordering.wait_for_turn(name, Duration::from_secs(10), &Cancel::new());
                    log.lock().unwrap().push(name);
                    ordering.terminated(name);
                });
            }
        });
        assert_eq!(*log.lock().unwrap(), ["main", "second", "first"]);
    }
}
