//! The API side of service account token mode: the pod's ServiceAccount (its UID
//! and annotations) and a bound token for it with the plugin's audience, as
//! upstream's kubelet asks for them: a GET of the service account, then a
//! TokenRequest bound to the pod, with the service account's UID as a
//! precondition and the API server's default lifetime.
//!
//! The Node authorizer lets a node read the service accounts of its pods and ask
//! their tokens; an audience that no pod on the node mounts needs RBAC's
//! `request-serviceaccounts-token-audience` verb for the node
//! (ServiceAccountNodeAudienceRestriction). A trait, so tests hand in a fake.

use std::collections::BTreeMap;

use crate::api::token::{ServiceAccount, TokenRequest};
use crate::api::{paths, ApiClient, ApiError};

/// What a plugin is told about the pod's service account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountData {
    pub uid: String,
    pub annotations: BTreeMap<String, String>,
}

/// The token wanted: for which service account, audience and pod.
#[derive(Clone, Copy, Debug)]
pub struct TokenFor<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub service_account_uid: &'a str,
    pub audience: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
}

/// Reads service accounts and asks their tokens (the API server, or a fake).
pub trait ServiceAccounts: Send + Sync {
    fn service_account(&self, namespace: &str, name: &str) -> Result<AccountData, ApiError>;
    /// The token's text (may be empty if the server sent none).
    fn token(&self, request: &TokenFor<'_>) -> Result<String, ApiError>;
}

impl ServiceAccounts for ApiClient {
    fn service_account(&self, namespace: &str, name: &str) -> Result<AccountData, ApiError> {
        let account: ServiceAccount = self.get(&paths::service_account(namespace, name))?;
        Ok(AccountData {
            uid: account.metadata.uid.unwrap_or_default(),
            annotations: account.metadata.annotations,
        })
    }

    fn token(&self, request: &TokenFor<'_>) -> Result<String, ApiError> {
        let mut body =
            TokenRequest::for_pod(Some(request.audience), 0, request.pod_name, request.pod_uid);
        // Upstream leaves the lifetime to the server (one hour by default) and names
        // the service account's UID, so a recreated account gets no token.
        body.spec.expiration_seconds = None;
        body.metadata.uid = Some(request.service_account_uid.to_owned());
        let path = paths::service_account_token(request.namespace, request.service_account);
        let answer: TokenRequest = self.create(&path, &body)?;
        Ok(answer.status.token)
    }
}

/// The annotations passed to the plugin: every required key (`None` when one is
/// missing: the plugin is not asked) and the optional keys present.
pub fn select_annotations(
    present: &BTreeMap<String, String>,
    required: &[String],
    optional: &[String],
) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for key in required {
        out.insert(key.clone(), present.get(key)?.clone());
    }
    for key in optional {
        if let Some(value) = present.get(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_annotations_gate_the_plugin_and_optional_ones_ride_along() {
        let present = BTreeMap::from([
            ("a.io/role".to_owned(), "puller".to_owned()),
            ("b.io/extra".to_owned(), "x".to_owned()),
            ("c.io/unlisted".to_owned(), "y".to_owned()),
        ]);
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let picked = select_annotations(
            &present,
            &keys(&["a.io/role"]),
            &keys(&["b.io/extra", "d.io/absent"]),
        );
        assert_eq!(
            picked,
            Some(BTreeMap::from([
                ("a.io/role".to_owned(), "puller".to_owned()),
                ("b.io/extra".to_owned(), "x".to_owned()),
            ]))
        );
        assert_eq!(
            select_annotations(&present, &keys(&["d.io/absent"]), &[]),
            None
        );
        assert_eq!(
            select_annotations(&present, &[], &[]),
            Some(BTreeMap::new())
        );
    }
}
