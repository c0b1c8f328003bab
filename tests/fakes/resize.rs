//! In-place resize through the runtime manager (SyncPod step 9) with real file writes:
//! the fake CRI with a temp-dir cgroupfs (v1 and v2 models), and, as root on a v1
//! machine, a private real containerd with a private cgroup root under
//! `/sys/fs/cgroup/*/litelet-resize-<pid>` (skipped loudly otherwise, unless CI=true).
//! The kubelet-level behaviour (admission, conditions, the API status, restarts) is in
//! `tests/fakes/resize_node.rs`.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::cgroup_model::CgroupModel;
use crate::support::containerd::{qos_cgroups_under, CgroupRoot, Containerd, BUSYBOX};
use crate::support::fake_cri::FakeCri;
use crate::support::pods;
use crate::support::runtime::{self, fake_with_busybox};
use crate::support::wait_until;
use grpcio::RpcStatusCode;
use litelet::api::meta::Time;
use litelet::api::pod::{
    Container, ContainerResizePolicy, Pod, PodPhase, ResizeRestartPolicy, ResourceRequirements,
    RestartPolicy,
};
use litelet::api::quantity::Quantity;
use litelet::cgroups::PodCgroupManager;
use litelet::events::Recorder;
use litelet::runtime::actions::ProbeResults;
use litelet::runtime::env::EnvContext;
use litelet::runtime::manager::{RuntimeManager, RuntimeSettings};
use litelet::runtime::model::{ContainerState, PodRuntimeStatus};
use litelet::runtime::result::{SyncAction, SyncOutcome};
use litelet::runtime::swap::{SwapBehavior, SwapSettings};
use litelet::runtime::sync::SyncInputs;
use litelet::status::generate::{generate_pod_status, PodStatusInput};

const MI: i64 = 1 << 20;

/// A runtime manager, a pod cgroup manager and what they write to.
struct Rig {
    manager: RuntimeManager,
    cgroups: Option<PodCgroupManager>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new(endpoint: &str, cgroups: Option<PodCgroupManager>) -> Rig {
        Rig::with_swap(endpoint, cgroups, Default::default())
    }

    fn with_swap(endpoint: &str, cgroups: Option<PodCgroupManager>, swap: SwapSettings) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, images) = runtime::connect(endpoint, Duration::from_secs(60));
        let settings = RuntimeSettings {
            swap,
            ..runtime::settings(dir.path())
        };
        let manager = runtime::manager(runtime, images, Recorder::log_only(), settings);
        Rig {
            manager,
            cgroups,
            _dir: dir,
        }
    }

    fn status(&self, pod: &Pod) -> PodRuntimeStatus {
        self.manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status")
    }

    /// One pod sync as the kubelet does it: pod cgroup first, then the runtime sync.
    /// `pod` plays the allocated pod.
    fn sync(&self, pod: &Pod) -> SyncOutcome {
        self.sync_with(pod, &self.status(pod))
    }

    /// [`Rig::sync`] from a runtime status already read (as the PLEG cache gives it).
    fn sync_with(&self, pod: &Pod, status: &PodRuntimeStatus) -> SyncOutcome {
        let parent = match &self.cgroups {
            Some(c) => {
                // On the models the "kernel" fills a new cgroup a moment after mkdir.
                let made = wait_until(Duration::from_secs(10), || c.ensure_pod(pod).is_ok());
                assert!(made, "pod cgroup: {:?}", c.ensure_pod(pod));
                c.pod_cgroup_name(pod).unwrap()
            }
            None => String::new(),
        };
        let volumes = BTreeMap::<String, PathBuf>::new();
        let env = EnvContext::default();
        let inputs = SyncInputs {
            cgroups: self.cgroups.as_ref(),
            ..runtime::inputs(parent, &volumes, &env)
        };
        self.manager
            .sync_pod(pod, status, &ProbeResults::default(), &inputs)
    }

    fn sync_until_running(&self, pod: &Pod) {
        let ok = wait_until(Duration::from_secs(60), || {
            let outcome = self.sync(pod);
            assert!(outcome.is_ok(), "{outcome}");
            self.status(pod)
                .newest("app")
                .is_some_and(|c| c.state == ContainerState::Running)
        });
        assert!(ok, "app never ran: {:#?}", self.status(pod));
    }

    fn app_id(&self, pod: &Pod) -> String {
        self.status(pod).newest("app").expect("app").id.clone()
    }
}

