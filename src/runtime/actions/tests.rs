//! Table tests for `compute_pod_actions`, in the shape of upstream's
//! TestComputePodActions: a base pod and runtime status, named cases that each change
//! something, and the expected actions, all checked by one `check` helper. Case names
//! say the behaviour or the upstream quirk they pin down (a `B12` prefix is a tag kept
//! from the first test plan).

use super::*;
use crate::api::meta::Time;
use crate::api::pod::{EphemeralContainer, Probe};
use crate::runtime::model::SandboxStatus;

const SANDBOX: &str = "sandbox-1";

/// A pod, what the runtime has for it, and the probe results.
struct World {
    pod: Pod,
    status: PodRuntimeStatus,
    probes: ProbeResults,
}

/// One table row: how it differs from the base, and how its expectation differs from
/// "nothing to do in the current sandbox".
struct Case {
    name: &'static str,
    setup: fn(&mut World),
    want: fn(&mut PodActions),
}

fn spec(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox:1.36".into()),
        ..Container::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some(RestartPolicy::Always),
        ..spec(name)
    }
}

fn probe() -> Option<Probe> {
    Some(Probe::default())
}

fn id(name: &str) -> String {
    format!("id-{name}")
}

impl World {
    fn new(init: Vec<Container>, containers: &[&str]) -> Self {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some("uid-1".into());
        pod.spec.restart_policy = Some(RestartPolicy::Always);
        pod.spec.init_containers = init;
        pod.spec.containers = containers.iter().map(|n| spec(n)).collect();
        let status = PodRuntimeStatus {
            uid: "uid-1".into(),
            name: "web".into(),
            namespace: "default".into(),
            ips: vec!["10.0.0.2".into()],
            sandboxes: vec![SandboxStatus {
                id: SANDBOX.into(),
                state: SandboxState::Ready,
                attempt: 0,
                ip: "10.0.0.2".into(),
                ..SandboxStatus::default()
            }],
            containers: Vec::new(),
        };
        World {
            pod,
            status,
            probes: ProbeResults::default(),
        }
    }

    /// Makes `state`/`exit_code` the only instance of container `name`, created from
    /// the pod's current spec for it.
    fn put(&mut self, name: &str, state: ContainerState, exit_code: i32) {
        let spec = &self.pod.spec;
        let created_from = spec
            .init_containers
            .iter()
            .chain(&spec.containers)
            .chain(spec.ephemeral_containers.iter().map(|e| &e.container))
            .find(|c| c.name == name);
        let hash = created_from.map(container_hash).unwrap_or(0);
        let hash_without_resources = created_from
            .map(container_hash_without_resources)
            .unwrap_or(0);
        self.status.containers.retain(|c| c.name != name);
        self.status.containers.insert(
            0,
            ContainerStatus {
                id: id(name),
                name: name.into(),
                state,
                exit_code,
                hash,
                hash_without_resources,
                ..ContainerStatus::default()
            },
        );
    }

    fn running(&mut self, names: &[&str]) {
        for n in names {
            self.put(n, ContainerState::Running, 0);
        }
    }

    fn policy(&mut self, policy: RestartPolicy) {
        self.pod.spec.restart_policy = Some(policy);
    }

    fn sandbox(&mut self) -> &mut SandboxStatus {
        &mut self.status.sandboxes[0]
    }

    fn liveness(&mut self, name: &str, result: ProbeResult) {
        self.probes.liveness.insert(id(name), result);
    }

    fn startup(&mut self, name: &str, result: ProbeResult) {
        self.probes.startup.insert(id(name), result);
    }

    fn ephemeral(&mut self, name: &str) {
        self.pod.spec.ephemeral_containers.push(EphemeralContainer {
            container: spec(name),
            target_container_name: None,
        });
    }
}

/// Expected: nothing to do, in the current sandbox.
fn nothing() -> PodActions {
    PodActions {
        sandbox_id: SANDBOX.into(),
        ..PodActions::default()
    }
}

