//! A new key pair and the certificate request a kubelet sends for its client or
//! serving certificate: ECDSA P-256 (as upstream's kubelet), subject
//! `O=system:nodes, CN=system:node:<node>`; a serving request also names the node's
//! host names and addresses. Pure apart from the system's random numbers.

/// A private key and the request signed with it, both PEM.
pub struct KeyAndRequest {
    pub key_pem: String,
    pub request_pem: String,
}

/// A fresh key pair and its client certificate request for node `node`.
pub fn kubelet_client_request(node: &str) -> Result<KeyAndRequest, rcgen::Error> {
    request(node, rcgen::CertificateParams::new(Vec::<String>::new())?)
}

/// A fresh key pair and its serving certificate request for node `node`, valid for
/// the host names `names` and the addresses `ips` (the node's addresses).
pub fn kubelet_serving_request(
    node: &str,
    names: &[String],
    ips: &[std::net::IpAddr],
) -> Result<KeyAndRequest, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    request(node, params)
}

fn request(
    node: &str,
    mut params: rcgen::CertificateParams,
) -> Result<KeyAndRequest, rcgen::Error> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut name = rcgen::DistinguishedName::new();
    name.push(rcgen::DnType::OrganizationName, "system:nodes");
    name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = name;
    let request = params.serialize_request(&key)?;
    Ok(KeyAndRequest {
        key_pem: key.serialize_pem(),
        request_pem: request.pem()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_pem_and_each_call_has_a_new_key() {
        let a = kubelet_client_request("edge-1").unwrap();
        let b = kubelet_client_request("edge-1").unwrap();
        assert!(a
            .request_pem
            .starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        assert!(a.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(a.key_pem, b.key_pem);
    }
}