fn resources(cpu_req: &str, cpu_lim: &str, memory: &str) -> ResourceRequirements {
    let q = |s: &str| Quantity::parse(s).unwrap();
    let mut r = ResourceRequirements::default();
    r.requests.insert("cpu".into(), q(cpu_req));
    r.requests.insert("memory".into(), q(memory));
    r.limits.insert("cpu".into(), q(cpu_lim));
    r.limits.insert("memory".into(), q(memory));
    r
}

/// A Guaranteed or Burstable pod with one busybox container `app`.
fn pod(uid: &str, r: ResourceRequirements) -> Pod {
    let mut pod = pods::meta("default", &format!("resize-{uid}"), uid);
    pod.metadata.generation = Some(1);
    pod.spec.host_network = Some(true);
    pod.spec.restart_policy = Some(RestartPolicy::Always);
    pod.spec.termination_grace_period_seconds = Some(1);
    pod.spec.containers.push(Container {
        name: "app".into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sh".into(), "-c".into(), "exec sleep 3600".into()],
        resources: Some(r),
        ..Default::default()
    });
    pod.status.phase = Some(PodPhase::Running);
    pod
}

fn resized(p: &Pod, r: ResourceRequirements) -> Pod {
    let mut p = p.clone();
    p.spec.containers[0].resources = Some(r);
    p.metadata.generation = p.metadata.generation.map(|g| g + 1);
    p
}

fn resize_step(outcome: &SyncOutcome) -> Option<Option<String>> {
    outcome
        .steps
        .iter()
        .find(|s| s.action == SyncAction::ResizeContainers)
        .map(|s| {
            s.failure
                .as_ref()
                .map(|f| format!("{}: {}", f.reason, f.message))
        })
}

fn methods(fake: &FakeCri, from: usize) -> Vec<String> {
    fake.calls()[from..]
        .iter()
        .map(|c| c.method.clone())
        .filter(|m| !m.ends_with("Status") && !m.starts_with("List") && m != "Version")
        .collect()
}

/// Pod cgroup values as the model holds them: (cpu shares or weight, quota, memory).
fn pod_values(model: &CgroupModel, name: &str) -> (String, String, String) {
    if model.v2 {
        (
            model.read("", name, "cpu.weight").unwrap(),
            model.read("", name, "cpu.max").unwrap(),
            model.read("", name, "memory.max").unwrap(),
        )
    } else {
        (
            model.read("cpu", name, "cpu.shares").unwrap(),
            model.read("cpu", name, "cpu.cfs_quota_us").unwrap(),
            model.read("memory", name, "memory.limit_in_bytes").unwrap(),
        )
    }
}

fn resize_on_model(model: CgroupModel) {
    let fake = fake_with_busybox();
    let rig = Rig::new(&fake.endpoint(), Some(model.manager()));
    let p = pod("uid-model", resources("500m", "500m", "128Mi"));
    rig.sync_until_running(&p);
    let name = rig.cgroups.as_ref().unwrap().pod_cgroup_name(&p).unwrap();
    let id = rig.app_id(&p);
    let before = if model.v2 {
        ("20", "50000 100000", "134217728")
    } else {
        ("512", "50000", "134217728")
    };
    let got = pod_values(&model, &name);
    assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_str()), before);

    // Up: CPU and memory, in place.
    let calls = fake.calls().len();
    let up = resized(&p, resources("1", "1", "256Mi"));
    let outcome = rig.sync(&up);
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    assert_eq!(
        methods(&fake, calls),
        ["UpdateContainerResources", "UpdateContainerResources"]
    );
    let after = if model.v2 {
        ("39", "100000 100000", "268435456")
    } else {
        ("1024", "100000", "268435456")
    };
    let got = pod_values(&model, &name);
    assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_str()), after);
    let applied = fake.state().container_resources(&id).unwrap();
    assert_eq!(
        (
            applied.cpu_shares,
            applied.cpu_quota,
            applied.memory_limit_in_bytes
        ),
        (1024, 100_000, 256 * MI)
    );
    // Nothing left to do: the next sync writes nothing.
    let calls = fake.calls().len();
    let again = rig.sync(&up);
    assert_eq!(resize_step(&again), None, "{again}");
    assert!(
        methods(&fake, calls).is_empty(),
        "{:?}",
        methods(&fake, calls)
    );

    // Down below the pod's memory usage: refused, nothing written.
    let (memory, usage_file) = if model.v2 {
        ("", "memory.current")
    } else {
        ("memory", "memory.usage_in_bytes")
    };
    model.set(memory, &name, usage_file, &(200 * MI).to_string());
    let down = resized(&up, resources("250m", "250m", "128Mi"));
    let calls = fake.calls().len();
    let refused = rig.sync(&down);
    let message = resize_step(&refused).flatten().expect("a resize failure");
    assert!(message.contains("below its current usage"), "{message}");
    assert!(methods(&fake, calls).is_empty());
    assert_eq!(pod_values(&model, &name).2, "268435456");
    // Usage drops: the same resize goes through, containers first, pod last.
    model.set(memory, &name, usage_file, &(64 * MI).to_string());
    let outcome = rig.sync(&down);
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    assert_eq!(pod_values(&model, &name).2, "134217728");
    let applied = fake.state().container_resources(&id).unwrap();
    assert_eq!(
        (
            applied.cpu_shares,
            applied.cpu_quota,
            applied.memory_limit_in_bytes
        ),
        (256, 25_000, 128 * MI)
    );
    assert_eq!(rig.app_id(&p), id, "resized in place, not restarted");
}

