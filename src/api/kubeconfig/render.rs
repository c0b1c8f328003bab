//! Writes the kubeconfig a bootstrapped kubelet runs with: the cluster of the
//! bootstrap kubeconfig (server, CA inline) and a user whose certificate and key are
//! one PEM file in the certificate directory (`kubelet-client-current.pem`), so a
//! renewed certificate needs no new kubeconfig. Pure.

use std::path::Path;

use serde_json::json;

use crate::api::base64;

/// The kubeconfig text for `server` with CA bundle `ca_pem` (None: the system's
/// roots) and the client certificate and key in `credentials`.
pub fn client_cert_kubeconfig(
    server: &str,
    ca_pem: Option<&[u8]>,
    credentials: &Path,
) -> Result<String, serde_yaml_ng::Error> {
    let mut cluster = json!({ "server": server });
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] = json!(base64::encode(ca));
    }
    let file = credentials.to_string_lossy();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "users": [{"name": "default-auth", "user": {
            "client-certificate": file,
            "client-key": file,
        }}],
        "contexts": [{"name": "default-context", "context": {
            "cluster": "default-cluster",
            "user": "default-auth",
        }}],
        "current-context": "default-context",
    });
    serde_yaml_ng::to_string(&config)
}