fn kill(want: &mut PodActions, name: &str, reason: KillReason, message: &str) {
    want.containers_to_kill.insert(
        id(name),
        ContainerToKill {
            name: name.into(),
            message: message.into(),
            reason,
        },
    );
}

fn recreate(want: &mut PodActions, attempt: u32, sandbox_id: &str) {
    want.kill_pod = true;
    want.create_sandbox = true;
    want.attempt = attempt;
    want.sandbox_id = sandbox_id.into();
}

fn check(
    name: &str,
    pod: &Pod,
    status: &PodRuntimeStatus,
    probes: &ProbeResults,
    want: &PodActions,
) {
    let got = compute_pod_actions(pod, status, probes);
    assert_eq!(&got, want, "case {name:?}\n got: {got}\nwant: {want}");
}

fn run(base: fn() -> World, cases: &[Case]) {
    for case in cases {
        let mut world = base();
        (case.setup)(&mut world);
        let mut want = nothing();
        (case.want)(&mut want);
        check(case.name, &world.pod, &world.status, &world.probes, &want);
    }
}

const UNKNOWN_MSG: &str = "Container is in \"unknown\" state, try killing it before restart";
const INIT_UNKNOWN_MSG: &str =
    "Init container is in \"unknown\" state, try killing it before restart";

/// Regular containers a and b, both running in a ready sandbox, restartPolicy Always.
fn regular_base() -> World {
    let mut w = World::new(Vec::new(), &["a", "b"]);
    w.running(&["a", "b"]);
    w
}

