//! What edge-autonomy tests give a pod to read (the data a node keeps for its pods,
//! `docs/autonomy.md`, "Pod data"): the secret `creds` (key `password`) as a volume
//! and in `env`, the configMap `cfg` (key `MODE`) through `envFrom`, and the default
//! service-account token, automounted. At each start the container appends one line
//! of what it saw to a marks file, so a test compares the data before and after a
//! reboot.

use serde_json::{json, Value};

use super::control_plane::ControlPlane;

/// Where a pod's default service-account token is mounted.
pub const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The line a container that saw `password` writes, up to the token's digest.
pub fn seen(password: &str) -> String {
    format!("pw={password} env={password} mode=edge tok=")
}

/// Creates the secret `creds` holding `password` and the configMap `cfg` in `ns`.
pub fn create_objects(cp: &ControlPlane, ns: &str, password: &str) {
    cp.create(
        &format!("/api/v1/namespaces/{ns}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                "stringData": {"password": password}}),
    );
    cp.create(
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                "data": {"MODE": "edge"}}),
    );
}

/// Makes `pod`'s first container read the data and append what it saw to `marks`
/// (a path inside the container), then sleep; the token is automounted.
pub fn read_by(pod: &mut Value, marks: &str) {
    if let Some(spec) = pod["spec"].as_object_mut() {
        spec.remove("automountServiceAccountToken");
    }
    let script = format!(
        "tok=$(md5sum < {TOKEN}); \
         echo \"pw=$(cat /creds/password) env=$PASSWORD mode=$MODE tok=$tok\" >> {marks}; \
         trap 'exit 0' TERM; sleep 1000000 & wait"
    );
    push(
        &mut pod["spec"]["volumes"],
        json!({"name": "creds", "secret": {"secretName": "creds"}}),
    );
    let main = &mut pod["spec"]["containers"][0];
    main["command"] = json!(["sh", "-c", script]);
    push(
        &mut main["env"],
        json!({"name": "PASSWORD",
               "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}),
    );
    main["envFrom"] = json!([{"configMapRef": {"name": "cfg"}}]);
    push(
        &mut main["volumeMounts"],
        json!({"name": "creds", "mountPath": "/creds"}),
    );
}

/// Appends `item` to the array `list` (made when absent).
fn push(list: &mut Value, item: Value) {
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(items) = list.as_array_mut() {
        items.push(item);
    }
}
