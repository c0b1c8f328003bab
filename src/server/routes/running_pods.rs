//! `/runningpods/`: the pods the runtime runs now, as a v1 PodList (upstream's
//! `getRunningPods`): ready sandboxes and running containers from CRI, grouped by the
//! kubelet's pod labels, each as a Pod with only its name, namespace, UID and
//! container names. Unlike `/pods` it shows what runs, not what is desired (orphans
//! included). One CRI list per request, on the connection's thread.

use crate::api::pod::{Container, Pod};
use crate::runtime::inspect::running_pods;
use crate::runtime::model::RunningPod;
use crate::server::http::Response;
use crate::server::Shared;

/// The API view of a running pod (upstream `Pod.ToAPIPod`; CRI lists carry no image
/// name worth showing, so containers have names only).
pub fn to_api_pod(running: &RunningPod) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(running.name.clone());
    pod.metadata.namespace = Some(running.namespace.clone());
    pod.metadata.uid = Some(running.uid.clone());
    pod.spec.containers = running
        .containers
        .iter()
        .map(|c| Container {
            name: c.name.clone(),
            ..Default::default()
        })
        .collect();
    pod
}

#[inline(never)]
pub fn serve(shared: &Shared) -> Response {
    let pods = match running_pods(&shared.ctx.runtime, false) {
        Ok(pods) => pods,
        Err(err) => return Response::text(500, format!("list running pods: {err}")),
    };
    let mut items: Vec<Pod> = pods.iter().map(to_api_pod).collect();
    items.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
    super::pods::pod_list(items)
}
