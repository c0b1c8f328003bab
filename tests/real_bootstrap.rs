//! TLS bootstrap on a real control plane: a node with nothing but a bootstrap-token
//! kubeconfig (what `kubeadm join` gives a kubelet) asks for its client certificate
//! through the CertificateSigningRequest API; the real kube-controller-manager
//! approves it (kubeadm's auto-approval bindings) and signs it; the node then runs
//! as `system:node:<name>` under the Node authorizer. Skips loudly without the
//! assets or root unless CI=true.

mod support;

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use support::containerd::BUSYBOX;
use support::control_plane::ControlPlane;
use support::real_node::RealNode;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn a_node_with_only_a_bootstrap_token_gets_its_certificate_and_goes_ready() {
    let test = "a_node_with_only_a_bootstrap_token_gets_its_certificate_and_goes_ready";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    cp.start_controllers(None)
        .unwrap_or_else(|e| panic!("controller-manager: {e}"));
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping(test, "rb-join", &token) else {
        return;
    };
    node.wait_ready();

    // The request: the kubelet client signer, from the bootstrap token's user, approved.
    let csrs = cp
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        .expect("csr list");
    let ours: Vec<&serde_json::Value> = csrs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["spec"]["username"]
                .as_str()
                .is_some_and(|u| u.starts_with("system:bootstrap:"))
        })
        .collect();
    assert_eq!(ours.len(), 1, "one request: {csrs}");
    let csr = ours[0];
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert!(
        csr["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Approved"),
        "approved: {csr}"
    );

    // The files, private, in upstream's layout.
    let d = node.dir();
    let current = d.join("pki/kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("current is a link");
    assert!(
        target.to_string_lossy().starts_with("kubelet-client-20"),
        "{target:?}"
    );
    assert_eq!(mode(&d.join("pki").join(&target)), 0o600);
    assert_eq!(mode(&d.join("kubeconfig")), 0o600);
    let kubeconfig = std::fs::read_to_string(d.join("kubeconfig")).expect("kubeconfig");
    assert!(
        kubeconfig.contains(&*current.to_string_lossy()),
        "{kubeconfig}"
    );

    // It works as the node: a pod bound to it runs and reports its status.
    cp.namespace("rb-join");
    cp.create(
        "/api/v1/namespaces/rb-join/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "after-join", "namespace": "rb-join"},
            "spec": {"nodeName": "rb-join", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": BUSYBOX,
                    "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600"]}]}}),
    );
    node.wait_pod("rb-join", "after-join", "Running", |p| {
        p["status"]["phase"] == "Running"
    });

    // A restart keeps the certificate: no second request.
    let mut node = node;
    node.restart();
    node.wait_ready();
    let csrs = cp
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        .expect("csr list");
    assert_eq!(
        csrs["items"].as_array().map_or(0, Vec::len),
        1,
        "no new request after a restart"
    );
}
