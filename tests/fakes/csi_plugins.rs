//! The plugin watcher and the CSI client against fake plugins: real gRPC servers on
//! unix sockets that serve the kubelet plugin-registration service and the CSI Node
//! service, record what they are told, and can hang a call. No root; the watcher
//! runs standalone (drivers are registered, nothing is published). The last test
//! adds the `node` thread against the fake API server: an attachable volume's
//! place in `status.volumesInUse` until the driver unpublished it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::fake_api::FakeApi;
use crate::support::wait_until;
use grpcio::{
    ChannelBuilder, Environment, RpcContext, Server, ServerBuilder, ServerCredentials, UnarySink,
};
use litelet::events::Recorder;
use litelet::node::{self, Health, MachineInfo, NodeConfig, NodeInputs};
use litelet::volumes::csi::{self, grpc, pb, reg_grpc, reg_pb, CsiClient, CsiError, Drivers};
use litelet::volumes::VolumeManager;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// What a fake plugin was told, and the calls it holds without answering.
#[derive(Default)]
struct Record {
    notified: Vec<(bool, String)>,
    held: Vec<UnarySink<pb::NodePublishVolumeResponse>>,
    unpublished: Vec<String>,
}

#[derive(Clone)]
struct FakePlugin {
    info: reg_pb::PluginInfo,
    record: Arc<Mutex<Record>>,
}

impl reg_grpc::Registration for FakePlugin {
    fn get_info(
        &mut self,
        ctx: RpcContext,
        _req: reg_pb::InfoRequest,
        sink: UnarySink<reg_pb::PluginInfo>,
    ) {
        let info = self.info.clone();
        ctx.spawn(async move {
            let _ = sink.success(info).await;
        });
    }

    fn notify_registration_status(
        &mut self,
        ctx: RpcContext,
        req: reg_pb::RegistrationStatus,
        sink: UnarySink<reg_pb::RegistrationStatusResponse>,
    ) {
        self.record
            .lock()
            .unwrap()
            .notified
            .push((req.plugin_registered, req.error.clone()));
        ctx.spawn(async move {
            let _ = sink.success(Default::default()).await;
        });
    }
}

impl grpc::Node for FakePlugin {
    fn node_get_info(
        &mut self,
        ctx: RpcContext,
        _req: pb::NodeGetInfoRequest,
        sink: UnarySink<pb::NodeGetInfoResponse>,
    ) {
        let mut resp = pb::NodeGetInfoResponse {
            node_id: "fake-node-id".into(),
            ..Default::default()
        };
        let mut topology = pb::Topology::new();
        topology.segments.insert("fake/zone".into(), "z1".into());
        resp.accessible_topology = Some(topology).into();
        ctx.spawn(async move {
            let _ = sink.success(resp).await;
        });
    }

    fn node_unpublish_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::NodeUnpublishVolumeRequest,
        sink: UnarySink<pb::NodeUnpublishVolumeResponse>,
    ) {
        self.record.lock().unwrap().unpublished.push(req.volume_id);
        ctx.spawn(async move {
            let _ = sink.success(Default::default()).await;
        });
    }

    /// A stuck driver: the call is never answered.
    fn node_publish_volume(
        &mut self,
        _ctx: RpcContext,
        _req: pb::NodePublishVolumeRequest,
        sink: UnarySink<pb::NodePublishVolumeResponse>,
    ) {
        self.record.lock().unwrap().held.push(sink);
    }
}

/// Serves `plugin`'s registration and Node services on `socket`.
fn serve(plugin: &FakePlugin, socket: &Path) -> Server {
    let env = Arc::new(Environment::new(1));
    let mut server = ServerBuilder::new(env.clone())
        .register_service(reg_grpc::create_registration(plugin.clone()))
        .register_service(grpc::create_node(plugin.clone()))
        .channel_args(ChannelBuilder::new(env).build_args())
        .build()
        .expect("build fake plugin server");
    server
        .add_listening_port(
            format!("unix:{}", socket.display()),
            ServerCredentials::insecure(),
        )
        .expect("bind fake plugin socket");
    server.start();
    server
}