#[test]
fn resize_in_place_on_the_v1_model() {
    resize_on_model(CgroupModel::v1());
}

#[test]
fn resize_in_place_on_the_v2_model() {
    resize_on_model(CgroupModel::v2());
}

#[test]
fn resize_quirk1_errors_reach_the_sync_outcome_and_are_retried() {
    // Upstream passed the sync result by value to doPodResizeAction: its failures
    // never reached SyncPod's result, only the log.
    let fake = fake_with_busybox();
    let model = CgroupModel::v1();
    let rig = Rig::new(&fake.endpoint(), Some(model.manager()));
    let p = pod("uid-quirk1", resources("500m", "500m", "128Mi"));
    rig.sync_until_running(&p);
    fake.fail_nth(
        "UpdateContainerResources",
        1,
        RpcStatusCode::UNAVAILABLE,
        "runtime says no",
    );
    let up = resized(&p, resources("500m", "500m", "256Mi"));
    let failed = rig.sync(&up);
    let message = resize_step(&failed).flatten().expect("a resize failure");
    assert!(message.starts_with("ResizeError: "), "{message}");
    assert!(message.contains("runtime says no"), "{message}");
    assert!(!failed.is_ok() && !failed.only_backoff());
    // The next sync plans again from what is there and finishes.
    let outcome = rig.sync(&up);
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    let id = rig.app_id(&p);
    let applied = fake.state().container_resources(&id).unwrap();
    assert_eq!(applied.memory_limit_in_bytes, 256 * MI);
}

#[test]
fn resize_quirk10_sync_pod_reads_no_pod_status() {
    // Upstream's computePodActions called GetPodStatus again in every sync once resize
    // was enabled. litelet's runtime sync decides from the status it is given: a sync
    // that resizes makes exactly its container updates, and one with nothing to do
    // makes no call at all (not even a list).
    let fake = fake_with_busybox();
    let model = CgroupModel::v1();
    let rig = Rig::new(&fake.endpoint(), Some(model.manager()));
    let p = pod("uid-quirk10", resources("500m", "500m", "128Mi"));
    rig.sync_until_running(&p);
    let all = |from: usize| -> Vec<String> {
        fake.calls()[from..]
            .iter()
            .map(|c| c.method.clone())
            .collect()
    };
    let status = rig.status(&p);
    let calls = fake.calls().len();
    let outcome = rig.sync_with(&p, &status);
    assert!(outcome.is_ok(), "{outcome}");
    assert!(all(calls).is_empty(), "{:?}", all(calls));

    let up = resized(&p, resources("1", "1", "256Mi"));
    let calls = fake.calls().len();
    let outcome = rig.sync_with(&up, &status);
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    assert_eq!(
        all(calls),
        ["UpdateContainerResources", "UpdateContainerResources"]
    );
}

