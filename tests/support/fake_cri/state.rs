//! The fake runtime's in-memory state and its rules, with no gRPC in sight.
//!
//! Each method takes a request and returns the response or the `RpcStatus` that
//! containerd would answer with. Timed exits are applied lazily: every method first
//! moves containers whose exit time has passed to EXITED, so no timer thread exists
//! (unless container events are on: see `events.rs`). Every state change is also an
//! event for the open event streams.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use grpcio::{RpcStatus, RpcStatusCode};
use litelet::cri::pb;
use protobuf::{EnumOrUnknown, MessageField};

use super::events::{EventHub, EventType};

/// One served call, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    /// The CRI method name, e.g. "CreateContainer".
    pub method: String,
    /// The ID or name the call was about (container ID, sandbox ID, image, ...).
    pub target: String,
    /// Call arguments worth asserting on, e.g. `timeout=30` for StopContainer.
    pub detail: String,
    /// When the call arrived (benchmarks measure latencies to it).
    pub at: Instant,
}

/// A failure injected for one numbered call of a method.
#[derive(Clone, Debug)]
pub struct Failure {
    pub method: String,
    /// Fails the call whose 1-based number among calls of `method` is this.
    pub call_number: usize,
    pub code: RpcStatusCode,
    pub message: String,
}

pub(super) struct SandboxEntry {
    pub config: pb::PodSandboxConfig,
    pub state: pb::PodSandboxState,
    pub created_at: i64,
    pub ip: String,
}

pub(super) struct ContainerEntry {
    pub sandbox_id: String,
    pub config: pb::ContainerConfig,
    pub image_ref: String,
    pub state: pb::ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub resources: pb::LinuxContainerResources,
    pub exit_at: Option<(Instant, i32)>,
}