fn plugin(type_: &str, name: &str, endpoint: &Path) -> FakePlugin {
    FakePlugin {
        info: reg_pb::PluginInfo {
            type_: type_.into(),
            name: name.into(),
            endpoint: endpoint.display().to_string(),
            supported_versions: vec!["1.0.0".into()],
            ..Default::default()
        },
        record: Arc::default(),
    }
}

fn notified(p: &FakePlugin) -> Vec<(bool, String)> {
    p.record.lock().unwrap().notified.clone()
}

#[test]
fn watcher_registers_a_valid_plugin_refuses_others_and_deregisters_on_removal() {
    let root = tempfile::tempdir().expect("root");
    let drivers = Drivers::default();
    let (stop, shutdown) = crossbeam_channel::bounded::<()>(0);
    let watcher = csi::watcher::spawn(root.path(), "n1", None, drivers.clone(), shutdown)
        .expect("start watcher");
    let registry: PathBuf = csi::watcher::registry_dir(root.path());
    assert!(registry.is_dir(), "the watcher makes plugins_registry");

    // A CSI plugin whose registration and driver share one socket (as a driver
    // that registers itself would).
    let good_socket = registry.join("fake.csi-reg.sock");
    let good = plugin("CSIPlugin", "fake.csi", &good_socket);
    let good_server = serve(&good, &good_socket);
    assert!(
        wait_until(WAIT, || drivers.get("fake.csi").is_some()),
        "the driver is registered"
    );
    let driver = drivers.get("fake.csi").expect("driver");
    assert_eq!(driver.endpoint, good_socket);
    assert_eq!(driver.node_id, "fake-node-id");
    assert!(wait_until(WAIT, || notified(&good) == [(true, String::new())]));

    // A device plugin is told no, and not used.
    let bad_socket = registry.join("gpu-reg.sock");
    let bad = plugin("DevicePlugin", "example.com/gpu", &bad_socket);
    let _bad_server = serve(&bad, &bad_socket);
    assert!(wait_until(WAIT, || !notified(&bad).is_empty()));
    let told = notified(&bad);
    assert!(!told[0].0, "{told:?}");
    assert!(told[0].1.contains("not supported"), "{told:?}");
    assert_eq!(drivers.names(), ["fake.csi"]);

    // The registration socket goes away: the driver is deregistered.
    drop(good_server);
    let _ = std::fs::remove_file(&good_socket);
    assert!(
        wait_until(WAIT, || drivers.get("fake.csi").is_none()),
        "the driver is deregistered"
    );

    drop(stop);
    watcher.join().expect("watcher thread ends on shutdown");
}

