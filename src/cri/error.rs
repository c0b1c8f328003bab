//! The CRI client's error type: one variant per gRPC outcome litelet acts on.

use std::fmt;
use std::sync::Arc;

use grpcio::RpcStatusCode;

/// A cause kept for [`std::error::Error::source`], shared so that the error holding
/// it stays `Clone` (errors are cached in pod statuses). Two are equal when they print
/// the same: grpcio's and std's errors have no equality of their own.
#[derive(Debug)]
pub struct Cause<E>(pub Arc<E>);

impl<E> Cause<E> {
    pub fn new(err: E) -> Cause<E> {
        Cause(Arc::new(err))
    }
}

impl<E> Clone for Cause<E> {
    fn clone(&self) -> Self {
        Cause(self.0.clone())
    }
}

impl<E: fmt::Display> fmt::Display for Cause<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Cause<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl<E: fmt::Display> PartialEq for Cause<E> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl<E: fmt::Display> Eq for Cause<E> {}

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
    /// The call failed without a gRPC status (the channel itself broke); reported
    /// with code UNKNOWN, as grpc-go does.
    #[error("cri {op}: rpc error code 2: {source}")]
    Grpc {
        op: &'static str,
        source: Cause<grpcio::Error>,
    },
    /// The caller gave up on the call (its pod worker's sync was cancelled).
    #[error("cri {op}: cancelled")]
    Cancelled { op: &'static str },
    /// `--container-runtime-endpoint` is malformed or nothing listens there; `source`
    /// is the error looking at the socket path, when that is why.
    #[error("container runtime endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        endpoint: String,
        reason: String,
        source: Option<Cause<std::io::Error>>,
    },
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
            other => CriError::Grpc {
                op,
                source: Cause::new(other),
            },
        }
    }

    /// True when the object the call named is gone; kill and remove paths treat it as done.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// True when the runtime does not serve the method (UNIMPLEMENTED): an older
    /// runtime, so asking again will not help.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, CriError::Other { code, .. } if *code == i32::from(RpcStatusCode::UNIMPLEMENTED))
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
            CriError::Grpc { .. } => RpcStatusCode::UNKNOWN,
            CriError::Cancelled { .. } => RpcStatusCode::CANCELLED,
            CriError::BadEndpoint { .. } | CriError::UnsupportedApi { .. } => return None,
        };
        Some(code.into())
    }
}