#[test]
fn sandbox_and_regular_containers() {
    use ContainerState::*;
    run(
        regular_base,
        &[
            Case {
                name: "B2 everything running: nothing to do",
                setup: |_| {},
                want: |_| {},
            },
            Case {
                name: "B1 new pod: create the sandbox, start every container",
                setup: |w| {
                    w.status.sandboxes.clear();
                    w.status.containers.clear();
                },
                want: |a| {
                    recreate(a, 0, "");
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B3 newest sandbox not ready: recreate with attempt+1, keep its id",
                setup: |w| {
                    *w.sandbox() = SandboxStatus {
                        id: SANDBOX.into(),
                        state: SandboxState::NotReady,
                        attempt: 2,
                        ..SandboxStatus::default()
                    };
                    w.put("a", Exited, 0);
                    w.put("b", Exited, 0);
                },
                want: |a| {
                    recreate(a, 3, SANDBOX);
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B4 two ready sandboxes: recreate from the newest",
                setup: |w| {
                    let mut newer = w.sandbox().clone();
                    newer.id = "sandbox-2".into();
                    newer.attempt = 1;
                    w.status.sandboxes.insert(0, newer);
                },
                want: |a| {
                    recreate(a, 2, "sandbox-2");
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B4 an older not-ready sandbox beside a ready one is fine",
                setup: |w| {
                    let mut older = w.sandbox().clone();
                    older.id = "sandbox-0".into();
                    older.state = SandboxState::NotReady;
                    w.status.sandboxes.push(older);
                },
                want: |_| {},
            },
            Case {
                name: "B5 host-network sandbox for a pod-network pod: recreate without id",
                setup: |w| w.sandbox().host_network = true,
                want: |a| {
                    recreate(a, 1, "");
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B5 pod switched to host network: recreate without id",
                setup: |w| w.pod.spec.host_network = Some(true),
                want: |a| {
                    recreate(a, 1, "");
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B6 pod-network sandbox without an IP: recreate, keep id",
                setup: |w| w.sandbox().ip.clear(),
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B6 host-network sandbox without an IP is fine",
                setup: |w| {
                    w.pod.spec.host_network = Some(true);
                    w.sandbox().host_network = true;
                    w.sandbox().ip.clear();
                },
                want: |_| {},
            },
            Case {
                name: "B6 unknown sandbox state counts as not ready",
                setup: |w| w.sandbox().state = SandboxState::Unknown,
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B7 Never, dead sandbox, containers ran: kill the pod, no new sandbox",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.sandbox().state = SandboxState::NotReady;
                    w.put("a", Exited, 1);
                    w.put("b", Exited, 0);
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.create_sandbox = false;
                },
            },
            Case {
                name: "B8 Never, dead sandbox, nothing ran yet: recreate and start",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.sandbox().state = SandboxState::NotReady;
                    w.status.containers.clear();
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B9 OnFailure, dead sandbox: only the failed container starts",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.sandbox().state = SandboxState::NotReady;
                    w.put("a", Exited, 0);
                    w.put("b", Exited, 1);
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![1];
                },
            },
            Case {
                name: "B10 OnFailure, dead sandbox, all succeeded: kill, no new sandbox",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.sandbox().state = SandboxState::NotReady;
                    w.put("a", Exited, 0);
                    w.put("b", Exited, 0);
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.create_sandbox = false;
                },
            },
            Case {
                name: "B16 exited(1), Always: restart it",
                setup: |w| w.put("a", Exited, 1),
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B16 exited(0), Always: restart it too",
                setup: |w| w.put("b", Exited, 0),
                want: |a| a.containers_to_start = vec![1],
            },
            Case {
                name: "B16 no instance left (garbage collected): start it",
                setup: |w| w.status.containers.retain(|c| c.name != "a"),
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B17 exited(0), OnFailure: leave it",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("a", Exited, 0);
                },
                want: |_| {},
            },
            Case {
                name: "B17 exited(2), OnFailure: restart it",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("a", Exited, 2);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B18 exited(1), Never, b running: nothing, b kept",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("a", Exited, 1);
                },
                want: |_| {},
            },
            Case {
                name: "B19 all exited, Never: kill the pod (sandbox stopped)",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("a", Exited, 0);
                    w.put("b", Exited, 1);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B19 all exited, OnFailure, all succeeded: kill the pod",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("a", Exited, 0);
                    w.put("b", Exited, 0);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B20 unknown state, Always: kill it, then start it",
                setup: |w| w.put("a", Unknown, 0),
                want: |a| {
                    kill(a, "a", KillReason::Unknown, UNKNOWN_MSG);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "B20 unknown state, Never: kill it, then start it",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("a", Unknown, 0);
                },
                want: |a| {
                    kill(a, "a", KillReason::Unknown, UNKNOWN_MSG);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "B21 quirk 3 kept: image changed restarts even with Never",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.pod.spec.containers[0].image = Some("busybox:1.37".into());
                },
                want: |a| {
                    let msg = "Container a definition changed, will be restarted";
                    kill(a, "a", KillReason::None, msg);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "resources-only change is left to in-place resize (runtime reports none)",
                setup: |w| {
                    let mut res = crate::api::pod::ResourceRequirements::default();
                    res.limits.insert(
                        "memory".into(),
                        serde_json::from_value(serde_json::json!("64Mi")).unwrap(),
                    );
                    w.pod.spec.containers[1].resources = Some(res);
                },
                want: |_| {},
            },
            Case {
                name: "B21 resources-only change of a static pod restarts it (no resize)",
                setup: |w| {
                    let mut res = crate::api::pod::ResourceRequirements::default();
                    res.limits.insert(
                        "memory".into(),
                        serde_json::from_value(serde_json::json!("64Mi")).unwrap(),
                    );
                    w.pod.spec.containers[1].resources = Some(res);
                    w.pod.metadata.annotations.insert(
                        crate::api::pod::CONFIG_SOURCE_ANNOTATION_KEY.into(),
                        "file".into(),
                    );
                },
                want: |a| {
                    let msg = "Container b definition changed, will be restarted";
                    kill(a, "b", KillReason::None, msg);
                    a.containers_to_start = vec![1];
                },
            },
            Case {
                name: "B22 liveness failure, Always: kill and restart",
                setup: |w| w.liveness("a", ProbeResult::Failure),
                want: |a| {
                    let msg = "Container a failed liveness probe, will be restarted";
                    kill(a, "a", KillReason::LivenessProbe, msg);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "B22 spec change wins over a liveness failure",
                setup: |w| {
                    w.liveness("a", ProbeResult::Failure);
                    w.pod.spec.containers[0].command = vec!["true".into()];
                },
                want: |a| {
                    let msg = "Container a definition changed, will be restarted";
                    kill(a, "a", KillReason::None, msg);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "B23 liveness failure, Never, only container: kill it and the pod",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.pod.spec.containers.truncate(1);
                    w.status.containers.retain(|c| c.name == "a");
                    w.liveness("a", ProbeResult::Failure);
                },
                want: |a| {
                    kill(
                        a,
                        "a",
                        KillReason::LivenessProbe,
                        "Container a failed liveness probe",
                    );
                    a.kill_pod = true;
                },
            },
            Case {
                name: "B24 startup failure, OnFailure: kill and restart",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.startup("b", ProbeResult::Failure);
                },
                want: |a| {
                    let msg = "Container b failed startup probe, will be restarted";
                    kill(a, "b", KillReason::StartupProbe, msg);
                    a.containers_to_start = vec![1];
                },
            },
            Case {
                name: "B25 probe results other than Failure never kill",
                setup: |w| {
                    w.liveness("a", ProbeResult::Unknown);
                    w.startup("a", ProbeResult::Success);
                    w.liveness("b", ProbeResult::Success);
                    // A stale result for an older instance's ID does not count.
                    w.probes
                        .liveness
                        .insert("id-old".into(), ProbeResult::Failure);
                },
                want: |_| {},
            },
            Case {
                name: "B26 deletion requested: nothing restarts, the pod is killed",
                setup: |w| {
                    w.pod.metadata.deletion_timestamp = Some(Time::from_unix_seconds(5));
                    w.put("a", Exited, 1);
                    w.put("b", Exited, 0);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B26 deletion requested, b still running: kept",
                setup: |w| {
                    w.pod.metadata.deletion_timestamp = Some(Time::from_unix_seconds(5));
                    w.put("a", Exited, 1);
                },
                want: |_| {},
            },
            Case {
                name: "B27 created but never started, Always: start it",
                setup: |w| w.put("a", Created, 0),
                want: |a| a.containers_to_start = vec![0],
            },
        ],
    );
}

#[test]
fn quirk_created_container_starts_under_every_policy() {
    // Upstream v1.29 (B27) leaves a `created` container alone under Never and under
    // OnFailure (exit code 0). It never ran, so starting it is not a restart; we start
    // it, as later upstream versions do for `created`.
    use ContainerState::*;
    run(
        regular_base,
        &[
            Case {
                name: "B27 created, Never: start it (fix)",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("a", Created, 0);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B27 created, OnFailure: start it (fix)",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("a", Created, 0);
                },
                want: |a| a.containers_to_start = vec![0],
            },
        ],
    );
}

#[test]
fn quirk_created_container_is_not_counted_as_succeeded() {
    // Section 4 "containerSucceeded": upstream counts any non-running instance with
    // exit code 0 as succeeded, including `created` and `unknown` ones. With OnFailure
    // and a dead sandbox that meant never starting a container that never ran (and, if
    // all were like that, killing the pod without a new sandbox). Fixed: only
    // exited(0) is success.
    use ContainerState::*;
    run(
        regular_base,
        &[
            Case {
                name: "created container is started in the new sandbox",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.sandbox().state = SandboxState::NotReady;
                    w.put("a", Created, 0);
                    w.put("b", Exited, 0);
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![0];
                },
            },
            Case {
                name: "unknown container is started in the new sandbox",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.sandbox().state = SandboxState::NotReady;
                    w.put("a", Exited, 0);
                    w.put("b", Unknown, 0);
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.containers_to_start = vec![1];
                },
            },
        ],
    );
}

