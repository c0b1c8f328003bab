//! `ApiError`: every way a request to the API server can fail, as litelet acts on it.
//!
//! The client maps each HTTP failure to one variant: the well-known API statuses
//! (404, 409 conflict vs. already-exists, 410, 401, 403) get their own variants so
//! callers `match` instead of comparing codes; the rest keep the code, reason and
//! message of the server's `Status` object. Each variant names the verb and path of
//! the request. Values only; no thread owns anything here.

use std::io;
use std::sync::Arc;

use crate::api::meta::{Status, STATUS_REASON_ALREADY_EXISTS};
use crate::api::stats::Verb;

/// Why no HTTP answer came. The causes sit behind an `Arc` because `ApiError` is
/// cloned (one failed request can answer several waiters).
#[derive(Clone, Debug, thiserror::Error)]
pub enum TransportError {
    /// The client was shut down; no request leaves any more.
    #[error("client connections closed")]
    Closed,
    /// Connect, TLS, timeout, or a connection that broke mid-way.
    #[error(transparent)]
    Http(Arc<ureq::Error>),
    /// A watch stream broke mid-line.
    #[error("read watch stream: {0}")]
    WatchRead(Arc<io::Error>),
}

/// Why a client cannot be built from its configuration.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClientConfigError {
    /// The server URL does not parse.
    #[error("server {server:?}: {source}")]
    ServerUrl {
        server: String,
        source: Arc<ureq::http::uri::InvalidUri>,
    },
    /// The server URL parses but cannot be used.
    #[error("server {server:?}: {why}")]
    Server { server: String, why: &'static str },
    /// A certificate or CA bundle rustls would refuse; `what` names it.
    #[error("{what}: {source}")]
    Certificate {
        what: &'static str,
        source: crate::api::certs::CertError,
    },
    /// PEM that does not parse; `what` names the file's role.
    #[error("parse {what}: {source}")]
    Pem {
        what: &'static str,
        source: Arc<ureq::Error>,
    },
    /// Pieces that are missing or do not fit together.
    #[error("{0}")]
    Invalid(&'static str),
}

/// Why an answer (or a watch line) is not the JSON expected.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body could not be read whole.
    #[error("read body: {0}")]
    Body(Arc<ureq::Error>),
    #[error(transparent)]
    Json(Arc<serde_json::Error>),
    /// A watch line that is too long or not UTF-8.
    #[error(transparent)]
    WatchLine(Arc<io::Error>),
    #[error("watch event: {0}")]
    WatchEvent(Arc<serde_json::Error>),
}

