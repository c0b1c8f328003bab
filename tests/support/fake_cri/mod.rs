//! A fake CRI runtime: a real grpcio server on a unix socket with in-memory state.
//!
//! It follows containerd where litelet depends on it: NotFound for unknown sandbox and
//! container IDs (but Remove* of an unknown ID succeeds), start only from CREATED,
//! names reserved per sandbox and attempt, stopping a sandbox stops its containers,
//! ImageStatus of a missing image is an empty answer, not an error.
//!
//! Tests drive it through [`FakeCri`]: read the call log, and inject faults: delay a
//! method, fail its Nth next call with a gRPC code, make a container exit with a code
//! (now, or some time after it starts), flip runtime conditions, restart the server on
//! the same socket with its state kept (as containerd keeps its state on disk), serve
//! the container event stream (containerd 1.7) or break it (`events.rs`).

mod events;
mod service;
mod state;
mod streaming;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use grpcio::{
    ChannelBuilder, Environment, RpcStatusCode, Server, ServerBuilder, ServerCredentials,
};
use litelet::cri::{self, ConnectOptions, Endpoint, ImageClient, RuntimeClient};

pub use state::{CallRecord, Failure, FakeState};
// Not every test binary that includes the fake needs it.
#[allow(unused_imports)]
pub use state::image_id;

/// A running fake runtime. Dropping it stops the server.
pub struct FakeCri {
    socket: PathBuf,
    state: Arc<Mutex<FakeState>>,
    env: Arc<Environment>,
    server: Option<Server>,
    _dir: Option<tempfile::TempDir>,
}

impl FakeCri {
    /// Starts a fake runtime on a socket in a fresh temp dir.
    pub fn start() -> FakeCri {
        let dir = tempfile::tempdir().expect("temp dir for the fake runtime");
        let socket = dir.path().join("fake-cri.sock");
        let mut fake = FakeCri::start_at(&socket);
        fake._dir = Some(dir);
        fake
    }

    /// Starts a fake runtime listening on `socket`.
    pub fn start_at(socket: &Path) -> FakeCri {
        let env = Arc::new(
            grpcio::EnvBuilder::new()
                .cq_count(2)
                .name_prefix("fake-cri")
                .build(),
        );
        let state = Arc::new(Mutex::new(FakeState::new()));
        let mut fake = FakeCri {
            socket: socket.to_owned(),
            state,
            env,
            server: None,
            _dir: None,
        };
        fake.serve();
        fake
    }

    fn serve(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let service = service::FakeService::new(self.state.clone());
        let mut server = ServerBuilder::new(self.env.clone())
            .register_service(cri::grpc::create_runtime_service(service.clone()))
            .register_service(cri::grpc::create_image_service(service))
            .channel_args(ChannelBuilder::new(self.env.clone()).build_args())
            .build()
            .expect("build fake CRI server");
        server
            .add_listening_port(
                format!("unix:{}", self.socket.display()),
                ServerCredentials::insecure(),
            )
            .expect("bind fake CRI socket");
        server.start();
        self.server = Some(server);
    }

    /// Stops serving (the socket disappears); state is kept.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            drop(server);
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Stops and starts the server on the same socket, keeping sandboxes and containers.
    pub fn restart(&mut self) {
        self.stop();
        self.serve();
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The endpoint string litelet takes on its command line.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Clients connected to this fake with the given deadline.
    pub fn clients(&self, timeout: Duration) -> (RuntimeClient, ImageClient) {
        let endpoint = Endpoint::parse(&self.endpoint()).expect("fake endpoint parses");
        let options = ConnectOptions {
            request_timeout: timeout,
            pull_timeout: timeout,
        };
        cri::connect(&endpoint, &options)
    }

    /// Direct access to the in-memory state, for setup and assertions.
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every call served so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.state().calls.clone()
    }

    /// How many times `method` (e.g. "StartContainer") was called.
    pub fn count(&self, method: &str) -> usize {
        self.state().call_counts.get(method).copied().unwrap_or(0)
    }

    /// Delays every later call of `method` by `delay` (the answer still comes).
    pub fn delay(&self, method: &str, delay: Duration) {
        self.state().delays.insert(method.to_owned(), delay);
    }

    /// Fails the `nth` next call of `method` (1 = the very next) with `code`.
    pub fn fail_nth(&self, method: &str, nth: usize, code: RpcStatusCode, message: &str) {
        let mut state = self.state();
        let seen = state.call_counts.get(method).copied().unwrap_or(0);
        state.failures.push(Failure {
            method: method.to_owned(),
            call_number: seen + nth,
            code,
            message: message.to_owned(),
        });
    }

    /// Removes every injected delay and failure.
    pub fn clear_faults(&self) {
        let mut state = self.state();
        state.delays.clear();
        state.failures.clear();
    }

    /// Makes a running container exit now with `code`.
    pub fn exit_container(&self, container_id: &str, code: i32) -> bool {
        self.state().exit_container(container_id, code, "")
    }

    /// Makes every container named `name` exit with `code` this long after it starts.
    pub fn exit_after_start(&self, name: &str, code: i32, after: Duration) {
        self.state()
            .exit_rules
            .insert(name.to_owned(), (code, after));
    }

    /// Serves the container event stream from now on (as containerd 1.7), or stops
    /// serving it (new calls fail with UNIMPLEMENTED; open streams end).
    pub fn serve_events(&self, on: bool) {
        let mut state = self.state();
        let was = state.events.enabled;
        state.events.enabled = on;
        if !on {
            state.events.disconnect_all();
        } else if !was {
            events::spawn_exit_timer(Arc::downgrade(&self.state));
        }
    }

    /// Ends every open event stream with UNAVAILABLE (as a runtime restart does);
    /// new calls are served as before.
    pub fn break_event_streams(&self) {
        self.state().events.disconnect_all();
    }

    /// Event streams opened so far, and events sent to them.
    pub fn event_stream_counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.events.opened, state.events.sent)
    }

    /// GetContainerEvents calls refused with UNIMPLEMENTED so far (events off).
    pub fn event_stream_refusals(&self) -> usize {
        self.state().events.refused
    }

    /// Sets a runtime condition (RuntimeReady / NetworkReady).
    pub fn set_condition(&self, kind: &str, ready: bool, reason: &str) {
        self.state().set_condition(kind, ready, reason);
    }
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A container config as litelet writes one, reduced to what the fake and the
/// relist read: container `name` of `image`, with `labels` (a pod's identity and
/// the container's name); callers add what else they need with `..`.
pub fn container_config(
    name: &str,
    image: &str,
    labels: std::collections::HashMap<String, String>,
) -> litelet::cri::pb::ContainerConfig {
    use litelet::cri::pb;
    use protobuf::MessageField;
    pb::ContainerConfig {
        metadata: MessageField::some(pb::ContainerMetadata {
            name: name.into(),
            ..Default::default()
        }),
        image: MessageField::some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        labels,
        ..Default::default()
    }
}

/// Creates and starts `config` in sandbox `sandbox_id` (without the sandbox's config,
/// which the fake does not need); returns the container's ID.
pub fn run_container(
    runtime: &RuntimeClient,
    sandbox_id: &str,
    config: litelet::cri::pb::ContainerConfig,
) -> String {
    use litelet::cri::pb;
    use protobuf::MessageField;
    let id = runtime
        .create_container(&pb::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: MessageField::some(config),
            ..Default::default()
        })
        .unwrap()
        .container_id;
    runtime
        .start_container(&pb::StartContainerRequest {
            container_id: id.clone(),
            ..Default::default()
        })
        .unwrap();
    id
}