#[test]
fn resize_with_restart_policy_restarts_under_the_new_pod_limits() {
    let fake = fake_with_busybox();
    let model = CgroupModel::v1();
    let rig = Rig::new(&fake.endpoint(), Some(model.manager()));
    let mut p = pod("uid-restart", resources("500m", "500m", "128Mi"));
    p.spec.containers[0].resize_policy = vec![ContainerResizePolicy {
        resource_name: "cpu".into(),
        restart_policy: ResizeRestartPolicy::RestartContainer,
    }];
    rig.sync_until_running(&p);
    let old = rig.app_id(&p);
    let name = rig.cgroups.as_ref().unwrap().pod_cgroup_name(&p).unwrap();
    let calls = fake.calls().len();
    let up = resized(&p, resources("1", "1", "128Mi"));
    let outcome = rig.sync(&up);
    assert!(outcome.is_ok(), "{outcome}");
    assert_eq!(
        methods(&fake, calls),
        ["StopContainer", "CreateContainer", "StartContainer"]
    );
    assert_eq!(
        model.read("cpu", &name, "cpu.cfs_quota_us").unwrap(),
        "100000"
    );
    let new = rig.app_id(&p);
    assert_ne!(new, old);
    let created = fake.state().container_resources(&new).unwrap();
    assert_eq!((created.cpu_shares, created.cpu_quota), (1024, 100_000));
}

#[test]
fn without_pod_cgroups_resizes_the_containers() {
    // Upstream dereferenced the missing pod cgroup config and crashed the kubelet.
    let fake = fake_with_busybox();
    let rig = Rig::new(&fake.endpoint(), None);
    let p = pod("uid-nocg", resources("500m", "500m", "128Mi"));
    rig.sync_until_running(&p);
    let outcome = rig.sync(&resized(&p, resources("1", "1", "256Mi")));
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    let id = rig.app_id(&p);
    let applied = fake.state().container_resources(&id).unwrap();
    assert_eq!(
        (applied.cpu_quota, applied.memory_limit_in_bytes),
        (100_000, 256 * MI)
    );
}

// ---- real v1 cgroups and a real containerd ----

fn skip(test: &str, why: &str) {
    let _: Option<()> = support::skip(test, why);
}

