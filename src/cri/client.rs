//! Blocking CRI clients over one shared grpcio channel.
//!
//! Called from any thread (pod workers, PLEG, probers, the node thread); the clients
//! are cheap to clone and hold no lock across a call. Every call carries a deadline:
//! the runtime request timeout (`--runtime-request-timeout`, 2 min by default), the
//! longer image pull timeout for `PullImage`, and the exec timeout plus the request
//! timeout for `ExecSync`. When the runtime restarts, grpcio reconnects on its own
//! (backoff capped at one second); calls made while it is down fail fast with
//! [`CriError::Unavailable`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use grpcio::{CallOption, ChannelBuilder, EnvBuilder, Environment};

use super::grpc::{ImageServiceClient, RuntimeServiceClient};
use super::{pb, CriError, Endpoint, ListedContainer, ListedSandbox, CRI_API_VERSION};

/// Upstream's limit on CRI responses (a full container list on a busy node is large).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Deadlines for CRI calls.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Deadline of every runtime call but `ExecSync`.
    pub request_timeout: Duration,
    /// Deadline of `PullImage`.
    pub pull_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            request_timeout: Duration::from_secs(120),
            pull_timeout: Duration::from_secs(600),
        }
    }
}

/// Opens the shared channel to the runtime at `endpoint`. Nothing is sent yet: call
/// [`RuntimeClient::check_version`] to learn whether the runtime is there and speaks v1.
pub fn connect(endpoint: &Endpoint, options: &ConnectOptions) -> (RuntimeClient, ImageClient) {
    let env: Arc<Environment> = Arc::new(EnvBuilder::new().cq_count(1).name_prefix("cri").build());
    let channel = ChannelBuilder::new(env)
        .max_receive_message_len(MAX_MESSAGE_BYTES as i32)
        .max_send_message_len(MAX_MESSAGE_BYTES as i32)
        .initial_reconnect_backoff(Duration::from_millis(100))
        .max_reconnect_backoff(Duration::from_secs(1))
        .connect(&endpoint.grpc_target());
    let runtime = RuntimeClient {
        stub: RuntimeServiceClient::new(channel.clone()),
        endpoint: endpoint.clone(),
        timeout: options.request_timeout,
    };
    let image = ImageClient {
        stub: ImageServiceClient::new(channel),
        timeout: options.request_timeout,
        pull_timeout: options.pull_timeout,
    };
    (runtime, image)
}

fn deadline(timeout: Duration) -> CallOption {
    CallOption::default().timeout(timeout)
}

/// Runs one call, logs its latency at trace level and maps its error.
fn call<T>(op: &'static str, run: impl FnOnce() -> grpcio::Result<T>) -> Result<T, CriError> {
    let started = Instant::now();
    let result = run();
    crate::metrics::cri_call(op, started.elapsed(), result.is_ok());
    log::trace!(
        "cri {op} took {:?} ok={}",
        started.elapsed(),
        result.is_ok()
    );
    result.map_err(|err| CriError::from_grpc(op, err))
}

