//! Container log rotation (upstream pkg/kubelet/logs, the container log manager).
//!
//! The runtime writes each container's stdout/stderr to `<podLogsDir>/<ns>_<pod>_<uid>/
//! <container>/<restart>.log`. Every `containerLogMonitorInterval` the `log-rotate`
//! thread lists the running containers over CRI and queues each one (at most once
//! while queued) for a small pool of `log-rot-N` workers (`containerLogMaxWorkers`).
//! A worker asks the runtime for the container's log path, and once the file reaches
//! `containerLogMaxSize` it removes what is beyond `containerLogMaxFiles`, gzips the
//! previous rotated copy, renames the live file to `<file>.<YYYYMMDD-hhmmss>` and calls
//! CRI `ReopenContainerLog` so the runtime starts a fresh live file (renaming back if
//! that call fails, so no output is lost).
//!
//! - [`policy`]: the pure decision (sizes, names, now → a [`policy::RotationPlan`]).
//! - [`rotate`]: carries one plan out on the file system.
//! - [`manager`]: the threads and the CRI side ([`manager::LogRuntime`]).
//!
//! Invariants: nothing here runs on the sync loop; only files below `podLogsDir` are
//! touched, each through a descriptor of its directory and never through a symlink
//! (`runtime::logs::dir`); a failure is logged and retried at the next interval,
//! never fatal.

pub mod manager;
pub mod rotate;

/// The pure rotation decision lives below, beside the log reader that must agree with
/// its file names (the runtime sits below this module).
pub use crate::runtime::logs::policy;

use std::path::PathBuf;
use std::time::Duration;

use crate::api::quantity::Quantity;
use crate::cri::CriError;

pub use manager::{LogManagerConfig, LogRuntime};
pub use policy::RotatePolicy;

/// Upstream's defaults (KubeletConfiguration v1beta1).
pub const DEFAULT_MAX_SIZE: &str = "10Mi";
pub const DEFAULT_MAX_FILES: u32 = 5;
pub const DEFAULT_MAX_WORKERS: u32 = 1;
pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// Bounds upstream's validation puts on `containerLogMonitorInterval`.
pub const MIN_MONITOR_INTERVAL: Duration = Duration::from_secs(3);

/// Why a container's log could not be rotated (or the settings are unusable).
#[derive(Debug, thiserror::Error)]
pub enum LogManagerError {
    #[error("invalid container log max size {text:?}: {why}")]
    MaxSize { text: String, why: String },
    #[error("invalid container log max files {0}: must be at least 2")]
    MaxFiles(u32),
    #[error("cannot stat container log {path}: {source}")]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot list container log directory {path}: {source}")]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove old container log {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot compress container log {path}: {source}")]
    Compress {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot rename container log {from} to {to}: {source}")]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("container {id}: {step} failed: {source}")]
    Runtime {
        id: String,
        step: &'static str,
        source: CriError,
    },
    /// The live log is a symlink, FIFO or other non-regular file: it is not rotated
    /// (a pod that can write its log folder could aim it at a host file).
    #[error("container log {path} is not rotated: {source}")]
    NotRegular {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {id}: log path {path:?} is not below the pod logs directory")]
    UnsafePath { id: String, path: String },
}

/// Parses `--container-log-max-size` (a quantity such as `10Mi`): `None` when it is
/// negative, which turns rotation off as upstream.
pub fn parse_max_size(text: &str) -> Result<Option<u64>, LogManagerError> {
    let bad = |why: String| LogManagerError::MaxSize {
        text: text.to_owned(),
        why,
    };
    let quantity = Quantity::parse(text).map_err(|e| bad(e.to_string()))?;
    if quantity.is_negative() {
        return Ok(None);
    }
    let bytes = quantity.value();
    if bytes == i64::MAX {
        return Err(bad("too large".into()));
    }
    Ok(Some(bytes as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_size_quantities() {
        assert_eq!(parse_max_size("10Mi").unwrap(), Some(10 * 1024 * 1024));
        assert_eq!(parse_max_size("1M").unwrap(), Some(1_000_000));
        assert_eq!(parse_max_size("512").unwrap(), Some(512));
        assert_eq!(parse_max_size("-1").unwrap(), None);
        assert!(parse_max_size("ten").is_err());
        assert!(parse_max_size("1e400").is_err());
    }
}
