//! litelet as a drop-in for the upstream kubelet, on the real control plane
//! (kube-apiserver v1.36 from `KUBEBUILDER_ASSETS`, a private containerd): the kubelet
//! section of the CIS Kubernetes Benchmark as a flag line and as a config file, a
//! `--config-dir` drop-in over a config file, and the node's own `/configz` (read
//! through the apiserver's node proxy) fed back as `--config`. Each node goes Ready.
//! Skips loudly without the assets or root unless CI=true.

use crate::support::real_node::{condition, RealNode};
use serde_json::Value;

/// The CIS items of the kubelet section, as flags (4.2.x: anonymous off, Webhook
/// authentication and authorization, read-only port 0, an idle timeout, kernel
/// defaults protected, iptables chains, event QPS, rotation, strong ciphers, a pod
/// PIDs limit).
const CIS_FLAGS: &[&str] = &[
    "--anonymous-auth=false",
    "--authorization-mode=Webhook",
    "--read-only-port=0",
    "--streaming-connection-idle-timeout=5m",
    "--protect-kernel-defaults",
    "--make-iptables-util-chains",
    "--event-qps=5",
    "--rotate-certificates",
    "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "--pod-max-pids=4096",
];

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// The same CIS items as a config file.
const CIS_CONFIG: &str = "authentication:\n  anonymous: {enabled: false}\n  webhook: {enabled: true}\n\
authorization: {mode: Webhook}\n\
readOnlyPort: 0\n\
streamingConnectionIdleTimeout: 5m\n\
protectKernelDefaults: true\n\
makeIPTablesUtilChains: true\n\
eventRecordQPS: 5\n\
rotateCertificates: true\n\
tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n\
podPidsLimit: 4096\n";

/// The node's `/configz`, through the apiserver's node proxy (the webhook
/// authenticates and authorizes the apiserver's client).
fn configz(node: &RealNode) -> Value {
    let path = format!("/api/v1/nodes/{}/proxy/configz", node_name(node));
    let mut answer = None;
    node.wait_for("/configz through the apiserver", || {
        answer = node.cp.admin().get::<Value>(&path).ok();
        answer.is_some()
    });
    answer.unwrap_or_default()["kubeletconfig"].clone()
}

fn node_name(node: &RealNode) -> String {
    node.node_object()
        .map(|n| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default()
}

fn max_pods(node: &RealNode) -> String {
    node.node_object()
        .map(|n| {
            n["status"]["capacity"]["pods"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default()
}

#[test]
fn a_cis_hardened_flag_line_starts_litelet_to_ready() {
    let Some(node) = RealNode::start(
        "a_cis_hardened_flag_line_starts_litelet_to_ready",
        "rn-cis-flags",
        CIS_FLAGS,
    ) else {
        return;
    };
    node.wait_ready();
    let config = configz(&node);
    assert_eq!(config["readOnlyPort"], 0, "{config}");
    assert_eq!(config["protectKernelDefaults"], true, "{config}");
    assert_eq!(config["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(config["streamingConnectionIdleTimeout"], "5m0s");
    assert_eq!(config["podPidsLimit"], 4096);
}

#[test]
fn a_cis_hardened_config_file_starts_litelet_to_ready() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("config.yaml");
    std::fs::write(&path, format!("{HEADER}{CIS_CONFIG}")).unwrap();
    let config_flag = format!("--config={}", path.display());
    let Some(node) = RealNode::start(
        "a_cis_hardened_config_file_starts_litelet_to_ready",
        "rn-cis-file",
        &[&config_flag],
    ) else {
        return;
    };
    node.wait_ready();
    let config = configz(&node);
    assert_eq!(config["protectKernelDefaults"], true, "{config}");
    assert_eq!(config["eventRecordQPS"], 5, "{config}");
    assert_eq!(config["rotateCertificates"], true, "{config}");
}

/// A `--config-dir` drop-in overrides the config file (as kubeadm's and distro
/// drop-ins do); then the node's own `/configz`, written over the config file with
/// the drop-in gone, starts it again to Ready with the same settings.
#[test]
fn a_config_dir_drop_in_and_the_nodes_own_configz_fed_back_start_litelet_to_ready() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("config.yaml");
    let dropins = files.path().join("kubelet.conf.d");
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::write(&path, format!("{HEADER}maxPods: 50\n")).unwrap();
    let dropin = dropins.join("10-pods.conf");
    std::fs::write(&dropin, format!("{HEADER}maxPods: 42\n")).unwrap();
    let config_flag = format!("--config={}", path.display());
    let dir_flag = format!("--config-dir={}", dropins.display());
    let Some(mut node) = RealNode::start(
        "a_config_dir_drop_in_and_the_nodes_own_configz_fed_back_start_litelet_to_ready",
        "rn-dropin",
        &[&config_flag, &dir_flag],
    ) else {
        return;
    };
    node.wait_ready();
    assert_eq!(
        max_pods(&node),
        "42",
        "the drop-in wins over the config file"
    );

    let config = configz(&node);
    assert_eq!(config["maxPods"], 42, "{config}");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    std::fs::remove_file(&dropin).unwrap();
    node.restart();
    node.wait_for("healthz after a restart from /configz", || {
        node.healthz() == Some(200)
    });
    node.wait_ready();
    let again = configz(&node);
    assert_eq!(again["maxPods"], 42, "{again}");
    let n = node.node_object().expect("node");
    assert_eq!(condition(&n["status"], "Ready"), Some("True"));
    assert_eq!(max_pods(&node), "42");
}
