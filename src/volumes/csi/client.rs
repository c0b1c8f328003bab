//! Blocking clients for a CSI driver's socket ([`CsiClient`]: Identity and Node
//! services) and for a plugin's registration socket ([`RegistrationClient`]).
//!
//! The CRI client's pattern: one grpcio channel per socket, a deadline on every
//! call, failures mapped to [`CsiError`] with the call's name. Cheap to clone; no
//! lock is held across a call. Used by the watcher thread and pod worker threads.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use grpcio::{CallOption, Channel, ChannelBuilder, EnvBuilder, Environment, RpcStatusCode};

use super::grpc::{IdentityClient, NodeClient};
use super::reg_grpc;
use super::{pb, reg_pb};

/// A failed call to a CSI driver or a registration socket.
#[derive(Debug, thiserror::Error, Clone)]
pub enum CsiError {
    /// The call's deadline passed before the driver answered.
    #[error("csi {op}: deadline exceeded: {message}")]
    DeadlineExceeded { op: &'static str, message: String },
    /// The socket does not answer (driver not running or restarting).
    #[error("csi {op}: driver unavailable: {message}")]
    Unavailable { op: &'static str, message: String },
    /// The call failed below gRPC status level (channel, codec); shared so the
    /// error stays cheap to clone.
    #[error("csi {op}: {source}")]
    Transport {
        op: &'static str,
        source: Arc<grpcio::Error>,
    },
    /// Any other gRPC status, with its name.
    #[error("csi {op}: {code:?}: {message}")]
    Status {
        op: &'static str,
        code: RpcStatusCode,
        message: String,
    },
}

impl CsiError {
    fn from_grpc(op: &'static str, err: grpcio::Error) -> CsiError {
        match err {
            grpcio::Error::RpcFailure(status) => {
                let message = status.message().to_owned();
                match status.code() {
                    RpcStatusCode::DEADLINE_EXCEEDED => CsiError::DeadlineExceeded { op, message },
                    RpcStatusCode::UNAVAILABLE => CsiError::Unavailable { op, message },
                    code => CsiError::Status { op, code, message },
                }
            }
            other => CsiError::Transport {
                op,
                source: Arc::new(other),
            },
        }
    }

    /// The gRPC status code of the failure.
    pub fn code(&self) -> RpcStatusCode {
        match self {
            CsiError::DeadlineExceeded { .. } => RpcStatusCode::DEADLINE_EXCEEDED,
            CsiError::Unavailable { .. } => RpcStatusCode::UNAVAILABLE,
            CsiError::Status { code, .. } => *code,
            CsiError::Transport { .. } => RpcStatusCode::UNKNOWN,
        }
    }
}

/// Upstream's deadline for registration calls and NodeGetInfo.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's deadline for each node volume operation (csiTimeout: 2 min).
pub const VOLUME_TIMEOUT: Duration = Duration::from_secs(120);

/// One completion queue for every plugin socket of the process.
fn environment() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(EnvBuilder::new().cq_count(1).name_prefix("csi").build()))
        .clone()
}

/// A channel to the unix socket at `path` (nothing is sent yet).
fn channel(path: &Path) -> Channel {
    ChannelBuilder::new(environment())
        .initial_reconnect_backoff(Duration::from_millis(100))
        .max_reconnect_backoff(Duration::from_secs(1))
        .connect(&format!("unix:{}", path.display()))
}

fn call<T>(
    op: &'static str,
    timeout: Duration,
    run: impl FnOnce(CallOption) -> grpcio::Result<T>,
) -> Result<T, CsiError> {
    run(CallOption::default().timeout(timeout)).map_err(|e| CsiError::from_grpc(op, e))
}

/// The Identity and Node services of one CSI driver.
#[derive(Clone)]
pub struct CsiClient {
    identity: IdentityClient,
    node: NodeClient,
    timeout: Duration,
}

impl CsiClient {
    /// A client for the driver socket at `path`; `timeout` bounds each volume call.
    pub fn new(path: &Path, timeout: Duration) -> Self {
        let ch = channel(path);
        CsiClient {
            identity: IdentityClient::new(ch.clone()),
            node: NodeClient::new(ch),
            timeout,
        }
    }

    /// Identity.GetPluginInfo (the driver's name and version).
    pub fn plugin_info(&self) -> Result<pb::GetPluginInfoResponse, CsiError> {
        call("GetPluginInfo", REGISTRATION_TIMEOUT, |o| {
            self.identity
                .get_plugin_info_opt(&pb::GetPluginInfoRequest::new(), o)
        })
    }