/// A failed API request, or a client that could not be built.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the object (or its namespace) does not exist.
    #[error("{verb} {path}: not found: {message}")]
    NotFound {
        verb: Verb,
        path: String,
        message: String,
    },
    /// 409 other than AlreadyExists: stale resourceVersion or failed precondition.
    #[error("{verb} {path}: conflict: {message}")]
    Conflict {
        verb: Verb,
        path: String,
        message: String,
    },
    /// 409 with reason AlreadyExists: a create of a name that is taken.
    #[error("{verb} {path}: already exists: {message}")]
    AlreadyExists {
        verb: Verb,
        path: String,
        message: String,
    },
    /// 410 (or a watch ERROR event with code 410): the resourceVersion is too old;
    /// list again.
    #[error("{verb} {path}: resource version gone: {message}")]
    Gone {
        verb: Verb,
        path: String,
        message: String,
    },
    /// 403: authenticated but not allowed (the Node authorizer said no).
    #[error("{verb} {path}: forbidden: {message}")]
    Forbidden {
        verb: Verb,
        path: String,
        message: String,
    },
    /// 401: the credentials were not accepted.
    #[error("{verb} {path}: unauthorized: {message}")]
    Unauthorized {
        verb: Verb,
        path: String,
        message: String,
    },
    /// Any other failure status from the server.
    #[error("{verb} {path}: http {code} {reason}: {message}")]
    Status {
        verb: Verb,
        path: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No HTTP answer: connect, TLS, timeout or a connection that broke mid-way.
    #[error("{verb} {path}: transport: {source}")]
    Transport {
        verb: Verb,
        path: String,
        source: TransportError,
    },
    /// The answer (or a watch line) is not the JSON we expected.
    #[error("decode response of {path}: {source}")]
    Decode { path: String, source: DecodeError },
    /// A request body could not be encoded as JSON.
    #[error("encode request body for {path}: {source}")]
    Encode {
        path: String,
        source: Arc<serde_json::Error>,
    },
    /// The client cannot be built from its configuration (server URL, PEM, ...).
    #[error("api client config: {0}")]
    Config(#[source] ClientConfigError),
    /// litelet's own request thread gave no answer (it ended, or the request panicked).
    #[error("{path}: {message}")]
    Internal { path: String, message: String },
}

impl ApiError {
    /// Maps an HTTP failure status and the server's `Status` body (if it sent one).
    pub(crate) fn from_status(verb: Verb, path: &str, code: u16, status: Option<Status>) -> Self {
        let status = status.unwrap_or_default();
        let message = status
            .message
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| format!("http status {code}"));
        let path = path.to_owned();
        match code {
            404 => ApiError::NotFound {
                verb,
                path,
                message,
            },
            409 if status.reason.as_deref() == Some(STATUS_REASON_ALREADY_EXISTS) => {
                ApiError::AlreadyExists {
                    verb,
                    path,
                    message,
                }
            }
            409 => ApiError::Conflict {
                verb,
                path,
                message,
            },
            410 => ApiError::Gone {
                verb,
                path,
                message,
            },
            401 => ApiError::Unauthorized {
                verb,
                path,
                message,
            },
            403 => ApiError::Forbidden {
                verb,
                path,
                message,
            },
            _ => ApiError::Status {
                verb,
                path,
                code,
                reason: status.reason.unwrap_or_default(),
                message,
            },
        }
    }

    /// Maps a `Status` carried in a watch ERROR event (its code stands in for HTTP's).
    pub(crate) fn from_watch_status(path: &str, status: Status) -> Self {
        let code = if status.is_gone() {
            410
        } else {
            status
                .code
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500)
        };
        Self::from_status(Verb::Watch, path, code, Some(status))
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound { .. })
    }

    /// 403: for a pod, the Node authorizer's answer once it is no longer bound here.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, ApiError::Forbidden { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, ApiError::Conflict { .. })
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, ApiError::AlreadyExists { .. })
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, ApiError::Gone { .. })
    }

    /// The HTTP status code the server answered with, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            ApiError::NotFound { .. } => Some(404),
            ApiError::Conflict { .. } | ApiError::AlreadyExists { .. } => Some(409),
            ApiError::Gone { .. } => Some(410),
            ApiError::Forbidden { .. } => Some(403),
            ApiError::Unauthorized { .. } => Some(401),
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reason: &str, code: i32, message: &str) -> Status {
        Status {
            reason: Some(reason.into()),
            code: Some(code),
            message: Some(message.into()),
            ..Status::default()
        }
    }

    #[test]
    fn maps_codes_to_variants() {
        let p = "/api/v1/namespaces/ns/pods/p";
        let e = ApiError::from_status(
            Verb::Get,
            p,
            404,
            Some(status("NotFound", 404, "pods \"p\" not found")),
        );
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "get /api/v1/namespaces/ns/pods/p: not found: pods \"p\" not found"
        );
        let e = ApiError::from_status(
            Verb::Create,
            p,
            409,
            Some(status("AlreadyExists", 409, "x")),
        );
        assert!(e.is_already_exists());
        let e = ApiError::from_status(Verb::Update, p, 409, Some(status("Conflict", 409, "x")));
        assert!(e.is_conflict());
        let e = ApiError::from_status(Verb::Get, p, 503, None);
        assert_eq!(e.status_code(), Some(503));
        assert_eq!(
            e.to_string(),
            "get /api/v1/namespaces/ns/pods/p: http 503 : http status 503"
        );
        let e = ApiError::from_watch_status(p, status("Expired", 410, "too old"));
        assert!(e.is_gone());
        let e = ApiError::from_watch_status(p, status("InternalError", 500, "boom"));
        assert_eq!(e.status_code(), Some(500));
    }
}
