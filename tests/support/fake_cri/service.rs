//! The gRPC face of the fake runtime: each handler records the call, applies injected
//! faults, runs the rule in `state.rs` under the lock and answers on grpcio's own
//! executor. An injected delay is a short-lived sleeper thread that wakes the answer,
//! so a slow call never blocks the others.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use grpcio::{RpcContext, RpcStatus, RpcStatusCode, ServerStreamingSink, UnarySink, WriteFlags};
use litelet::cri::{grpc, pb};

use super::state::FakeState;

/// One call as the call log records it: the method, its target (an ID or a name)
/// and its arguments worth asserting on.
struct Call {
    method: &'static str,
    target: String,
    detail: String,
}

#[derive(Clone)]
pub(super) struct FakeService {
    state: Arc<Mutex<FakeState>>,
}

impl FakeService {
    pub(super) fn new(state: Arc<Mutex<FakeState>>) -> FakeService {
        FakeService { state }
    }

    fn serve<T: Send + 'static>(
        &self,
        method: &'static str,
        target: String,
        ctx: &RpcContext,
        sink: UnarySink<T>,
        body: impl FnOnce(&mut FakeState) -> Result<T, RpcStatus>,
    ) {
        let call = Call {
            method,
            target,
            detail: String::new(),
        };
        self.serve_detailed(call, ctx, sink, body);
    }

    /// Like `serve`, recording the call's arguments (`detail`) in the call log too.
    fn serve_detailed<T: Send + 'static>(
        &self,
        call: Call,
        ctx: &RpcContext,
        sink: UnarySink<T>,
        body: impl FnOnce(&mut FakeState) -> Result<T, RpcStatus>,
    ) {
        let (result, delay) = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.apply_timed_exits();
            let delay = state.delays.get(call.method).copied();
            let result = match state.record_with(call.method, call.target, call.detail) {
                Some(injected) => Err(injected),
                None => body(&mut state),
            };
            (result, delay)
        };
        ctx.spawn(async move {
            let result = match delay {
                Some(delay) => Delayed::new(delay, result).await,
                None => result,
            };
            let _ = match result {
                Ok(response) => sink.success(response).await,
                Err(status) => sink.fail(status).await,
            };
        });
    }
}

/// A value that becomes ready after a delay, woken by a sleeper thread.
struct Delayed<T> {
    shared: Arc<Mutex<(Option<T>, Option<Waker>)>>,
}

impl<T: Send + 'static> Delayed<T> {
    fn new(delay: Duration, value: T) -> Delayed<T> {
        let shared = Arc::new(Mutex::new((None, None::<Waker>)));
        let writer = shared.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let mut slot = writer.lock().unwrap_or_else(|p| p.into_inner());
            slot.0 = Some(value);
            if let Some(waker) = slot.1.take() {
                waker.wake();
            }
        });
        Delayed { shared }
    }
}

impl<T> Future for Delayed<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut slot = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        match slot.0.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl grpc::RuntimeService for FakeService {
    fn version(
        &mut self,
        ctx: RpcContext,
        _: pb::VersionRequest,
        sink: UnarySink<pb::VersionResponse>,
    ) {
        self.serve("Version", String::new(), &ctx, sink, |s| Ok(s.version()));
    }

    fn run_pod_sandbox(
        &mut self,
        ctx: RpcContext,
        req: pb::RunPodSandboxRequest,
        sink: UnarySink<pb::RunPodSandboxResponse>,
    ) {
        let target = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_default();
        self.serve("RunPodSandbox", target, &ctx, sink, |s| {
            s.run_pod_sandbox(req)
        });
    }

    fn stop_pod_sandbox(
        &mut self,
        ctx: RpcContext,
        req: pb::StopPodSandboxRequest,
        sink: UnarySink<pb::StopPodSandboxResponse>,
    ) {
        let id = req.pod_sandbox_id;
        self.serve("StopPodSandbox", id.clone(), &ctx, sink, |s| {
            s.stop_pod_sandbox(&id)
        });
    }

    fn remove_pod_sandbox(
        &mut self,
        ctx: RpcContext,
        req: pb::RemovePodSandboxRequest,
        sink: UnarySink<pb::RemovePodSandboxResponse>,
    ) {
        let id = req.pod_sandbox_id;
        self.serve("RemovePodSandbox", id.clone(), &ctx, sink, |s| {
            Ok(s.remove_pod_sandbox(&id))
        });
    }

    fn pod_sandbox_status(
        &mut self,
        ctx: RpcContext,
        req: pb::PodSandboxStatusRequest,
        sink: UnarySink<pb::PodSandboxStatusResponse>,
    ) {
        let id = req.pod_sandbox_id;
        self.serve("PodSandboxStatus", id.clone(), &ctx, sink, |s| {
            s.pod_sandbox_status(&id)
        });
    }

