//! URL paths of the API objects litelet touches: pods, pods/status, nodes,
//! nodes/status, leases and events (and, for volumes, configmaps, secrets, the
//! serviceaccounts/token subresource, claims, persistent volumes, CSIDrivers,
//! CSINodes and VolumeAttachments). Pure string building; names are
//! percent-encoded (the `percent-encoding` crate, with the sets below) so an odd
//! name can never change the path's shape.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::api::lease::NODE_LEASE_NAMESPACE;

const CORE: &str = "/api/v1";
const COORDINATION: &str = "/apis/coordination.k8s.io/v1";
const CERTIFICATES: &str = "/apis/certificates.k8s.io/v1";
const STORAGE: &str = "/apis/storage.k8s.io/v1";

/// Bytes a query key or value keeps as they are: RFC 3986 unreserved characters.
pub(crate) const QUERY_KEEPS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Bytes a path segment keeps as they are: unreserved characters and `:` (as in
/// `system:node:n1`); `/`, `%`, `?` and the rest are escaped.
const SEGMENT_KEEPS: &AsciiSet = &QUERY_KEEPS.remove(b':');

/// Encodes one path segment: unreserved characters and `:` pass, everything else is
/// `%XX` (upper-case hex).
fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT_KEEPS).to_string()
}

/// All pods of all namespaces (list and watch with a field selector).
pub fn all_pods() -> String {
    format!("{CORE}/pods")
}

/// All services of all namespaces (list and watch, for service environment variables).
pub fn all_services() -> String {
    format!("{CORE}/services")
}

/// The pods collection of one namespace (create).
pub fn pods(namespace: &str) -> String {
    format!("{CORE}/namespaces/{}/pods", seg(namespace))
}

pub fn pod(namespace: &str, name: &str) -> String {
    format!("{}/{}", pods(namespace), seg(name))
}

pub fn pod_status(namespace: &str, name: &str) -> String {
    format!("{}/status", pod(namespace, name))
}

pub fn nodes() -> String {
    format!("{CORE}/nodes")
}

pub fn node(name: &str) -> String {
    format!("{CORE}/nodes/{}", seg(name))
}

pub fn node_status(name: &str) -> String {
    format!("{}/status", node(name))
}

pub fn leases(namespace: &str) -> String {
    format!("{COORDINATION}/namespaces/{}/leases", seg(namespace))
}

pub fn lease(namespace: &str, name: &str) -> String {
    format!("{}/{}", leases(namespace), seg(name))
}

/// The heartbeat lease of a node (`kube-node-lease/<node>`).
pub fn node_lease(node_name: &str) -> String {
    lease(NODE_LEASE_NAMESPACE, node_name)
}

pub fn events(namespace: &str) -> String {
    format!("{CORE}/namespaces/{}/events", seg(namespace))
}

pub fn event(namespace: &str, name: &str) -> String {
    format!("{}/{}", events(namespace), seg(name))
}

/// One configMap (the Node authorizer allows it for pods bound to this node).
pub fn config_map(namespace: &str, name: &str) -> String {
    format!(
        "{CORE}/namespaces/{}/configmaps/{}",
        seg(namespace),
        seg(name)
    )
}

/// One secret (the Node authorizer allows it for pods bound to this node).
pub fn secret(namespace: &str, name: &str) -> String {
    format!("{CORE}/namespaces/{}/secrets/{}", seg(namespace), seg(name))
}

/// One service account (the Node authorizer allows it for pods bound to this node).
pub fn service_account(namespace: &str, name: &str) -> String {
    format!(
        "{CORE}/namespaces/{}/serviceaccounts/{}",
        seg(namespace),
        seg(name)
    )
}

/// The TokenRequest subresource of a service account (POST).
pub fn service_account_token(namespace: &str, name: &str) -> String {
    format!(
        "{CORE}/namespaces/{}/serviceaccounts/{}/token",
        seg(namespace),
        seg(name)
    )
}

/// One PersistentVolumeClaim.
pub fn persistent_volume_claim(namespace: &str, name: &str) -> String {
    format!(
        "{CORE}/namespaces/{}/persistentvolumeclaims/{}",
        seg(namespace),
        seg(name)
    )
}

/// One PersistentVolume (cluster-scoped).
pub fn persistent_volume(name: &str) -> String {
    format!("{CORE}/persistentvolumes/{}", seg(name))
}

/// One CSIDriver (named after the driver).
pub fn csi_driver(name: &str) -> String {
    format!("{STORAGE}/csidrivers/{}", seg(name))
}

/// CSINodes (create).
pub fn csi_nodes() -> String {
    format!("{STORAGE}/csinodes")
}

/// The CSINode of a node (named after it).
pub fn csi_node(node: &str) -> String {
    format!("{}/{}", csi_nodes(), seg(node))
}

/// One VolumeAttachment.
pub fn volume_attachment(name: &str) -> String {
    format!("{STORAGE}/volumeattachments/{}", seg(name))
}

/// CertificateSigningRequests (cluster-scoped).
pub fn csrs() -> String {
    format!("{CERTIFICATES}/certificatesigningrequests")
}

/// One CertificateSigningRequest.
pub fn csr(name: &str) -> String {
    format!("{CERTIFICATES}/certificatesigningrequests/{}", seg(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_escape_all_but_unreserved_and_colon() {
        for (name, want) in [
            ("system:node:n1", "system:node:n1"),
            ("~-._09AZaz", "~-._09AZaz"),
            ("a/b", "a%2Fb"),
            ("c d?", "c%20d%3F"),
            ("50%", "50%25"),
            ("a+b=c&d#e;f", "a%2Bb%3Dc%26d%23e%3Bf"),
            ("é日", "%C3%A9%E6%97%A5"),
            ("\u{0}\u{7f}", "%00%7F"),
        ] {
            assert_eq!(seg(name), want, "{name:?}");
        }
    }

    #[test]
    fn paths() {
        assert_eq!(all_pods(), "/api/v1/pods");
        assert_eq!(
            pod_status("default", "web-0"),
            "/api/v1/namespaces/default/pods/web-0/status"
        );
        assert_eq!(node_status("n1"), "/api/v1/nodes/n1/status");
        assert_eq!(
            node_lease("n1"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        );
        assert_eq!(event("ns", "p.17a"), "/api/v1/namespaces/ns/events/p.17a");
        assert_eq!(pod("a/b", "c d?"), "/api/v1/namespaces/a%2Fb/pods/c%20d%3F");
        assert_eq!(
            service_account("ns", "default"),
            "/api/v1/namespaces/ns/serviceaccounts/default"
        );
        assert_eq!(
            service_account_token("ns", "default"),
            "/api/v1/namespaces/ns/serviceaccounts/default/token"
        );
        assert_eq!(
            config_map("ns", "cfg"),
            "/api/v1/namespaces/ns/configmaps/cfg"
        );
        assert_eq!(secret("ns", "s"), "/api/v1/namespaces/ns/secrets/s");
        assert_eq!(
            persistent_volume_claim("ns", "data"),
            "/api/v1/namespaces/ns/persistentvolumeclaims/data"
        );
        assert_eq!(persistent_volume("pv-1"), "/api/v1/persistentvolumes/pv-1");
        assert_eq!(
            csi_driver("hostpath.csi.k8s.io"),
            "/apis/storage.k8s.io/v1/csidrivers/hostpath.csi.k8s.io"
        );
        assert_eq!(csi_node("n1"), "/apis/storage.k8s.io/v1/csinodes/n1");
        assert_eq!(
            volume_attachment("csi-ab"),
            "/apis/storage.k8s.io/v1/volumeattachments/csi-ab"
        );
    }
}