    /// Node.NodeGetInfo: the node id and topology the driver reports.
    pub fn node_info(&self) -> Result<pb::NodeGetInfoResponse, CsiError> {
        call("NodeGetInfo", REGISTRATION_TIMEOUT, |o| {
            self.node
                .node_get_info_opt(&pb::NodeGetInfoRequest::new(), o)
        })
    }

    /// Node.NodeGetCapabilities, as the set of RPC types the driver has.
    pub fn node_capabilities(&self) -> Result<Vec<NodeCapability>, CsiError> {
        let resp = call("NodeGetCapabilities", self.timeout, |o| {
            self.node
                .node_get_capabilities_opt(&pb::NodeGetCapabilitiesRequest::new(), o)
        })?;
        use pb::node_service_capability::rpc::Type;
        use pb::node_service_capability::Type as Kind;
        Ok(resp
            .capabilities
            .iter()
            .filter_map(|c| match &c.type_ {
                Some(Kind::Rpc(rpc)) => match rpc.type_.enum_value() {
                    Ok(Type::STAGE_UNSTAGE_VOLUME) => Some(NodeCapability::StageUnstage),
                    Ok(Type::SINGLE_NODE_MULTI_WRITER) => {
                        Some(NodeCapability::SingleNodeMultiWriter)
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect())
    }

    /// Node.NodeStageVolume.
    pub fn stage(&self, req: &pb::NodeStageVolumeRequest) -> Result<(), CsiError> {
        call("NodeStageVolume", self.timeout, |o| {
            self.node.node_stage_volume_opt(req, o)
        })
        .map(drop)
    }

    /// Node.NodeUnstageVolume.
    pub fn unstage(&self, volume_id: &str, staging_path: &str) -> Result<(), CsiError> {
        let req = pb::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_owned(),
            staging_target_path: staging_path.to_owned(),
            ..Default::default()
        };
        call("NodeUnstageVolume", self.timeout, |o| {
            self.node.node_unstage_volume_opt(&req, o)
        })
        .map(drop)
    }

    /// Node.NodePublishVolume.
    pub fn publish(&self, req: &pb::NodePublishVolumeRequest) -> Result<(), CsiError> {
        call("NodePublishVolume", self.timeout, |o| {
            self.node.node_publish_volume_opt(req, o)
        })
        .map(drop)
    }

    /// Node.NodeUnpublishVolume.
    pub fn unpublish(&self, volume_id: &str, target_path: &str) -> Result<(), CsiError> {
        let req = pb::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_owned(),
            target_path: target_path.to_owned(),
            ..Default::default()
        };
        call("NodeUnpublishVolume", self.timeout, |o| {
            self.node.node_unpublish_volume_opt(&req, o)
        })
        .map(drop)
    }
}

/// Node capabilities the mounter acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeCapability {
    /// NodeStageVolume must come before NodePublishVolume.
    StageUnstage,
    /// ReadWriteOnce maps to SINGLE_NODE_MULTI_WRITER (upstream's mapping).
    SingleNodeMultiWriter,
}

/// The kubelet plugin-registration service of one `*.sock` in `plugins_registry`.
#[derive(Clone)]
pub struct RegistrationClient {
    stub: reg_grpc::RegistrationClient,
}

impl RegistrationClient {
    /// A client for the registration socket at `path`.
    pub fn new(path: &Path) -> Self {
        RegistrationClient {
            stub: reg_grpc::RegistrationClient::new(channel(path)),
        }
    }

    /// Registration.GetInfo: type, name, endpoint and versions of the plugin.
    pub fn info(&self) -> Result<reg_pb::PluginInfo, CsiError> {
        call("GetInfo", REGISTRATION_TIMEOUT, |o| {
            self.stub.get_info_opt(&reg_pb::InfoRequest::new(), o)
        })
    }

    /// Registration.NotifyRegistrationStatus.
    pub fn notify(&self, registered: bool, error: &str) -> Result<(), CsiError> {
        let req = reg_pb::RegistrationStatus {
            plugin_registered: registered,
            error: error.to_owned(),
            ..Default::default()
        };
        call("NotifyRegistrationStatus", REGISTRATION_TIMEOUT, |o| {
            self.stub.notify_registration_status_opt(&req, o)
        })
        .map(drop)
    }
}