    fn list_pod_sandbox(
        &mut self,
        ctx: RpcContext,
        req: pb::ListPodSandboxRequest,
        sink: UnarySink<pb::ListPodSandboxResponse>,
    ) {
        // Whether the listing was for one pod (a label selector) or everything.
        let detail = match req.filter.as_ref() {
            Some(f) if !f.label_selector.is_empty() => "filtered".to_owned(),
            _ => "all".to_owned(),
        };
        let call = Call {
            method: "ListPodSandbox",
            target: String::new(),
            detail,
        };
        self.serve_detailed(call, &ctx, sink, |s| Ok(s.list_pod_sandbox(&req)));
    }

    fn create_container(
        &mut self,
        ctx: RpcContext,
        req: pb::CreateContainerRequest,
        sink: UnarySink<pb::CreateContainerResponse>,
    ) {
        let target = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| m.name.clone())
            .unwrap_or_default();
        self.serve("CreateContainer", target, &ctx, sink, |s| {
            s.create_container(req)
        });
    }

    fn start_container(
        &mut self,
        ctx: RpcContext,
        req: pb::StartContainerRequest,
        sink: UnarySink<pb::StartContainerResponse>,
    ) {
        let id = req.container_id;
        self.serve("StartContainer", id.clone(), &ctx, sink, |s| {
            s.start_container(&id)
        });
    }

    fn stop_container(
        &mut self,
        ctx: RpcContext,
        req: pb::StopContainerRequest,
        sink: UnarySink<pb::StopContainerResponse>,
    ) {
        let id = req.container_id;
        let detail = format!("timeout={}", req.timeout);
        let call = Call {
            method: "StopContainer",
            target: id.clone(),
            detail,
        };
        self.serve_detailed(call, &ctx, sink, |s| s.stop_container(&id));
    }

    fn remove_container(
        &mut self,
        ctx: RpcContext,
        req: pb::RemoveContainerRequest,
        sink: UnarySink<pb::RemoveContainerResponse>,
    ) {
        let id = req.container_id;
        self.serve("RemoveContainer", id.clone(), &ctx, sink, |s| {
            Ok(s.remove_container(&id))
        });
    }

    fn list_containers(
        &mut self,
        ctx: RpcContext,
        req: pb::ListContainersRequest,
        sink: UnarySink<pb::ListContainersResponse>,
    ) {
        self.serve("ListContainers", String::new(), &ctx, sink, |s| {
            Ok(s.list_containers(&req))
        });
    }

    fn container_status(
        &mut self,
        ctx: RpcContext,
        req: pb::ContainerStatusRequest,
        sink: UnarySink<pb::ContainerStatusResponse>,
    ) {
        let id = req.container_id;
        self.serve("ContainerStatus", id.clone(), &ctx, sink, |s| {
            s.container_status(&id)
        });
    }

    fn reopen_container_log(
        &mut self,
        ctx: RpcContext,
        req: pb::ReopenContainerLogRequest,
        sink: UnarySink<pb::ReopenContainerLogResponse>,
    ) {
        let id = req.container_id;
        self.serve("ReopenContainerLog", id.clone(), &ctx, sink, |s| {
            s.reopen_container_log(&id)
                .map(|()| pb::ReopenContainerLogResponse::default())
        });
    }

    fn update_container_resources(
        &mut self,
        ctx: RpcContext,
        req: pb::UpdateContainerResourcesRequest,
        sink: UnarySink<pb::UpdateContainerResourcesResponse>,
    ) {
        let id = req.container_id.clone();
        self.serve("UpdateContainerResources", id, &ctx, sink, |s| {
            s.update_container_resources(req)
        });
    }

    fn exec_sync(
        &mut self,
        ctx: RpcContext,
        req: pb::ExecSyncRequest,
        sink: UnarySink<pb::ExecSyncResponse>,
    ) {
        let id = req.container_id.clone();
        self.serve("ExecSync", id, &ctx, sink, |s| s.exec_sync(&req));
    }

    fn exec(&mut self, ctx: RpcContext, req: pb::ExecRequest, sink: UnarySink<pb::ExecResponse>) {
        let id = req.container_id.clone();
        self.serve("Exec", id, &ctx, sink, |s| {
            let url = s.streaming("exec", &req.container_id, false)?;
            Ok(pb::ExecResponse {
                url,
                ..Default::default()
            })
        });
    }

    fn attach(
        &mut self,
        ctx: RpcContext,
        req: pb::AttachRequest,
        sink: UnarySink<pb::AttachResponse>,
    ) {
        let id = req.container_id.clone();
        self.serve("Attach", id, &ctx, sink, |s| {
            let url = s.streaming("attach", &req.container_id, false)?;
            Ok(pb::AttachResponse {
                url,
                ..Default::default()
            })
        });
    }

    fn port_forward(
        &mut self,
        ctx: RpcContext,
        req: pb::PortForwardRequest,
        sink: UnarySink<pb::PortForwardResponse>,
    ) {
        let id = req.pod_sandbox_id.clone();
        self.serve("PortForward", id, &ctx, sink, |s| {
            let url = s.streaming("portforward", &req.pod_sandbox_id, true)?;
            Ok(pb::PortForwardResponse {
                url,
                ..Default::default()
            })
        });
    }

    fn status(
        &mut self,
        ctx: RpcContext,
        req: pb::StatusRequest,
        sink: UnarySink<pb::StatusResponse>,
    ) {
        self.serve("Status", String::new(), &ctx, sink, |s| {
            Ok(s.status(req.verbose))
        });
    }

    fn runtime_config(
        &mut self,
        ctx: RpcContext,
        _: pb::RuntimeConfigRequest,
        sink: UnarySink<pb::RuntimeConfigResponse>,
    ) {
        self.serve("RuntimeConfig", String::new(), &ctx, sink, |s| {
            s.runtime_config()
        });
    }

    fn get_container_events(
        &mut self,
        ctx: RpcContext,
        _: pb::GetEventsRequest,
        mut sink: ServerStreamingSink<pb::ContainerEventResponse>,
    ) {
        let events = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if !state.events.enabled {
                state.events.refused += 1;
                // As a runtime without the stream (containerd 1.6), and not logged as
                // a call: tests of other things see the same calls as before.
                let status = RpcStatus::with_message(
                    RpcStatusCode::UNIMPLEMENTED,
                    "unknown method GetContainerEvents for service runtime.v1.RuntimeService"
                        .into(),
                );
                ctx.spawn(async move {
                    let _ = sink.fail(status).await;
                });
                return;
            }
            if let Some(injected) = state.record("GetContainerEvents", String::new()) {
                ctx.spawn(async move {
                    let _ = sink.fail(injected).await;
                });
                return;
            }
            state.events.subscribe()
        };
        // Its own thread: the stream lives until the hub drops it or litelet goes.
        std::thread::spawn(move || {
            litelet::blocking::block_on(async move {
                use futures_util::SinkExt;
                while let Ok(event) = events.recv() {
                    if sink.send((event, WriteFlags::default())).await.is_err() {
                        return;
                    }
                }
                let closed = RpcStatus::with_message(
                    RpcStatusCode::UNAVAILABLE,
                    "event stream closed".into(),
                );
                let _ = sink.fail(closed).await;
            })
        });
    }

    fn update_runtime_config(
        &mut self,
        ctx: RpcContext,
        _: pb::UpdateRuntimeConfigRequest,
        sink: UnarySink<pb::UpdateRuntimeConfigResponse>,
    ) {
        self.serve("UpdateRuntimeConfig", String::new(), &ctx, sink, |_| {
            Ok(Default::default())
        });
    }
}

