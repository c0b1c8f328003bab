//! TLS bootstrap and client certificate rotation on a real control plane: a node
//! with nothing but a bootstrap-token kubeconfig (what `kubeadm join` gives a
//! kubelet) asks for its client certificate through the CertificateSigningRequest
//! API; the real kube-controller-manager approves it (kubeadm's auto-approval
//! bindings) and signs it; the node then runs as `system:node:<name>` under the Node
//! authorizer, and with `--rotate-certificates` renews it before it expires. The
//! controller-manager of this binary signs for 4 minutes, so a rotation happens
//! within the test. Skips loudly without the assets or root unless CI=true.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::containerd::BUSYBOX;
use support::control_plane::ControlPlane;
use support::pods::ApiPod;
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
    controllers(cp);
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping(test, "rb-join", &token, &[]) else {
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
        .filter(|c| requested_by(c, "system:bootstrap:") && for_node(c, "rb-join"))
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
        &ApiPod::new("rb-join", "after-join", "rb-join", BUSYBOX)
            .grace(1)
            .stoppable("sleep 3600")
            .json(),
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
    let for_us = csrs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| for_node(c, "rb-join"))
        .count();
    assert_eq!(for_us, 1, "no new request after a restart");
}

fn controllers(cp: &ControlPlane) {
    cp.start_controllers_signing_for(None, Some("4m"))
        .unwrap_or_else(|e| panic!("controller-manager: {e}"));
}

fn requested_by(csr: &serde_json::Value, user_prefix: &str) -> bool {
    csr["spec"]["username"]
        .as_str()
        .is_some_and(|u| u.starts_with(user_prefix))
}

/// The request is for node `node`'s certificate (its CSR's subject names the node;
/// a bootstrap request's user does not, so read the request's PEM).
fn for_node(csr: &serde_json::Value, node: &str) -> bool {
    let request = csr["spec"]["request"].as_str().unwrap_or("");
    let pem = litelet::api::base64::decode(request).unwrap_or_default();
    let body: String = String::from_utf8_lossy(&pem)
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = litelet::api::base64::decode(&body).unwrap_or_default();
    // The subject's CN is in the DER as plain text.
    let cn = format!("system:node:{node}");
    der.windows(cn.len()).any(|w| w == cn.as_bytes())
}

