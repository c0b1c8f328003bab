//! The `PodResourcesLister` gRPC server on `<root-dir>/pod-resources/kubelet.sock`.
//! It shares the device plugin side's grpcio environment: no completion-queue
//! thread of its own; each handler takes a token, builds its answer and replies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use grpcio::{RpcContext, RpcStatus, RpcStatusCode, UnarySink};

use crate::devicemanager::{private_folder, serve_unix, UnixServeError};

use super::grpc::{create_pod_resources_lister, PodResourcesLister};
use super::rate_limit::{TokenBucket, DEFAULT_BURST, DEFAULT_QPS};
use super::{pb, response, DeviceSource, PodSource};

/// The folder under the root directory (upstream's podResourcesDir).
pub const SOCKET_DIR: &str = "pod-resources";
/// The socket's name in it.
pub const SOCKET_NAME: &str = "kubelet.sock";
/// Upstream's message for a call over the rate limit.
const RATE_LIMITED: &str = "rejected by rate limit";

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("pod resources folder {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("pod resources server at {path}: {source}")]
    Serve {
        path: PathBuf,
        source: Box<grpcio::Error>,
    },
}

/// The running server; dropping it stops serving.
pub struct PodResourcesServer {
    _server: grpcio::Server,
    pub socket: PathBuf,
}

impl PodResourcesServer {
    /// Serves at `<root_dir>/pod-resources/kubelet.sock` (the folder 0750 as
    /// upstream, the socket 0600 whatever the umask; a socket left by an earlier
    /// run is replaced).
    pub fn start(
        root_dir: &Path,
        pods: Arc<dyn PodSource>,
        devices: Arc<dyn DeviceSource>,
    ) -> Result<PodResourcesServer, PodResourcesError> {
        let dir = root_dir.join(SOCKET_DIR);
        let folder = |path: &Path| {
            let path = path.to_owned();
            move |source| PodResourcesError::Folder { path, source }
        };
        private_folder(&dir).map_err(folder(&dir))?;
        let socket = dir.join(SOCKET_NAME);
        let service = Lister {
            pods,
            devices,
            limit: Arc::new(TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST, Instant::now())),
        };
        let server =
            serve_unix(create_pod_resources_lister(service), &socket).map_err(|e| match e {
                UnixServeError::StaleSocket(source) | UnixServeError::Socket(source) => {
                    folder(&socket)(source)
                }
                UnixServeError::Grpc(source) => PodResourcesError::Serve {
                    path: socket.clone(),
                    source: Box::new(source),
                },
            })?;
        log::info!("pod resources API at {}", socket.display());
        Ok(PodResourcesServer {
            _server: server,
            socket,
        })
    }
}

#[derive(Clone)]
struct Lister {
    pods: Arc<dyn PodSource>,
    devices: Arc<dyn DeviceSource>,
    limit: Arc<TokenBucket>,
}

impl Lister {
    /// Replies with `answer()`, or RESOURCE_EXHAUSTED without building it when over
    /// the rate limit.
    fn reply<T: Send + 'static>(
        &self,
        ctx: &RpcContext,
        sink: UnarySink<T>,
        call: &'static str,
        answer: impl FnOnce() -> Result<T, RpcStatus>,
    ) {
        let result = if self.limit.allow(Instant::now()) {
            answer()
        } else {
            Err(RpcStatus::with_message(
                RpcStatusCode::RESOURCE_EXHAUSTED,
                RATE_LIMITED.into(),
            ))
        };
        ctx.spawn(async move {
            let sent = match result {
                Ok(answer) => sink.success(answer).await,
                Err(status) => sink.fail(status).await,
            };
            if let Err(e) = sent {
                log::debug!("pod resources: {call} answer: {e}");
            }
        });
    }
}

impl PodResourcesLister for Lister {
    fn list(
        &mut self,
        ctx: RpcContext,
        _req: pb::ListPodResourcesRequest,
        sink: UnarySink<pb::ListPodResourcesResponse>,
    ) {
        self.reply(&ctx, sink, "List", || {
            Ok(response::list(self.pods.as_ref(), self.devices.as_ref()))
        });
    }

    fn get_allocatable_resources(
        &mut self,
        ctx: RpcContext,
        _req: pb::AllocatableResourcesRequest,
        sink: UnarySink<pb::AllocatableResourcesResponse>,
    ) {
        self.reply(&ctx, sink, "GetAllocatableResources", || {
            Ok(response::allocatable(self.devices.as_ref()))
        });
    }

    fn get(
        &mut self,
        ctx: RpcContext,
        req: pb::GetPodResourcesRequest,
        sink: UnarySink<pb::GetPodResourcesResponse>,
    ) {
        self.reply(&ctx, sink, "Get", || {
            response::get(self.pods.as_ref(), self.devices.as_ref(), &req)
                .map_err(|e| RpcStatus::with_message(RpcStatusCode::NOT_FOUND, e.to_string()))
        });
    }
}
