//! Pods for the tests to create: [`ApiPod`] builds the API JSON most of them send
//! (a pod bound to a node with one container `main`, an image and maybe a shell
//! script), with the few knobs they turn; [`meta`] starts a typed [`Pod`] for the
//! tests that hand one to a component directly. A test that needs more sets the
//! extra fields on the result.

use litelet::api::pod::Pod;
use serde_json::{json, Value};

/// An API pod being built; [`ApiPod::json`] gives it.
pub struct ApiPod(Value);

impl ApiPod {
    /// `ns/name` bound to `node` (not bound when `node` is empty) with one container
    /// `main` running `image` with its own command.
    pub fn new(ns: &str, name: &str, node: &str, image: &str) -> Self {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "main", "image": image}]}
        });
        if !node.is_empty() {
            pod["spec"]["nodeName"] = node.into();
        }
        Self(pod)
    }

    /// The container runs `script` with `sh -c`.
    pub fn script(mut self, script: &str) -> Self {
        self.0["spec"]["containers"][0]["command"] = json!(["sh", "-c", script]);
        self
    }

    /// The container runs `script` behind a TERM trap that exits 0, so it stops as
    /// soon as it is asked (a shell as PID 1 ignores TERM otherwise).
    pub fn stoppable(self, script: &str) -> Self {
        self.script(&format!("trap 'exit 0' TERM; {script}"))
    }

    /// `terminationGracePeriodSeconds`.
    pub fn grace(mut self, seconds: u32) -> Self {
        self.0["spec"]["terminationGracePeriodSeconds"] = seconds.into();
        self
    }

    /// In the node's network namespace (no CNI needed).
    pub fn host_network(mut self) -> Self {
        self.0["spec"]["hostNetwork"] = true.into();
        self
    }

    /// `restartPolicy`: Always, OnFailure or Never.
    pub fn restart(mut self, policy: &str) -> Self {
        self.0["spec"]["restartPolicy"] = policy.into();
        self
    }

    /// The label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["labels"][key] = value.into();
        self
    }

    /// The volume `volume` (with its `name`), mounted in the container at `path`.
    pub fn volume(mut self, volume: Value, path: &str) -> Self {
        let name = volume["name"].clone();
        push(&mut self.0["spec"]["volumes"], volume);
        let mounts = &mut self.0["spec"]["containers"][0]["volumeMounts"];
        push(mounts, json!({"name": name, "mountPath": path}));
        self
    }

    pub fn json(self) -> Value {
        self.0
    }
}

/// Appends `item` to the array at `list` (made when absent).
fn push(list: &mut Value, item: Value) {
    match list.as_array_mut() {
        Some(items) => items.push(item),
        None => *list = json!([item]),
    }
}

/// A typed pod `ns/name` with this UID and an empty spec.
pub fn meta(ns: &str, name: &str, uid: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some(ns.into());
    pod.metadata.uid = Some(uid.into());
    pod
}