impl grpc::ImageService for FakeService {
    fn list_images(
        &mut self,
        ctx: RpcContext,
        _: pb::ListImagesRequest,
        sink: UnarySink<pb::ListImagesResponse>,
    ) {
        self.serve("ListImages", String::new(), &ctx, sink, |s| {
            Ok(s.list_images())
        });
    }

    fn image_status(
        &mut self,
        ctx: RpcContext,
        req: pb::ImageStatusRequest,
        sink: UnarySink<pb::ImageStatusResponse>,
    ) {
        let image = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        self.serve("ImageStatus", image.clone(), &ctx, sink, |s| {
            Ok(s.image_status(&image))
        });
    }

    fn pull_image(
        &mut self,
        ctx: RpcContext,
        req: pb::PullImageRequest,
        sink: UnarySink<pb::PullImageResponse>,
    ) {
        let image = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        self.serve("PullImage", image.clone(), &ctx, sink, |s| {
            s.pull_image(&image)
        });
    }

    fn remove_image(
        &mut self,
        ctx: RpcContext,
        req: pb::RemoveImageRequest,
        sink: UnarySink<pb::RemoveImageResponse>,
    ) {
        let image = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        self.serve("RemoveImage", image.clone(), &ctx, sink, |s| {
            Ok(s.remove_image(&image))
        });
    }

    fn image_fs_info(
        &mut self,
        ctx: RpcContext,
        _: pb::ImageFsInfoRequest,
        sink: UnarySink<pb::ImageFsInfoResponse>,
    ) {
        self.serve("ImageFsInfo", String::new(), &ctx, sink, |s| {
            Ok(s.image_fs_info())
        });
    }
}
