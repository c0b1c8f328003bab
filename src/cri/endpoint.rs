//! Parsing of `--container-runtime-endpoint` values.
//!
//! Only unix sockets are supported (`unix:///path` or a bare absolute path), the way
//! every Linux CRI runtime listens. Parsing is pure; [`Endpoint::check_socket`] is the
//! one place that looks at the file system.

use std::fmt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::CriError;

/// A CRI runtime's unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    socket: PathBuf,
}

impl Endpoint {
    /// Parses `unix:///run/containerd/containerd.sock` or `/run/containerd/containerd.sock`.
    pub fn parse(value: &str) -> Result<Endpoint, CriError> {
        let invalid = |why: &str| CriError::BadEndpoint {
            endpoint: value.to_owned(),
            reason: why.to_owned(),
            source: None,
        };
        let path = match value.split_once("://") {
            Some(("unix", rest)) => rest,
            Some((scheme, _)) => {
                return Err(invalid(&format!(
                    "scheme {scheme:?} is not supported, only unix://"
                )))
            }
            None => value,
        };
        if path.is_empty() {
            return Err(invalid("the socket path is empty"));
        }
        if !path.starts_with('/') {
            return Err(invalid("the socket path must be absolute"));
        }
        Ok(Endpoint {
            socket: PathBuf::from(path),
        })
    }

    /// The socket's path on this machine.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The target string grpcio understands.
    pub(crate) fn grpc_target(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    /// Fails with a clear message when nothing listens at the socket path yet.
    pub fn check_socket(&self) -> Result<(), CriError> {
        match std::fs::metadata(&self.socket) {
            Ok(meta) if meta.file_type().is_socket() => Ok(()),
            Ok(_) => Err(CriError::BadEndpoint {
                endpoint: self.to_string(),
                reason: "the path exists but is not a unix socket".into(),
                source: None,
            }),
            Err(err) => Err(CriError::BadEndpoint {
                endpoint: self.to_string(),
                reason: format!("cannot reach the socket: {err} (is the runtime running?)"),
                source: Some(super::Cause::new(err)),
            }),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unix://{}", self.socket.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_urls_and_bare_paths() {
        let url = Endpoint::parse("unix:///run/containerd/containerd.sock").unwrap();
        assert_eq!(url.socket(), Path::new("/run/containerd/containerd.sock"));
        assert_eq!(url.grpc_target(), "unix:/run/containerd/containerd.sock");
        assert_eq!(url.to_string(), "unix:///run/containerd/containerd.sock");
        let bare = Endpoint::parse("/run/crio/crio.sock").unwrap();
        assert_eq!(bare.socket(), Path::new("/run/crio/crio.sock"));
    }

    #[test]
    fn rejects_other_schemes_and_relative_paths() {
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://",
            "unix://relative.sock",
            "",
            "x.sock",
        ] {
            let err = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(err.contains("container runtime endpoint"), "{bad}: {err}");
        }
    }

    #[test]
    fn missing_socket_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint =
            Endpoint::parse(&format!("unix://{}/none.sock", dir.path().display())).unwrap();
        let err = endpoint.check_socket().unwrap_err().to_string();
        assert!(err.contains("is the runtime running"), "{err}");
    }
}