/// Regular init containers i0, i1 and one regular container a; a ready sandbox and no
/// container instances yet.
fn init_base() -> World {
    World::new(vec![spec("i0"), spec("i1")], &["a"])
}

#[test]
fn init_and_ephemeral_containers() {
    use ContainerState::*;
    run(
        init_base,
        &[
            Case {
                name: "B28 nothing ran: start i0 only",
                setup: |_| {},
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B29 i0 done: start i1",
                setup: |w| w.put("i0", Exited, 0),
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B29 i0 done, i1 running: wait",
                setup: |w| {
                    w.put("i0", Exited, 0);
                    w.put("i1", Running, 0);
                },
                want: |_| {},
            },
            Case {
                name: "B29 i0 running: wait",
                setup: |w| w.put("i0", Running, 0),
                want: |_| {},
            },
            Case {
                name: "B30 last init done: initialised, start a",
                setup: |w| {
                    w.put("i0", Exited, 0);
                    w.put("i1", Exited, 0);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B30 only the last init's instance is left: still initialised",
                setup: |w| w.put("i1", Exited, 0),
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B31 i0 failed, Never: kill the pod, start nothing",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("i0", Exited, 1);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B32 i0 failed, OnFailure: start it again",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("i0", Exited, 1);
                },
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B32 i1 failed, Always: start it again, i0 not re-run",
                setup: |w| {
                    w.put("i0", Exited, 0);
                    w.put("i1", Exited, 2);
                },
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B33 i0 unknown, Always: kill it, start it",
                setup: |w| w.put("i0", Unknown, 0),
                want: |a| {
                    kill(a, "i0", KillReason::Unknown, INIT_UNKNOWN_MSG);
                    a.init_containers_to_start = vec![0];
                },
            },
            Case {
                name: "B33 i0 unknown, Never: kill the pod",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("i0", Unknown, 0);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B11 quirk 5 kept: dead sandbox with init containers starts only i0",
                setup: |w| {
                    w.sandbox().state = SandboxState::NotReady;
                    w.sandbox().attempt = 1;
                    w.put("i0", Exited, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Exited, 1);
                },
                want: |a| {
                    recreate(a, 2, SANDBOX);
                    a.init_containers_to_start = vec![0];
                },
            },
            Case {
                name: "B38 initialised (a running), init instances gone: not re-run",
                setup: |w| w.put("a", Running, 0),
                want: |_| {},
            },
            Case {
                name: "B38 initialised (a created), i0 failed long ago: not re-run",
                setup: |w| {
                    w.put("i0", Exited, 1);
                    w.put("a", Created, 0);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B16 initialised pod: crashed a restarts, init untouched",
                setup: |w| {
                    w.put("i0", Exited, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Exited, 1);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B42 ephemeral container starts while init is still running",
                setup: |w| {
                    w.ephemeral("e0");
                    w.put("i0", Running, 0);
                },
                want: |a| a.ephemeral_containers_to_start = vec![0],
            },
            Case {
                name: "B42 ephemeral container starts while init keeps failing",
                setup: |w| {
                    w.ephemeral("e0");
                    w.put("i0", Exited, 1);
                },
                want: |a| {
                    a.ephemeral_containers_to_start = vec![0];
                    a.init_containers_to_start = vec![0];
                },
            },
            Case {
                name: "B43 exited ephemeral container is never restarted",
                setup: |w| {
                    w.ephemeral("e0");
                    w.ephemeral("e1");
                    w.put("a", Running, 0);
                    w.put("e0", Exited, 0);
                    w.put("e1", Running, 0);
                },
                want: |_| {},
            },
            Case {
                name: "B43 no ephemeral start while the sandbox is recreated",
                setup: |w| {
                    w.ephemeral("e0");
                    w.sandbox().state = SandboxState::NotReady;
                },
                want: |a| {
                    recreate(a, 1, SANDBOX);
                    a.init_containers_to_start = vec![0];
                },
            },
        ],
    );
}

#[test]
fn verify_created_init_container_is_started() {
    // Section 4.4 "[verify]": v1.29 waits on an init container in `created` (the start
    // failed), which can block the pod forever. Later upstream starts it again; so do we.
    use ContainerState::*;
    run(
        init_base,
        &[
            Case {
                name: "created i0: start it again",
                setup: |w| w.put("i0", Created, 0),
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "i0 done, created i1: start i1 again",
                setup: |w| {
                    w.put("i0", Exited, 0);
                    w.put("i1", Created, 0);
                },
                want: |a| a.init_containers_to_start = vec![1],
            },
        ],
    );
}

#[test]
fn quirk12_created_ephemeral_container_is_retried() {
    // Upstream: an ephemeral container whose start failed stays `created` and
    // is never retried. It never ran, so starting it again is not a restart: retry.
    let mut w = init_base();
    w.ephemeral("e0");
    w.ephemeral("e1");
    w.put("a", ContainerState::Running, 0);
    w.put("e0", ContainerState::Created, 0);
    w.put("e1", ContainerState::Exited, 1);
    let mut want = nothing();
    want.ephemeral_containers_to_start = vec![0];
    check(
        "created e0 retried, exited e1 not",
        &w.pod,
        &w.status,
        &w.probes,
        &want,
    );
}

/// Sidecar s0, regular init i1, regular container a; ready sandbox, no instances.
fn sidecar_base() -> World {
    World::new(vec![sidecar("s0"), spec("i1")], &["a"])
}

#[test]
fn sidecar_containers() {
    use ContainerState::*;
    run(
        sidecar_base,
        &[
            Case {
                name: "B34 nothing ran: start the sidecar first",
                setup: |_| {},
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B34 sidecar running (no startup probe): start i1",
                setup: |w| w.put("s0", Running, 0),
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B34 sidecar running, i1 running: wait",
                setup: |w| {
                    w.put("s0", Running, 0);
                    w.put("i1", Running, 0);
                },
                want: |_| {},
            },
            Case {
                name: "B34 sidecar running, i1 done: initialised, start a",
                setup: |w| {
                    w.put("s0", Running, 0);
                    w.put("i1", Exited, 0);
                },
                want: |a| a.containers_to_start = vec![0],
            },
            Case {
                name: "B35 startup probe without a result: wait",
                setup: |w| {
                    w.pod.spec.init_containers[0].startup_probe = probe();
                    w.put("s0", Running, 0);
                },
                want: |_| {},
            },
            Case {
                name: "B35 startup probe Unknown: wait",
                setup: |w| {
                    w.pod.spec.init_containers[0].startup_probe = probe();
                    w.put("s0", Running, 0);
                    w.startup("s0", ProbeResult::Unknown);
                },
                want: |_| {},
            },
            Case {
                name: "B35 startup probe failed: kill and restart the sidecar",
                setup: |w| {
                    w.pod.spec.init_containers[0].startup_probe = probe();
                    w.put("s0", Running, 0);
                    w.startup("s0", ProbeResult::Failure);
                },
                want: |a| {
                    let msg = "Init container s0 failed startup probe";
                    kill(a, "s0", KillReason::StartupProbe, msg);
                    a.init_containers_to_start = vec![0];
                },
            },
            Case {
                name: "B35 startup probe passed: start i1",
                setup: |w| {
                    w.pod.spec.init_containers[0].startup_probe = probe();
                    w.put("s0", Running, 0);
                    w.startup("s0", ProbeResult::Success);
                },
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B36 initialised, sidecar exited(0), Never: restart the sidecar",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("s0", Exited, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Running, 0);
                },
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B36 sidecar crashed during initialisation: restart it, i1 waits",
                setup: |w| w.put("s0", Exited, 1),
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B37 initialised, sidecar liveness failed: kill and restart, a kept",
                setup: |w| {
                    w.pod.spec.init_containers[0].liveness_probe = probe();
                    w.put("s0", Running, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Running, 0);
                    w.liveness("s0", ProbeResult::Failure);
                },
                want: |a| {
                    let msg = "Init container s0 failed liveness probe";
                    kill(a, "s0", KillReason::LivenessProbe, msg);
                    a.init_containers_to_start = vec![0];
                },
            },
            Case {
                name: "B37 sidecar liveness failure counts only with a liveness probe",
                setup: |w| {
                    w.put("s0", Running, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Running, 0);
                    w.liveness("s0", ProbeResult::Failure);
                },
                want: |_| {},
            },
            Case {
                name: "B37 sidecar liveness failure during initialisation: i1 still starts",
                setup: |w| {
                    w.pod.spec.init_containers[0].liveness_probe = probe();
                    w.put("s0", Running, 0);
                    w.liveness("s0", ProbeResult::Failure);
                },
                want: |a| {
                    let msg = "Init container s0 failed liveness probe";
                    kill(a, "s0", KillReason::LivenessProbe, msg);
                    a.init_containers_to_start = vec![0, 1];
                },
            },
            Case {
                name: "B38 initialised, every init instance gone: only the sidecar starts",
                setup: |w| w.put("a", Running, 0),
                want: |a| a.init_containers_to_start = vec![0],
            },
            Case {
                name: "B39 Never, main containers done, sidecar running: kill the pod",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("s0", Running, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Exited, 0);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B39 sidecar exited too: kill the pod, sidecar not restarted",
                setup: |w| {
                    w.policy(RestartPolicy::OnFailure);
                    w.put("s0", Exited, 0);
                    w.put("i1", Exited, 0);
                    w.put("a", Exited, 0);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B33 sidecar unknown: kill it, restart it (any policy)",
                setup: |w| {
                    w.policy(RestartPolicy::Never);
                    w.put("s0", Unknown, 0);
                },
                want: |a| {
                    kill(a, "s0", KillReason::Unknown, INIT_UNKNOWN_MSG);
                    a.init_containers_to_start = vec![0];
                },
            },
        ],
    );
}

#[test]
fn later_upstream_sidecar_definition_change_restarts_it() {
    // v1.29 left a running sidecar on its old spec after an image change; later
    // upstream versions restart it, as for regular containers. We do the same.
    run(
        sidecar_base,
        &[Case {
            name: "sidecar image changed",
            setup: |w| {
                w.put("s0", ContainerState::Running, 0);
                w.put("i1", ContainerState::Exited, 0);
                w.put("a", ContainerState::Running, 0);
                w.pod.spec.init_containers[0].image = Some("envoy:2".into());
            },
            want: |a| {
                kill(
                    a,
                    "s0",
                    KillReason::None,
                    "Init container s0 definition changed",
                );
                a.init_containers_to_start = vec![0];
            },
        }],
    );
}

#[test]
fn two_sidecars_start_in_order() {
    // B34 with two sidecars: each one started unblocks the next.
    let base = || World::new(vec![sidecar("s0"), sidecar("s1"), spec("i2")], &["a"]);
    run(
        base,
        &[
            Case {
                name: "B34 s0 running: start s1",
                setup: |w| w.put("s0", ContainerState::Running, 0),
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B34 s0, s1 running: start i2",
                setup: |w| w.running(&["s0", "s1"]),
                want: |a| a.init_containers_to_start = vec![2],
            },
            Case {
                name: "B38 initialised: missing s1 restarted, s0 kept, i2 not re-run",
                setup: |w| w.running(&["s0", "a"]),
                want: |a| a.init_containers_to_start = vec![1],
            },
            Case {
                name: "B36 initialised: both sidecars exited, both restart in order",
                setup: |w| {
                    w.running(&["a"]);
                    w.put("s0", ContainerState::Exited, 1);
                    w.put("s1", ContainerState::Exited, 0);
                },
                want: |a| a.init_containers_to_start = vec![0, 1],
            },
        ],
    );
}

#[test]
fn should_container_be_restarted_follows_policy() {
    use ContainerState::*;
    // (policy, state, exit code, want)
    let table = [
        (RestartPolicy::Always, Exited, 0, true),
        (RestartPolicy::Always, Running, 0, false),
        (RestartPolicy::OnFailure, Exited, 0, false),
        (RestartPolicy::OnFailure, Exited, 137, true),
        (RestartPolicy::Never, Exited, 1, false),
        (RestartPolicy::Never, Unknown, 0, true),
        (RestartPolicy::Never, Created, 0, true),
    ];
    for (policy, state, exit, want) in table {
        let mut w = World::new(Vec::new(), &["a"]);
        w.policy(policy.clone());
        w.put("a", state, exit);
        let c = &w.pod.spec.containers[0];
        assert_eq!(
            should_container_be_restarted(c, &w.pod, &w.status),
            want,
            "{policy} {state:?} {exit}"
        );
        w.pod.metadata.deletion_timestamp = Some(Time::from_unix_seconds(1));
        assert!(!should_container_be_restarted(c, &w.pod, &w.status));
    }
    let w = World::new(Vec::new(), &["a"]);
    assert!(should_container_be_restarted(
        &w.pod.spec.containers[0],
        &w.pod,
        &w.status
    ));
}

#[test]
fn unset_or_unknown_restart_policy_means_always() {
    for policy in [None, Some(RestartPolicy::from("Sometimes"))] {
        let mut w = regular_base();
        w.pod.spec.restart_policy = policy;
        w.put("a", ContainerState::Exited, 0);
        let mut want = nothing();
        want.containers_to_start = vec![0];
        check("policy default", &w.pod, &w.status, &w.probes, &want);
    }
}

#[test]
fn sandbox_check_reports_attempt_and_id() {
    let w = regular_base();
    assert_eq!(
        pod_sandbox_changed(&w.pod, &w.status),
        SandboxCheck {
            changed: false,
            attempt: 0,
            sandbox_id: SANDBOX.into()
        }
    );
    let mut w = regular_base();
    w.sandbox().attempt = u32::MAX;
    w.sandbox().state = SandboxState::NotReady;
    // No overflow panic on a runtime-supplied attempt number.
    assert_eq!(pod_sandbox_changed(&w.pod, &w.status).attempt, u32::MAX);
}

#[test]
fn display_names_every_decision() {
    let mut w = regular_base();
    w.liveness("a", ProbeResult::Failure);
    let actions = compute_pod_actions(&w.pod, &w.status, &w.probes);
    let text = actions.to_string();
    assert_eq!(
        text,
        "kill_pod=false create_sandbox=false sandbox_id=\"sandbox-1\" attempt=0 \
         update_pod_resources=false init_to_start=[] to_start=[0] ephemeral_to_start=[] \
         to_kill={id-a: a reason=\"LivenessProbe\" \
         \"Container a failed liveness probe, will be restarted\"}"
    );
    assert!(format!("{actions:?}").contains("containers_to_kill"));
}

#[test]
fn quirk_no_ephemeral_start_into_a_pod_being_killed() {
    // Upstream computes ephemeral starts before it decides to kill a finished pod and
    // then tries to start them in the stopped sandbox, failing on every sync. A pod
    // that is killed without a new sandbox starts nothing.
    use ContainerState::*;
    run(
        init_base,
        &[
            Case {
                name: "B31 init failed, Never: pod killed, e0 not started",
                setup: |w| {
                    w.ephemeral("e0");
                    w.policy(RestartPolicy::Never);
                    w.put("i0", Exited, 1);
                },
                want: |a| a.kill_pod = true,
            },
            Case {
                name: "B19 all done, Never: pod killed, e0 not started",
                setup: |w| {
                    w.ephemeral("e0");
                    w.policy(RestartPolicy::Never);
                    w.put("i1", Exited, 0);
                    w.put("a", Exited, 0);
                },
                want: |a| a.kill_pod = true,
            },
        ],
    );
}
