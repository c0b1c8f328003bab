//! CertificateSigningRequest (`certificates.k8s.io/v1`): what a kubelet sends to get a
//! certificate and reads back once it is approved and signed. Only the fields a
//! kubelet uses are modelled.

use serde::{Deserialize, Serialize};

use super::base64;
use super::meta::ObjectMeta;

/// The signer of kubelet client certificates (`system:node:<name>` in `system:nodes`).
pub const SIGNER_KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The signer of kubelet serving certificates (port 10250), which a cluster approves
/// by hand or with an approver of its choosing.
pub const SIGNER_KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// A CertificateSigningRequest.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSigningRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CsrSpec,
    #[serde(default, skip_serializing)]
    pub status: CsrStatus,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsrSpec {
    /// The PKCS#10 request, PEM, base64-encoded on the wire.
    #[serde(default)]
    pub request: String,
    #[serde(default)]
    pub signer_name: String,
    #[serde(default)]
    pub usages: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsrStatus {
    #[serde(default)]
    pub conditions: Vec<CsrCondition>,
    /// The issued certificate chain, PEM, base64-encoded on the wire.
    #[serde(default)]
    pub certificate: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsrCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CsrState {
    /// Not yet approved, or approved and not yet signed.
    Pending,
    /// Signed: the certificate chain, PEM.
    Issued(Vec<u8>),
    /// Denied or failed, with the condition's type, reason and message.
    Refused(String),
}

impl CertificateSigningRequest {
    /// A kubelet client certificate request for `request_pem`, named by the server
    /// (`csr-` and a suffix, as upstream's kubelet names them).
    pub fn kubelet_client(request_pem: &str) -> CertificateSigningRequest {
        CertificateSigningRequest {
            api_version: "certificates.k8s.io/v1".into(),
            kind: "CertificateSigningRequest".into(),
            metadata: ObjectMeta {
                generate_name: Some("csr-".into()),
                ..ObjectMeta::default()
            },
            spec: CsrSpec {
                request: base64::encode(request_pem.as_bytes()),
                signer_name: SIGNER_KUBELET_CLIENT.into(),
                // What upstream asks for with an ECDSA key (no key encipherment).
                usages: vec!["digital signature".into(), "client auth".into()],
            },
            status: CsrStatus::default(),
        }
    }

    /// A kubelet serving certificate request for `request_pem`.
    pub fn kubelet_serving(request_pem: &str) -> CertificateSigningRequest {
        let mut csr = CertificateSigningRequest::kubelet_client(request_pem);
        csr.spec.signer_name = SIGNER_KUBELET_SERVING.into();
        csr.spec.usages = vec!["digital signature".into(), "server auth".into()];
        csr
    }

    /// The request's state from its status.
    pub fn state(&self) -> CsrState {
        if let Some(refused) = self
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Denied" || c.type_ == "Failed")
        {
            return CsrState::Refused(format!(
                "{}: {} {}",
                refused.type_,
                refused.reason.as_deref().unwrap_or(""),
                refused.message.as_deref().unwrap_or("")
            ));
        }
        match self.status.certificate.as_deref().map(base64::decode) {
            Some(Ok(pem)) if !pem.is_empty() => CsrState::Issued(pem),
            Some(Err(why)) => {
                CsrState::Refused(format!("the issued certificate is not base64: {why}"))
            }
            _ => CsrState::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kubelet_client_request_has_upstreams_signer_usages_and_name_prefix() {
        let csr =
            CertificateSigningRequest::kubelet_client("-----BEGIN CERTIFICATE REQUEST-----\n");
        let wire = serde_json::to_value(&csr).unwrap();
        assert_eq!(wire["metadata"]["generateName"], "csr-");
        assert_eq!(
            wire["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(
            wire["spec"]["usages"],
            json!(["digital signature", "client auth"])
        );
        assert_eq!(
            base64::decode(wire["spec"]["request"].as_str().unwrap()).unwrap(),
            b"-----BEGIN CERTIFICATE REQUEST-----\n"
        );
        assert!(wire.get("status").is_none());
    }

    #[test]
    fn state_reads_pending_issued_and_refused() {
        let read = |status: serde_json::Value| -> CsrState {
            serde_json::from_value::<CertificateSigningRequest>(json!({"status": status}))
                .unwrap()
                .state()
        };
        assert_eq!(read(json!({})), CsrState::Pending);
        assert_eq!(
            read(json!({"conditions": [{"type": "Approved", "status": "True"}]})),
            CsrState::Pending
        );
        assert_eq!(
            read(json!({"certificate": base64::encode(b"PEM")})),
            CsrState::Issued(b"PEM".to_vec())
        );
        assert!(matches!(
            read(json!({"conditions": [{"type": "Denied", "reason": "NotMine"}]})),
            CsrState::Refused(why) if why.contains("NotMine")
        ));
    }
}