#[test]
fn a_stuck_driver_call_fails_at_its_deadline() {
    let dir = tempfile::tempdir().expect("dir");
    let socket = dir.path().join("csi.sock");
    let fake = plugin("CSIPlugin", "stuck.csi", &socket);
    let _server = serve(&fake, &socket);
    let client = CsiClient::new(&socket, Duration::from_millis(300));
    assert_eq!(
        client.node_info().expect("NodeGetInfo answers").node_id,
        "fake-node-id"
    );
    let err = client
        .publish(&pb::NodePublishVolumeRequest {
            volume_id: "v".into(),
            target_path: dir.path().join("t").display().to_string(),
            ..Default::default()
        })
        .expect_err("a call the driver never answers");
    assert!(
        matches!(
            err,
            CsiError::DeadlineExceeded {
                op: "NodePublishVolume",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fake.record.lock().unwrap().held.len(), 1);
}

/// The `volumesInUse` of node `name` in the fake API server.
fn volumes_in_use(api: &FakeApi, name: &str) -> Option<Value> {
    api.get("nodes", "", name)
        .map(|n| n["status"]["volumesInUse"].clone())
}

/// A volume an earlier run mounted (its `vol_data.json` names an attachment) is in
/// the node's `volumesInUse` from start-up, reported back to the volume manager, and
/// leaves the list only once the driver unpublished it.
#[test]
fn an_attached_volume_stays_in_volumes_in_use_until_it_is_unpublished() {
    const NODE: &str = "node-1";
    let root = tempfile::tempdir().expect("root");
    let dir = root
        .path()
        .join("pods/old-pod/volumes")
        .join(csi::plan::PLUGIN_CSI)
        .join("pv-1");
    std::fs::create_dir_all(&dir).expect("volume dir");
    let record = csi::plan::VolData {
        attachment_id: csi::plan::attachment_name("vol-1", "fake.csi", NODE),
        driver_name: "fake.csi".into(),
        node_name: NODE.into(),
        spec_vol_id: "pv-1".into(),
        volume_handle: "vol-1".into(),
        volume_lifecycle_mode: "Persistent".into(),
    };
    std::fs::write(
        dir.join(csi::plan::VOL_DATA),
        serde_json::to_vec(&record).expect("encode"),
    )
    .expect("write record");
    let volumes = VolumeManager::new(root.path(), None, NODE).without_mounts();
    let in_use = volumes.volumes_in_use();
    let name = "kubernetes.io/csi/fake.csi^vol-1";
    assert_eq!(in_use.names(), [name], "read back from the record");
    assert!(!in_use.is_reported(name));

    let api = FakeApi::start();
    let mut config = NodeConfig::new(NODE, NODE);
    // Long periods: only a change of the set can bring the next status soon.
    config.node_status_update_frequency = Duration::from_secs(3600);
    config.node_status_report_frequency = Duration::from_secs(3600);
    let inputs = NodeInputs {
        machine: Box::new(|| (MachineInfo::default(), Vec::new())),
        health: Box::new(Health::default),
        runtime_version: Box::new(|| None),
        images: None,
        sync_now: None,
        devices: None,
        devices_changed: None,
        volumes: Some(Box::new(in_use.clone())),
    };
    let (stop, shutdown) = crossbeam_channel::bounded::<()>(0);
    let handles = node::start(
        &api.client(),
        config,
        inputs,
        Recorder::log_only(),
        shutdown,
    )
    .expect("start node");
    assert!(
        wait_until(WAIT, || volumes_in_use(&api, NODE) == Some(json!([name]))),
        "published: {:?}",
        volumes_in_use(&api, NODE)
    );
    assert!(
        wait_until(WAIT, || in_use.is_reported(name)),
        "the volume manager learns that the API server has it"
    );

    // The driver is not registered: nothing can unpublish the volume, so it stays.
    let err = volumes.teardown_pod("old-pod").expect_err("no driver");
    assert!(err.to_string().contains("not registered"), "{err}");
    assert_eq!(in_use.names(), [name]);

    let (stop_watcher, watcher_shutdown) = crossbeam_channel::bounded::<()>(0);
    let watcher = volumes
        .spawn_plugin_watcher(watcher_shutdown)
        .expect("start watcher");
    let socket = csi::watcher::registry_dir(root.path()).join("fake.csi-reg.sock");
    let fake = plugin("CSIPlugin", "fake.csi", &socket);
    let _server = serve(&fake, &socket);
    assert!(wait_until(WAIT, || volumes.csi_drivers() == ["fake.csi"]));
    volumes
        .teardown_pod("old-pod")
        .expect("unpublished and removed");
    assert_eq!(fake.record.lock().unwrap().unpublished, ["vol-1"]);
    assert!(in_use.names().is_empty());
    assert!(
        wait_until(WAIT, || volumes_in_use(&api, NODE) == Some(json!([]))),
        "dropped at once: {:?}",
        volumes_in_use(&api, NODE)
    );
    assert!(wait_until(WAIT, || !in_use.is_reported(name)));

    drop(stop_watcher);
    watcher.join().expect("watcher ends");
    drop(stop);
    handles.join();
}