fn kernel(controller: &str, cgroup: &str, file: &str) -> String {
    std::fs::read_to_string(format!("/sys/fs/cgroup/{controller}{cgroup}/{file}"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("<{e}>"))
}

#[test]
fn resize_real_v1_cgroups_and_containerd() {
    const TEST: &str = "resize_real_v1_cgroups_and_containerd";
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() {
        return skip(TEST, "needs cgroup v1 at /sys/fs/cgroup");
    }
    let top = format!("litelet-resize-{}", std::process::id());
    let _cleanup = CgroupRoot(top.clone());
    let Some(ctd) = Containerd::start(TEST) else {
        return;
    };
    let cgroups = qos_cgroups_under(&format!("/{top}"));
    let rig = Rig::new(&ctd.endpoint(), Some(cgroups));
    // Burstable: requests below limits.
    let mut r = resources("250m", "500m", "64Mi");
    r.requests
        .insert("memory".into(), Quantity::parse("32Mi").unwrap());
    let p = pod("uid-real-resize", r);
    rig.sync_until_running(&p);
    let pod_cg = rig.cgroups.as_ref().unwrap().pod_cgroup_name(&p).unwrap();
    let id = rig.app_id(&p);
    let ctr_cg = format!("{pod_cg}/{id}");
    assert_eq!(
        kernel("cpu", &ctr_cg, "cpu.cfs_quota_us"),
        "50000",
        "{}",
        ctd.log_tail()
    );
    assert_eq!(
        kernel("memory", &ctr_cg, "memory.limit_in_bytes"),
        (64 * MI).to_string()
    );
    assert_eq!(kernel("cpu", &pod_cg, "cpu.cfs_quota_us"), "50000");

    // Up: CPU limit 500m → 1500m, memory 64Mi → 128Mi, request 250m → 1.
    let mut r = resources("1", "1500m", "128Mi");
    r.requests
        .insert("memory".into(), Quantity::parse("32Mi").unwrap());
    let up = resized(&p, r);
    let outcome = rig.sync(&up);
    assert_eq!(
        resize_step(&outcome),
        Some(None),
        "{outcome}\n{}",
        ctd.log_tail()
    );
    assert_eq!(kernel("cpu", &ctr_cg, "cpu.cfs_quota_us"), "150000");
    assert_eq!(kernel("cpu", &ctr_cg, "cpu.shares"), "1024");
    assert_eq!(
        kernel("memory", &ctr_cg, "memory.limit_in_bytes"),
        (128 * MI).to_string()
    );
    assert_eq!(kernel("cpu", &pod_cg, "cpu.cfs_quota_us"), "150000");
    assert_eq!(kernel("cpu", &pod_cg, "cpu.shares"), "1024");
    assert_eq!(
        kernel("memory", &pod_cg, "memory.limit_in_bytes"),
        (128 * MI).to_string()
    );

    // The status reports it: allocated and actual resources.
    let runtime = rig.status(&up);
    let input = PodStatusInput::new(&up, &runtime, "containerd", Time::now());
    let status = generate_pod_status(&input);
    let app = &status.container_statuses[0];
    let actual = app.resources.as_ref().expect("resources");
    assert_eq!(actual.limits["cpu"], Quantity::parse("1500m").unwrap());
    assert_eq!(actual.limits["memory"], Quantity::parse("128Mi").unwrap());
    assert_eq!(actual.requests["cpu"], Quantity::parse("1").unwrap());
    assert_eq!(
        app.allocated_resources["cpu"],
        Quantity::parse("1").unwrap()
    );

    // Down again: the container first, so the kernel accepts the lower pod quota.
    let mut r = resources("100m", "200m", "48Mi");
    r.requests
        .insert("memory".into(), Quantity::parse("32Mi").unwrap());
    let down = resized(&up, r);
    let outcome = rig.sync(&down);
    assert_eq!(
        resize_step(&outcome),
        Some(None),
        "{outcome}\n{}",
        ctd.log_tail()
    );
    assert_eq!(kernel("cpu", &ctr_cg, "cpu.cfs_quota_us"), "20000");
    assert_eq!(kernel("cpu", &pod_cg, "cpu.cfs_quota_us"), "20000");
    assert_eq!(
        kernel("memory", &pod_cg, "memory.limit_in_bytes"),
        (48 * MI).to_string()
    );
    assert_eq!(
        kernel("memory", &ctr_cg, "memory.limit_in_bytes"),
        (48 * MI).to_string()
    );
    assert_eq!(rig.app_id(&p), id, "resized in place, not restarted");

    let killed = rig
        .manager
        .kill_pod(Some(&down), &rig.status(&down).to_running_pod(), Some(1));
    assert!(killed.is_ok(), "{killed}");
}

/// LimitedSwap follows a resize: the container's new memory request gets its share of
/// the node's swap in the same UpdateContainerResources (upstream generates the
/// container resources, swap included, for a resize as for a creation).
#[test]
fn a_resized_burstable_container_gets_the_swap_share_of_its_new_request() {
    let fake = fake_with_busybox();
    let swap = SwapSettings {
        behavior: SwapBehavior::LimitedSwap,
        cgroup_v2: true,
        controller: true,
        memory_capacity: 8 << 30,
        swap_capacity: 2 << 30,
    };
    let rig = Rig::with_swap(&fake.endpoint(), None, swap);
    let burstable = |request: &str, limit: &str| {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut r = ResourceRequirements::default();
        r.requests.insert("cpu".into(), q("100m"));
        r.requests.insert("memory".into(), q(request));
        r.limits.insert("memory".into(), q(limit));
        r
    };
    let p = pod("uid-swap", burstable("1Gi", "2Gi"));
    rig.sync_until_running(&p);
    let id = rig.app_id(&p);
    let swap_max = |fake: &FakeCri| {
        let r = fake.state().container_resources(&id).unwrap();
        r.unified.get("memory.swap.max").cloned()
    };
    assert_eq!(swap_max(&fake).as_deref(), Some("268435456"), "1Gi of 8Gi");
    let calls = fake.calls().len();
    let up = resized(&p, burstable("2Gi", "4Gi"));
    let outcome = rig.sync(&up);
    assert_eq!(resize_step(&outcome), Some(None), "{outcome}");
    assert_eq!(methods(&fake, calls), ["UpdateContainerResources"]);
    assert_eq!(swap_max(&fake).as_deref(), Some("536870912"), "2Gi of 8Gi");
}
