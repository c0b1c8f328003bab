//! Termination messages of exited containers (upstream getTerminationMessage and
//! readLastStringFromContainerLogs in kuberuntime_container.go).
//!
//! At create time litelet mounts a world-writable host file at the container's
//! `terminationMessagePath` (`runtime/sync.rs`). Once the container has exited, the
//! message is the tail of that file; with `FallbackToLogsOnError` and a failed run, an
//! empty or missing file gives way to the tail of the container's CRI log. The result
//! is appended to the runtime's own message, and `status/normalize.rs` then shares
//! 12 KiB among the pod's containers.
//!
//! [`plan`] decides where to look from the CRI status alone (pure); [`read`] carries
//! the plan out: one bounded file read, and at most one log tail. Called by
//! `inspect::pod_status` (PLEG and pod worker threads). A read error becomes the
//! message, as upstream; it never fails the status.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::container::DEFAULT_TERMINATION_MESSAGE_PATH;
use super::labels::ContainerAnnotations;
use crate::api::pod::TerminationMessagePolicy;
use crate::cri::pb;
use crate::runtime::logs::{LogOptions, LogReader};

/// The most a container's termination message file contributes (the file's tail).
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH: usize = 4 * 1024;
/// The most a message taken from the logs keeps (the end of the log tail).
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH: usize = 2 * 1024;
/// Lines of log read for a message taken from the logs.
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES: u64 = 80;

/// The runtime's reason for a container that could not even start: it has no logs.
const CONTAINER_CANNOT_RUN: &str = "ContainerCannotRun";

/// Where an exited container's termination message comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The host file mounted at the termination message path, if litelet mounted one.
    pub file: Option<PathBuf>,
    /// Read the log tail when the file gives nothing (FallbackToLogsOnError and a
    /// failed run).
    pub fallback_to_logs: bool,
    /// The container's CRI log file.
    pub log_path: PathBuf,
}

/// Decides where to read the message of `status`; None when the container has not
/// exited (running containers report no message).
pub fn plan(status: &pb::ContainerStatus) -> Option<Plan> {
    if status.state.enum_value_or_default() != pb::ContainerState::CONTAINER_EXITED {
        return None;
    }
    let info = ContainerAnnotations::parse(&status.annotations);
    let fallback_to_logs = info.termination_message_policy
        == Some(TerminationMessagePolicy::FallbackToLogsOnError)
        && status.exit_code != 0
        && status.reason != CONTAINER_CANNOT_RUN;
    let wanted = info
        .termination_message_path
        .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.to_owned());
    let file = status
        .mounts
        .iter()
        .find(|m| m.container_path == wanted)
        .map(|m| PathBuf::from(&m.host_path));
    Some(Plan {
        file,
        fallback_to_logs,
        log_path: PathBuf::from(&status.log_path),
    })
}

/// The runtime's message with the termination message appended (upstream joins the
/// two with ": ").
pub fn append(runtime_message: &str, termination_message: &str) -> String {
    match (runtime_message.is_empty(), termination_message.is_empty()) {
        (_, true) => runtime_message.to_owned(),
        (true, false) => termination_message.to_owned(),
        (false, false) => format!("{runtime_message}: {termination_message}"),
    }
}

/// Carries out `plan`: the file's last 4 KiB, else (when allowed) the log tail.
pub fn read(plan: &Plan) -> String {
    let from_file = match &plan.file {
        None => None,
        Some(path) => match read_tail(path, MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH) {
            Ok(bytes) => Some(bytes),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => {
                return format!("Error on reading termination log {}: {err}", path.display())
            }
        },
    };
    match from_file {
        Some(bytes) if !bytes.is_empty() => text(&bytes),
        _ if plan.fallback_to_logs => log_tail(&plan.log_path),
        _ => String::new(),
    }
}

/// The message of an exited container, or "" (also for containers still running).
pub fn message(status: &pb::ContainerStatus) -> String {
    plan(status).map(|p| read(&p)).unwrap_or_default()
}

/// The last `max` bytes of `path`.
fn read_tail(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max as u64);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.take(max as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The end of the container's log: its last 80 records, of which the last 2 KiB.
fn log_tail(path: &Path) -> String {
    // litelet only knows where a relative log path lives by the pod; containerd and
    // CRI-O answer with absolute paths.
    if !path.is_absolute() {
        log::debug!(
            "termination message from logs: log path {:?} is not absolute",
            path
        );
        return String::new();
    }
    let options = LogOptions {
        tail_lines: Some(MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES),
        ..Default::default()
    };
    // The path is `<pod logs root>/<ns>_<name>_<uid>/<container>/<n>.log`: the two
    // folders below the root may be reached by a pod (a hostPath), so neither may be
    // a symlink, as for `kubectl logs`.
    let root = path.ancestors().nth(3).unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    let pumped = LogReader::open_below(root, path, options).and_then(|mut r| r.pump(&mut out));
    match pumped {
        Ok(_) => text(last_bytes(
            &out,
            MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH,
        )),
        Err(err) => format!("Error on reading termination message from logs: {err}"),
    }
}

/// The last `max` bytes of `bytes`.
fn last_bytes(bytes: &[u8], max: usize) -> &[u8] {
    &bytes[bytes.len().saturating_sub(max)..]
}

/// Bytes as text; a character cut in two at the start by a byte limit is dropped, so
/// the text never grows past the limit.
fn text(bytes: &[u8]) -> String {
    let cut = bytes
        .iter()
        .take(3)
        .take_while(|b| (0x80..0xc0).contains(*b))
        .count();
    String::from_utf8_lossy(&bytes[cut..]).into_owned()
}

#[cfg(test)]
mod tests;