/// Everything the fake runtime knows.
pub struct FakeState {
    pub(super) sandboxes: BTreeMap<String, SandboxEntry>,
    pub(super) containers: BTreeMap<String, ContainerEntry>,
    /// Images by reference (tag), with their size.
    pub images: BTreeMap<String, u64>,
    /// References of images ListImages reports as pinned (as containerd pins its
    /// sandbox image).
    pub pinned_images: BTreeSet<String>,
    /// The mountpoint ImageFsInfo names; none is reported while empty.
    pub image_fs_mountpoint: String,
    pub calls: Vec<CallRecord>,
    /// Calls so far per method (the call log is long in scale tests; counting it on
    /// every call made the fake quadratic).
    pub call_counts: HashMap<String, usize>,
    pub delays: HashMap<String, Duration>,
    pub failures: Vec<Failure>,
    /// Containers named like the key exit with the code this long after they start.
    pub exit_rules: HashMap<String, (i32, Duration)>,
    /// Exec outcomes by command line joined with spaces: (exit code, stdout).
    pub exec_results: HashMap<String, (i32, String)>,
    /// Base URL the streaming calls (Exec, Attach, PortForward) answer with.
    pub streaming_url: Option<String>,
    /// What RuntimeConfig answers; `None` is UNIMPLEMENTED, as containerd 1.6 and 1.7.
    pub runtime_config: Option<pb::RuntimeConfigResponse>,
    /// The `info` of a verbose Status (containerd puts its CRI config under "config").
    pub status_info: HashMap<String, String>,
    /// What Status reports as runtime handlers (none, as containerd 1.6, by default).
    pub runtime_handlers: Vec<pb::RuntimeHandler>,
    /// The container event streams (off by default).
    pub events: EventHub,
    conditions: Vec<pb::RuntimeCondition>,
    next_id: u64,
    next_ip: u32,
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// A stable image ID for a reference (like a digest, but computed from the name).
pub fn image_id(reference: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in reference.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("sha256:{hash:016x}{:048x}", reference.len())
}

fn not_found(what: &str, id: &str) -> RpcStatus {
    RpcStatus::with_message(
        RpcStatusCode::NOT_FOUND,
        format!("{what} {id:?}: not found"),
    )
}

fn failed(code: RpcStatusCode, message: String) -> RpcStatus {
    RpcStatus::with_message(code, message)
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Default for FakeState {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeState {
    pub fn new() -> FakeState {
        let ready = |kind: &str| pb::RuntimeCondition {
            type_: kind.to_owned(),
            status: true,
            ..Default::default()
        };
        let mut images = BTreeMap::new();
        images.insert("localhost/litelet/pause:1.0".to_owned(), 300_000);
        FakeState {
            sandboxes: BTreeMap::new(),
            containers: BTreeMap::new(),
            images,
            pinned_images: BTreeSet::new(),
            image_fs_mountpoint: String::new(),
            calls: Vec::new(),
            call_counts: HashMap::new(),
            delays: HashMap::new(),
            failures: Vec::new(),
            exit_rules: HashMap::new(),
            exec_results: HashMap::new(),
            streaming_url: None,
            runtime_config: None,
            status_info: HashMap::new(),
            runtime_handlers: Vec::new(),
            events: EventHub::default(),
            conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            next_id: 1,
            next_ip: 2,
        }
    }

    /// Records a call and returns the injected failure for it, if any.
    pub(super) fn record(&mut self, method: &str, target: String) -> Option<RpcStatus> {
        self.record_with(method, target, String::new())
    }

    /// Records a call with argument details and returns the injected failure for it.
    pub(super) fn record_with(
        &mut self,
        method: &str,
        target: String,
        detail: String,
    ) -> Option<RpcStatus> {
        self.calls.push(CallRecord {
            method: method.to_owned(),
            target,
            detail,
            at: Instant::now(),
        });
        let number = {
            let count = self.call_counts.entry(method.to_owned()).or_default();
            *count += 1;
            *count
        };
        let index = self
            .failures
            .iter()
            .position(|f| f.method == method && f.call_number == number)?;
        let failure = self.failures.remove(index);
        Some(failed(failure.code, failure.message))
    }

    fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("{:032x}{:032x}", now_nanos(), self.next_id)
    }

    /// Moves containers whose timed exit has come to EXITED.
    pub(super) fn apply_timed_exits(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, i32)> = self
            .containers
            .iter()
            .filter_map(|(id, c)| match c.exit_at {
                Some((at, code)) if at <= now => Some((id.clone(), code)),
                _ => None,
            })
            .collect();
        for (id, code) in due {
            self.exit_container(&id, code, "");
        }
    }

    /// Moves a running container to EXITED; false when it was not running.
    pub fn exit_container(&mut self, id: &str, code: i32, reason: &str) -> bool {
        let Some(container) = self.containers.get_mut(id) else {
            return false;
        };
        if container.state != pb::ContainerState::CONTAINER_RUNNING {
            return false;
        }
        container.state = pb::ContainerState::CONTAINER_EXITED;
        container.exit_code = code;
        container.finished_at = now_nanos();
        container.exit_at = None;
        container.reason = if !reason.is_empty() {
            reason.to_owned()
        } else if code == 0 {
            "Completed".to_owned()
        } else {
            "Error".to_owned()
        };
        let sandbox_id = container.sandbox_id.clone();
        self.emit(id, &sandbox_id, EventType::CONTAINER_STOPPED_EVENT);
        true
    }

    pub fn set_condition(&mut self, kind: &str, ready: bool, reason: &str) {
        self.conditions.retain(|c| c.type_ != kind);
        self.conditions.push(pb::RuntimeCondition {
            type_: kind.to_owned(),
            status: ready,
            reason: reason.to_owned(),
            ..Default::default()
        });
    }

    /// IDs of containers in a given state, for assertions.
    pub fn container_ids(&self, state: pb::ContainerState) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, c)| c.state == state)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Puts a container in `state` (e.g. CONTAINER_UNKNOWN); false when it does not exist.
    pub fn set_container_state(&mut self, id: &str, state: pb::ContainerState) -> bool {
        match self.containers.get_mut(id) {
            Some(container) => {
                container.state = state;
                true
            }
            None => false,
        }
    }

    /// ReopenContainerLog as containerd: only a running container, and the log file
    /// (`<sandbox log_directory>/<log_path>`) exists afterwards.
    pub fn reopen_container_log(&mut self, id: &str) -> Result<(), RpcStatus> {
        let c = self
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        if c.state != pb::ContainerState::CONTAINER_RUNNING {
            return Err(RpcStatus::with_message(
                RpcStatusCode::FAILED_PRECONDITION,
                format!("container {id} is not running"),
            ));
        }
        let dir = self
            .sandboxes
            .get(&c.sandbox_id)
            .map(|s| s.config.log_directory.clone())
            .unwrap_or_default();
        if !dir.is_empty() && !c.config.log_path.is_empty() {
            let file = std::path::Path::new(&dir).join(&c.config.log_path);
            if let Some(parent) = file.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file);
        }
        Ok(())
    }

    /// Number of sandboxes the runtime holds.
    /// The `io.kubernetes.pod.name` label of container `id`'s sandbox.
    pub fn pod_of_container(&self, id: &str) -> Option<String> {
        let container = self.containers.get(id)?;
        let sandbox = self.sandboxes.get(&container.sandbox_id)?;
        sandbox.config.labels.get("io.kubernetes.pod.name").cloned()
    }

    pub fn sandbox_count(&self) -> usize {
        self.sandboxes.len()
    }

    /// The CreateContainer configs of every container the runtime holds.
    pub fn container_configs(&self) -> Vec<pb::ContainerConfig> {
        self.containers.values().map(|c| c.config.clone()).collect()
    }

    /// The RunPodSandbox configs of every sandbox the runtime holds.
    pub fn sandbox_configs(&self) -> Vec<pb::PodSandboxConfig> {
        self.sandboxes.values().map(|s| s.config.clone()).collect()
    }

    /// The environment a container was created with, in order.
    pub fn container_envs(&self, id: &str) -> Option<Vec<(String, String)>> {
        self.containers.get(id).map(|c| {
            c.config
                .envs
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect()
        })
    }

    /// The resources last applied to a container.
    pub fn container_resources(&self, id: &str) -> Option<pb::LinuxContainerResources> {
        self.containers.get(id).map(|c| c.resources.clone())
    }

    // ---- RuntimeService ----

    pub fn version(&self) -> pb::VersionResponse {
        pb::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake-cri".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
            ..Default::default()
        }
    }

    pub fn status(&self, verbose: bool) -> pb::StatusResponse {
        let status = pb::RuntimeStatus {
            conditions: self.conditions.clone(),
            ..Default::default()
        };
        pb::StatusResponse {
            status: MessageField::some(status),
            info: if verbose {
                self.status_info.clone()
            } else {
                HashMap::new()
            },
            runtime_handlers: self.runtime_handlers.clone(),
            ..Default::default()
        }
    }

    pub fn runtime_config(&self) -> Result<pb::RuntimeConfigResponse, RpcStatus> {
        self.runtime_config.clone().ok_or_else(|| {
            failed(
                RpcStatusCode::UNIMPLEMENTED,
                "unknown method RuntimeConfig".into(),
            )
        })
    }

    pub fn run_pod_sandbox(
        &mut self,
        req: pb::RunPodSandboxRequest,
    ) -> Result<pb::RunPodSandboxResponse, RpcStatus> {
        let config = req.config.into_option().ok_or_else(|| {
            failed(
                RpcStatusCode::INVALID_ARGUMENT,
                "sandbox config is required".into(),
            )
        })?;
        let meta = config.metadata.clone().into_option().ok_or_else(|| {
            failed(
                RpcStatusCode::INVALID_ARGUMENT,
                "sandbox metadata is required".into(),
            )
        })?;
        let name_taken = self.sandboxes.values().any(|s| {
            s.config.metadata.as_ref().is_some_and(|m| {
                m.name == meta.name
                    && m.namespace == meta.namespace
                    && m.uid == meta.uid
                    && m.attempt == meta.attempt
            })
        });
        if name_taken {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!(
                    "failed to reserve sandbox name \"{}_{}_{}_{}\": name is reserved",
                    meta.name, meta.namespace, meta.uid, meta.attempt
                ),
            ));
        }
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network.enum_value_or_default() == pb::NamespaceMode::NODE);
        let ip = if host_network {
            String::new()
        } else {
            self.next_ip += 1;
            format!("10.88.{}.{}", self.next_ip / 250, self.next_ip % 250 + 2)
        };
        let id = self.new_id();
        self.sandboxes.insert(
            id.clone(),
            SandboxEntry {
                config,
                state: pb::PodSandboxState::SANDBOX_READY,
                created_at: now_nanos(),
                ip,
            },
        );
        self.emit(&id, &id, EventType::CONTAINER_CREATED_EVENT);
        self.emit(&id, &id, EventType::CONTAINER_STARTED_EVENT);
        Ok(pb::RunPodSandboxResponse {
            pod_sandbox_id: id,
            ..Default::default()
        })
    }

    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<pb::StopPodSandboxResponse, RpcStatus> {
        let sandbox = self
            .sandboxes
            .get_mut(id)
            .ok_or_else(|| not_found("sandbox", id))?;
        let was_ready = sandbox.state == pb::PodSandboxState::SANDBOX_READY;
        sandbox.state = pb::PodSandboxState::SANDBOX_NOTREADY;
        for cid in self.containers_of(id) {
            self.exit_container(&cid, 137, "Error");
        }
        if was_ready {
            self.emit(id, id, EventType::CONTAINER_STOPPED_EVENT);
        }
        Ok(Default::default())
    }

    fn containers_of(&self, sandbox_id: &str) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, c)| c.sandbox_id == sandbox_id)
            .map(|(cid, _)| cid.clone())
            .collect()
    }

    /// Removes the sandbox's containers, then the sandbox (each an event).
    pub fn remove_pod_sandbox(&mut self, id: &str) -> pb::RemovePodSandboxResponse {
        if self.sandboxes.contains_key(id) {
            for cid in self.containers_of(id) {
                self.remove_container(&cid);
            }
            self.emit(id, id, EventType::CONTAINER_DELETED_EVENT);
            self.sandboxes.remove(id);
        }
        Default::default()
    }

    pub fn pod_sandbox_status(&self, id: &str) -> Result<pb::PodSandboxStatusResponse, RpcStatus> {
        let s = self
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("sandbox", id))?;
        let network = pb::PodSandboxNetworkStatus {
            ip: s.ip.clone(),
            ..Default::default()
        };
        let status = pb::PodSandboxStatus {
            id: id.to_owned(),
            metadata: s.config.metadata.clone(),
            state: EnumOrUnknown::new(s.state),
            created_at: s.created_at,
            network: MessageField::some(network),
            // Report the namespace modes the sandbox was created with, as containerd does.
            linux: MessageField::some(pb::LinuxPodSandboxStatus {
                namespaces: MessageField::some(pb::Namespace {
                    options: s
                        .config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|c| c.namespace_options.clone().into_option())
                        .into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            ..Default::default()
        };
        Ok(pb::PodSandboxStatusResponse {
            status: MessageField::some(status),
            ..Default::default()
        })
    }

    pub fn list_pod_sandbox(&self, req: &pb::ListPodSandboxRequest) -> pb::ListPodSandboxResponse {
        let filter = req.filter.clone().unwrap_or_default();
        let items = self
            .sandboxes
            .iter()
            .filter(|(id, s)| {
                (filter.id.is_empty() || filter.id == **id)
                    && filter
                        .state
                        .as_ref()
                        .is_none_or(|v| v.state.enum_value_or_default() == s.state)
                    && labels_match(&s.config.labels, &filter.label_selector)
            })
            .map(|(id, s)| pb::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: EnumOrUnknown::new(s.state),
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                ..Default::default()
            })
            .collect();
        pb::ListPodSandboxResponse {
            items,
            ..Default::default()
        }
    }

    pub fn create_container(
        &mut self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, RpcStatus> {
        let sandbox = self
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| not_found("sandbox", &req.pod_sandbox_id))?;
        if sandbox.state != pb::PodSandboxState::SANDBOX_READY {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("sandbox {:?} is not ready", req.pod_sandbox_id),
            ));
        }
        let config = req.config.into_option().ok_or_else(|| {
            failed(
                RpcStatusCode::INVALID_ARGUMENT,
                "container config is required".into(),
            )
        })?;
        let meta = config.metadata.clone().unwrap_or_default();
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        // Like containerd: an image is named by a reference or by its ID.
        if !self.images.contains_key(&image) && !self.images.keys().any(|r| image_id(r) == image) {
            return Err(not_found("image", &image));
        }
        let taken = self.containers.values().any(|c| {
            c.sandbox_id == req.pod_sandbox_id
                && c.config
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.name == meta.name && m.attempt == meta.attempt)
        });
        if taken {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!(
                    "failed to reserve container name \"{}_{}\": name is reserved",
                    meta.name, meta.attempt
                ),
            ));
        }
        let id = self.new_id();
        let resources = config
            .linux
            .as_ref()
            .and_then(|l| l.resources.clone().into_option())
            .unwrap_or_default();
        self.containers.insert(
            id.clone(),
            ContainerEntry {
                sandbox_id: req.pod_sandbox_id,
                config,
                image_ref: if image.starts_with("sha256:") {
                    image.clone()
                } else {
                    image_id(&image)
                },
                state: pb::ContainerState::CONTAINER_CREATED,
                created_at: now_nanos(),
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                resources,
                exit_at: None,
            },
        );
        let sandbox_id = self.containers[&id].sandbox_id.clone();
        self.emit(&id, &sandbox_id, EventType::CONTAINER_CREATED_EVENT);
        Ok(pb::CreateContainerResponse {
            container_id: id,
            ..Default::default()
        })
    }

    pub fn start_container(&mut self, id: &str) -> Result<pb::StartContainerResponse, RpcStatus> {
        let rules = &self.exit_rules;
        let container = self
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("container", id))?;
        if container.state != pb::ContainerState::CONTAINER_CREATED {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!(
                    "container {id:?} is in {:?} state, not CONTAINER_CREATED",
                    container.state
                ),
            ));
        }
        container.state = pb::ContainerState::CONTAINER_RUNNING;
        container.started_at = now_nanos();
        let name = container
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or("");
        if let Some((code, after)) = rules.get(name) {
            container.exit_at = Some((Instant::now() + *after, *code));
        }
        let sandbox_id = container.sandbox_id.clone();
        self.emit(id, &sandbox_id, EventType::CONTAINER_STARTED_EVENT);
        Ok(Default::default())
    }

    pub fn stop_container(&mut self, id: &str) -> Result<pb::StopContainerResponse, RpcStatus> {
        if !self.containers.contains_key(id) {
            return Err(not_found("container", id));
        }
        self.exit_container(id, 143, "Error");
        Ok(Default::default())
    }

    pub fn remove_container(&mut self, id: &str) -> pb::RemoveContainerResponse {
        if let Some(removed) = self.containers.remove(id) {
            self.emit(id, &removed.sandbox_id, EventType::CONTAINER_DELETED_EVENT);
        }
        Default::default()
    }

    fn container_proto(&self, id: &str, c: &ContainerEntry) -> pb::Container {
        pb::Container {
            id: id.to_owned(),
            pod_sandbox_id: c.sandbox_id.clone(),
            metadata: c.config.metadata.clone(),
            image: c.config.image.clone(),
            image_ref: c.image_ref.clone(),
            state: EnumOrUnknown::new(c.state),
            created_at: c.created_at,
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            ..Default::default()
        }
    }

    pub fn list_containers(&self, req: &pb::ListContainersRequest) -> pb::ListContainersResponse {
        let filter = req.filter.clone().unwrap_or_default();
        let containers = self
            .containers
            .iter()
            .filter(|(id, c)| {
                (filter.id.is_empty() || filter.id == **id)
                    && (filter.pod_sandbox_id.is_empty() || filter.pod_sandbox_id == c.sandbox_id)
                    && filter
                        .state
                        .as_ref()
                        .is_none_or(|v| v.state.enum_value_or_default() == c.state)
                    && labels_match(&c.config.labels, &filter.label_selector)
            })
            .map(|(id, c)| self.container_proto(id, c))
            .collect();
        pb::ListContainersResponse {
            containers,
            ..Default::default()
        }
    }

    pub fn container_status(&self, id: &str) -> Result<pb::ContainerStatusResponse, RpcStatus> {
        let c = self
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        let mut resources = pb::ContainerResources::default();
        resources.linux = MessageField::some(c.resources.clone());
        let status = pb::ContainerStatus {
            id: id.to_owned(),
            metadata: c.config.metadata.clone(),
            state: EnumOrUnknown::new(c.state),
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            mounts: c.config.mounts.clone(),
            log_path: c.config.log_path.clone(),
            resources: MessageField::some(resources),
            ..Default::default()
        };
        Ok(pb::ContainerStatusResponse {
            status: MessageField::some(status),
            ..Default::default()
        })
    }

    pub fn update_container_resources(
        &mut self,
        req: pb::UpdateContainerResourcesRequest,
    ) -> Result<pb::UpdateContainerResourcesResponse, RpcStatus> {
        let id = req.container_id.as_str();
        let c = self
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("container", id))?;
        if c.state == pb::ContainerState::CONTAINER_EXITED {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("container {id:?} is not running or created"),
            ));
        }
        if let Some(linux) = req.linux.into_option() {
            c.resources = linux;
        }
        Ok(Default::default())
    }

    pub fn exec_sync(&self, req: &pb::ExecSyncRequest) -> Result<pb::ExecSyncResponse, RpcStatus> {
        let id = req.container_id.as_str();
        let c = self
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        if c.state != pb::ContainerState::CONTAINER_RUNNING {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("container {id:?} is not running"),
            ));
        }
        let line = req.cmd.join(" ");
        if let Some((code, stdout)) = self.exec_results.get(&line) {
            return Ok(exec_response(*code, stdout));
        }
        match req.cmd.first().map(String::as_str) {
            Some("echo") => Ok(exec_response(0, &format!("{}\n", req.cmd[1..].join(" ")))),
            Some("true") => Ok(exec_response(0, "")),
            Some("false") => Ok(exec_response(1, "")),
            Some("sh") if req.cmd.len() == 3 && req.cmd[1] == "-c" => {
                let code = req.cmd[2]
                    .strip_prefix("exit ")
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                Ok(exec_response(code, ""))
            }
            Some(other) => Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("exec: {other:?}: executable file not found in $PATH"),
            )),
            None => Err(failed(
                RpcStatusCode::INVALID_ARGUMENT,
                "cmd must not be empty".into(),
            )),
        }
    }

    // ---- ImageService ----

    fn image_proto(&self, reference: &str, size: u64) -> pb::Image {
        pb::Image {
            id: image_id(reference),
            repo_tags: vec![reference.to_owned()],
            size,
            pinned: self.pinned_images.contains(reference),
            ..Default::default()
        }
    }

    pub fn list_images(&self) -> pb::ListImagesResponse {
        pb::ListImagesResponse {
            images: self
                .images
                .iter()
                .map(|(r, size)| self.image_proto(r, *size))
                .collect(),
            ..Default::default()
        }
    }

    pub fn image_status(&self, reference: &str) -> pb::ImageStatusResponse {
        let found = self
            .images
            .iter()
            .find(|(r, _)| r.as_str() == reference || image_id(r) == reference);
        pb::ImageStatusResponse {
            image: found.map(|(r, size)| self.image_proto(r, *size)).into(),
            ..Default::default()
        }
    }

    pub fn pull_image(&mut self, reference: &str) -> Result<pb::PullImageResponse, RpcStatus> {
        if reference.is_empty() || reference.contains(char::is_whitespace) {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("failed to pull {reference:?}: invalid reference format"),
            ));
        }
        if reference.contains("does-not-exist") {
            return Err(failed(
                RpcStatusCode::UNKNOWN,
                format!("failed to pull {reference:?}: not found"),
            ));
        }
        self.images.insert(reference.to_owned(), 1_000_000);
        Ok(pb::PullImageResponse {
            image_ref: image_id(reference),
            ..Default::default()
        })
    }

    /// Removes an image named by reference or by ID (like containerd).
    pub fn remove_image(&mut self, reference: &str) -> pb::RemoveImageResponse {
        self.images
            .retain(|r, _| r != reference && image_id(r) != reference);
        Default::default()
    }

    pub fn image_fs_info(&self) -> pb::ImageFsInfoResponse {
        let used: u64 = self.images.values().sum();
        let fs_id = (!self.image_fs_mountpoint.is_empty()).then(|| pb::FilesystemIdentifier {
            mountpoint: self.image_fs_mountpoint.clone(),
            ..Default::default()
        });
        let usage = pb::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: fs_id.into(),
            used_bytes: MessageField::some(pb::UInt64Value {
                value: used,
                ..Default::default()
            }),
            ..Default::default()
        };
        pb::ImageFsInfoResponse {
            image_filesystems: vec![usage],
            ..Default::default()
        }
    }
}

fn exec_response(code: i32, stdout: &str) -> pb::ExecSyncResponse {
    pb::ExecSyncResponse {
        stdout: stdout.as_bytes().to_vec(),
        exit_code: code,
        ..Default::default()
    }
}
