//! A fake device plugin (API v1beta1): a real grpcio server on a unix socket in the
//! device plugins folder that registers at `kubelet.sock`, streams the device list
//! the test sets (`ListAndWatch`), answers `Allocate` with a mount per device and an
//! env naming them, and records every call. Every device is on NUMA node 0. Dropping it stops the server and
//! removes its socket, as a plugin that exits.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use futures_util::SinkExt;
use grpcio::{
    ChannelBuilder, EnvBuilder, RpcContext, ServerBuilder, ServerCredentials, ServerStreamingSink,
    UnarySink, WriteFlags,
};
use litelet::devicemanager::grpc::{create_device_plugin, DevicePlugin, RegistrationClient};
use litelet::devicemanager::pb;

#[derive(Default)]
struct State {
    options: pb::DevicePluginOptions,
    devices: Vec<(String, bool)>,
    /// One sender per open ListAndWatch stream.
    streams: Vec<Sender<Vec<(String, bool)>>>,
    calls: Vec<String>,
    /// GetPreferredAllocation's answer.
    preferred: Vec<String>,
}

#[derive(Clone)]
struct Service(Arc<Mutex<State>>);

fn list(devices: &[(String, bool)]) -> pb::ListAndWatchResponse {
    pb::ListAndWatchResponse {
        devices: devices
            .iter()
            .map(|(id, healthy)| pb::Device {
                ID: id.clone(),
                health: if *healthy { "Healthy" } else { "Unhealthy" }.into(),
                // Every fake device sits on NUMA node 0.
                topology: Some(pb::TopologyInfo {
                    nodes: vec![pb::NUMANode {
                        ID: 0,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

impl DevicePlugin for Service {
    fn get_device_plugin_options(
        &mut self,
        ctx: RpcContext,
        _req: pb::Empty,
        sink: UnarySink<pb::DevicePluginOptions>,
    ) {
        let mut s = self.0.lock().unwrap();
        s.calls.push("GetDevicePluginOptions".into());
        let options = s.options.clone();
        ctx.spawn(async move {
            let _ = sink.success(options).await;
        });
    }

    fn list_and_watch(
        &mut self,
        _ctx: RpcContext,
        _req: pb::Empty,
        mut sink: ServerStreamingSink<pb::ListAndWatchResponse>,
    ) {
        let (tx, rx): (_, Receiver<Vec<(String, bool)>>) = unbounded();
        {
            let mut s = self.0.lock().unwrap();
            s.calls.push("ListAndWatch".into());
            tx.send(s.devices.clone()).unwrap();
            s.streams.push(tx);
        }
        // Its own thread: the stream lives as long as the plugin.
        std::thread::spawn(move || {
            litelet::blocking::block_on(async move {
                while let Ok(devices) = rx.recv() {
                    if sink
                        .send((list(&devices), WriteFlags::default()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                let _ = sink.close().await;
            })
        });
    }

    fn get_preferred_allocation(
        &mut self,
        ctx: RpcContext,
        req: pb::PreferredAllocationRequest,
        sink: UnarySink<pb::PreferredAllocationResponse>,
    ) {
        let mut s = self.0.lock().unwrap();
        let available = req
            .container_requests
            .first()
            .map(|r| r.available_deviceIDs.join(","))
            .unwrap_or_default();
        s.calls.push(format!("GetPreferredAllocation {available}"));
        let answer = pb::PreferredAllocationResponse {
            container_responses: vec![pb::ContainerPreferredAllocationResponse {
                deviceIDs: s.preferred.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        ctx.spawn(async move {
            let _ = sink.success(answer).await;
        });
    }

    fn allocate(
        &mut self,
        ctx: RpcContext,
        req: pb::AllocateRequest,
        sink: UnarySink<pb::AllocateResponse>,
    ) {
        let mut s = self.0.lock().unwrap();
        let mut responses = Vec::new();
        for r in &req.container_requests {
            s.calls
                .push(format!("Allocate {}", r.devices_ids.join(",")));
            let mut answer = pb::ContainerAllocateResponse::default();
            answer
                .envs
                .insert("FAKE_DEVICES".into(), r.devices_ids.join(","));
            for id in &r.devices_ids {
                answer.mounts.push(pb::Mount {
                    container_path: format!("/dev/fake/{id}"),
                    host_path: format!("/tmp/fake-{id}"),
                    read_only: true,
                    ..Default::default()
                });
                answer.devices.push(pb::DeviceSpec {
                    container_path: format!("/dev/{id}"),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                    ..Default::default()
                });
                answer.cdi_devices.push(pb::CDIDevice {
                    name: format!("example.com/resource={id}"),
                    ..Default::default()
                });
            }
            answer
                .annotations
                .insert("fake/devices".into(), r.devices_ids.join(","));
            responses.push(answer);
        }
        let answer = pb::AllocateResponse {
            container_responses: responses,
            ..Default::default()
        };
        ctx.spawn(async move {
            let _ = sink.success(answer).await;
        });
    }

    fn pre_start_container(
        &mut self,
        ctx: RpcContext,
        req: pb::PreStartContainerRequest,
        sink: UnarySink<pb::PreStartContainerResponse>,
    ) {
        self.0
            .lock()
            .unwrap()
            .calls
            .push(format!("PreStartContainer {}", req.devices_ids.join(",")));
        ctx.spawn(async move {
            let _ = sink.success(pb::PreStartContainerResponse::new()).await;
        });
    }
}

/// A running fake plugin.
pub struct FakeDevicePlugin {
    server: Option<grpcio::Server>,
    state: Arc<Mutex<State>>,
    pub socket: PathBuf,
    pub endpoint: String,
}

impl FakeDevicePlugin {
    /// Serves at `<dir>/<endpoint>` with `devices` (id, healthy) and `options`.
    pub fn start(
        dir: &Path,
        endpoint: &str,
        devices: &[(&str, bool)],
        options: pb::DevicePluginOptions,
    ) -> FakeDevicePlugin {
        let state = Arc::new(Mutex::new(State {
            options,
            devices: devices.iter().map(|(id, h)| (id.to_string(), *h)).collect(),
            ..Default::default()
        }));
        let socket = dir.join(endpoint);
        let env = Arc::new(EnvBuilder::new().cq_count(1).name_prefix("fake-dp").build());
        let mut server = ServerBuilder::new(env)
            .register_service(create_device_plugin(Service(state.clone())))
            .build()
            .unwrap();
        server
            .add_listening_port(
                format!("unix:{}", socket.display()),
                ServerCredentials::insecure(),
            )
            .unwrap();
        server.start();
        FakeDevicePlugin {
            server: Some(server),
            state,
            socket,
            endpoint: endpoint.into(),
        }
    }

    /// Calls `Register` at `<dir>/kubelet.sock` for `resource` with `version`.
    pub fn register(&self, dir: &Path, resource: &str, version: &str) -> grpcio::Result<()> {
        let env = Arc::new(EnvBuilder::new().cq_count(1).build());
        let channel = ChannelBuilder::new(env)
            .connect(&format!("unix:{}", dir.join("kubelet.sock").display()));
        let client = RegistrationClient::new(channel);
        let options = self.state.lock().unwrap().options.clone();
        client
            .register_opt(
                &pb::RegisterRequest {
                    version: version.into(),
                    endpoint: self.endpoint.clone(),
                    resource_name: resource.into(),
                    options: Some(options).into(),
                    ..Default::default()
                },
                grpcio::CallOption::default().timeout(Duration::from_secs(5)),
            )
            .map(drop)
    }

    /// Sends a new device list on every open stream.
    pub fn set_devices(&self, devices: &[(&str, bool)]) {
        let mut s = self.state.lock().unwrap();
        s.devices = devices.iter().map(|(id, h)| (id.to_string(), *h)).collect();
        let list = s.devices.clone();
        s.streams.retain(|tx| tx.send(list.clone()).is_ok());
    }

    pub fn set_preferred(&self, ids: &[&str]) {
        self.state.lock().unwrap().preferred = ids.iter().map(|s| s.to_string()).collect();
    }

    /// ListAndWatch streams still open (a send to a closed one drops it).
    pub fn open_streams(&self) -> usize {
        self.state.lock().unwrap().streams.len()
    }

    /// Every call so far, as "Name args".
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Ends its streams and stops serving, as a plugin that exits.
    pub fn stop(&mut self) {
        self.state.lock().unwrap().streams.clear();
        if let Some(mut server) = self.server.take() {
            let _ = litelet::blocking::block_on(server.shutdown());
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for FakeDevicePlugin {
    fn drop(&mut self) {
        self.stop();
    }
}
