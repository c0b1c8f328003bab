//! A runtime manager for the tests that drive SyncPod themselves, on the fake CRI or
//! a private containerd: the settings they all start from, the sync inputs of a pod
//! without volumes or config sources, and [`Harness`], which syncs a pod until its
//! runtime status reaches a state, as a pod worker woken by the PLEG would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use litelet::api::pod::{Container, Pod};
use litelet::cri::{self, ConnectOptions, Endpoint, ImageClient, RuntimeClient};
use litelet::events::Recorder;
use litelet::runtime::actions::ProbeResults;
use litelet::runtime::env::{EnvContext, NoConfigSource};
use litelet::runtime::hooks::CriHookRunner;
use litelet::runtime::manager::{RuntimeManager, RuntimeSettings};
use litelet::runtime::model::{ContainerState, PodRuntimeStatus};
use litelet::runtime::result::SyncOutcome;
use litelet::runtime::sync::SyncInputs;

use super::containerd::BUSYBOX;
use super::fake_cri::FakeCri;
use super::wait_until;

/// A test node's runtime settings: root and pod logs below `dir`, 8 GiB of memory,
/// CPU limits enforced, no AppArmor, the machine's `/etc/hosts`, default DNS and swap.
pub fn settings(dir: &Path) -> RuntimeSettings {
    RuntimeSettings {
        root_dir: dir.join("root"),
        pod_logs_dir: dir.join("logs"),
        dns: Default::default(),
        memory_capacity: 8 << 30,
        enforce_cpu_limits: true,
        apparmor_enabled: false,
        node_hosts_file: "/etc/hosts".into(),
        swap: Default::default(),
        seccomp_default: false,
    }
}

/// CRI clients for `endpoint`: 30 s for a call, `pull_timeout` for an image pull.
pub fn connect(endpoint: &str, pull_timeout: Duration) -> (RuntimeClient, ImageClient) {
    let endpoint = Endpoint::parse(endpoint).unwrap();
    let options = ConnectOptions {
        request_timeout: Duration::from_secs(30),
        pull_timeout,
    };
    cri::connect(&endpoint, &options)
}

/// A runtime manager whose lifecycle hooks run over CRI, as the agent builds it.
pub fn manager(
    runtime: RuntimeClient,
    images: ImageClient,
    recorder: Recorder,
    settings: RuntimeSettings,
) -> RuntimeManager {
    let hooks = Arc::new(CriHookRunner::new(runtime.clone()));
    RuntimeManager::new(runtime, images, hooks, recorder, settings)
}

/// The sync inputs of a pod with no config sources, pull secrets or pod cgroup
/// manager (tests that need one set it with struct update syntax).
pub fn inputs<'a>(
    cgroup_parent: String,
    volumes: &'a BTreeMap<String, PathBuf>,
    env: &'a EnvContext,
) -> SyncInputs<'a> {
    SyncInputs {
        cgroup_parent,
        volumes,
        env,
        config_source: &NoConfigSource,
        pull_secrets: None,
        cgroups: None,
        cancel: Default::default(),
    }
}

/// A runtime manager on one endpoint, its root and logs in a temp dir, syncing pods
/// without volumes under one cgroup parent.
pub struct Harness {
    pub manager: RuntimeManager,
    pub dir: tempfile::TempDir,
    pub cgroup_parent: String,
}

impl Harness {
    /// A harness on `endpoint` whose pods go under `cgroup_parent` ("" lets the
    /// runtime choose).
    pub fn new(endpoint: &str, cgroup_parent: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, images) = connect(endpoint, Duration::from_secs(30));
        let manager = manager(runtime, images, Recorder::log_only(), settings(dir.path()));
        Harness {
            manager,
            dir,
            cgroup_parent: cgroup_parent.to_owned(),
        }
    }

    pub fn status(&self, pod: &Pod) -> PodRuntimeStatus {
        self.manager
            .pod_status(pod.uid(), pod.name(), pod.namespace())
            .expect("pod status")
    }

    pub fn sync(&self, pod: &Pod) -> SyncOutcome {
        let volumes = BTreeMap::new();
        let env = EnvContext::default();
        let inputs = inputs(self.cgroup_parent.clone(), &volumes, &env);
        self.manager
            .sync_pod(pod, &self.status(pod), &ProbeResults::default(), &inputs)
    }

    /// The state of the newest instance of container `name`.
    pub fn state_of(&self, pod: &Pod, name: &str) -> Option<ContainerState> {
        self.status(pod).newest(name).map(|c| c.state)
    }

    /// Syncs until `done` holds for the pod's runtime status, like a pod worker would.
    pub fn sync_until(&self, pod: &Pod, what: &str, done: impl Fn(&PodRuntimeStatus) -> bool) {
        let ok = wait_until(Duration::from_secs(30), || {
            let outcome = self.sync(pod);
            if !outcome.is_ok() {
                eprintln!("sync outcome: {outcome}");
            }
            std::thread::sleep(Duration::from_millis(50));
            done(&self.status(pod))
        });
        assert!(ok, "never reached: {what}; status: {:#?}", self.status(pod));
    }
}

/// A busybox container `name` running `script` with `sh -c`.
pub fn sh_container(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(BUSYBOX.into()),
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

/// A fake runtime that already holds the busybox image.
pub fn fake_with_busybox() -> FakeCri {
    let fake = FakeCri::start();
    fake.state().images.insert(BUSYBOX.into(), 1_300_000);
    fake
}