/// The first certificate's notAfter of a PEM file (Unix seconds).
fn not_after(path: &std::path::Path) -> i64 {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let der = ureq::tls::parse_pem(&pem)
        .filter_map(Result::ok)
        .find_map(|item| match item {
            ureq::tls::PemItem::Certificate(der) => Some(der.der().to_vec()),
            _ => None,
        })
        .expect("a certificate");
    litelet::api::x509::validity(&der).expect("validity").1
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// With 4-minute certificates: litelet renews before expiry and, past the first
/// certificate's notAfter, still renews its Lease and serves logs and exec, without a
/// restart.
#[test]
fn a_client_certificate_is_renewed_before_it_expires_without_a_restart() {
    let test = "a_client_certificate_is_renewed_before_it_expires_without_a_restart";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    controllers(cp);
    let token = cp.bootstrap_token();
    let Some(node) =
        RealNode::start_bootstrapping(test, "rb-rotate", &token, &["--rotate-certificates=true"])
    else {
        return;
    };
    node.wait_ready();
    let pid = node.pid();
    let current = node.dir().join("pki/kubelet-client-current.pem");
    let first = std::fs::read_link(&current).expect("current link");
    let first_not_after = not_after(&current);
    assert!(
        first_not_after - unix_now() < 600,
        "short-lived certificate"
    );
    cp.namespace("rb-rotate");
    cp.create(
        "/api/v1/namespaces/rb-rotate/pods",
        &ApiPod::new("rb-rotate", "talker", "rb-rotate", BUSYBOX)
            .grace(1)
            .stoppable("echo hello; sleep 3600")
            .json(),
    );
    node.wait_pod("rb-rotate", "talker", "Running", |p| {
        p["status"]["phase"] == "Running"
    });

    // Renewed before the first certificate ends: a new pair behind the link,
    // requested by the node itself.
    let renewed = || std::fs::read_link(&current).is_ok_and(|target| target != first);
    while !renewed() && unix_now() < first_not_after {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert!(
        renewed(),
        "no renewal before the first certificate's notAfter:\n{}",
        node.tail()
    );
    assert!(
        not_after(&current) > first_not_after,
        "the new certificate outlives the first"
    );
    let csrs = cp
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        .expect("csr list");
    assert!(
        csrs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| requested_by(c, "system:node:rb-rotate")),
        "a renewal authenticated by the node's own certificate: {csrs}"
    );

    // Past the first certificate's end the node still talks to the API server.
    while unix_now() <= first_not_after + 5 {
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rb-rotate";
    let renewed = |l: &serde_json::Value| l["spec"]["renewTime"].as_str().unwrap_or("").to_owned();
    let before = renewed(&cp.get(lease_path).expect("lease"));
    node.wait_for(
        "a lease renewal after the first certificate expired",
        || cp.get(lease_path).is_some_and(|l| renewed(&l) != before),
    );
    let out = cp.kubectl(&["logs", "-n", "rb-rotate", "talker"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hello"),
        "kubectl logs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cp.kubectl(&["exec", "-n", "rb-rotate", "talker", "--", "echo", "exec-ok"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("exec-ok"),
        "kubectl exec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(node.pid(), pid, "the same process throughout");
    assert!(
        node.log().contains("client certificate renewed"),
        "{}",
        node.tail()
    );
}

/// With `--rotate-server-certificates`: the node asks for a serving certificate
/// (signer `kubernetes.io/kubelet-serving`, its name and address); once an admin
/// approves it, port 10250 presents it (it verifies against the cluster CA for the
/// node's address) without a restart. Until then the self-signed one is served.
#[test]
fn an_approved_serving_certificate_replaces_the_self_signed_one() {
    let test = "an_approved_serving_certificate_replaces_the_self_signed_one";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    controllers(cp);
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping(
        test,
        "rb-serve",
        &token,
        &["--rotate-server-certificates=true"],
    ) else {
        return;
    };
    node.wait_ready();
    let pid = node.pid();
    let addr = std::net::SocketAddr::new(cp.node_ip.into(), node.port);
    assert!(
        support::https::connect(addr, cp.ca_pem.as_bytes(), None).is_err(),
        "the self-signed certificate does not verify against the cluster CA"
    );
    let mut name = String::new();
    node.wait_for("a serving CertificateSigningRequest from the node", || {
        let Some(csrs) = cp.get("/apis/certificates.k8s.io/v1/certificatesigningrequests") else {
            return false;
        };
        let found = csrs["items"].as_array().into_iter().flatten().find(|c| {
            c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                && requested_by(c, "system:node:rb-serve")
        });
        if let Some(csr) = found {
            name = csr["metadata"]["name"].as_str().unwrap_or("").to_owned();
        }
        !name.is_empty()
    });
    let out = cp.kubectl(&["certificate", "approve", &name]);
    assert!(
        out.status.success(),
        "approve: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.wait_for(
        "10250 presents a certificate the cluster CA verifies",
        || support::https::connect(addr, cp.ca_pem.as_bytes(), None).is_ok(),
    );
    let stored = node.dir().join("pki/kubelet-server-current.pem");
    assert_eq!(mode(&stored), 0o600);
    assert_eq!(node.pid(), pid, "no restart");
}

/// libfaketime's environment for a litelet whose clock runs `seconds` behind the
/// cluster's (an edge board without a real-time clock): every clock read of the
/// process, certificate checks included, is shifted; nothing else on the machine.
/// Skips loudly without libfaketime (`scripts/install-deps.sh`) unless CI=true.
fn clock_behind(test: &str, seconds: u32) -> Option<Vec<(String, String)>> {
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    if !std::path::Path::new(lib).exists() {
        return support::skip(
            test,
            "libfaketime is not installed (scripts/install-deps.sh)",
        );
    }
    Some(vec![
        ("LD_PRELOAD".to_owned(), lib.to_owned()),
        ("FAKETIME".to_owned(), format!("-{seconds}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
    ])
}

/// The node's CertificateSigningRequests of signer `signer`.
fn requests_for(cp: &ControlPlane, node: &str, signer: &str) -> Vec<serde_json::Value> {
    let csrs = cp
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        .expect("csr list");
    csrs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["spec"]["signerName"] == signer && for_node(c, node))
        .cloned()
        .collect()
}

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The first certificate's notBefore of a PEM file (Unix seconds).
fn not_before(path: &std::path::Path) -> i64 {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let der = ureq::tls::parse_pem(&pem)
        .filter_map(Result::ok)
        .find_map(|item| match item {
            ureq::tls::PemItem::Certificate(der) => Some(der.der().to_vec()),
            _ => None,
        })
        .expect("a certificate");
    litelet::api::x509::validity(&der).expect("validity").0
}

/// A node whose clock runs 10 minutes behind the cluster's gets a certificate the
/// signer back-dated by only 5 minutes, so by the node's clock it is not valid yet:
/// litelet keeps it (the API server judges it by its own clock), goes Ready, runs a
/// pod, and keeps the same certificate across a restart: one request, no restart
/// loop filing new ones.
#[test]
fn a_node_clock_ten_minutes_behind_bootstraps_and_keeps_its_certificate() {
    let test = "a_node_clock_ten_minutes_behind_bootstraps_and_keeps_its_certificate";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    controllers(cp);
    let Some(env) = clock_behind(test, 600) else {
        return;
    };
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping_with_env(test, "rb-behind", &token, &[], &env)
    else {
        return;
    };
    node.wait_ready();
    let current = node.dir().join("pki/kubelet-client-current.pem");
    assert!(
        not_before(&current) > unix_now() - 600,
        "the certificate is not valid yet by the node's clock"
    );
    cp.namespace("rb-behind");
    cp.create(
        "/api/v1/namespaces/rb-behind/pods",
        &ApiPod::new("rb-behind", "behind", "rb-behind", BUSYBOX)
            .grace(1)
            .stoppable("sleep 3600")
            .json(),
    );
    node.wait_pod("rb-behind", "behind", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let mut node = node;
    node.restart();
    node.wait_ready();
    assert_eq!(
        requests_for(cp, "rb-behind", CLIENT_SIGNER).len(),
        1,
        "one request, kept across a restart:\n{}",
        node.tail()
    );
}

/// A serving request approved late: by the rule that judged the certificate at the
/// moment the request was filed, a certificate approved more than 5 minutes (the
/// signer's back-date) after filing was refused and a new request filed. Scaled
/// down: the node's clock runs 4m50s behind, which moves that window the same way,
/// and the approval comes 70 s after filing (6 minutes for that rule). The node
/// keeps the certificate: 10250 presents it, one request was filed, no restart.
#[test]
fn a_serving_certificate_approved_after_the_signers_backdate_is_kept() {
    let test = "a_serving_certificate_approved_after_the_signers_backdate_is_kept";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    controllers(cp);
    let Some(env) = clock_behind(test, 290) else {
        return;
    };
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping_with_env(
        test,
        "rb-late",
        &token,
        &["--rotate-server-certificates=true"],
        &env,
    ) else {
        return;
    };
    node.wait_ready();
    let pid = node.pid();
    let serving = "kubernetes.io/kubelet-serving";
    node.wait_for("a serving CertificateSigningRequest from the node", || {
        !requests_for(cp, "rb-late", serving).is_empty()
    });
    let filed = std::time::Instant::now();
    let name = requests_for(cp, "rb-late", serving)[0]["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    // The approval comes late on purpose: that delay is what is tested.
    std::thread::sleep(std::time::Duration::from_secs(70).saturating_sub(filed.elapsed()));
    let out = cp.kubectl(&["certificate", "approve", &name]);
    assert!(
        out.status.success(),
        "approve: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let addr = std::net::SocketAddr::new(cp.node_ip.into(), node.port);
    node.wait_for("10250 presents the late-approved certificate", || {
        support::https::connect(addr, cp.ca_pem.as_bytes(), None).is_ok()
    });
    assert_eq!(
        requests_for(cp, "rb-late", serving).len(),
        1,
        "no second request:\n{}",
        node.tail()
    );
    assert_eq!(node.pid(), pid, "no restart");
}

/// Without `--rotate-certificates` the 4-minute client certificate expires while
/// litelet runs: litelet asks for a new one with the bootstrap credentials, installs
/// it and keeps renewing its Lease, in the same process.
#[test]
fn an_expired_client_certificate_falls_back_to_the_bootstrap_credentials() {
    let test = "an_expired_client_certificate_falls_back_to_the_bootstrap_credentials";
    let Some(cp) = ControlPlane::shared(test) else {
        return;
    };
    controllers(cp);
    let token = cp.bootstrap_token();
    let Some(node) = RealNode::start_bootstrapping(test, "rb-expire", &token, &[]) else {
        return;
    };
    node.wait_ready();
    let pid = node.pid();
    let current = node.dir().join("pki/kubelet-client-current.pem");
    let first = std::fs::read_link(&current).expect("current link");
    let first_not_after = not_after(&current);
    while unix_now() <= first_not_after + 2 {
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    node.wait_for("a new client certificate after the first expired", || {
        std::fs::read_link(&current).is_ok_and(|target| target != first)
    });
    assert!(not_after(&current) > first_not_after);
    let requests = requests_for(cp, "rb-expire", CLIENT_SIGNER);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests
            .iter()
            .all(|c| requested_by(c, "system:bootstrap:")),
        "both asked with the bootstrap token: {requests:?}"
    );
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rb-expire";
    let renewed = |l: &serde_json::Value| l["spec"]["renewTime"].as_str().unwrap_or("").to_owned();
    let before = renewed(&cp.get(lease_path).expect("lease"));
    node.wait_for("a lease renewal with the new certificate", || {
        cp.get(lease_path).is_some_and(|l| renewed(&l) != before)
    });
    assert_eq!(node.pid(), pid, "the same process throughout");
    assert!(
        node.log().contains("with the bootstrap credentials"),
        "{}",
        node.tail()
    );
}
