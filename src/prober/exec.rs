//! Exec probes (upstream `pkg/probe/exec` over the runtime's ExecSync): the command
//! runs in the container; exit 0 is healthy.
//!
//! Runs on `probe-N` attempt threads. The CRI request carries the probe's timeout (the
//! runtime kills the command then) and the gRPC deadline is the same timeout, so a hung
//! runtime costs no more either. Outcomes:
//! - exit 0 → success; any other exit → failure with the exit code and the output
//!   (stdout then stderr, cut at [`MAX_OUTPUT`]);
//! - deadline exceeded → failure "command ... timed out";
//! - any other runtime error (a command that does not exist, a stopped container) →
//!   failure with the runtime's message. Upstream drops such errors without counting
//!   them; litelet counts them so a probe that can never pass does fail;
//! - the runtime unreachable, or the container already gone → unknown (not counted:
//!   restarting a container cannot help, and its worker is about to be removed).

use std::time::Duration;

use crate::cri::{pb, CriError, RuntimeClient};

use super::{Attempt, MAX_OUTPUT};

/// Runs `command` in `container_id` within `timeout`.
pub fn probe(
    runtime: &RuntimeClient,
    container_id: &str,
    command: &[String],
    timeout: Duration,
) -> Attempt {
    let request = pb::ExecSyncRequest {
        container_id: container_id.to_owned(),
        cmd: command.to_vec(),
        timeout: timeout.as_secs().max(1) as i64,
        ..Default::default()
    };
    match runtime.exec_sync_within(&request, timeout) {
        Ok(response) => {
            let mut output = response.stdout;
            output.extend_from_slice(&response.stderr);
            output.truncate(MAX_OUTPUT);
            let output = String::from_utf8_lossy(&output).trim_end().to_owned();
            match response.exit_code {
                0 => Attempt::Success(output),
                code if output.is_empty() => {
                    Attempt::Failure(format!("command {command:?} exited with {code}"))
                }
                code => {
                    Attempt::Failure(format!("command {command:?} exited with {code}: {output}"))
                }
            }
        }
        Err(CriError::DeadlineExceeded { .. }) => {
            Attempt::Failure(format!("command {command:?} timed out after {timeout:?}"))
        }
        Err(err @ (CriError::Unavailable { .. } | CriError::NotFound { .. })) => {
            Attempt::Unknown(format!("command {command:?}: {err}"))
        }
        Err(err) => Attempt::Failure(format!("command {command:?}: {err}")),
    }
}
