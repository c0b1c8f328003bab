//! The CRI client's error type: one variant per gRPC outcome litelet acts on.

use grpcio::RpcStatusCode;

/// A failed CRI call, or a runtime litelet cannot use.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CriError {
    /// The object (sandbox, container, image) does not exist in the runtime.
    #[error("cri {op}: not found: {message}")]
    NotFound { op: &'static str, message: String },
    /// The runtime is not reachable (not running, restarting, socket gone).
    #[error("cri {op}: runtime unavailable: {message}")]
    Unavailable { op: &'static str, message: String },
    /// The call's deadline passed before the runtime answered.
    #[error("cri {op}: deadline exceeded: {message}")]
    DeadlineExceeded { op: &'static str, message: String },
    /// The runtime rejected the request's content.
    #[error("cri {op}: invalid argument: {message}")]
    InvalidArgument { op: &'static str, message: String },
    /// Any other gRPC status, with its numeric code.
    #[error("cri {op}: rpc error code {code}: {message}")]
    Other {
        op: &'static str,
        code: i32,
        message: String,
    },
    /// The caller gave up on the call (its pod worker's sync was cancelled).
    #[error("cri {op}: cancelled")]
    Cancelled { op: &'static str },
    /// `--container-runtime-endpoint` is malformed or nothing listens there.
    #[error("container runtime endpoint {endpoint:?}: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// The runtime answers but does not speak CRI v1.
    #[error("container runtime at {endpoint} does not speak CRI v1: {reason}")]
    UnsupportedApi { endpoint: String, reason: String },
}

impl CriError {
    /// Maps a grpcio failure of call `op` to the variant litelet acts on.
    pub(crate) fn from_grpc(op: &'static str, err: grpcio::Error) -> CriError {
        match err {
            grpcio::Error::RpcFailure(status) => {
                let message = status.message().to_owned();
                match status.code() {
                    RpcStatusCode::NOT_FOUND => CriError::NotFound { op, message },
                    RpcStatusCode::UNAVAILABLE => CriError::Unavailable { op, message },
                    RpcStatusCode::DEADLINE_EXCEEDED => CriError::DeadlineExceeded { op, message },
                    RpcStatusCode::INVALID_ARGUMENT => CriError::InvalidArgument { op, message },
                    code => CriError::Other {
                        op,
                        code: code.into(),
                        message,
                    },
                }
            }
            other => CriError::Other {
                op,
                code: RpcStatusCode::UNKNOWN.into(),
                message: other.to_string(),
            },
        }
    }

    /// True when the object the call named is gone; kill and remove paths treat it as done.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// True when the runtime itself could not be reached or did not answer in time.
    pub fn is_runtime_down(&self) -> bool {
        matches!(
            self,
            CriError::Unavailable { .. } | CriError::DeadlineExceeded { .. }
        )
    }

    /// The gRPC status code, for metrics and for the fake runtime's tests.
    pub fn code(&self) -> Option<i32> {
        let code = match self {
            CriError::NotFound { .. } => RpcStatusCode::NOT_FOUND,
            CriError::Unavailable { .. } => RpcStatusCode::UNAVAILABLE,
            CriError::DeadlineExceeded { .. } => RpcStatusCode::DEADLINE_EXCEEDED,
            CriError::InvalidArgument { .. } => RpcStatusCode::INVALID_ARGUMENT,
            CriError::Other { code, .. } => return Some(*code),
            CriError::Cancelled { .. } => RpcStatusCode::CANCELLED,
            CriError::BadEndpoint { .. } | CriError::UnsupportedApi { .. } => return None,
        };
        Some(code.into())
    }
}