macro_rules! unary {
    ($(#[$doc:meta])* $name:ident, $stub_call:ident, $req:ident => $resp:ident, $timeout:ident) => {
        $(#[$doc])*
        pub fn $name(&self, request: &pb::$req) -> Result<pb::$resp, CriError> {
            call(stringify!($name), || self.stub.$stub_call(request, deadline(self.$timeout)))
        }
    };
}

/// The CRI RuntimeService: sandboxes, containers, exec and runtime status.
#[derive(Clone)]
pub struct RuntimeClient {
    stub: RuntimeServiceClient,
    endpoint: Endpoint,
    timeout: Duration,
}

impl RuntimeClient {
    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Asks the runtime for its version and fails unless it speaks CRI v1.
    ///
    /// Checks the socket first so that a missing runtime gets a clear message instead
    /// of a bare "unavailable".
    pub fn check_version(&self) -> Result<pb::VersionResponse, CriError> {
        self.endpoint.check_socket()?;
        let request = pb::VersionRequest {
            version: CRI_API_VERSION.to_owned(),
            ..Default::default()
        };
        let response = match self.version(&request) {
            Err(err) if err.is_unimplemented() => {
                return Err(CriError::UnsupportedApi {
                    endpoint: self.endpoint.to_string(),
                    reason: format!("runtime.v1.RuntimeService is not served ({err})"),
                })
            }
            other => other?,
        };
        if response.runtime_api_version != CRI_API_VERSION {
            return Err(CriError::UnsupportedApi {
                endpoint: self.endpoint.to_string(),
                reason: format!(
                    "runtime {} {} reports API version {:?}",
                    response.runtime_name, response.runtime_version, response.runtime_api_version
                ),
            });
        }
        Ok(response)
    }

    unary!(
        /// Runtime name, version and CRI API version.
        version, version_opt, VersionRequest => VersionResponse, timeout);
    unary!(
        /// Creates and starts a pod sandbox.
        run_pod_sandbox, run_pod_sandbox_opt, RunPodSandboxRequest => RunPodSandboxResponse, timeout);
    unary!(
        /// Stops a sandbox and all its containers; idempotent in the runtime.
        stop_pod_sandbox, stop_pod_sandbox_opt, StopPodSandboxRequest => StopPodSandboxResponse, timeout);
    unary!(
        /// Removes a stopped sandbox and its containers.
        remove_pod_sandbox, remove_pod_sandbox_opt, RemovePodSandboxRequest => RemovePodSandboxResponse, timeout);
    unary!(
        /// One sandbox's state, IPs and metadata.
        pod_sandbox_status, pod_sandbox_status_opt, PodSandboxStatusRequest => PodSandboxStatusResponse, timeout);
    unary!(
        /// All sandboxes matching a filter.
        list_pod_sandbox, list_pod_sandbox_opt, ListPodSandboxRequest => ListPodSandboxResponse, timeout);
    /// [`Self::list_pod_sandbox`] with only what a relist reads decoded
    /// (`cri/listing.rs`).
    pub fn list_pod_sandbox_lean(
        &self,
        request: &pb::ListPodSandboxRequest,
    ) -> Result<Vec<ListedSandbox>, CriError> {
        let (client, method) = (&self.stub.client, &super::listing::LIST_POD_SANDBOX);
        call("list_pod_sandbox", || {
            client.unary_call(method, request, deadline(self.timeout))
        })
        .map(|listed| listed.0)
    }
    unary!(
        /// Creates a container inside a sandbox.
        create_container, create_container_opt, CreateContainerRequest => CreateContainerResponse, timeout);
    unary!(
        /// Starts a created container.
        start_container, start_container_opt, StartContainerRequest => StartContainerResponse, timeout);
    unary!(
        /// Stops a container within the request's grace period.
        stop_container, stop_container_opt, StopContainerRequest => StopContainerResponse, timeout);
    /// Stops a container like `stop_container`, giving up (and cancelling the call)
    /// once `cancelled` turns true: a shorter grace period replaces a running stop.
    pub fn stop_container_cancellable(
        &self,
        request: &pb::StopContainerRequest,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<pb::StopContainerResponse, CriError> {
        let receiver = self
            .stub
            .stop_container_async_opt(request, deadline(self.timeout))
            .map_err(|err| CriError::from_grpc("stop_container", err))?;
        super::cancellable::wait("stop_container", receiver, cancelled)
    }
    unary!(
        /// Removes a container.
        remove_container, remove_container_opt, RemoveContainerRequest => RemoveContainerResponse, timeout);
    unary!(
        /// All containers matching a filter.
        list_containers, list_containers_opt, ListContainersRequest => ListContainersResponse, timeout);
    /// [`Self::list_containers`] with only what a relist reads decoded
    /// (`cri/listing.rs`).
    pub fn list_containers_lean(
        &self,
        request: &pb::ListContainersRequest,
    ) -> Result<Vec<ListedContainer>, CriError> {
        let (client, method) = (&self.stub.client, &super::listing::LIST_CONTAINERS);
        call("list_containers", || {
            client.unary_call(method, request, deadline(self.timeout))
        })
        .map(|listed| listed.0)
    }
    unary!(
        /// One container's state, exit code, timestamps and resources.
        container_status, container_status_opt, ContainerStatusRequest => ContainerStatusResponse, timeout);
    unary!(
        /// Applies new resources to a running container.
        update_container_resources, update_container_resources_opt,
        UpdateContainerResourcesRequest => UpdateContainerResourcesResponse, timeout);
    unary!(
        /// Reopens a container's log file after rotation.
        reopen_container_log, reopen_container_log_opt, ReopenContainerLogRequest => ReopenContainerLogResponse, timeout);
    unary!(
        /// A streaming URL for exec (used by the node's HTTP server).
        exec, exec_opt, ExecRequest => ExecResponse, timeout);
    unary!(
        /// A streaming URL for attach.
        attach, attach_opt, AttachRequest => AttachResponse, timeout);
    unary!(
        /// A streaming URL for port forwarding.
        port_forward, port_forward_opt, PortForwardRequest => PortForwardResponse, timeout);
    unary!(
        /// Resource usage of one container.
        container_stats, container_stats_opt, ContainerStatsRequest => ContainerStatsResponse, timeout);
    unary!(
        /// Resource usage of all containers matching a filter.
        list_container_stats, list_container_stats_opt, ListContainerStatsRequest => ListContainerStatsResponse, timeout);
    unary!(
        /// Passes runtime configuration such as the pod CIDR.
        update_runtime_config, update_runtime_config_opt, UpdateRuntimeConfigRequest => UpdateRuntimeConfigResponse, timeout);
    unary!(
        /// Runtime conditions (RuntimeReady, NetworkReady) and, when verbose, extra info.
        status, status_opt, StatusRequest => StatusResponse, timeout);
    unary!(
        /// The runtime's configuration: its cgroup driver (UNIMPLEMENTED before
        /// containerd 2.0 and CRI-O 1.28).
        runtime_config, runtime_config_opt, RuntimeConfigRequest => RuntimeConfigResponse, timeout);

    /// Opens the runtime's container event stream (no deadline: it lasts as long as
    /// litelet, or the runtime). `events::spawn_reader` reads it.
    pub(super) fn open_container_events(
        &self,
    ) -> Result<grpcio::ClientSStreamReceiver<pb::ContainerEventResponse>, CriError> {
        self.stub
            .get_container_events(&pb::GetEventsRequest::default())
            .map_err(|err| CriError::from_grpc(super::events::OP, err))
    }

    /// Runs a command in a container and waits for it. The deadline is the command's
    /// own timeout plus the request timeout, so the runtime reports the timeout itself.
    pub fn exec_sync(
        &self,
        request: &pb::ExecSyncRequest,
    ) -> Result<pb::ExecSyncResponse, CriError> {
        let command_timeout = Duration::from_secs(request.timeout.max(0) as u64);
        let option = deadline(command_timeout + self.timeout);
        call("exec_sync", || self.stub.exec_sync_opt(request, option))
    }

    /// ExecSync that gives up after `limit` whatever the runtime does (exec probes:
    /// a hung runtime must not hold a probe longer than its timeout).
    pub fn exec_sync_within(
        &self,
        request: &pb::ExecSyncRequest,
        limit: Duration,
    ) -> Result<pb::ExecSyncResponse, CriError> {
        call("exec_sync", || {
            self.stub.exec_sync_opt(request, deadline(limit))
        })
    }
}

/// The CRI ImageService: pulls, lists and removes images.
#[derive(Clone)]
pub struct ImageClient {
    stub: ImageServiceClient,
    timeout: Duration,
    pull_timeout: Duration,
}

impl ImageClient {
    unary!(
        /// All images the runtime holds.
        list_images, list_images_opt, ListImagesRequest => ListImagesResponse, timeout);
    unary!(
        /// One image, or an empty response when the runtime does not have it.
        image_status, image_status_opt, ImageStatusRequest => ImageStatusResponse, timeout);
    unary!(
        /// Pulls an image, with the pull deadline.
        pull_image, pull_image_opt, PullImageRequest => PullImageResponse, pull_timeout);
    /// Pulls an image, with the pull deadline, giving up (and cancelling the call)
    /// once `cancelled` turns true.
    pub fn pull_image_cancellable(
        &self,
        request: &pb::PullImageRequest,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<pb::PullImageResponse, CriError> {
        let receiver = self
            .stub
            .pull_image_async_opt(request, deadline(self.pull_timeout))
            .map_err(|err| CriError::from_grpc("pull_image", err))?;
        super::cancellable::wait("pull_image", receiver, cancelled)
    }
    unary!(
        /// Removes an image.
        remove_image, remove_image_opt, RemoveImageRequest => RemoveImageResponse, timeout);
    unary!(
        /// Usage of the image file systems.
        image_fs_info, image_fs_info_opt, ImageFsInfoRequest => ImageFsInfoResponse, timeout);
}
