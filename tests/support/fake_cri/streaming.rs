//! The fake runtime's streaming calls (Exec, Attach, PortForward): like a real
//! runtime they only hand out a URL of a streaming server, here
//! `<FakeState::streaming_url>/<kind>/<id>`, which a test serves itself. Without a
//! configured base URL they are UNIMPLEMENTED, as for a runtime without streaming.

use grpcio::{RpcStatus, RpcStatusCode};
use litelet::cri::pb;

use super::state::FakeState;

impl FakeState {
    /// The URL for streaming `kind` into container (or sandbox) `id`.
    pub(super) fn streaming(
        &self,
        kind: &str,
        id: &str,
        sandbox: bool,
    ) -> Result<String, RpcStatus> {
        let Some(base) = &self.streaming_url else {
            return Err(RpcStatus::with_message(
                RpcStatusCode::UNIMPLEMENTED,
                format!("{kind}: streaming is not configured in the fake runtime"),
            ));
        };
        let running = if sandbox {
            self.sandboxes
                .get(id)
                .is_some_and(|s| s.state == pb::PodSandboxState::SANDBOX_READY)
        } else {
            self.containers
                .get(id)
                .is_some_and(|c| c.state == pb::ContainerState::CONTAINER_RUNNING)
        };
        if !running {
            return Err(RpcStatus::with_message(
                RpcStatusCode::NOT_FOUND,
                format!("{kind}: {id:?} is not running"),
            ));
        }
        Ok(format!("{}/{kind}/{id}", base.trim_end_matches('/')))
    }
}
